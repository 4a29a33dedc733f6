"""Reading a report and the pods bound to its node into the figures the filter and the score read."""

from __future__ import annotations

from typing import Any

from colocation.loadaware.load_aware_config import LoadAwareConfig, parse_load_aware_config
from colocation.loadaware.node_figures import AssignedPod, NodeFigures, freshness, node_figures, reported_load
from tests.unit.loadaware.koordinator_nodes import ALLOCATABLE, GI, NOW, status

AGGREGATES = [
    {"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "5", "memory": "5Gi"}}}},
    {"duration": "30m0s", "usage": {"p95": {"resources": {"cpu": "30", "memory": "30Gi"}},
                                    "avg": {"resources": {"cpu": "3", "memory": "3Gi"}}}},
]


def with_recent(report: dict[str, Any], cpu: str, pod_cpu: str | None = None) -> dict[str, Any]:
    report["nodeMetric"]["recentUsage"] = {"resources": {"cpu": cpu, "memory": "1Gi"}, "windowSeconds": 10}
    if pod_cpu is not None:
        report["podsMetric"][0]["recentUsage"] = {"resources": {"cpu": pod_cpu, "memory": "1Gi"}}
    return report


def test_the_short_window_is_read_first_and_nodeusage_without_it() -> None:
    config = LoadAwareConfig()
    report = with_recent(status("40", "10Gi", pods=[{"name": "p", "cpu": "4", "memory": "2Gi"}]), "60", "9")
    read = reported_load(report, received_at=NOW, config=config)
    assert read.node_usage == {"cpu": 60_000, "memory": GI}
    assert read.pod_usages == {("default", "p"): {"cpu": 9000, "memory": GI}}  # the same window as the node's
    plain = reported_load(status("40", "10Gi", pods=[{"name": "p", "cpu": "4", "memory": "2Gi"}]),
                          received_at=NOW, config=config)
    assert plain.node_usage == {"cpu": 40_000, "memory": 10 * GI}
    assert plain.pod_usages == {("default", "p"): {"cpu": 4000, "memory": 2 * GI}}


def test_an_aggregation_is_read_over_its_window_or_the_longest() -> None:
    report = with_recent(status("40", "10Gi", aggregatedNodeUsages=AGGREGATES), "60")
    five = parse_load_aware_config('{"aggregated": {"type": "p95", "duration": "5m"}}')
    assert reported_load(report, received_at=NOW, config=five).node_usage == {"cpu": 5000, "memory": 5 * GI}
    longest = parse_load_aware_config('{"aggregated": {"type": "p95"}}')
    assert reported_load(report, received_at=NOW, config=longest).node_usage == {"cpu": 30_000, "memory": 30 * GI}


def test_a_report_without_the_aggregation_is_judged_by_its_nodeusage() -> None:
    report = with_recent(status("40", "10Gi", aggregatedNodeUsages=AGGREGATES), "60")
    for text in ('{"aggregated": {"type": "p99"}}', '{"aggregated": {"type": "avg", "duration": "10m"}}'):
        config = parse_load_aware_config(text)
        assert reported_load(report, received_at=NOW, config=config).node_usage == {"cpu": 40_000, "memory": 10 * GI}


def test_prod_usage_counts_pods_prod_in_the_report_and_in_their_spec() -> None:
    # Koordinator's podAssignCache: a pod the report calls prod counts its usage in prod usage only
    # if its spec is prod too; a prod pod the report does not call prod counts its whole estimate.
    config = LoadAwareConfig()
    report = reported_load(status("40", "10Gi", pods=[
        {"name": "both", "cpu": "10", "memory": "1Gi", "priority": "koord-prod"},
        {"name": "report-only", "cpu": "7", "memory": "1Gi", "priority": "koord-prod"},
        {"name": "spec-only", "cpu": "5", "memory": "1Gi"},
    ]), received_at=NOW, config=config)

    def assigned(name: str, *, prod: bool) -> AssignedPod:
        return AssignedPod(namespace="default", name=name, estimate={"cpu": 2000, "memory": GI}, prod=prod,
                           assigned_at=NOW - 3600)

    node = node_figures(allocatable=ALLOCATABLE, report=report, assigned=[
        assigned("both", prod=True), assigned("report-only", prod=False), assigned("spec-only", prod=True)])
    assert node.prod_used == {"cpu": 10_000 + 2000, "memory": GI + GI}
    assert node.used == {"cpu": 40_000, "memory": 10 * GI}  # every pod settled in the node's usage


def test_a_tentative_pod_counts_its_whole_estimate() -> None:
    config = LoadAwareConfig()
    report = reported_load(status("40", "10Gi"), received_at=NOW, config=config)
    held = AssignedPod(namespace="default", name="new", estimate={"cpu": 850, "memory": GI}, prod=True,
                       assigned_at=None)
    node = node_figures(allocatable=ALLOCATABLE, report=report, assigned=[held])
    assert node.used == {"cpu": 40_850, "memory": 11 * GI}
    assert node.prod_used == {"cpu": 850, "memory": GI}


def test_freshness_is_judged_by_the_receipt_time() -> None:
    fresh = NodeFigures(allocatable=ALLOCATABLE, received_at=NOW - 179.9)
    assert freshness(fresh, now=NOW, expiration_seconds=180) == "fresh"
    assert freshness(fresh, now=NOW + 0.1, expiration_seconds=180) == "stale"
    unreported = NodeFigures(allocatable=ALLOCATABLE, received_at=None)
    assert freshness(unreported, now=NOW, expiration_seconds=180) == "missing"
    assert freshness(None, now=NOW, expiration_seconds=180) == "missing"
    assert node_figures(allocatable=ALLOCATABLE, report=None).received_at is None
