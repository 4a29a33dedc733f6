"""The leader's in-memory view, as its Node, Lease and Pod informers fill it."""

from __future__ import annotations

import gc
import random
import tracemalloc
from typing import Any

import orjson

from benchmarks import workload
from colocation.apimachinery import pods
from colocation.apimachinery.pods import KEPT_REQUESTS
from colocation.controllers.cluster import ClusterState, SharedParts, slim_node, slim_pod
from colocation.controllers.eviction import evictable
from colocation.koordinator.batch_formula import RESERVATION_ANNOTATION, calculate_batch_resources
from colocation.koordinator.classes import (
    KEPT_CLASSES,
    is_evictable_best_effort,
    is_high_priority_pod,
    priority_of,
    qos_of,
)
from colocation.koordinator.mid_formula import calculate_mid_resources


def real_node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7", "labels": dict(labels),
                     "annotations": {RESERVATION_ANNOTATION: '{"resources": {"cpu": "1"}}',
                                     "node.alpha.kubernetes.io/ttl": "0"},
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "7", "memory": "30Gi"},
                   "images": [{"names": ["registry/image:v1"], "sizeBytes": 1}] * 50,
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
    }


def test_a_node_keeps_only_what_the_controllers_read() -> None:
    slim = slim_node(real_node("n1", zone="a"))
    assert slim == {
        "metadata": {"name": "n1", "uid": "uid-n1", "resourceVersion": "7", "labels": {"zone": "a"},
                     "annotations": {RESERVATION_ANNOTATION: '{"resources": {"cpu": "1"}}'}},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "7", "memory": "30Gi"}},
    }


def test_nodes_keep_one_copy_of_the_strings_they_have_in_common() -> None:
    # Each Node parsed on its own, as the informer's pages and events deliver them.
    one, two = (slim_node(orjson.loads(orjson.dumps(real_node(name, zone="a", host=name))))
                for name in ("n1", "n2"))
    assert one["status"] == two["status"]
    assert [(key, value) for key, value in one["status"]["capacity"].items()] == \
        [(key, two["status"]["capacity"][key]) for key in two["status"]["capacity"]]
    assert all(key_one is key_two and value_one is value_two for (key_one, value_one), (key_two, value_two)
               in zip(one["status"]["allocatable"].items(), two["status"]["allocatable"].items(), strict=True))
    labels_one, labels_two = one["metadata"]["labels"], two["metadata"]["labels"]
    assert labels_one == {"zone": "a", "host": "n1"} and labels_two == {"zone": "a", "host": "n2"}
    assert next(iter(labels_one)) is next(iter(labels_two)) and labels_one["zone"] is labels_two["zone"]
    assert labels_two["host"] is two["metadata"]["name"]  # the hostname label is the Node's name


def test_the_leader_keeps_a_node_in_about_one_and_a_half_kilobytes() -> None:
    """A kubelet's Node (`benchmarks.workload`: nine labels, six resources) was 2.7 KiB kept, the
    strings of its labels and resources its own."""
    payloads = [orjson.dumps(workload.node(index)) for index in range(2000)]
    state = ClusterState()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for payload in payloads:
            state.node_event("ADDED", slim_node(orjson.loads(payload)))
        gc.collect()
        per_node = (tracemalloc.get_traced_memory()[0] - before) / len(payloads)
    finally:
        tracemalloc.stop()
    assert per_node < 1_700, per_node  # 1,509 measured, its node_versions entry included


async def test_a_node_missing_from_a_relist_is_deleted_and_its_objects_go_too() -> None:
    state = ClusterState()
    await state.nodes_synced_with([real_node("n1"), real_node("n2")], "10")
    assert sorted(state.nodes) == ["n1", "n2"] and not state.deleted_nodes
    state.wake.clear()
    await state.nodes_synced_with([real_node("n2"), real_node("n3")], "20")
    assert sorted(state.nodes) == ["n2", "n3"]
    assert state.deleted_nodes == {"n1"}  # its NodeSLO and NodeResource are removed at the next evaluation
    assert state.wake.is_set()


async def test_node_events_store_the_slim_node_as_delivered_and_bump_the_nodes_version() -> None:
    state = ClusterState()
    await state.node_changed("ADDED", slim_node(real_node("n1")))
    first = state.node_versions["n1"]
    kept = slim_node(real_node("n1", zone="b"))  # the informer's transform
    await state.node_changed("MODIFIED", kept)
    assert state.node_versions["n1"] > first
    assert state.nodes["n1"] is kept  # slimmed once, by the transform, not copied again
    assert state.nodes["n1"]["metadata"]["labels"] == {"zone": "b"}
    await state.node_changed("DELETED", real_node("n1"))
    assert "n1" not in state.nodes and state.deleted_nodes == {"n1"}


def lease(name: str, renew: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "colocation-node-lease"},
            "spec": {"holderIdentity": name, "renewTime": renew}}


def test_a_lease_missing_from_a_relist_is_forgotten() -> None:
    state = ClusterState()
    state.leases_synced_with([lease("n1", "2026-11-26T10:00:00.000000Z"), lease("n2", "2026-11-26T10:00:01.000000Z")])
    state.lease_event("MODIFIED", lease("n1", "2026-11-26T10:10:00.000000Z"))
    assert state.lease_renew_times == {"n1": "2026-11-26T10:10:00.000000Z", "n2": "2026-11-26T10:00:01.000000Z"}
    state.leases_synced_with([lease("n2", "2026-11-26T10:10:01.000000Z")])
    assert state.lease_renew_times == {"n2": "2026-11-26T10:10:01.000000Z"}


def replica(name: str, node: str, cpu: str = "1", qos: str = "BE") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                         "labels": {"app": "web", "pod-template-hash": "5d8f", "koordinator.sh/qosClass": qos}},
            "spec": {"nodeName": node, "priority": 5000,
                     "containers": [{"name": "main", "image": "web:1", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running", "qosClass": "Burstable", "podIP": "10.0.0.9"}}


async def test_replicas_of_a_workload_keep_one_copy_of_what_they_have_in_common() -> None:
    state = ClusterState()
    for name, node, cpu, qos in (("web-a", "n1", "1", "BE"), ("web-b", "n2", "1", "BE"), ("other", "n2", "2", "LS")):
        await state.pod_event("ADDED", state.pod_kept(replica(name, node, cpu=cpu, qos=qos)))
    (a,), (b, other) = state.pods_on("n1"), state.pods_on("n2")
    assert a["metadata"]["labels"] is b["metadata"]["labels"] and a["status"] is b["status"]
    assert a[KEPT_REQUESTS] is b[KEPT_REQUESTS] and a["spec"]["priority"] is b["spec"]["priority"]
    assert a[KEPT_CLASSES] is b[KEPT_CLASSES] == ("koord-batch", "BE")
    # ...and what differs stays its own; the containers are not kept, their requests and classes are.
    assert other == {"metadata": {"name": "other", "namespace": "team", "uid": "uid-other",
                                  "labels": {"koordinator.sh/qosClass": "LS"}},
                     "spec": {"nodeName": "n2", "priority": 5000},
                     "status": {"phase": "Running", "qosClass": "Burstable"},
                     KEPT_REQUESTS: (2000, 0), KEPT_CLASSES: ("koord-batch", "LS")}
    assert a["metadata"]["name"] == "web-a" and b["metadata"]["uid"] == "uid-web-b"
    assert a["spec"]["nodeName"] == "n1" and b["spec"]["nodeName"] == "n2"


# ---- what the leader keeps answers as the whole pod does ------------------------------------------

_QUANTITIES = ("100m", "1", "1.5", "2Gi", "512Mi", "0", "abc", "-", "1e3", "250M")


def _resources(rng: random.Random) -> dict[str, Any]:
    def some() -> dict[str, str]:
        return {name: rng.choice(_QUANTITIES) for name in ("cpu", "memory", "kubernetes.io/batch-cpu")
                if rng.random() < 0.5}
    return {key: some() for key in ("requests", "limits") if rng.random() < 0.7}


def generated_pod(rng: random.Random, index: int) -> dict[str, Any]:
    """Init containers, sidecars, overhead, pod-level resources, limits only, bad quantities,
    BE/LS/mid classes by label or by priority value, any phase, with or without status.qosClass."""
    labels = {key: rng.choice(values) for key, values in (
        ("koordinator.sh/qosClass", ("BE", "LS", "LSR", "LSE", "SYSTEM", "bogus")),
        ("koordinator.sh/priority-class", ("koord-prod", "koord-mid", "koord-batch", "koord-free", "x")))
        if rng.random() < 0.5}
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [
        {"name": f"c{i}", "image": "x", "resources": _resources(rng)} for i in range(rng.randint(0, 3))]}
    if rng.random() < 0.5:
        spec["initContainers"] = [{"name": f"i{i}", "resources": _resources(rng),
                                   **({"restartPolicy": "Always"} if rng.random() < 0.5 else {})}
                                  for i in range(rng.randint(1, 3))]
    for key in ("overhead", "resources"):
        if rng.random() < 0.2:
            spec[key] = _resources(rng).get("requests", {}) if key == "overhead" else _resources(rng)
    if rng.random() < 0.8:
        spec["priority"] = rng.choice((0, 3500, 5500, 7500, 9500, 100000))
    status: dict[str, Any] = {"phase": rng.choice(("Running", "Pending", "Succeeded", "Failed"))} \
        if rng.random() < 0.9 else {}
    if rng.random() < 0.3:
        status["qosClass"] = rng.choice(("Guaranteed", "Burstable", "BestEffort"))
    return {"metadata": {"name": f"p{index}", "namespace": "ns", "uid": f"u{index}", "labels": labels},
            "spec": spec, "status": status}


def test_a_kept_pod_answers_every_reader_as_the_whole_pod_does() -> None:
    rng = random.Random(16)
    shared = SharedParts()
    readers = (pods.pod_requests, pods.qos_class, qos_of, priority_of, is_high_priority_pod,
               is_evictable_best_effort, evictable)
    whole = [generated_pod(rng, index) for index in range(3000)]
    kept = [slim_pod(pod, shared) for pod in whole]
    for full, slim in zip(whole, kept, strict=True):
        assert [read(slim) for read in readers] == [read(full) for read in readers], full
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "32", "memory": "128Gi"},
                                                   "allocatable": {"cpu": "30", "memory": "120Gi"}}}
    for start in range(0, len(whole), 30):
        group = slice(start, start + 30)
        metric = {"status": {"updateTime": "2026-11-26T10:00:00Z", "nodeMetric": {"nodeUsage": {"cpu": "9"}},
                             "podsMetric": [{"namespace": "ns", "name": pod["metadata"]["name"],
                                             "podUsage": {"cpu": "300m", "memory": "1Gi"}} for pod in whole[group]]}}
        for formula in (calculate_batch_resources, calculate_mid_resources):
            on_kept = formula(node, kept[group], metric, strategy={"enable": True}, now=0.0, received_at=0.0)
            assert on_kept == formula(node, whole[group], metric, strategy={"enable": True}, now=0.0, received_at=0.0)
            assert on_kept  # the formula ran (a fresh metric), it did not bail out


def _own(kind: str, name: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": kind,
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "42", "generation": 3,
                         "labels": {"app.kubernetes.io/managed-by": "colocation-operator"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": "n"}],
                         "managedFields": [{"manager": "colocation", "operation": "Apply",
                                            "fieldsV1": {"f:spec": {}}}]},
            "spec": spec, **extra}


def test_our_own_objects_keep_what_the_controllers_read_and_one_copy_of_equal_specs() -> None:
    state = ClusterState()
    rendered = {"cpuBurstStrategy": {"policy": "none", "cpuBurstPercent": 1000}, "extensions": {}}
    for name in ("a", "b"):
        spec = {**rendered, "cpuBurstStrategy": dict(rendered["cpuBurstStrategy"])}  # equal, not the same
        state.nodeslo_event("ADDED", _own("NodeSLO", name, spec))
    state.nodeslo_event("ADDED", _own("NodeSLO", "c", {**rendered, "extensions": {"x": 1}}))
    kept = state.nodeslos["a"]
    assert kept == {"metadata": {"name": "a", "resourceVersion": "42", "generation": 3}, "spec": rendered}
    assert state.nodeslos["b"]["spec"] is kept["spec"]  # equal specs, kept once
    assert state.nodeslos["c"]["spec"] == {**rendered, "extensions": {"x": 1}}
    status = {"conditions": [{"type": "Healthy", "status": "True"}], "lastNodeUpdateTime": "2026-11-26T10:00:00Z"}
    state.noderesource_event("MODIFIED", _own("NodeResource", "a", {}, status=status))
    assert state.noderesources["a"] == {"metadata": {"name": "a", "resourceVersion": "42", "generation": 3},
                                        "spec": {}, "status": status}
    state.noderesource_event("DELETED", _own("NodeResource", "a", {}))
    assert "a" not in state.noderesources
