"""The sandbox's supervisor restarts a child that exits, after the back-off its CrashLoopBackOff says."""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import time
from pathlib import Path

import pytest

from colocation.sandbox.launcher.child_processes import ChildProcess, Supervisor
from colocation.sandbox.launcher.crash_loop_backoff import CrashLoopBackOff

FALSE = shutil.which("false")


class SteppingClock:
    """Each reading is `step` seconds after the one before: every run of the child lasts `step`."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def restarts_of(child: ChildProcess, count: int, timeout: float) -> float:
    started = time.monotonic()
    while child.restarts < count:
        assert time.monotonic() - started < timeout, f"{child.restarts} restarts in {timeout}s"
        await asyncio.sleep(0.01)  # polling the child's restart count, with a deadline
    return time.monotonic() - started


@pytest.mark.skipif(FALSE is None, reason="no `false` on the PATH")
async def test_a_child_that_ran_long_enough_before_each_exit_is_restarted_at_once_every_time(
        tmp_path: Path) -> None:
    # The back-off reads its clock as the child starts and as it exits: every run lasts 700 s by
    # that clock, beyond the 10 minutes that reset the back-off, so no restart waits.
    clock = SteppingClock(700.0)
    supervisor = Supervisor("child", logging.getLogger(__name__), functools.partial(CrashLoopBackOff, clock),
                            on_restart=lambda: None)
    child = ChildProcess([str(FALSE)], {}, str(tmp_path / "child.log"))
    await supervisor.start(child)
    try:
        await restarts_of(child, 4, timeout=8.0)  # a back-off that never reset would wait 10 s at the second
    finally:
        await supervisor.stop()


@pytest.mark.skipif(FALSE is None, reason="no `false` on the PATH")
async def test_a_child_that_keeps_crashing_waits_longer_each_time(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = SteppingClock(0.001)
    backoff = functools.partial(CrashLoopBackOff, clock, initial=0.05, maximum=0.2)
    supervisor = Supervisor("child", logging.getLogger(__name__), backoff, on_restart=lambda: None)
    child = ChildProcess([str(FALSE)], {}, str(tmp_path / "child.log"))
    with caplog.at_level(logging.WARNING):
        await supervisor.start(child)
        try:
            await restarts_of(child, 5, timeout=8.0)
        finally:
            await supervisor.stop()
    waits = [record.__dict__["restart_in"] for record in caplog.records if "restart_in" in record.__dict__]
    assert waits[:5] == [0.0, 0.05, 0.1, 0.2, 0.2]
