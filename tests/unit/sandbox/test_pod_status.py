"""The kubelet's restart rule and the phase of a pod whose container is done (pure)."""

from __future__ import annotations

import pytest

from colocation_sandbox.launcher.controlplane.pod_status import (
    ContainerReport,
    container_exit_code,
    pod_phase,
    restarts_after_exit,
    terminated_state,
)


@pytest.mark.parametrize(("policy", "code", "restarts"), [
    ("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 2, True),
    ("Never", 0, False), ("Never", 137, False),
])
def test_the_restart_policy_decides_whether_an_exited_container_starts_again(policy: str, code: int,
                                                                             restarts: bool) -> None:
    assert restarts_after_exit(policy, code) is restarts


def test_a_signal_is_reported_as_128_plus_its_number() -> None:
    assert [container_exit_code(c) for c in (0, 1, -9, -15)] == [0, 1, 137, 143]


@pytest.mark.parametrize(("finished", "phase"), [
    (None, "Running"), (terminated_state(0, started_at="a", finished_at="b"), "Succeeded"),
    (terminated_state(1, started_at="a", finished_at="b"), "Failed"),
])
def test_the_phase_follows_the_container_that_will_not_start_again(finished: dict[str, object] | None,
                                                                   phase: str) -> None:
    report = ContainerReport(name="c", image="colocation:dev", alive=finished is None, ready=False, restarts=0,
                             started_at="a", finished=finished)
    assert pod_phase(report) == phase
