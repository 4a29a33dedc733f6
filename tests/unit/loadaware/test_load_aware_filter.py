"""The filter, against Koordinator's LoadAwareScheduling filter tests restated in our terms.

Each case names the Koordinator test it comes from (pkg/scheduler/plugins/loadaware/
load_aware_test.go): TestFilterUsage, unless said otherwise. Their node: 96 cores and 512 GiB
allocatable (koordinator_nodes). Where Koordinator uses separate `aggregated.usageThresholds`, we
set `usageThresholds` with `aggregated`: ours picks one figure for both filter and score.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from colocation.loadaware.load_aware_config import LoadAwareConfig, parse_load_aware_config
from colocation.loadaware.load_aware_filter import filter_nodes
from colocation.loadaware.node_figures import NodeFigures
from colocation.loadaware.pod_estimate import JudgedPod
from tests.unit.loadaware.koordinator_nodes import NOW, figures, incoming, pod, status

PROD = 9999  # Koordinator's PriorityProdValueMax
MID = 7999  # PriorityMidValueMax
TWO_PROD_PODS = [pod("prod-pod-1", priority=PROD), pod("prod-pod-2", priority=PROD)]


def config(**fields: Any) -> LoadAwareConfig:
    return LoadAwareConfig.model_validate(fields, by_alias=True)


CASES: list[tuple[str, LoadAwareConfig, dict[str, Any], list[dict[str, Any]], dict[str, Any] | None, str | None]] = [
    ("filter normal usage", config(), status("60", "256Gi"), [], None, None),
    ("filter exceed cpu usage", config(), status("70", "256Gi"), [], None,
     "load-aware: cpu usage above 65% of allocatable"),
    ("filter exceed memory usage", config(), status("30", "500Gi"), [], None,
     "load-aware: memory usage above 95% of allocatable"),
    # A threshold of 0 turns the resource's check off; the map replaces the defaults whole.
    ("disable filter exceed memory usage", config(usageThresholds={"memory": 0}), status("30", "500Gi"), [], None,
     None),
    # Koordinator: aggregated.usageThresholds {cpu: 60} with p95 over 5m; nodeUsage alone would pass.
    ("filter exceed p95 cpu usage",
     config(usageThresholds={"cpu": 60}, aggregated={"type": "p95", "duration": "5m"}),
     status("30", "100Gi", aggregatedNodeUsages=[{"duration": "5m0s", "usage": {
         "p95": {"resources": {"cpu": "70", "memory": "256Gi"}}}}]), [], None,
     "load-aware: p95 cpu usage above 60% of allocatable"),
    # The node is at 65.6 % cpu and 97.6 % memory, all of it two prod pods; the pod is not prod.
    ("prod usage filter is not enabled by default", config(usageThresholds={"cpu": 100, "memory": 100}),
     status("63", "500Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "200Gi", "priority": "koord-prod"},
                                 {"name": "prod-pod-2", "cpu": "33", "memory": "300Gi", "priority": "koord-prod"}]),
     TWO_PROD_PODS, None, None),
    ("filter prod cpu usage",
     config(usageThresholds={"cpu": 100, "memory": 100}, prodUsageThresholds={"cpu": 50, "memory": 100}),
     status("63", "500Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "200Gi", "priority": "koord-prod"},
                                 {"name": "prod-pod-2", "cpu": "33", "memory": "300Gi", "priority": "koord-prod"}]),
     TWO_PROD_PODS, pod("prod-pod-3", priority=PROD), "load-aware: prod cpu usage above 50% of allocatable"),
    ("filter prod memory usage",
     config(usageThresholds={"cpu": 100, "memory": 100}, prodUsageThresholds={"cpu": 100, "memory": 50}),
     status("63", "500Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "200Gi", "priority": "koord-prod"},
                                 {"name": "prod-pod-2", "cpu": "33", "memory": "300Gi", "priority": "koord-prod"}]),
     TWO_PROD_PODS, pod("prod-pod-3", priority=PROD), "load-aware: prod memory usage above 50% of allocatable"),
    # A DaemonSet's pod must run on its node: never filtered.
    ("filter daemonset pod exceed cpu usage", config(), status("70", "256Gi"), [],
     pod("test-pod", priority=PROD, owner="DaemonSet"), None),
    # The pod's own estimate counts: prod usage 53 cores + 85 % of 20 = 70 of 96 cores (73 %) > 60 %.
    ("filter prod cpu usage with new pod request configuration",
     config(usageThresholds={"cpu": 65, "memory": 100}, prodUsageThresholds={"cpu": 60, "memory": 100}),
     status("53", "500Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "100Gi", "priority": "koord-prod"},
                                 {"name": "prod-pod-2", "cpu": "23", "memory": "200Gi", "priority": "koord-prod"}]),
     TWO_PROD_PODS, pod("prod-pod-3", priority=PROD, requests={"cpu": "20", "memory": "100Gi"}),
     "load-aware: prod cpu usage above 60% of allocatable"),
    # A mid pod is judged by node usage with its mid-cpu: 53 + 85 % of 12 = 63.2 cores, 65.8 % rounds to 66 > 65.
    ("filter mid cpu usage with new pod request configuration",
     config(usageThresholds={"cpu": 65, "memory": 100}, prodUsageThresholds={"cpu": 60, "memory": 100}),
     status("53", "300Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "100Gi", "priority": "koord-prod"},
                                 {"name": "prod-pod-2", "cpu": "23", "memory": "200Gi"}]),
     TWO_PROD_PODS, pod("prod-pod-3", priority=MID, requests={"kubernetes.io/mid-cpu": "12k",
                                                               "kubernetes.io/mid-memory": "100Gi"}),
     "load-aware: cpu usage above 65% of allocatable"),
    # Prod memory: 300 GiB + 70 % of 165 GiB = 415.5 of 512 (81 %) > 80 %; cpu stays at 56 % < 60 %.
    ("filter memory usage with new pod request configuration",
     config(usageThresholds={"cpu": 65, "memory": 85}, prodUsageThresholds={"cpu": 60, "memory": 80}),
     status("53", "300Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "100Gi", "priority": "koord-prod"},
                                 {"name": "prod-pod-2", "cpu": "23", "memory": "200Gi", "priority": "koord-prod"}]),
     TWO_PROD_PODS, pod("prod-pod-3", priority=PROD, requests={"cpu": "1", "memory": "165Gi"}),
     "load-aware: prod memory usage above 80% of allocatable"),
    # prod-pod-2 is bound but not in the report: its whole estimate (70 % of 200 GiB) counts, then the
    # new pod's: 100 + 140 + 140 = 380 of 512 GiB (74 %) > 70 %.
    ("filter prod memory usage with assignedCache pod",
     config(usageThresholds={"cpu": 65, "memory": 85}, prodUsageThresholds={"cpu": 60, "memory": 70}),
     status("53", "300Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "100Gi", "priority": "koord-prod"}]),
     [pod("prod-pod-1", priority=PROD), pod("prod-pod-2", priority=PROD, requests={"cpu": "1", "memory": "200Gi"})],
     pod("prod-pod-3", priority=PROD, requests={"cpu": "1", "memory": "200Gi"}),
     "load-aware: prod memory usage above 70% of allocatable"),
    # The same with mid pods on node usage: 33 + 17 (mid-pod-2, unreported) + 17 = 67 cores (70 %) > 65 %.
    ("filter mid cpu usage with assignedCache pod",
     config(usageThresholds={"cpu": 65, "memory": 85}, prodUsageThresholds={"cpu": 60, "memory": 70}),
     status("33", "110Gi", pods=[{"name": "prod-pod-1", "cpu": "30", "memory": "100Gi", "priority": "koord-prod"}]),
     [pod("prod-pod-1", priority=PROD),
      pod("mid-pod-2", priority=MID, requests={"kubernetes.io/mid-cpu": "20k", "kubernetes.io/mid-memory": "200Gi"})],
     pod("mid-pod-3", priority=MID, requests={"kubernetes.io/mid-cpu": "20k", "kubernetes.io/mid-memory": "200Gi"}),
     "load-aware: cpu usage above 65% of allocatable"),
]


@pytest.mark.parametrize(("koordinator_case", "the_config", "report", "bound_pods", "the_pod", "reason"), CASES,
                         ids=[case[0] for case in CASES])
def test_koordinators_filter_cases(koordinator_case: str, the_config: LoadAwareConfig, report: dict[str, Any],
                                   bound_pods: list[dict[str, Any]], the_pod: dict[str, Any] | None,
                                   reason: str | None) -> None:
    node = figures(report, config=the_config, bound_pods=bound_pods)
    outcome = filter_nodes(["test-node-1"], {"test-node-1": node}, pod=incoming(the_pod, config=the_config),
                           config=the_config, now=NOW)
    if reason is None:
        assert (outcome.passed, dict(outcome.failed)) == (("test-node-1",), {})
    else:
        assert (outcome.passed, dict(outcome.failed)) == ((), {"test-node-1": reason})
    assert (outcome.stale, outcome.missing) == (0, 0)


def test_the_percentage_is_rounded_half_up_as_koordinator_rounds_it() -> None:
    # 62.25 + 0.25 cores of 96 is 65.1 %: 65, not above 65. One more core is 66.1 %.
    the_config = config()
    passing = figures(status("62250m", "1Gi"), config=the_config)
    failing = figures(status("63250m", "1Gi"), config=the_config)
    outcome = filter_nodes(["a", "b"], {"a": passing, "b": failing}, pod=incoming(None, config=the_config),
                           config=the_config, now=NOW)
    assert outcome.passed == ("a",)


def test_a_node_without_a_nodemetric_passes_and_is_counted() -> None:
    # TestFilterUsage "filter node missing NodeMetrics": Koordinator passes it too.
    the_config = config()
    outcome = filter_nodes(["test-node-1", "other"], {"other": figures(None, config=the_config)},
                           pod=incoming(None, config=the_config), config=the_config, now=NOW)
    assert outcome.passed == ("test-node-1", "other")
    assert (outcome.stale, outcome.missing) == (0, 2)


@pytest.mark.parametrize("age", [180.0, 3600.0])
def test_an_expired_report_passes_however_hot_it_says_the_node_is(age: float) -> None:
    # TestFilterExpiredNodeMetric "filter unhealthy nodeMetric with expired updateTime" and
    # TestEnableScheduleWhenNodeMetricsExpired "disable scheduling when nodeMetric with expired
    # updateTime": Koordinator (filterExpiredNodeMetrics true, enableScheduleWhenNodeMetricsExpired
    # false, its defaults) filters a node whose report is 180 s old. We pass it, on purpose: an
    # agent that died must not strand its node. Age is judged by the receipt time.
    the_config = config()
    hot = figures(status("90", "500Gi"), config=the_config, received_at=NOW - age)
    outcome = filter_nodes(["test-node-1"], {"test-node-1": hot}, pod=incoming(None, config=the_config),
                           config=the_config, now=NOW)
    assert (outcome.passed, outcome.stale) == (("test-node-1",), 1)
    fresh = figures(status("90", "500Gi"), config=the_config, received_at=NOW - 179)
    assert filter_nodes(["n"], {"n": fresh}, pod=incoming(None, config=the_config), config=the_config,
                        now=NOW).passed == ()


def test_a_short_expiration_from_the_config_map_applies() -> None:
    the_config = parse_load_aware_config('{"nodeMetricExpirationSeconds": 20}')
    hot = figures(status("90", "500Gi"), config=the_config, received_at=NOW - 20)
    outcome = filter_nodes(["n"], {"n": hot}, pod=incoming(None, config=the_config), config=the_config, now=NOW)
    assert (outcome.passed, outcome.stale) == (("n",), 1)


def test_batch_pods_are_judged_unless_skipped() -> None:
    # Koordinator judges a batch pod like any non-prod pod (its estimate from batch-cpu and
    # batch-memory); `batchPods: skipped` leaves it to the batch resources instead.
    batch_pod = pod("be", priority=5000, requests={"kubernetes.io/batch-cpu": "1000"})
    judged = config()
    hot = figures(status("70", "256Gi"), config=judged)
    assert filter_nodes(["n"], {"n": hot}, pod=incoming(batch_pod, config=judged), config=judged,
                        now=NOW).failed == {"n": "load-aware: cpu usage above 65% of allocatable"}
    skipped = config(batchPods="skipped")
    assert filter_nodes(["n"], {"n": hot}, pod=incoming(batch_pod, config=skipped), config=skipped,
                        now=NOW).passed == ("n",)


def test_only_the_nodes_given_are_answered_in_their_order() -> None:
    the_config = config()
    nodes = {name: figures(status(cpu, "1Gi"), config=the_config) for name, cpu in
             (("a", "10"), ("b", "90"), ("c", "20"), ("unasked", "1"))}
    outcome = filter_nodes(["c", "b", "a"], nodes, pod=incoming(None, config=the_config), config=the_config, now=NOW)
    assert outcome.passed == ("c", "a")
    assert list(outcome.failed) == ["b"]


@given(used=st.integers(0, 10**12), estimate=st.integers(0, 10**10), total=st.integers(1, 10**12),
       threshold=st.integers(1, 100))
@example(used=131, estimate=0, total=200, threshold=65)  # 65.5 %: rounds up to 66, refused
@example(used=130, estimate=0, total=200, threshold=65)  # 65.0 %: passes
def test_a_node_is_refused_exactly_when_its_rounded_percentage_is_above_the_threshold(
        used: int, estimate: int, total: int, threshold: int) -> None:
    # The filter compares without dividing (it runs for thousands of candidates per pod); the
    # percentage rounded half up is what the docs and Koordinator define.
    the_config = config(usageThresholds={"cpu": threshold, "memory": 0})
    node = NodeFigures(allocatable={"cpu": total}, received_at=NOW, used={"cpu": used})
    pod_estimate = JudgedPod(estimate={"cpu": estimate}, prod=False, batch=False, daemon=False)
    refused = filter_nodes(["n"], {"n": node}, pod=pod_estimate, config=the_config, now=NOW).failed != {}
    percentage = math.floor(Fraction(100 * (used + estimate), total) + Fraction(1, 2))  # exact
    assert refused == (percentage > threshold)
