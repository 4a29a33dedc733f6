"""The scheduler extender's latency (issue 40), in-process: filter and prioritize at 1,000 and 5,000 candidates.

The extender as the manager assembles it (`assemble_extender`: a NodeMetricStore, a Node
directory, the bound pods) is served by its aiohttp application on a loopback port of this
process (aiohttp's TestServer: plain HTTP, no TLS), and called as kube-scheduler calls an
extender with `nodeCacheCapable: true` (ExtenderArgs with `NodeNames`), one pod at a time: filter
with every candidate, then prioritize with the candidates the filter passed. Each call is timed
from sending the request to reading the whole answer, in this process, which is the client too.

Every node has a fresh report (received now), a usage spread over 0 to 89 % of its cpu (so the
filter refuses some: the default threshold is 65 %) and 16 cores; the figures are computed before
the calls (`NodeFigureCache.refresh`, as the replica does each second). The pods have UIDs, so
prioritize places each tentatively on its best node (the default hold, 30 s): the later calls
carry those placements, as a burst does.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from benchmarks.stats import Latency, ms
from colocation.kube.nodes import NodeDirectory
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.manager.extender_assembly import SchedulerExtender, assemble_extender
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report

NODE_CPU_MILLIS = 16_000
NODE_MEMORY = "64Gi"
WARMUP = 5  # calls per size not counted: the first ones build aiohttp's and the caches' state


@dataclass(frozen=True)
class LatencyFigures:
    """One size's calls: seconds per call of each verb, and how many candidates the filter passed."""

    nodes: int
    filter_seconds: list[float]
    prioritize_seconds: list[float]
    passed: int  # candidates the last filter passed (what prioritize was sent)

    @property
    def filter(self) -> Latency:
        return Latency.of(self.filter_seconds)

    @property
    def prioritize(self) -> Latency:
        return Latency.of(self.prioritize_seconds)


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def usage_millis(index: int) -> int:
    """A node's cpu usage: spread over 0 to 89 % of its cpu, the same for the same index."""
    return NODE_CPU_MILLIS * ((index * 37) % 90) // 100


def node_object(index: int) -> dict[str, Any]:
    return {"metadata": {"name": node_name(index)},
            "status": {"allocatable": {"cpu": f"{NODE_CPU_MILLIS}m", "memory": NODE_MEMORY, "pods": "110"}}}


def report_body(index: int, wall: float) -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))
    return orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                         "metadata": {"name": node_name(index)},
                         "status": {"updateTime": stamp, "podsMetric": [], "nodeMetric": {
                             "nodeUsage": {"resources": {"cpu": f"{usage_millis(index)}m", "memory": "8Gi"}}}}})


def pending_pod(index: int) -> dict[str, Any]:
    return {"metadata": {"name": f"bench-{index}", "namespace": "default", "uid": f"uid-bench-{index}"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}}


async def assembled(nodes: int) -> tuple[SchedulerExtender, LoadAwareConfig]:
    """The extender with `nodes` Nodes, each with a fresh report, and their figures computed."""
    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic)
    directory = NodeDirectory()
    config = LoadAwareConfig()
    extender = assemble_extender(store, directory, config=lambda: config, ready=lambda: True,
                                 registry=CollectorRegistry())
    await directory.on_sync([node_object(i) for i in range(nodes)], "1")
    await extender.pods.on_sync([], "1")
    now = time.time()
    for i in range(nodes):
        store.put(validate_report(report_body(i, now), node_name(i)), {})
    extender.cache.refresh(config)
    return extender, config


async def _call(client: TestClient[Any, Any], verb: str, body: bytes) -> tuple[float, Any]:
    started = time.perf_counter()
    response = await client.post(f"/scheduler/{verb}", data=body, headers={"Content-Type": "application/json"})
    payload = await response.read()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise RuntimeError(f"{verb}: {response.status} {payload[:300]!r}")
    return elapsed, orjson.loads(payload)


async def measure(nodes: int, calls: int) -> LatencyFigures:
    """`calls` pods (after WARMUP), each a filter of every node then a prioritize of those it passed."""
    extender, _ = await assembled(nodes)
    names = [node_name(i) for i in range(nodes)]
    filters: list[float] = []
    prioritizes: list[float] = []
    passed = 0
    async with TestClient(TestServer(extender.routes.application())) as client:
        for index in range(WARMUP + calls):
            pod = pending_pod(index)
            filter_seconds, answer = await _call(client, "filter", orjson.dumps(
                {"Pod": pod, "Nodes": None, "NodeNames": names}))
            passed = len(answer["NodeNames"])
            prioritize_seconds, _ = await _call(client, "prioritize", orjson.dumps(
                {"Pod": pod, "Nodes": None, "NodeNames": answer["NodeNames"]}))
            if index >= WARMUP:
                filters.append(filter_seconds)
                prioritizes.append(prioritize_seconds)
    return LatencyFigures(nodes=nodes, filter_seconds=filters, prioritize_seconds=prioritizes, passed=passed)


def run(sizes: tuple[int, ...], calls: int) -> list[LatencyFigures]:
    async def each() -> list[LatencyFigures]:
        return [await measure(nodes, calls) for nodes in sizes]

    return asyncio.run(each())


if __name__ == "__main__":  # `python -m benchmarks.scheduler_extender_latency`: this part alone, no report
    for each in run((1000, 5000), 200):
        print(f"{each.nodes:,} candidates ({each.passed:,} passed): "
              + "; ".join(f"{verb} p50 {ms(latency.p50)} ms, p99 {ms(latency.p99)} ms, max {ms(latency.max)} ms"
                          for verb, latency in (("filter", each.filter), ("prioritize", each.prioritize))))
