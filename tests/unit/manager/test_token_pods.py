"""The leader's pod cache as the token authenticator sees it: bound, unfinished pods, once listed."""

from __future__ import annotations

from colocation.apiserver.local_token_authentication import BoundPod
from colocation.controllers.cluster import ClusterState
from colocation.manager.token_pods import ClusterStatePods


def pod(name: str, uid: str, node: str | None, deleted: str | None = None) -> dict[str, object]:
    metadata: dict[str, object] = {"name": name, "namespace": "colocation-system", "uid": uid}
    if deleted:
        metadata["deletionTimestamp"] = deleted
    return {"metadata": metadata, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


async def test_pods_are_found_by_namespace_and_name_once_listed() -> None:
    state = ClusterState()
    pods = ClusterStatePods(state)
    assert not pods.synced
    await state.pods_synced_with([pod("agent-a", "uid-a", "node-1")], "1")
    assert pods.synced
    assert pods.pod("colocation-system", "agent-a") == BoundPod("uid-a", "node-1")
    assert pods.pod("colocation-system", "agent-b") is None
    await state.pod_event("MODIFIED", pod("agent-a", "uid-a", "node-1", deleted="2026-11-23T10:00:00Z"))
    assert pods.pod("colocation-system", "agent-a") == BoundPod("uid-a", "node-1", 1795428000.0)
    await state.pod_event("DELETED", pod("agent-a", "uid-a", "node-1"))
    assert pods.pod("colocation-system", "agent-a") is None
