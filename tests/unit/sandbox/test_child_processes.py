"""The sandbox's supervisor restarts a child that exits, after the back-off its CrashLoopBackOff says."""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from benchmarks import polling
from colocation_sandbox.launcher.child_processes import ChildProcess, Supervisor
from colocation_sandbox.launcher.crash_loop_backoff import CrashLoopBackOff
from tests.clock import FakeClock
from tests.timing import eventually_async

FALSE = shutil.which("false")


async def restarts_of(child: ChildProcess, count: int, timeout: float) -> float:
    """Seconds until the child has restarted `count` times; `timeout` is the bound under test, not scaled."""
    started = time.monotonic()
    await polling.eventually_async(lambda: child.restarts >= count, timeout, interval=0.01,
                                   message=f"{count} restarts of the child")
    return time.monotonic() - started


@pytest.mark.skipif(FALSE is None, reason="no `false` on the PATH")
async def test_a_child_that_ran_long_enough_before_each_exit_is_restarted_at_once_every_time(
        tmp_path: Path) -> None:
    # The back-off reads its clock as the child starts and as it exits: every run lasts 700 s by
    # that clock, beyond the 10 minutes that reset the back-off, so no restart waits.
    clock = FakeClock(0.0, tick=700.0)  # each reading 700 s after the one before
    supervisor = Supervisor("child", logging.getLogger(__name__), functools.partial(CrashLoopBackOff, clock),
                            on_restart=lambda child: None)
    child = ChildProcess(command=[str(FALSE)], env={}, log=str(tmp_path / "child.log"))
    await supervisor.start(child)
    try:
        await restarts_of(child, 4, timeout=8.0)  # a back-off that never reset would wait 10 s at the second
    finally:
        await supervisor.stop()


@pytest.mark.skipif(FALSE is None, reason="no `false` on the PATH")
async def test_a_child_that_keeps_crashing_waits_longer_each_time(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(0.0, tick=0.001)
    backoff = functools.partial(CrashLoopBackOff, clock, initial=0.05, maximum=0.2)
    supervisor = Supervisor("child", logging.getLogger(__name__), backoff, on_restart=lambda child: None)
    child = ChildProcess(command=[str(FALSE)], env={}, log=str(tmp_path / "child.log"))
    with caplog.at_level(logging.WARNING):
        await supervisor.start(child)
        try:
            await restarts_of(child, 5, timeout=8.0)
        finally:
            await supervisor.stop()
    waits = [record.__dict__["restart_in"] for record in caplog.records if "restart_in" in record.__dict__]
    assert waits[:5] == [0.0, 0.05, 0.1, 0.2, 0.2]


# A child that, like `colocation operator`, stops on SIGTERM or SIGINT after a long drain, unless a
# second one of them arrives meanwhile.
DRAINING_CHILD = """
import signal, sys, threading, time
stop, stop_now = threading.Event(), threading.Event()
def on_signal(signum, frame):
    (stop_now if stop.is_set() else stop).set()
signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
print("ready", flush=True)
while not stop.is_set():
    time.sleep(0.01)
stop_now.wait(60)  # the drain
"""


async def started_child(supervisor: Supervisor, log: Path) -> ChildProcess:
    child = ChildProcess(command=[sys.executable, "-c", DRAINING_CHILD], env={}, log=str(log))
    await supervisor.start(child)
    # Its log is a small local file: read from the loop.
    await eventually_async(lambda: "ready" in log.read_text(), 30, interval=0.01, message="the child started")
    return child


async def test_stop_signals_end_a_childs_drain_where_sigterm_alone_waits_for_it(tmp_path: Path) -> None:
    hurried = Supervisor("child", logging.getLogger(__name__), CrashLoopBackOff, on_restart=lambda child: None,
                         stop_signals=(signal.SIGTERM, signal.SIGINT))
    child = await started_child(hurried, tmp_path / "hurried.log")
    await hurried.stop()
    assert child.process is not None and child.process.returncode == 0  # it ended by itself, not killed

    patient = Supervisor("child", logging.getLogger(__name__), CrashLoopBackOff, on_restart=lambda child: None)
    child = await started_child(patient, tmp_path / "patient.log")
    assert child.process is not None
    stopping = asyncio.create_task(patient.stop())
    with pytest.raises(TimeoutError):  # SIGTERM alone: still draining
        await asyncio.wait_for(asyncio.shield(child.process.wait()), 0.5)
    child.process.send_signal(signal.SIGINT)
    await stopping
    assert child.process.returncode == 0
