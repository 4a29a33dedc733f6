"""The scheduler extender over HTTP, as the manager assembles it: a NodeMetric store, the Node
directory and the bound pods in, the scheduler's wire format out."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from colocation.kube.nodes import NodeDirectory
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.manager.extender_assembly import SchedulerExtender, assemble_extender
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from tests.clock import FakeClock

NODES = ("node-1", "node-2", "node-3")


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}


def pending_pod(name: str, *, cpu: str = "500m") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"},
                                                                   "limits": {"cpu": cpu, "memory": "256Mi"}}}]}}


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock(now=1000.0, wall=1_800_000_000.0)
        self.store = NodeMetricStore(clock_wall=self.clock.wall, clock_monotonic=self.clock.monotonic)
        self.nodes = NodeDirectory()
        self.registry = CollectorRegistry()
        self.ready = True
        self.config = LoadAwareConfig.model_validate({"nodeMetricExpirationSeconds": 60})
        self.extender: SchedulerExtender = assemble_extender(
            self.store, self.nodes, config=lambda: self.config, ready=lambda: self.ready, registry=self.registry,
            clock_wall=self.clock.wall, clock_monotonic=self.clock.monotonic)

    async def start(self) -> None:
        await self.nodes.on_sync([node(name) for name in NODES], "1")
        await self.extender.pods.on_sync([], "1")

    def report(self, name: str, cpu: str, *, refresh: bool = True) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.wall()))
        raw = orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                            "metadata": {"name": name},
                            "status": {"updateTime": stamp, "podsMetric": [],
                                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}}})
        self.store.put(validate_report(raw, name), {})
        if refresh:
            self.extender.cache.refresh(self.config)  # the second's refresh, now

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def harness() -> AsyncIterator[tuple[Harness, TestClient[Any, Any]]]:
    h = Harness()
    await h.start()
    async with TestClient(TestServer(h.extender.routes.application())) as client:
        yield h, client


async def call(client: TestClient[Any, Any], verb: str, pod: dict[str, Any], names: list[str]) -> Any:
    response = await client.post(f"/scheduler/{verb}", data=orjson.dumps({"Pod": pod, "Nodes": None,
                                                                          "NodeNames": names}))
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


async def test_a_hot_node_is_filtered_as_unresolvable_and_the_others_pass(
        harness: tuple[Harness, TestClient[Any, Any]]) -> None:
    h, client = harness
    h.report("node-1", "3600m")  # 90 % of 4 cores: above the 65 % threshold
    h.report("node-2", "400m")
    result = await call(client, "filter", pending_pod("web-1"), ["node-1", "node-2", "node-3"])
    assert result["NodeNames"] == ["node-2", "node-3"]
    # Never in FailedNodes: preemption would nominate it.
    assert result["FailedNodes"] == {}
    assert list(result["FailedAndUnresolvableNodes"]) == ["node-1"]
    assert "cpu usage above 65%" in result["FailedAndUnresolvableNodes"]["node-1"]
    assert result["Error"] == ""
    assert h.sample("colocation_scheduler_extender_filtered_nodes_total") == 1
    assert h.sample("colocation_scheduler_extender_missing_nodes_total", verb="filter") == 1  # node-3
    assert h.sample("colocation_scheduler_extender_request_duration_seconds_count", verb="filter", code="200") == 1


async def test_a_stale_node_is_neither_filtered_nor_favoured(harness: tuple[Harness, TestClient[Any, Any]]) -> None:
    h, client = harness
    h.report("node-1", "3600m")
    h.clock.advance(61)  # past nodeMetricExpirationSeconds
    h.report("node-2", "400m")
    h.report("node-3", "2000m")
    result = await call(client, "filter", pending_pod("web-1"), ["node-1", "node-2", "node-3"])
    assert result["NodeNames"] == ["node-1", "node-2", "node-3"]
    scores = {entry["Host"]: entry["Score"] for entry in
              await call(client, "prioritize", pending_pod("web-2"), ["node-1", "node-2", "node-3"])}
    # The neutral score: the mean of the fresh ones, between the cool node and the busy one.
    assert scores["node-2"] > scores["node-1"] > scores["node-3"]
    assert h.sample("colocation_scheduler_extender_stale_nodes_total", verb="filter") == 1
    assert h.sample("colocation_scheduler_extender_stale_nodes_total", verb="prioritize") == 1


async def test_a_pod_ranked_first_counts_on_its_node_until_the_watch_shows_it_bound(
        harness: tuple[Harness, TestClient[Any, Any]]) -> None:
    h, client = harness
    h.report("node-1", "1000m")
    h.report("node-2", "1000m")
    names = ["node-1", "node-2"]
    big = pending_pod("big-1", cpu="2")
    first = await call(client, "prioritize", big, names)
    assert first[0]["Score"] == first[1]["Score"]  # equal: the first takes it
    second = {entry["Host"]: entry["Score"] for entry in await call(client, "prioritize", pending_pod("big-2", cpu="2"),
                                                                     names)}
    assert second["node-2"] > second["node-1"]
    assert h.sample("colocation_scheduler_extender_tentative_placements_total") == 2
    # The watch shows big-1 bound elsewhere: node-1 no longer carries it.
    await h.extender.pods.on_event("ADDED", {**big, "spec": {**big["spec"], "nodeName": "node-3"}})
    third = {entry["Host"]: entry["Score"] for entry in await call(client, "prioritize", pending_pod("small", cpu="1m"),
                                                                    names)}
    assert third["node-1"] > third["node-2"]  # node-2 still holds big-2
    h.clock.advance(h.config.tentative_hold_seconds)
    last = {entry["Host"]: entry["Score"] for entry in await call(client, "prioritize", pending_pod("x", cpu="1m"),
                                                                   names)}
    assert last["node-1"] == last["node-2"]  # the hold passed: big-2 counts nowhere


async def test_a_replica_that_is_not_ready_answers_503_so_the_scheduler_goes_on_without_it(
        harness: tuple[Harness, TestClient[Any, Any]]) -> None:
    h, client = harness
    h.ready = False
    response = await client.post("/scheduler/filter", data=orjson.dumps({"Pod": pending_pod("a"), "NodeNames": []}))
    assert response.status == 503
    assert h.sample("colocation_scheduler_extender_request_duration_seconds_count", verb="filter", code="503") == 1


async def test_a_replica_that_turns_ready_answers_from_its_copy_not_from_figures_computed_before(
        harness: tuple[Harness, TestClient[Any, Any]]) -> None:
    h, client = harness
    h.ready = False  # a restarted replica: its copy of the NodeMetrics still empty
    h.extender.cache.refresh(h.config)  # the periodic refresh, before the copy arrives
    h.report("node-1", "3600m", refresh=False)  # the copy arrives, and the replica is ready before the next refresh
    h.ready = True
    result = await call(client, "filter", pending_pod("web-1"), list(NODES))
    assert list(result["FailedAndUnresolvableNodes"]) == ["node-1"]


async def test_a_body_that_is_no_extender_args_is_answered_400(harness: tuple[Harness, TestClient[Any, Any]]) -> None:
    _, client = harness
    response = await client.post("/scheduler/prioritize", data=b"{}")
    assert response.status == 400
    assert "Pod is missing" in await response.text()
