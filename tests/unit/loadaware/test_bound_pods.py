"""The extender's cache of bound pods: pruned as they arrive, by node, versioned, and telling of bindings."""

from __future__ import annotations

import datetime as dt
from typing import Any

from colocation.loadaware.bound_pods import BoundPods, assigned_time, pruned_pod
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.pod_estimate import estimate_pod


def api_pod(name: str, node: str = "node-1", *, uid: str | None = None, cpu: str = "1",
            scheduled: str | None = "2027-01-15T08:00:00Z") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "qosClass": "Burstable", "podIP": "10.0.0.1"}
    if scheduled:
        status["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-15T09:00:00Z"},
                                {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "labels": {"app": "web", "koordinator.sh/priority-class": "koord-prod"},
                         "annotations": {"big": "x" * 1000},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "web-abc", "uid": "r"}]},
            "spec": {"nodeName": node, "priority": 9000,
                     "containers": [{"name": "main", "image": "web", "env": [{"name": "A", "value": "1"}],
                                     "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": "2"}}}]},
            "status": status}


def test_a_pruned_pod_estimates_as_the_whole_pod_does() -> None:
    pod = api_pod("web-1")
    kept = pruned_pod(pod)
    factors = LoadAwareConfig().estimated_scaling_factors
    assert estimate_pod(kept, scaling_factors=factors) == estimate_pod(pod, scaling_factors=factors)
    assert "annotations" not in kept["metadata"] and kept["metadata"]["labels"] == {
        "koordinator.sh/priority-class": "koord-prod"}
    assert kept["spec"]["containers"] == [{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}]
    assert assigned_time(kept) == assigned_time(pod) == dt.datetime(2027, 1, 15, 8, tzinfo=dt.UTC).timestamp()


async def test_pods_are_kept_by_node_and_each_change_moves_the_node_version() -> None:
    bound: list[str] = []
    pods = BoundPods(on_bound=bound.append)
    await pods.on_sync([pruned_pod(api_pod("a")), pruned_pod(api_pod("b", "node-2"))], "1")
    assert pods.synced and len(pods) == 2
    assert [pod.name for pod in pods.on("node-1")] == ["a"]
    before = pods.version("node-1")
    assert before > 0 and pods.version("node-3") == 0
    await pods.on_event("MODIFIED", pruned_pod(api_pod("a", cpu="3")))
    assert pods.version("node-1") > before
    await pods.on_event("ADDED", pruned_pod(api_pod("c", "node-3", uid="new-pod")))
    assert [pod.uid for pod in pods.on("node-3")] == ["new-pod"]
    await pods.on_event("DELETED", pruned_pod(api_pod("c", "node-3", uid="new-pod")))
    assert pods.on("node-3") == () and pods.version("node-3") == 0
    assert bound.count("new-pod") == 2  # seen bound, then gone: either ends a tentative placement


async def test_a_pod_moved_by_a_relist_leaves_its_old_node() -> None:
    pods = BoundPods()
    await pods.on_sync([pruned_pod(api_pod("a"))], "1")
    await pods.on_sync([pruned_pod(api_pod("a", "node-2"))], "2")
    assert pods.on("node-1") == () and [pod.node for pod in pods.on("node-2")] == ["node-2"]


def test_a_pod_without_podscheduled_has_no_assigned_time() -> None:
    assert assigned_time(pruned_pod(api_pod("a", scheduled=None))) is None
