"""Parity with koord-manager: the expectations of Koordinator's batchresource plugin, as vectors.

Each vector restates one case of the plugin's Calculate tests (pkg/slo-controller/noderesource/
plugins/batchresource, and the safety margin of plugins/util) in our words and inputs: plain
JSON as `calculate_batch_resources` takes it, and the node-level batch-cpu (milli-cores) and
batch-memory (bytes) Koordinator expects, or None where it removes them. Memory is in decimal
units (G = 10^9 bytes), as there. Every case is here; what the plugin does outside the formula
(NUMA zones, third-party allocations, cpu normalization) is listed in docs/architecture.md.

Two scenarios recur. The first, `SERVING`, on a node of 100 cpus / 120G that uses 7 cpus / 12G
for itself:
    serving    qos LS, requests 20 / 20G, Running, uses 11 / 11G        high priority
    crawler    qos BE, no requests, Running, uses 10 / 10G              batch
    database   Guaranteed 2 x (10 / 20G), Pending, uses 22 / 22G         prod (LSR)
    report     qos BE, 10 / 10G, Succeeded, no metric                   nothing
so HPUsed = 33 / 33G, HPRequest = 40 / 60G, HPMaxUsageRequest = 42 / 60G.
The second, `CLASSES`, mixes priority classes on the same node:
    web        qos LS, 10 / 10G, Running, uses 5 / 5G                    prod
    api        spec.priority 9999, 10 / 10G, Running, uses 6 / 6G        prod
    etl        qos BE, 10 / 10G, Running, uses 10 / 10G                  batch
    cache      qos BE but spec.priority 7000, 2 x (10 / 20G), Pending,   mid: high priority
               uses 22 / 22G
    finished   10 / 10G, Succeeded                                       no request
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from colocation.koordinator.batch_formula import BATCH_CPU, BATCH_MEMORY, calculate_batch_resources

G = 10**9
NOW = dt.datetime(2026, 11, 25, 12, 0, 0, tzinfo=dt.UTC).timestamp()
RESERVATION = "node.koordinator.sh/reservation"
NUMA_STATUS = "scheduling.koordinator.sh/resource-status"
QOS = "koordinator.sh/qosClass"


def node(capacity: tuple[str, str] = ("100", "120G"), allocatable: tuple[str, str] | None = None,
         reservation: dict[str, Any] | None = None) -> dict[str, Any]:
    allocatable = allocatable or capacity
    annotations = {RESERVATION: json.dumps(reservation)} if reservation is not None else {}
    return {"metadata": {"name": "n1", "annotations": annotations},
            "status": {"capacity": {"cpu": capacity[0], "memory": capacity[1]},
                       "allocatable": {"cpu": allocatable[0], "memory": allocatable[1]}}}


def pod(name: str, *containers: tuple[str, str], phase: str = "Running", qos: str | None = None,
        priority: int | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod whose containers request and are limited to (cpu, memory) each."""
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [
        {"name": f"c{i}", "resources": {"requests": {"cpu": cpu, "memory": memory},
                                        "limits": {"cpu": cpu, "memory": memory}}}
        for i, (cpu, memory) in enumerate(containers)] or [{"name": "c0"}]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"namespace": "test", "name": name, "labels": {QOS: qos} if qos else {},
                         "annotations": annotations or {}},
            "spec": spec, "status": {"phase": phase}}


def usage(name: str, cpu: str, memory: str, priority: str | None = None, qos: str | None = None) -> dict[str, Any]:
    metric: dict[str, Any] = {"namespace": "test", "name": name,
                              "podUsage": {"resources": {"cpu": cpu, "memory": memory}}}
    metric.update({k: v for k, v in (("priority", priority), ("qos", qos)) if v is not None})
    return metric


def metric(pods: list[dict[str, Any]], *, node_usage: tuple[str, str] = ("50", "55G"),
           system: tuple[str, str] = ("7", "12G"), host_apps: list[dict[str, Any]] | None = None,
           age_seconds: float = 0) -> dict[str, Any]:
    update_time = dt.datetime.fromtimestamp(NOW - age_seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {
        "updateTime": update_time,
        "nodeMetric": {"nodeUsage": {"resources": {"cpu": node_usage[0], "memory": node_usage[1]}},
                       "systemUsage": {"resources": {"cpu": system[0], "memory": system[1]}}},
        "podsMetric": pods}
    if host_apps is not None:
        status["hostApplicationMetric"] = host_apps
    return {"metadata": {"name": "n1"}, "status": status}


def host_app(name: str, priority: str) -> dict[str, Any]:
    return {"name": name, "usage": {"resources": {"cpu": "3", "memory": "6G"}}, "priority": priority}


SERVING_PODS = [pod("serving", ("20", "20G"), qos="LS"), pod("crawler", qos="BE"),
                pod("database", ("10", "20G"), ("10", "20G"), phase="Pending"),
                pod("report", ("10", "10G"), phase="Succeeded", qos="BE")]
SERVING_USAGE = [usage("serving", "11", "11G"), usage("crawler", "10", "10G"), usage("database", "22", "22G")]
SERVING = metric(SERVING_USAGE)

BOUND_TO_NUMA_0 = {NUMA_STATUS: json.dumps({"numaNodeResources": [{"node": 0}]})}


def classes_pods(web_qos: str = "LS", web_annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [pod("web", ("10", "10G"), qos=web_qos, annotations=web_annotations),
            pod("api", ("10", "10G"), priority=9999),
            pod("etl", ("10", "10G"), qos="BE"),
            pod("cache", ("10", "20G"), ("10", "20G"), phase="Pending", qos="BE", priority=7000),
            pod("finished", ("10", "10G"), phase="Succeeded")]


CLASSES = metric([usage("web", "5", "5G"), usage("api", "6", "6G"), usage("etl", "10", "10G"),
                  usage("cache", "22", "22G")])
# The agent states each pod's classes. "finished" was still running when it was measured.
CLASSES_STATED = [usage("api", "6", "6G", "koord-prod", "LS"), usage("finished", "2", "4G", "koord-prod", "LSR"),
                  usage("etl", "10", "10G", "koord-batch", "BE"), usage("cache", "22", "22G", "koord-mid", "BE")]
LSE_BOUND = {NUMA_STATUS: json.dumps({"cpuset": "2-5,10-13", "numaNodeResources": [{"node": 0}]})}


@dataclass(frozen=True)
class Vector:
    rule: str
    expected: tuple[int, int] | None  # (batch-cpu milli-cores, batch-memory bytes)
    strategy: dict[str, Any] = field(default_factory=dict)
    node: dict[str, Any] = field(default_factory=node)
    pods: list[dict[str, Any]] = field(default_factory=lambda: SERVING_PODS)
    metric: dict[str, Any] | None = field(default_factory=lambda: SERVING)


R65 = {"cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65}
R70_80_REQUEST = {"cpuReclaimThresholdPercent": 70, "memoryReclaimThresholdPercent": 80,
                  "memoryCalculatePolicy": "request"}
OVER = {"cpuReclaimThresholdPercent": 150, "memoryReclaimThresholdPercent": 120}
OVER_MAX_REQUEST = {**OVER, "cpuCalculatePolicy": "maxUsageRequest", "memoryCalculatePolicy": "request"}
OVER_USAGE_MAX = {**OVER, "cpuCalculatePolicy": "usage", "memoryCalculatePolicy": "maxUsageRequest"}
CAPS = {"batchCPUThresholdPercent": 100, "batchMemoryThresholdPercent": 100}

VECTORS = [
    # -- usage policy: capacity - margin - max(system usage, reservation) - HP usage -----------------
    # cpu 100 - 35 - 7 - 33 = 25; memory 120 - 42 - 12 - 33 = 33G
    Vector("usage: HP pods count their usage, batch and finished pods nothing", (25000, 33 * G), R65),
    Vector("an empty reservation annotation reserves nothing", (25000, 33 * G), R65, node(reservation={})),
    Vector("reserved cpus below the system usage change nothing", (25000, 33 * G), R65,
           node(reservation={"reservedCPUs": "0-1"})),
    # 20 reserved cpus > 7 used: 100 - 35 - 20 - 33 = 12
    Vector("reserved cpus above the system usage replace it", (12000, 33 * G), R65,
           node(reservation={"reservedCPUs": "0-19"})),
    Vector("a reserved cpu quantity above the system usage replaces it", (12000, 33 * G), R65,
           node(reservation={"resources": {"cpu": "20"}})),
    # reservedCPUs (10) wins over the quantity (20): 100 - 35 - 10 - 33 = 22
    Vector("reserved cpus override a reserved cpu quantity", (22000, 33 * G), R65,
           node(reservation={"resources": {"cpu": "20"}, "reservedCPUs": "0-9"})),
    # 120 - 42 - 20 - 33 = 25G
    Vector("reserved memory above the system usage replaces it", (25000, 25 * G), R65,
           node(reservation={"resources": {"memory": "20G"}})),
    Vector("reserved memory below the system usage changes nothing", (25000, 33 * G), R65,
           node(reservation={"resources": {"memory": "5G"}})),
    Vector("reserved cpu and memory below the system usage change nothing", (25000, 33 * G), R65,
           node(reservation={"resources": {"memory": "5G", "cpu": "2"}})),
    Vector("reserved cpu and memory above the system usage replace it", (22000, 25 * G), R65,
           node(reservation={"resources": {"memory": "20G", "cpu": "10"}})),
    Vector("reserved memory and cpus above the system usage replace it", (22000, 25 * G), R65,
           node(reservation={"resources": {"memory": "20G"}, "reservedCPUs": "0-9"})),
    # kubelet reserves 10 / 20G (capacity - allocatable), more than the annotation and the usage
    Vector("the kubelet reservation counts when it is the largest", (22000, 25 * G), R65,
           node(allocatable=("90", "100G"), reservation={"resources": {"memory": "5G", "cpu": "2"}})),
    # -- request policy (memory): capacity - margin - reservation - HP requests ------------------------
    # cpu 100 - 30 - 7 - 33 = 30; memory 120 - 24 - 0 - 60 = 36G
    Vector("request: memory counts HP requests, not the system usage", (30000, 36 * G), R70_80_REQUEST),
    Vector("request: the reservation annotation counts", (30000, 31 * G), R70_80_REQUEST,
           node(reservation={"resources": {"memory": "5G"}})),
    # kubelet 10 / 20G: cpu 100 - 30 - 10 - 33 = 27; memory 120 - 24 - 20 - 60 = 16G
    Vector("request: the larger of kubelet and annotation reservations counts", (27000, 16 * G),
           R70_80_REQUEST, node(allocatable=("90", "100G"), reservation={"resources": {"memory": "5G"}})),
    Vector("request: a larger annotation reservation counts", (30000, 26 * G), R70_80_REQUEST,
           node(reservation={"resources": {"memory": "10G"}})),
    # -- priority classes, phases, LSE ---------------------------------------------------------------
    # HPUsed = web 5 + api 6 + cache 22 = 33 / 33G
    Vector("mid pods are high priority, whatever their QoS class", (25000, 33 * G), R65, node(),
           classes_pods(), CLASSES),
    # web 5 + api's request 10 (no metric) + a vanished pod's 10 (no priority stated) = 25 / 25G;
    # cpu 100 - 35 - 5 - 25 = 35; memory 120 - 42 - 10 - 25 = 43G
    Vector("a pod without a metric counts its request; a gone pod's metric counts", (35000, 43 * G), R65,
           node(), classes_pods()[:2],
           metric([usage("web", "5", "5G"), usage("vanished", "10", "10G")],
                  node_usage=("25", "30G"), system=("5", "10G"))),
    # LSE: web counts its cpu request 10 (not its usage 5): HPUsed cpu 38
    Vector("an LSE pod counts its cpu request instead of its cpu usage", (20000, 33 * G), R65, node(),
           classes_pods("LSE"), CLASSES),
    # -- the NUMA cases, at node level (their zone results are not ours) -------------------------------
    Vector("one NUMA zone: the node-level result is unchanged", (25000, 33 * G), R65, node(),
           classes_pods(), CLASSES),
    Vector("a pod bound to one NUMA node: the node-level result is unchanged", (25000, 33 * G), R65,
           node(), classes_pods(web_annotations=BOUND_TO_NUMA_0), CLASSES),
    # cpu: LSE web 10 + api 6 + cache 22 = 38 -> 20; memory (request): 10 + 10 + 40 = 60 -> 18G
    Vector("request memory with an LSE pod", (20000, 18 * G), {**R65, "memoryCalculatePolicy": "request"},
           node(), classes_pods("LSE", LSE_BOUND), CLASSES),
    # web (LSE) has no metric: its request 10; api 6; cache 22; finished (Succeeded, prod) 2 = 40
    Vector("a terminated pod's metric counts unless it says batch or free", (18000, 18 * G),
           {**R65, "memoryCalculatePolicy": "request"}, node(), classes_pods("LSE", LSE_BOUND),
           metric(CLASSES_STATED)),
    # + vanished-prod 4 (counts) and vanished-batch 8 (does not): 44 -> 14
    Vector("gone pods' metrics count by their stated priority", (14000, 18 * G),
           {**R65, "memoryCalculatePolicy": "request"}, node(), classes_pods("LSE", LSE_BOUND),
           metric([*CLASSES_STATED, usage("vanished-prod", "4", "8G", "koord-prod", "LS"),
                   usage("vanished-batch", "8", "8G", "koord-batch", "BE")])),
    # -- maxUsageRequest, reclaim above 100, caps ------------------------------------------------------
    # cpu 100 - 30 - 7 - 42 = 21; memory 120 - 24 - 0 - 60 = 36G
    Vector("maxUsageRequest cpu counts the larger of request and usage", (21000, 36 * G),
           {**R70_80_REQUEST, "cpuCalculatePolicy": "maxUsageRequest"}),
    # margins -50 / -24G: cpu 100 + 50 - 7 - 42 = 101; memory 120 + 24 - 0 - 60 = 84G
    Vector("a reclaim percentage above 100 offers more than the capacity", (101000, 84 * G), OVER_MAX_REQUEST),
    Vector("a batch cpu cap of 100 % caps at the capacity", (100000, 84 * G),
           {**OVER_MAX_REQUEST, "batchCPUThresholdPercent": 100}),
    Vector("a batch memory cap above the result changes nothing", (101000, 84 * G),
           {**OVER_MAX_REQUEST, "batchMemoryThresholdPercent": 100}),
    Vector("both batch caps", (100000, 84 * G), {**OVER_MAX_REQUEST, **CAPS}),
    # cpu 100 + 50 - 7 - 33 = 110; memory 120 + 24 - 12 - 60 = 72G
    Vector("usage cpu with maxUsageRequest memory", (110000, 72 * G), OVER_USAGE_MAX),
    Vector("both batch caps with usage cpu and maxUsageRequest memory", (100000, 72 * G),
           {**OVER_USAGE_MAX, **CAPS}),
    # -- host applications: prod and mid ones are system usage (4 / 6G + 3 / 6G), batch ones not -----
    Vector("a prod host application counts as system usage", (25000, 33 * G), R65,
           metric=metric(SERVING_USAGE, system=("4", "6G"), host_apps=[host_app("proxy", "koord-prod")])),
    Vector("a mid host application counts as system usage", (25000, 33 * G), R65,
           metric=metric(SERVING_USAGE, system=("4", "6G"), host_apps=[host_app("proxy", "koord-mid")])),
    # cpu 100 - 35 - 4 - 33 = 28; memory 120 - 42 - 6 - 33 = 39G
    Vector("a batch host application does not", (28000, 39 * G), R65,
           metric=metric(SERVING_USAGE, system=("4", "6G"), host_apps=[host_app("yarn", "koord-batch")])),
    # -- plugins/util: the safety margin; usage beyond cpu and memory is ignored ------------------------
    # margin 35 / 35Gi of 100 / 100Gi; nothing else: 65 / 65Gi
    Vector("the safety margin is (100 - reclaim) % of the capacity", (65000, 65 * 2**30), R65,
           node(("100", "100Gi")), [pod("gpu", ("1", "1Gi"))],
           metric([{**usage("gpu", "0", "0"), "podUsage": {"resources": {"cpu": "0", "memory": "0",
                                                                         "example.com/gpu": "1"}}}],
                  system=("0", "0"))),
    # -- when batch resources are removed (isDegradeNeeded) ------------------------------------------
    Vector("no metric: removed", None, {"degradeTimeMinutes": 10}, metric=None),
    Vector("a metric without status: removed", None, {"degradeTimeMinutes": 10}, metric={"metadata": {}}),
    Vector("a metric older than degradeTimeMinutes: removed", None, {"degradeTimeMinutes": 10},
           metric=metric(SERVING_USAGE, age_seconds=11 * 60)),
]


@pytest.mark.parametrize("vector", VECTORS, ids=[v.rule for v in VECTORS])
def test_koordinator_expectation(vector: Vector) -> None:
    result = calculate_batch_resources(vector.node, vector.pods, vector.metric, strategy=vector.strategy, now=NOW)
    assert (None if result is None else (result[BATCH_CPU], result[BATCH_MEMORY])) == vector.expected


def test_every_rule_is_named_once() -> None:
    assert len({v.rule for v in VECTORS}) == len(VECTORS)
