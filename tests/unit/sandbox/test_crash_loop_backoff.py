"""The restart delays of every process a sandbox keeps running: the kubelet's CrashLoopBackOff."""

from __future__ import annotations

import pytest

from colocation_sandbox.launcher.crash_loop_backoff import CrashLoopBackOff
from tests.clock import FakeClock


def crash_after(clock: FakeClock, backoff: CrashLoopBackOff, ran_for: float) -> float:
    """The container starts, runs `ran_for` seconds, exits: the wait before its next start (then waited)."""
    backoff.started()
    clock.now += ran_for
    delay = backoff.exited()
    clock.now += delay
    return delay


def test_the_first_exit_restarts_at_once_then_10s_doubling_to_300s_without_jitter() -> None:
    clock = FakeClock(1000.0)
    backoff = CrashLoopBackOff(clock)
    delays = [crash_after(clock, backoff, 5.0) for _ in range(9)]
    assert delays == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]


def test_a_container_that_ran_more_than_ten_minutes_starts_the_back_off_over() -> None:
    clock = FakeClock(1000.0)
    backoff = CrashLoopBackOff(clock)
    assert [crash_after(clock, backoff, 1.0) for _ in range(6)] == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0]
    assert crash_after(clock, backoff, 601.0) == 0.0  # it ran 10 minutes: healthy, at once again
    assert [crash_after(clock, backoff, 1.0) for _ in range(3)] == [10.0, 20.0, 40.0]


def test_ten_minutes_exactly_is_not_enough_and_time_spent_waiting_does_not_count() -> None:
    clock = FakeClock(1000.0)
    backoff = CrashLoopBackOff(clock)
    assert [crash_after(clock, backoff, 1.0) for _ in range(3)] == [0.0, 10.0, 20.0]
    assert crash_after(clock, backoff, 600.0) == 40.0  # the kubelet resets only beyond 600 s
    clock.now += 3600.0  # an hour between the exit and the next start (the sandbox was busy)
    assert crash_after(clock, backoff, 1.0) == 80.0  # how long it ran decides, not how long ago it crashed


def test_a_short_max_restart_period_caps_every_wait_including_the_first() -> None:
    clock = FakeClock(1000.0)
    backoff = CrashLoopBackOff(clock, maximum=1.0)  # crashLoopBackOff.maxContainerRestartPeriod: 1s
    assert [crash_after(clock, backoff, 1.0) for _ in range(4)] == [0.0, 1.0, 1.0, 1.0]


def test_nonsense_periods_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        CrashLoopBackOff(FakeClock(1000.0), maximum=0.0)
