"""The leader's caches as the token authenticator sees them: bound, unfinished pods and the
operator namespace's ServiceAccounts, once listed."""

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
    pods = ClusterStatePods(state, "colocation-system")
    assert not pods.synced
    await state.pods_synced_with([pod("agent-a", "uid-a", "node-1")], "1")
    assert pods.synced
    assert pods.pod("colocation-system", "agent-a") == BoundPod("uid-a", "node-1")
    assert pods.pod("colocation-system", "agent-b") is None
    await state.pod_event("MODIFIED", pod("agent-a", "uid-a", "node-1", deleted="2026-11-23T10:00:00Z"))
    assert pods.pod("colocation-system", "agent-a") == BoundPod("uid-a", "node-1", 1795428000.0)
    await state.pod_event("DELETED", pod("agent-a", "uid-a", "node-1"))
    assert pods.pod("colocation-system", "agent-a") is None


def account(name: str, uid: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "colocation-system", "uid": uid}}


async def test_service_accounts_of_the_operator_namespace_are_known_once_listed() -> None:
    state = ClusterState()
    accounts = ClusterStatePods(state, "colocation-system")
    assert accounts.service_account_uid("colocation-system", "colocation-agent") is None  # not listed yet
    await state.service_accounts_synced_with([account("colocation-agent", "sa-1")], "1")
    assert accounts.service_account_uid("colocation-system", "colocation-agent") == "sa-1"
    assert accounts.service_account_uid("other", "colocation-agent") is None  # a namespace it does not follow
    await state.service_account_changed("DELETED", account("colocation-agent", "sa-1"))
    assert accounts.service_account_uid("colocation-system", "colocation-agent") is None
    await state.service_account_changed("ADDED", account("colocation-agent", "sa-2"))
    assert accounts.service_account_uid("colocation-system", "colocation-agent") == "sa-2"
