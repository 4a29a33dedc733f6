"""What the leader's kept pods cost, in process: tracemalloc bytes per pod kept, and µs of CPU per
node evaluation of the batch + mid formulas.

    .venv/bin/python -m benchmarks.leader_pods [--nodes 1000] [--pods-per-node 30]

Two pod shapes: the sandbox's (`SyntheticCollector` pods, as `colocation sandbox --nodes`
creates them) and a realistic cluster's (replicas of a few hundred workloads sharing their
container specs, with init containers, sidecars and scrape annotations).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

from colocation.agent.synthetic import SyntheticCollector
from colocation.controllers.cluster import ClusterState
from colocation.koordinator.batch_formula import calculate_batch_resources
from colocation.koordinator.mid_formula import calculate_mid_resources

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
    work = [(_node(name), state.pods_on(name)) for name in sorted(state.pods_by_node)]
    metrics = [_metric(pods) for _, pods in work]
    started = time.process_time()
    for (node, pods), metric in zip(work, metrics, strict=True):
        calculate_batch_resources(node, pods, metric, {"enable": True}, _NOW, received_at=_NOW)
        calculate_mid_resources(node, pods, metric, {"enable": True}, _NOW, received_at=_NOW)
    return (time.process_time() - started) / len(work) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    args = parser.parse_args()
    nodes, per_node = args.nodes, args.pods_per_node
    print(f"sandbox pods:   {bytes_per_pod(lambda: sandbox_pods(nodes, per_node)):.0f} bytes per pod kept")
    print(f"realistic pods: {bytes_per_pod(lambda: realistic_pods(nodes, per_node)):.0f} bytes per pod kept")
    print(f"batch + mid formulas: {evaluation_micros(nodes, per_node):.1f} µs CPU per node evaluation")


if __name__ == "__main__":
    main()
