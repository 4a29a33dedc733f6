"""The replicas' pods as a standby sees them: the leader's container stopping wakes the election."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from colocation.kube.lease_record import LeaderElectionRecord
from colocation.manager.replica_pods import ReplicaPods

RENEWED = datetime(2026, 11, 28, 12, 0, 5, 300_000, tzinfo=UTC)
LEADER = LeaderElectionRecord(holder_identity="colocation-operator-0_3f2a", lease_duration_seconds=15,
                              acquire_time=RENEWED, renew_time=RENEWED)


def operator_pod(name: str, state: dict[str, Any], last_state: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "operator", "state": state, "restartCount": 0, "image": "colocation:dev"}
    if last_state is not None:
        status["lastState"] = last_state
    return {"metadata": {"name": name, "namespace": "colocation-system", "labels": {"a": "b"}, "uid": "u"},
            "spec": {"containers": [{"name": "operator"}]},
            "status": {"phase": "Running", "containerStatuses": [status]}}


async def test_the_leaders_container_stopping_after_its_renewal_is_seen_and_heard_of() -> None:
    changed: list[str] = []
    pods = ReplicaPods("colocation-system", on_change=changed.append)
    informer = pods.informer(transport=None)  # type: ignore[arg-type]  # never run here
    kept = informer.transform
    assert kept is not None
    assert informer.options.label_selector == "app.kubernetes.io/component=operator"
    assert informer.options.field_selector == "metadata.namespace=colocation-system"
    alive = operator_pod("colocation-operator-0", {"running": {"startedAt": "2026-11-28T11:00:00Z"}})
    await pods.on_sync([kept(alive)], "1")
    assert changed == ["colocation-operator-0"] and not pods.holder_ended(LEADER)
    stopped = operator_pod("colocation-operator-0", {"waiting": {"reason": "CrashLoopBackOff"}},
                           {"terminated": {"exitCode": 137, "finishedAt": "2026-11-28T12:00:06Z"}})
    await pods.on_event("MODIFIED", kept(stopped))
    assert changed[-1] == "colocation-operator-0" and pods.holder_ended(LEADER)
    await pods.on_event("DELETED", stopped)
    assert not pods.holder_ended(LEADER)  # no pod, no proof: the lease is waited out


async def test_only_names_and_container_statuses_are_kept() -> None:
    informer = ReplicaPods("colocation-system").informer(transport=None)  # type: ignore[arg-type]
    assert informer.transform is not None
    kept = informer.transform(operator_pod("colocation-operator-1", {"running": {"startedAt": "2026-11-28T11:00:00Z"}}))
    assert kept == {"metadata": {"name": "colocation-operator-1"},
                    "status": {"containerStatuses": [{"name": "operator", "restartCount": 0, "image": "colocation:dev",
                                                      "state": {"running": {"startedAt": "2026-11-28T11:00:00Z"}}}]}}
