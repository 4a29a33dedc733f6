"""The score, against Koordinator's LoadAwareScheduling score tests restated in our terms.

Each case names the Koordinator test it comes from (pkg/scheduler/plugins/loadaware/
load_aware_test.go, TestScore) and keeps its 0..100 score; the extender answers it on the 0..10
scale. Their pod requests and limits 16 cores and 32 GiB (estimated 13.6 cores, 22.4 GiB); their
node has 96 cores and 512 GiB. Expired and missing reports differ on purpose: Koordinator scores
them 0, we give them the neutral score.
"""

from __future__ import annotations

from typing import Any

import pytest

from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.load_aware_score import extender_score, load_score, score_nodes
from colocation.loadaware.node_figures import node_figures, reported_load
from colocation.loadaware.tentative_placements import TentativePlacements
from tests.clock import FakeClock
from tests.unit.loadaware.koordinator_nodes import ALLOCATABLE, NOW, bound, figures, incoming, pod, status

SIXTEEN_CORES = {"cpu": "16", "memory": "32Gi"}


def sixteen_core_pod(name: str = "test-pod-1") -> dict[str, Any]:
    the_pod = pod(name, requests=SIXTEEN_CORES)
    the_pod["spec"]["containers"][0]["resources"]["limits"] = SIXTEEN_CORES
    return the_pod


def config(**fields: Any) -> LoadAwareConfig:
    return LoadAwareConfig.model_validate(fields, by_alias=True)


P95_OVER_5M = [{"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "32", "memory": "10Gi"}},
                                              "p99": {"resources": {"cpu": "50", "memory": "70Gi"}}}}]


@pytest.mark.parametrize(("koordinator_case", "the_config", "report", "the_pod", "expected"), [
    # cpu (96 - 13.6) / 96 = 85 %, memory (512 - 22.4) / 512 = 95 %: (85 + 95) / 2.
    ("score empty node", config(), status("0", "0"), sixteen_core_pod(), 90),
    # cpu (96 - 45.6) / 96 = 52 %, memory (512 - 32.4) / 512 = 93 %: 72 (72.5 rounded down).
    ("score load node", config(), status("32", "10Gi"), sixteen_core_pod(), 72),
    ("score load node with p95", config(aggregated={"type": "p95", "duration": "5m"}),
     status("0", "0", aggregatedNodeUsages=P95_OVER_5M), sixteen_core_pod(), 72),
    # A batch pod's 16000 batch-cpu milli-cores and 32 GiB of batch-memory weigh as cpu and memory.
    ("score batch Pod", config(), status("0", "0"),
     pod("test-pod-1", priority=5000, requests={"kubernetes.io/batch-cpu": "16000",
                                                "kubernetes.io/batch-memory": "32Gi"}), 90),
    # The estimate is of the limit when it is above the request.
    ("score request less than limit", config(), status("0", "0"),
     {**sixteen_core_pod(), "spec": {"containers": [{"resources": {"requests": {"cpu": "8", "memory": "16Gi"},
                                                                   "limits": SIXTEEN_CORES}}]}}, 90),
    # An empty pod counts Koordinator's defaults, 250 milli-cores and 200 MiB.
    ("score empty pod", config(), status("0", "0"), {}, 99),
])
def test_koordinators_score_cases(koordinator_case: str, the_config: LoadAwareConfig, report: dict[str, Any],
                                  the_pod: dict[str, Any], expected: int) -> None:
    node = figures(report, config=the_config)
    assert load_score(node, pod=incoming(the_pod, config=the_config), config=the_config) == expected
    outcome = score_nodes(["test-node-1"], {"test-node-1": node}, pod=incoming(the_pod, config=the_config),
                          config=the_config, now=NOW)
    assert outcome.scores == {"test-node-1": extender_score(expected)}


@pytest.mark.parametrize(("koordinator_case", "report_at", "assigned_at"), [
    ("score load node with just assigned pod", NOW, NOW),
    ("score load node with just assigned pod where after updateTime", NOW - 10, NOW),
    # Bound 10 s before the report: within one report interval (60 s), its usage may not show yet.
    ("score load node with just assigned pod where before updateTime", NOW, NOW - 10),
])
def test_a_pod_bound_since_the_report_counts_its_estimate(koordinator_case: str, report_at: float,
                                                          assigned_at: float) -> None:
    # 32 + 13.6 + 13.6 cores (38 %), 10 + 22.4 + 22.4 GiB (89 %): 63.
    the_config = config()
    report = reported_load(status("32", "10Gi"), received_at=report_at, config=the_config)
    just_bound = bound(sixteen_core_pod("assigned-pod-1"), config=the_config, assigned_at=assigned_at)
    node = node_figures(allocatable=ALLOCATABLE, report=report, assigned=[just_bound])
    assert load_score(node, pod=incoming(sixteen_core_pod(), config=the_config), config=the_config) == 63


def test_a_pod_the_report_shows_counts_only_its_estimate_above_its_usage() -> None:
    # Koordinator's rule (its podAssignCache), not one of its TestScore cases: bound more than a
    # report interval before the report, a reported pod is in the node's usage already; bound
    # since, the part of its estimate above its reported usage is added.
    the_config = config()
    running = status("32", "10Gi", pods=[{"name": "assigned-pod-1", "cpu": "10", "memory": "10Gi"}])
    old = node_figures(allocatable=ALLOCATABLE, report=reported_load(running, received_at=NOW, config=the_config),
                       assigned=[bound(sixteen_core_pod("assigned-pod-1"), config=the_config, assigned_at=NOW - 61)])
    assert old.used == {"cpu": 32_000, "memory": 10 * 1024**3}
    recent = node_figures(allocatable=ALLOCATABLE,
                          report=reported_load(running, received_at=NOW, config=the_config),
                          assigned=[bound(sixteen_core_pod("assigned-pod-1"), config=the_config, assigned_at=NOW - 59)])
    assert recent.used["cpu"] == 32_000 + 13_600 - 10_000
    # 10 GiB of node usage, plus the 22.4 GiB estimate (70 % of 32 GiB, rounded) less its 10 GiB.
    assert recent.used["memory"] == 24_051_816_858


@pytest.mark.parametrize(("weights", "expected"), [
    ({"cpu": 1, "memory": 1}, 72),
    ({"cpu": 3, "memory": 1}, 62),  # (52 * 3 + 93) / 4 = 62.25
    ({"memory": 1}, 93),  # cpu left out of the score
])
def test_resource_weights_weigh_the_free_shares(weights: dict[str, int], expected: int) -> None:
    # "score load node" of TestScore, weighted.
    the_config = config(resourceWeights=weights)
    node = figures(status("32", "10Gi"), config=the_config)
    assert load_score(node, pod=incoming(sixteen_core_pod(), config=the_config), config=the_config) == expected


def test_a_node_above_its_allocatable_scores_0() -> None:
    the_config = config()
    node = figures(status("100", "600Gi"), config=the_config)
    assert load_score(node, pod=incoming(None, config=the_config), config=the_config) == 0


@pytest.mark.parametrize(("score", "expected"), [(0, 0), (4, 0), (5, 1), (72, 7), (95, 10), (99, 10), (100, 10)])
def test_the_extender_scale_is_tenths_rounded_half_up(score: int, expected: int) -> None:
    assert extender_score(score) == expected


def test_stale_and_missing_nodes_get_the_mean_of_the_fresh_ones() -> None:
    # TestScore "score node with expired nodeMetric" (a report 180 s old) and "score node missing
    # NodeMetrics": Koordinator scores them 0. We score them the mean of the fresh candidates.
    the_config = config()
    nodes = {
        "empty": figures(status("0", "0"), config=the_config),  # 90
        "loaded": figures(status("32", "10Gi"), config=the_config),  # 72
        "expired": figures(status("0", "0"), config=the_config, received_at=NOW - 180),
        "no-nodemetric": figures(None, config=the_config),
    }
    outcome = score_nodes(["empty", "loaded", "expired", "no-nodemetric", "unknown"], nodes,
                          pod=incoming(sixteen_core_pod(), config=the_config), config=the_config, now=NOW)
    assert outcome.neutral == 8  # mean 81 of 100
    assert outcome.scores == {"empty": 9, "loaded": 7, "expired": 8, "no-nodemetric": 8, "unknown": 8}
    assert (outcome.stale, outcome.missing) == (1, 2)


def test_without_any_fresh_candidate_every_node_scores_the_midpoint() -> None:
    the_config = config()
    stale = figures(status("0", "0"), config=the_config, received_at=NOW - 1000)
    outcome = score_nodes(["a", "b"], {"a": stale}, pod=incoming(None, config=the_config), config=the_config, now=NOW)
    assert outcome.scores == {"a": 5, "b": 5}
    assert (outcome.stale, outcome.missing) == (1, 1)


def test_skipped_batch_pods_get_the_same_score_everywhere() -> None:
    the_config = config(batchPods="skipped")
    nodes = {"idle": figures(status("0", "0"), config=the_config), "hot": figures(status("90", "0"), config=the_config)}
    batch_pod = pod("be", priority=5000)
    outcome = score_nodes(["idle", "hot"], nodes, pod=incoming(batch_pod, config=the_config), config=the_config,
                          now=NOW)
    assert outcome.scores == {"idle": 0, "hot": 0}


def test_a_burst_spreads_once_the_first_pod_is_placed_tentatively() -> None:
    # Two equal nodes: the first pod ranks "a" first and is held there; the second then ranks "b" first.
    the_config = config()
    clock = FakeClock()
    placements = TentativePlacements(clock=clock, hold_seconds=the_config.tentative_hold_seconds)
    report = reported_load(status("40", "10Gi"), received_at=NOW, config=the_config)
    the_pod = incoming(sixteen_core_pod(), config=the_config)

    def scores() -> dict[str, int]:
        nodes = {name: node_figures(allocatable=ALLOCATABLE, report=report, assigned=placements.on_node(name))
                 for name in ("a", "b")}
        return {name: load_score(nodes[name], pod=the_pod, config=the_config) for name in nodes}

    assert scores()["a"] == scores()["b"]
    placements.place("uid-1", node="a", pod=bound(sixteen_core_pod("burst-1"), config=the_config, assigned_at=None))
    assert scores()["a"] < scores()["b"]
    clock.advance(the_config.tentative_hold_seconds)  # never confirmed: it no longer counts
    assert scores()["a"] == scores()["b"]
