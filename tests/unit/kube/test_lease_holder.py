"""A standby may take the Lease at once only when the holder's own pod proves its process ended."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from colocation.kube.lease_holder import holder_ended, holder_pod_name
from colocation.kube.lease_record import LeaderElectionRecord

RENEWED = datetime(2026, 11, 28, 12, 0, 5, 300_000, tzinfo=UTC)  # 12:00:05.3
RECORD = LeaderElectionRecord(holder_identity="colocation-operator-0_3f2a", lease_duration_seconds=15,
                              acquire_time=RENEWED, renew_time=RENEWED)


def pod(state: dict[str, Any], last_state: dict[str, Any] | None = None, *, name: str = "colocation-operator-0",
        container: str = "operator") -> dict[str, Any]:
    status: dict[str, Any] = {"name": container, "state": state, "restartCount": 1}
    if last_state is not None:
        status["lastState"] = last_state
    return {"metadata": {"name": name}, "status": {"containerStatuses": [status]}}


def running(started: str) -> dict[str, Any]:
    return {"running": {"startedAt": started}}


def terminated(finished: str) -> dict[str, Any]:
    return {"terminated": {"exitCode": 137, "startedAt": "2026-11-28T11:00:00Z", "finishedAt": finished}}


WAITING = {"waiting": {"reason": "CrashLoopBackOff"}}


def test_the_pod_of_a_holder_is_its_identity_without_the_process_suffix() -> None:
    assert holder_pod_name("colocation-operator-7d9f-abcde_3f2a") == "colocation-operator-7d9f-abcde"
    assert holder_pod_name("a_b_c") == "a_b"
    assert holder_pod_name("no-suffix") == ""


@pytest.mark.parametrize(("the_pod", "ended"), [
    # Restarted after the last renewal: the holder was an earlier process.
    (pod(running("2026-11-28T12:00:06Z")), True),
    # Running since before the renewal (the same second counts as before: times are cut down).
    (pod(running("2026-11-28T12:00:05Z")), False),
    (pod(running("2026-11-28T11:59:00Z"), terminated("2026-11-28T12:00:07Z")), False),
    # Stopped, in back-off, and the last run ended at or after the renewal.
    (pod(WAITING, terminated("2026-11-28T12:00:06Z")), True),
    # ... but ended within the renewal's second, cut down to before it: not proof.
    (pod(WAITING, terminated("2026-11-28T12:00:05Z")), False),
    # A container that will not start again.
    (pod(terminated("2026-11-28T12:00:09Z")), True),
    # Nothing said about the end yet, another pod, another container.
    (pod(WAITING), False),
    (pod(running("2026-11-28T12:00:09Z"), name="colocation-operator-1"), False),
    (pod(running("2026-11-28T12:00:09Z"), container="sidecar"), False),
    ({"metadata": {"name": "colocation-operator-0"}}, False),
])
def test_only_a_start_or_an_end_after_the_last_renewal_proves_the_holder_ended(the_pod: dict[str, Any],
                                                                              ended: bool) -> None:
    assert holder_ended(RECORD, the_pod) is ended


def test_a_lease_without_a_renewal_time_proves_nothing() -> None:
    record = LeaderElectionRecord(holder_identity="colocation-operator-0_3f2a", lease_duration_seconds=15)
    assert not holder_ended(record, pod(running("2026-11-28T12:00:06Z")))
