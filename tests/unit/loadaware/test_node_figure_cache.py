"""Each node's figures, kept between requests: a report is parsed once, and figures change with their inputs."""

from __future__ import annotations

import time
from types import MappingProxyType

import orjson

from colocation.loadaware.bound_pods import BoundPods, pruned_pod
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.node_figure_cache import NodeFigureCache
from colocation.loadaware.node_figures import AssignedPod
from colocation.loadaware.tentative_placements import TentativePlacements
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from tests.clock import FakeClock
from tests.unit.loadaware.test_bound_pods import api_pod

ALLOCATABLE = MappingProxyType({"cpu": 4000, "memory": 8 * 1024**3})


class Cluster:
    def __init__(self) -> None:
        self.clock = FakeClock(now=1000.0, wall=1_800_000_000.0)
        self.store = NodeMetricStore(clock_wall=self.clock.wall, clock_monotonic=self.clock.monotonic)
        self.pods = BoundPods()
        self.allocatable = {"node-1": ALLOCATABLE, "node-2": ALLOCATABLE}
        self.cache = NodeFigureCache(self.store, self.pods, TentativePlacements(clock=self.clock, hold_seconds=30),
                                     allocatable=self.allocatable.get)

    def report(self, name: str, cpu: str) -> None:
        self.clock.advance(1)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.wall()))
        raw = orjson.dumps({"metadata": {"name": name}, "status": {
            "updateTime": stamp, "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}}})
        self.store.put(validate_report(raw, name), {})


def test_a_report_is_parsed_once_and_again_only_when_it_changes() -> None:
    cluster, config = Cluster(), LoadAwareConfig()
    cluster.report("node-1", "1000m")
    cluster.cache.refresh(config)
    figures = cluster.cache.node("node-1", config)
    assert figures is not None and figures.used["cpu"] == 1000
    assert cluster.cache.node("node-1", config) is figures and cluster.cache.parsed == 1
    cluster.report("node-1", "2000m")
    assert cluster.cache.node("node-1", config) is figures  # until the next refresh
    cluster.cache.refresh(config)
    assert cluster.cache.figures(config)["node-1"].used["cpu"] == 2000
    assert cluster.cache.parsed == 2


async def test_a_pod_bound_since_the_report_adds_its_estimate() -> None:
    cluster, config = Cluster(), LoadAwareConfig()
    cluster.report("node-1", "1000m")
    cluster.cache.refresh(config)
    before = cluster.cache.node("node-1", config)
    assert before is not None
    # Bound just now, after the report: its estimate counts (1 cpu requested, 2 limit: 2 x 85 %).
    await cluster.pods.on_sync([pruned_pod(api_pod("web", "node-1", scheduled=None))], "1")
    after = cluster.cache.node("node-1", config)
    assert after is not None and after.used["cpu"] == 1000 + 1700
    assert cluster.cache.parsed == 1  # the report was not parsed again


def test_a_node_without_a_report_or_allocatable_has_no_figures_and_gone_nodes_are_forgotten() -> None:
    cluster, config = Cluster(), LoadAwareConfig()
    cluster.report("node-3", "1000m")  # no allocatable known
    cluster.cache.refresh(config)
    assert dict(cluster.cache.figures(config)) == {}
    cluster.report("node-2", "1000m")
    cluster.cache.refresh(config)
    cluster.store.delete("node-2")
    cluster.cache.refresh(config)
    assert cluster.cache.node("node-2", config) is None


async def test_a_tentative_pod_adds_what_a_pod_bound_since_the_report_would() -> None:
    cluster, config = Cluster(), LoadAwareConfig()
    cluster.report("node-1", "1000m")
    await cluster.pods.on_sync([pruned_pod(api_pod("old", "node-1", scheduled="2020-01-01T00:00:00Z"))], "1")
    cluster.cache.refresh(config)
    base = cluster.cache.node("node-1", config)
    assert base is not None and base.used["cpu"] == 1000 + 1700  # not in the report: its estimate counts
    tentatives = TentativePlacements(clock=cluster.clock, hold_seconds=30)
    cache = NodeFigureCache(cluster.store, cluster.pods, tentatives, allocatable=cluster.allocatable.get)
    tentatives.place("uid-new", node="node-1", pod=AssignedPod(namespace="default", name="new", prod=True,
                                                               estimate={"cpu": 500, "memory": 0}, assigned_at=None))
    held = cache.node("node-1", config)
    assert held is not None and held.used["cpu"] == base.used["cpu"] + 500
    assert held.prod_used["cpu"] == base.prod_used["cpu"] + 500
    cluster.clock.advance(30)
    assert cache.node("node-1", config) == base  # the hold passed
