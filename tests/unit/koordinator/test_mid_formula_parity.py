"""Parity with koord-manager's Mid-tier resources, one rule per vector, in our words.

The vectors restate the cases of Koordinator's midresource plugin (its Calculate and degradation
tests, pkg/slo-controller/noderesource/plugins/midresource) and the rules of its policy
arithmetic (plugins/util), with our inputs: plain JSON as `calculate_mid_resources` takes it,
and the mid-cpu (milli-cores) and mid-memory (bytes) expected, or None where they are removed;
the last vectors are its midReclaimMode "static" (plugins/util CalculateMidResourceByStaticMode).
Memory is in decimal units (G = 10^9 bytes), as there.

The node has 100 cpus / 210G of capacity and 100 / 200G allocatable (the kubelet reserves 10G),
and runs two pods:
    serving   qos LS, requests 20 / 40G, Running      prod: its requests count as allocated
    spark     qos BE, requests 15 / 30G, Running      batch: counts nothing
System usage is stated as 0 unless a vector says otherwise, so unallocated = 100 - 0 - 20 = 80
cpus and 210 - max(10G, 0) - 40G = 160G.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from colocation.koordinator.mid_formula import MID_CPU, MID_MEMORY, calculate_mid_resources

G = 10**9
NOW = dt.datetime(2026, 11, 25, 12, 0, 0, tzinfo=dt.UTC).timestamp()


def node(reservation: dict[str, Any] | None = None) -> dict[str, Any]:
    annotations = {"node.koordinator.sh/reservation": json.dumps(reservation)} if reservation else {}
    return {"metadata": {"name": "n1", "annotations": annotations},
            "status": {"capacity": {"cpu": "100", "memory": "210G"},
                       "allocatable": {"cpu": "100", "memory": "200G"}}}


def pod(name: str, cpu: str, memory: str, *, qos: str = "LS", priority: int | None = None,
        phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [
        {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory},
                                    "limits": {"cpu": cpu, "memory": memory}}}]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"namespace": "test", "name": name, "labels": {"koordinator.sh/qosClass": qos}},
            "spec": spec, "status": {"phase": phase}}


PODS = [pod("serving", "20", "40G"), pod("spark", "15", "30G", qos="BE")]


def metric(node_usage: dict[str, str] | None = None, reclaimable: tuple[str, str] | None = None, *,
           system: tuple[str, str] | None = ("0", "0"), host_apps: list[dict[str, Any]] | None = None,
           age_seconds: float = 0, pods: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    usage = {"cpu": "30", "memory": "50G"} if node_usage is None else node_usage
    info: dict[str, Any] = {"nodeUsage": {"resources": usage}}
    if system is not None:
        info["systemUsage"] = {"resources": {"cpu": system[0], "memory": system[1]}}
    updated = dt.datetime.fromtimestamp(NOW - age_seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"updateTime": updated, "nodeMetric": info, "podsMetric": pods or [
        {"namespace": "test", "name": "serving", "podUsage": {"resources": {"cpu": "5", "memory": "10G"}}},
        {"namespace": "test", "name": "spark", "podUsage": {"resources": {"cpu": "15", "memory": "30G"}}}]}
    if reclaimable is not None:
        status["prodReclaimableMetric"] = {"resource": {"resources": {"cpu": reclaimable[0],
                                                                      "memory": reclaimable[1]}}}
    if host_apps is not None:
        status["hostApplicationMetric"] = host_apps
    return {"metadata": {"name": "n1"}, "status": status}


def host_app(priority: str | None) -> dict[str, Any]:
    app: dict[str, Any] = {"name": "nginx", "usage": {"resources": {"cpu": "5", "memory": "15G"}}}
    if priority is not None:
        app["priority"] = priority
    return app


@dataclass(frozen=True)
class Vector:
    rule: str
    expected: tuple[int, int] | None  # (mid-cpu milli-cores, mid-memory bytes)
    metric: dict[str, Any] | None
    strategy: dict[str, Any] = field(default_factory=dict)
    node: dict[str, Any] = field(default_factory=node)
    pods: list[dict[str, Any]] = field(default_factory=lambda: PODS)


TENTH = {"midUnallocatedPercent": 10}
CAPPED = {"midCPUThresholdPercent": 10, "midMemoryThresholdPercent": 20, "midUnallocatedPercent": 10}
STATIC = {"midReclaimMode": "static", "midStaticCPUReservedPercent": 30, "midStaticMemoryReservedPercent": 20}

VECTORS = [
    # -- what prod pods leave, bounded by what the node leaves -------------------------------------
    Vector("prod reclaimable below the node's unused is offered whole (defaults: no unallocated share)",
           (10000, 15 * G), metric({"cpu": "20", "memory": "45G"}, ("10", "15G"))),
    Vector("prod reclaimable above the node's unused is cut to the unused (capacity - node usage)",
           (10000, 10 * G), metric({"cpu": "90", "memory": "200G"}, ("20", "20G"))),
    Vector("a node using more than its capacity offers no reclaimable, never a negative amount",
           (8000, 16 * G), metric({"cpu": "120", "memory": "250G"}, ("20", "20G")), TENTH),
    Vector("without a prediction (no prodReclaimableMetric) the reclaimable part is 0, and the node "
           "is not degraded", (0, 0), metric(reclaimable=None)),
    Vector("without a prediction the unallocated share is still offered", (8000, 16 * G), metric(), TENTH),
    Vector("a node usage that lacks cpu or memory makes the unused 0 for both", (0, 0),
           metric({"cpu": "20"}, ("20", "20G"))),
    # -- the unallocated share and the cap ----------------------------------------------------------
    Vector("the unallocated share is added, then the sum is capped at capacity * the threshold",
           (10000, 42 * G), metric(reclaimable=("15", "30G")), CAPPED),
    Vector("under the cap: reclaimable + unallocated * midUnallocatedPercent",
           (23000, 46 * G), metric(reclaimable=("15", "30G")), TENTH),
    Vector("the cap is of capacity (210G), not allocatable (200G)", (100000, 210 * G),
           metric({"cpu": "0", "memory": "0"}, ("100", "210G")), {"midUnallocatedPercent": 100}),
    Vector("percentages are applied in floating point and truncated: 29 % of 100 cpus is 28.999",
           (28999, 60899999999), metric({"cpu": "0", "memory": "0"}, ("100", "210G")),
           {"midCPUThresholdPercent": 29, "midMemoryThresholdPercent": 29}),
    # -- what unallocated is -------------------------------------------------------------------------
    Vector("prod host applications' usage counts as reserved for the system (max with the kubelet's)",
           (7500, 15500000000), metric(host_apps=[host_app("koord-prod")]), TENTH),
    Vector("mid host applications' usage reserves nothing", (8000, 16 * G),
           metric(host_apps=[host_app("koord-mid")]), TENTH),
    Vector("batch host applications' usage reserves nothing", (8000, 16 * G),
           metric(host_apps=[host_app("koord-batch")]), TENTH),
    Vector("a host application stating no priority counts as prod (ours: the safe side)", (7500, 15500000000),
           metric(host_apps=[host_app(None)]), TENTH),
    Vector("the reservation annotation reserves when it is the largest", (5000, 12 * G), metric(), TENTH,
           node({"resources": {"cpu": "30", "memory": "50G"}})),
    Vector("system usage reserves when it is the largest", (7000, 14 * G), metric(system=("10", "30G")), TENTH),
    Vector("absent system usage is derived: node usage - pods' usage (30 - 20 cpus, 50G - 40G)",
           (7000, 16 * G), metric(system=None), TENTH),
    Vector("only prod pods' requests are allocated: Pending counts, mid, batch and finished pods do not",
           (7000, 15 * G), metric(), TENTH,
           pods=[*PODS, pod("cache", "10", "10G", priority=7000), pod("warming", "10", "10G", phase="Pending"),
                 pod("done", "10", "10G", phase="Succeeded"), pod("failed", "10", "10G", phase="Failed")]),
    Vector("prod requests beyond what is left make unallocated 0, not negative", (0, 0), metric(), TENTH,
           pods=[pod("huge", "200", "400G")]),
    # -- when they are removed -----------------------------------------------------------------------
    Vector("a report older than degradeTimeMinutes removes them", None,
           metric(reclaimable=("10", "15G"), age_seconds=30 * 60), {"degradeTimeMinutes": 5}),
    Vector("a report exactly degradeTimeMinutes old still counts", (10000, 15 * G),
           metric(reclaimable=("10", "15G"), age_seconds=5 * 60), {"degradeTimeMinutes": 5}),
    Vector("no NodeMetric removes them", None, None),
    Vector("colocation disabled removes them", None, metric(reclaimable=("10", "15G")), {"enable": False}),
    # -- midReclaimMode "static": fixed shares of capacity -------------------------------------------
    Vector("static mode offers capacity * midStatic{CPU,Memory}ReservedPercent, ignoring the prediction",
           (30000, 42 * G), metric(reclaimable=("10", "15G")), STATIC),
    Vector("static mode ignores prod requests and the node's usage", (30000, 42 * G),
           metric({"cpu": "100", "memory": "210G"}), STATIC, pods=[pod("huge", "200", "400G")]),
    Vector("static mode is still capped at capacity * the threshold", (25000, 42 * G), metric(),
           {**STATIC, "midCPUThresholdPercent": 25}),
    Vector("static mode's shares default to 0: nothing until they are set", (0, 0),
           metric(reclaimable=("10", "15G")), {"midReclaimMode": "static"}),
    Vector("static mode's products are truncated floats too: 29 % of 100 cpus is 28.999", (28999, 60899999999),
           metric(), {"midReclaimMode": "static", "midStaticCPUReservedPercent": 29,
                      "midStaticMemoryReservedPercent": 29}),
    Vector("static mode removes them too when the report is stale", None, metric(age_seconds=30 * 60),
           {**STATIC, "degradeTimeMinutes": 5}),
    Vector("static mode removes them too without a NodeMetric", None, None, STATIC),
]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.rule)
def test_mid_resources_follow_koordinator(vector: Vector) -> None:
    result = calculate_mid_resources(vector.node, vector.pods, vector.metric, strategy=vector.strategy, now=NOW)
    assert (None if result is None else (result[MID_CPU], result[MID_MEMORY])) == vector.expected


def test_a_metric_without_update_time_removes_them() -> None:
    body = metric(reclaimable=("10", "15G"))
    del body["status"]["updateTime"]
    assert calculate_mid_resources(node(), PODS, body, strategy={}, now=NOW) is None


def test_age_is_judged_by_reception_when_given() -> None:
    # An agent clock 30 minutes behind does not degrade a report the leader just received.
    stale_clock = metric(reclaimable=("10", "15G"), age_seconds=30 * 60)
    assert calculate_mid_resources(node(), PODS, stale_clock, strategy={}, now=NOW, received_at=NOW - 1) == {
        MID_CPU: 10000, MID_MEMORY: 15 * G}
