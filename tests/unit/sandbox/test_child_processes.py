"""Restart delays of the sandboxes' supervisors, which stand in for the kubelet's."""

from __future__ import annotations

from colocation.sandbox.launcher.child_processes import CrashLoopBackOff


def test_a_first_crash_restarts_at_once_and_repeated_crashes_back_off() -> None:
    restarts = CrashLoopBackOff(jitter=0.0)
    delays = [restarts.next_delay(ran_for=5.0) for _ in range(7)]
    assert delays == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0]


def test_a_container_that_ran_ten_minutes_starts_the_back_off_over() -> None:
    restarts = CrashLoopBackOff(jitter=0.0)
    assert [restarts.next_delay(ran_for=1.0) for _ in range(3)] == [0.0, 10.0, 20.0]
    assert restarts.next_delay(ran_for=600.0) == 0.0
    assert restarts.next_delay(ran_for=1.0) == 10.0


def test_a_short_max_restart_period_caps_every_wait() -> None:
    restarts = CrashLoopBackOff(maximum=1.0, jitter=0.0)  # crashLoopBackOff.maxContainerRestartPeriod: 1s
    assert [restarts.next_delay(ran_for=1.0) for _ in range(4)] == [0.0, 1.0, 1.0, 1.0]
