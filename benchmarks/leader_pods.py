"""What the leader's kept pods cost, in process: tracemalloc bytes per pod kept, µs of CPU per
node evaluation of the batch + mid formulas, and of the reconciler's whole evaluation.

    .venv/bin/python -m benchmarks.leader_pods [--nodes 1000] [--pods-per-node 30] [--profile]

The reconciler's evaluation (`reconciler_micros`) runs `NodeResourceReconciler.evaluate` as the
leader does every 5 s, on sandbox nodes and pods, with 7 KiB reports of which half are new each
round (agents report every 10 s), against a writer that answers like the API server without a
network (`_LocalWriter`), under the operator's GC settings; `--profile` prints its cProfile.

Two pod shapes: the sandbox's (`SyntheticCollector` pods, as `colocation sandbox --nodes`
creates them) and a realistic cluster's (replicas of a few hundred workloads sharing their
container specs, with init containers, sidecars and scrape annotations).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import random
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from colocation.agent.synthetic import SyntheticCollector
from colocation.apimachinery.clock import format_time
from colocation.apimachinery.merge_patch import json_merge_patch
from colocation.controllers.cluster import ClusterState
from colocation.controllers.configsource import ConfigSource
from colocation.controllers.controller_metrics import ControllerMetrics
from colocation.controllers.evaluation_shards import shard_of
from colocation.controllers.events import ObjectRef
from colocation.controllers.health import NodeHealthTracker
from colocation.controllers.noderesource_controller import NodeResourceReconciler
from colocation.controllers.settings import ControllerSettings
from colocation.koordinator.batch_formula import calculate_batch_resources
from colocation.koordinator.mid_formula import calculate_mid_resources
from colocation.manager.operator_process import GC_YOUNG_THRESHOLD
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report

_METRIC_TIME = "2026-11-26T10:00:00Z"
_NOW = 1_795_000_000.0  # any time: `received_at` keeps the metric fresh


def sandbox_pods(nodes: int, per_node: int) -> Iterator[dict[str, Any]]:
    for index in range(nodes):
        yield from SyntheticCollector(f"node-{index:05d}", pods_per_node=per_node).pods()


def realistic_pods(nodes: int, per_node: int) -> Iterator[dict[str, Any]]:
    """Replicas of 300 workloads: the same containers (sidecar, init container) per workload."""
    for index in range(nodes * per_node):
        workload = index % 300
        yield {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"app-{workload}-5d8f-{index:06x}", "namespace": f"team-{workload % 20}",
                         "uid": f"00000000-0000-0000-0000-{index:012d}",
                         "labels": {"app": f"app-{workload}", "pod-template-hash": "5d8f",
                                    "koordinator.sh/qosClass": "BE" if workload % 3 == 0 else "LS"},
                         "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}},
            "spec": {"nodeName": f"node-{index % nodes:05d}", "priority": 0 if workload % 3 == 0 else 9000,
                     "initContainers": [
                         {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "50m"}}},
                         {"name": "proxy", "image": "envoy", "restartPolicy": "Always",
                          "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                     "containers": [{"name": "main", "image": f"app-{workload}:1",
                                     "env": [{"name": "MODE", "value": "prod"}],
                                     "resources": {"requests": {"cpu": f"{100 + workload}m", "memory": "256Mi"},
                                                   "limits": {"cpu": "2", "memory": "512Mi"}}}]},
            "status": {"phase": "Running", "qosClass": "Burstable", "podIP": "10.0.0.1"},
        }


def _fill(state: ClusterState, pods: Iterator[dict[str, Any]]) -> int:
    """The Pod informer's initial list, through its transform (`pod_kept`); returns the count."""
    kept = [state.pod_kept(pod) for pod in pods]
    asyncio.run(state.pods_synced_with(kept, "1"))
    return len(kept)


def bytes_per_pod(pods: Callable[[], Iterator[dict[str, Any]]]) -> float:
    """Memory the state holds for each pod, as the informer's transform and events deliver them."""
    gc.collect()
    tracemalloc.start()
    state = ClusterState()
    before = tracemalloc.get_traced_memory()[0]
    count = _fill(state, pods())
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / count


def _node(name: str) -> dict[str, Any]:
    resources = {"cpu": "16", "memory": "64Gi"}
    return {"metadata": {"name": name}, "status": {"capacity": resources, "allocatable": resources}}


def _metric(pods: list[Any]) -> dict[str, Any]:
    return {"status": {"updateTime": _METRIC_TIME,
                       "nodeMetric": {"nodeUsage": {"cpu": "6", "memory": "20Gi"}},
                       "podsMetric": [{"namespace": pod["metadata"]["namespace"], "name": pod["metadata"]["name"],
                                       "podUsage": {"cpu": "100m", "memory": "200Mi"}} for pod in pods]}}


def evaluation_micros(nodes: int, per_node: int) -> float:
    """µs of process CPU per node for the batch and mid formulas over the kept pods."""
    state = ClusterState()
    _fill(state, sandbox_pods(nodes, per_node))
    work = [(_node(name), state.pods_on(name)) for name in sorted(state.pods.nodes())]
    metrics = [_metric(pods) for _, pods in work]
    started = time.process_time()
    for (node, pods), metric in zip(work, metrics, strict=True):
        calculate_batch_resources(node, pods, metric, strategy={"enable": True}, now=_NOW, received_at=_NOW)
        calculate_mid_resources(node, pods, metric, strategy={"enable": True}, now=_NOW, received_at=_NOW)
    return (time.process_time() - started) / len(work) * 1e6


class _Time:
    """The reconciler's two clocks, moved together by the benchmark."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def wall(self) -> float:
        return _NOW + self.elapsed

    def monotonic(self) -> float:
        return 5000.0 + self.elapsed


class _LocalWriter:
    """The writer's interface, answering as the API server does (the patched object back), in memory."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    async def patch_node_status(self, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        return 200, json_merge_patch(self.state.nodes[name], patch)  # copies what it changes

    async def create_cluster_object(self, plural: str, body: dict[str, Any]) -> tuple[int, Any]:
        return 201, {**body, "metadata": {**body["metadata"], "generation": 1, "resourceVersion": "1"}}

    async def patch_noderesource_status(self, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        return 200, json_merge_patch(self.state.noderesources[name], patch)

    async def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        pass


def _report(name: str, pods: list[dict[str, Any]], now: float, rng: random.Random) -> bytes:
    """A sandbox agent's report: node usage, its aggregates, and every pod's usage (~7 KiB for 30)."""
    def usage(cpu: int, memory_ki: int) -> dict[str, Any]:
        return {"resources": {"cpu": f"{cpu}m", "memory": f"{memory_ki}Ki"}}

    node = usage(8000, 30_000_000)
    return orjson.dumps({
        "apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
        "status": {"updateTime": format_time(now), "nodeMetric": {
            "nodeUsage": node, "recentUsage": {**node, "windowSeconds": 10}, "systemUsage": usage(500, 2_000_000),
            "aggregatedNodeUsages": [{"usage": {q: usage(7000, 29_000_000) for q in ("avg", "p50", "p90", "p99")},
                                      "duration": "5m0s"}]},
            "podsMetric": [{"namespace": pod["metadata"]["namespace"], "name": pod["metadata"]["name"],
                            "podUsage": usage(rng.randint(10, 900), rng.randint(10_000, 900_000)),
                            "recentUsage": usage(rng.randint(10, 900), rng.randint(10_000, 900_000)),
                            "priority": (pod["metadata"].get("labels") or {}).get("koordinator.sh/priority-class",
                                                                                  "koord-prod"),
                            "qos": "LS"} for pod in pods]}})


class _HeldShards:
    """Evaluation shards (`controllers.evaluation_shards.ShardView`): `held` of `count` held, every write allowed."""

    def __init__(self, held: int, count: int) -> None:
        self.count = count
        self.held = frozenset(range(held))

    def owns(self, node: str) -> bool:
        return shard_of(node, self.count) in self.held

    def write_budget_of(self, node: str) -> Callable[[], float]:
        return lambda: 10.0


def reconciler_micros(nodes: int, per_node: int, *, rounds: int = 6, reporting: bool = True,
                      profile: bool = False, shards: tuple[int, int] | None = None) -> float:
    """µs of process CPU per node of `NodeResourceReconciler.evaluate`, in its steady state: half
    the nodes with a new report each round, or (`reporting` False) none, their Leases renewed.
    `shards` (held, count): a replica holding that many of that many evaluation shards; per node
    of the whole cluster still."""
    clocks = _Time()
    state = ClusterState()
    settings = ControllerSettings(node_grace_period=40.0, eviction_timeout=300.0, eviction_rate=100.0)
    store = NodeMetricStore(clock_wall=clocks.wall, clock_monotonic=clocks.monotonic)
    tracker = NodeHealthTracker(clocks.monotonic, grace_period=settings.node_grace_period,
                                eviction_timeout=settings.eviction_timeout)
    writer = _LocalWriter(state)
    config = ConfigSource("colocation-system", writer.event)
    config.loaded = True
    reconciler = NodeResourceReconciler(state, tracker, store, config=config, writer=writer,  # type: ignore[arg-type]
                                        metrics=ControllerMetrics(CollectorRegistry()), settings=settings,
                                        shards=_HeldShards(*shards) if shards else None, wall=clocks.wall)
    names = [f"node-{index:05d}" for index in range(nodes)]
    pods: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        collector = SyntheticCollector(name, pods_per_node=per_node)
        state.node_event(None, collector.node())
        pods[name] = collector.pods()
    _fill(state, (pod for name in names for pod in pods[name]))
    rng = random.Random(16)

    def reports(selected: list[str]) -> None:
        for name in selected:
            store.put(validate_report(_report(name, pods[name], clocks.wall(), rng), name), {})
        for name in names:
            reconciler.observe_lease({"metadata": {"name": name},
                                      "spec": {"renewTime": format_time(clocks.wall()), "holderIdentity": name}})

    thresholds = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
    gc.collect()
    gc.freeze()
    profiler = cProfile.Profile()
    spent = 0.0

    async def run() -> None:
        nonlocal spent
        reports(names)
        # Unmeasured: NodeResources created, first writes, the startup grace (40 s) passes.
        for round_ in range(-10, rounds):
            if round_ >= 0 and profile:
                profiler.enable()
            started = time.process_time()
            await reconciler.evaluate()
            if round_ >= 0:
                spent += time.process_time() - started
                profiler.disable()
            clocks.elapsed += 5
            reports(names[round_ % 2::2] if reporting or round_ < -1 else [])

    asyncio.run(run())
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    if profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return spent / rounds / nodes * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--profile", action="store_true", help="print the reconciler evaluation's cProfile")
    args = parser.parse_args()
    nodes, per_node = args.nodes, args.pods_per_node
    print(f"sandbox pods:   {bytes_per_pod(lambda: sandbox_pods(nodes, per_node)):.0f} bytes per pod kept")
    print(f"realistic pods: {bytes_per_pod(lambda: realistic_pods(nodes, per_node)):.0f} bytes per pod kept")
    print(f"batch + mid formulas: {evaluation_micros(nodes, per_node):.1f} µs CPU per node evaluation")
    print(f"reconciler, half the nodes reporting anew: {reconciler_micros(nodes, per_node, profile=args.profile):.1f}"
          " µs CPU per node evaluation")
    print(f"reconciler, no new report: {reconciler_micros(nodes, per_node, reporting=False, profile=args.profile):.1f}"
          " µs CPU per node evaluation")


if __name__ == "__main__":
    main()
