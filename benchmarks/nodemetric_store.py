"""Micro-benchmark of the operator's NodeMetric ingest path and store, on one core.

    PYTHONPATH=operator python -m benchmarks.nodemetric_store [--nodes 2000 --pods 30 --seconds 3]

Prints reports/s for validation alone and for validation + store (every report a change, as
each carries a new updateTime), and the memory held per node (tracemalloc): the entries alone,
and with the watch window full of events. Targets: ≥ 3,000 reports/s, ≤ 40 KiB per node.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import time
import tracemalloc
from collections.abc import Callable

import orjson

from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import ValidatedReport, validate_report

_EPOCH = 1_795_341_600  # 2026-11-22T10:00:00Z


def report_body(node: str, pods: int, sequence: int) -> bytes:
    """A report as an agent sends it: node and system usage, 5 aggregates, `pods` pod entries."""
    def usage(cpu_millis: int, memory_mi: int) -> dict[str, object]:
        return {"resources": {"cpu": f"{cpu_millis}m", "memory": f"{memory_mi}Mi"}}

    moment = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_EPOCH + sequence))
    return orjson.dumps({
        "apiVersion": "metrics.colocation.dev/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": node},
        "status": {
            "updateTime": moment,
            "nodeMetric": {
                "nodeUsage": usage(2500 + sequence % 100, 8192),
                "systemUsage": usage(300, 1024),
                "aggregatedNodeUsages": [{"usage": {kind: usage(2400, 8000) for kind in
                                                    ("avg", "p50", "p90", "p95", "p99")}, "duration": "5m0s"}],
            },
            "podsMetric": [{"namespace": f"team-{i % 7}", "name": f"workload-{i}-5d8f7c9b4-x2k{i:02d}",
                            "podUsage": usage(10 * i + sequence % 10, 64 + i),
                            "priority": "koord-batch" if i % 3 else "koord-prod", "qos": "BE" if i % 3 else "LS"}
                           for i in range(pods)],
            "hostApplicationMetric": [{"name": "kubelet", "usage": usage(100, 200),
                                       "priority": "koord-prod", "qos": "SYSTEM"}],
        },
    })


def rate(action: Callable[[int], object], seconds: float) -> float:
    """Calls of `action` per second, over about `seconds`."""
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(200):
            action(done)
            done += 1
    return done / elapsed


def bytes_per_node(nodes: int, pods: int, window: int, reports_per_node: int) -> float:
    labels = {"kubernetes.io/hostname": "", "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m5.2xl",
              "topology.kubernetes.io/zone": "eu-west-1a", "pool": "general"}
    reports = [[validate_report(report_body(f"node-{n:05d}", pods, s), f"node-{n:05d}")
                for s in range(reports_per_node)] for n in range(nodes)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    clock = itertools.count()
    store = NodeMetricStore(clock_wall=lambda: _EPOCH + next(clock) / 1000, clock_monotonic=time.monotonic,
                            window=window)
    for sequence in range(reports_per_node):
        for n in range(nodes):
            store.put(reports[n][sequence], {**labels, "kubernetes.io/hostname": f"node-{n:05d}"})
    del reports
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert store.node_count == nodes
    return held / nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000, help="Nodes stored for the memory figures.")
    parser.add_argument("--pods", type=int, default=30, help="Pod entries per report.")
    parser.add_argument("--seconds", type=float, default=3.0, help="Duration of each rate measurement.")
    args = parser.parse_args()

    bodies = [report_body(f"node-{n:05d}", args.pods, n) for n in range(1000)]
    print(f"report body: {len(bodies[0]):,} bytes, {args.pods} pods")
    validate_rate = rate(lambda i: validate_report(bodies[i % 1000], f"node-{i % 1000:05d}"), args.seconds)
    print(f"validate:        {validate_rate:8,.0f} reports/s")

    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic)
    # Ten distinct reports per node, so every put is a change (a new version and a watch event).
    changing = [report_body(f"node-{n % 100:05d}", args.pods, n) for n in range(1000)]

    def ingest(i: int) -> None:
        report: ValidatedReport = validate_report(changing[i % 1000], f"node-{i % 100:05d}")
        store.put(report, {"pool": "general"})

    print(f"validate + put:  {rate(ingest, args.seconds):8,.0f} reports/s")
    entries_only = bytes_per_node(args.nodes, args.pods, window=1, reports_per_node=1)
    print(f"memory per node: {entries_only / 1024:6.1f} KiB (latest report only)")
    full_window = bytes_per_node(args.nodes, args.pods, window=10_000,
                                 reports_per_node=max(1, 10_000 // args.nodes + 1))
    print(f"memory per node: {full_window / 1024:6.1f} KiB (with a full window of 10,000 events over "
          f"{args.nodes:,} nodes)")


if __name__ == "__main__":
    main()
