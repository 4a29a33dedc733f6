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
    def __init__(self, *, full_walk_every: int = 30) -> None:
        self.clock = FakeClock(now=1000.0, wall=1_800_000_000.0)
        self.store = NodeMetricStore(clock_wall=self.clock.wall, clock_monotonic=self.clock.monotonic)
        self.pods = BoundPods()
        self.allocatable = {"node-1": ALLOCATABLE, "node-2": ALLOCATABLE}
        self.cache = NodeFigureCache(self.store, self.pods, TentativePlacements(clock=self.clock, hold_seconds=30),
                                     allocatable=self.allocatable.get, full_walk_every=full_walk_every)

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
    # With prodUsageThresholds, so that the prod figure is computed too.
    cluster, config = Cluster(), LoadAwareConfig(prod_usage_thresholds={"cpu": 80})
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


def test_a_refresh_reads_only_the_nodes_that_reported_since_the_last() -> None:
    cluster, config = Cluster(), LoadAwareConfig()
    for name in ("node-1", "node-2"):
        cluster.report(name, "1000m")
    cluster.cache.refresh(config)
    assert (cluster.cache.full_walks, cluster.cache.parsed) == (1, 2)
    cluster.report("node-2", "3000m")
    cluster.cache.refresh(config)
    cluster.cache.refresh(config)  # nothing new: nothing read
    assert (cluster.cache.full_walks, cluster.cache.parsed) == (1, 3)
    assert cluster.cache.figures(config)["node-2"].used["cpu"] == 3000
    cluster.store.delete("node-1")
    cluster.cache.refresh(config)
    assert set(cluster.cache.figures(config)) == {"node-2"} and cluster.cache.full_walks == 1


def test_a_nodes_allocatable_learnt_without_a_report_counts_at_the_next_full_walk() -> None:
    cluster, config = Cluster(full_walk_every=3), LoadAwareConfig()
    cluster.report("node-3", "1000m")  # its Node is not known yet
    cluster.cache.refresh(config)
    cluster.allocatable["node-3"] = ALLOCATABLE
    for _ in range(2):
        cluster.cache.refresh(config)
        assert cluster.cache.node("node-3", config) is None  # the store saw no change
    cluster.cache.refresh(config)  # the third since the last full walk
    assert cluster.cache.full_walks == 2 and cluster.cache.node("node-3", config) is not None


def test_a_refresh_pauses_every_step_and_a_new_configuration_ends_it() -> None:
    cluster, config = Cluster(), LoadAwareConfig()
    for name in ("node-1", "node-2"):
        cluster.report(name, "1000m")
    steps = cluster.cache.refresh_in_steps(config, step=1)
    next(steps)  # one node done
    assert cluster.cache.parsed == 1
    other = LoadAwareConfig(resource_weights={"cpu": 2})
    assert cluster.cache.figures(other)["node-2"].used["cpu"] == 1000  # the request refreshed everything
    parsed = cluster.cache.parsed
    assert list(steps) == [] and cluster.cache.parsed == parsed  # the paused refresh did no more


async def test_the_prod_figure_is_left_at_0_when_no_threshold_reads_it() -> None:
    cluster = Cluster()
    cluster.report("node-1", "1000m")
    await cluster.pods.on_sync([pruned_pod(api_pod("web", "node-1", scheduled=None))], "1")
    plain, prod = LoadAwareConfig(), LoadAwareConfig(prod_usage_thresholds={"cpu": 80})
    unread, read = cluster.cache.node("node-1", plain), cluster.cache.node("node-1", prod)
    assert unread is not None and read is not None and unread.used == read.used
    assert (unread.prod_used["cpu"], read.prod_used["cpu"]) == (0, 1700)  # a prod pod: 2 cpu limit x 85 %
