"""The leader's in-memory view, as its Node, Lease and Pod informers fill it."""

from __future__ import annotations

from typing import Any

from colocation.controllers.cluster import ClusterState, slim_node
from colocation.koordinator.batch_formula import RESERVATION_ANNOTATION


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


async def test_a_node_missing_from_a_relist_is_deleted_and_its_objects_go_too() -> None:
    state = ClusterState()
    await state.nodes_synced_with([real_node("n1"), real_node("n2")], "10")
    assert sorted(state.nodes) == ["n1", "n2"] and not state.deleted_nodes
    state.wake.clear()
    await state.nodes_synced_with([real_node("n2"), real_node("n3")], "20")
    assert sorted(state.nodes) == ["n2", "n3"]
    assert state.deleted_nodes == {"n1"}  # its NodeSLO and NodeResource are removed at the next evaluation
    assert state.wake.is_set()


async def test_node_events_store_slim_nodes_and_bump_the_nodes_version() -> None:
    state = ClusterState()
    await state.node_changed("ADDED", real_node("n1"))
    first = state.node_versions["n1"]
    await state.node_changed("MODIFIED", real_node("n1", zone="b"))
    assert state.node_versions["n1"] > first
    assert state.nodes["n1"]["metadata"]["labels"] == {"zone": "b"}
    assert "images" not in state.nodes["n1"]["status"]
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
    await state.pod_event("ADDED", replica("web-a", "n1"))
    await state.pod_event("ADDED", replica("web-b", "n2"))
    await state.pod_event("ADDED", replica("other", "n2", cpu="2", qos="LS"))
    (a,), (b, other) = state.pods_on("n1"), state.pods_on("n2")
    assert a["spec"]["containers"] is b["spec"]["containers"]
    assert a["metadata"]["labels"] is b["metadata"]["labels"] and a["status"] is b["status"]
    # ...and what differs stays its own.
    assert other["spec"]["containers"] == [{"name": "main", "resources": {"requests": {"cpu": "2"}}}]
    assert other["metadata"]["labels"] == {"koordinator.sh/qosClass": "LS"}
    assert a["metadata"]["name"] == "web-a" and b["metadata"]["uid"] == "uid-web-b"
    assert a["spec"]["nodeName"] == "n1" and b["spec"]["nodeName"] == "n2"
