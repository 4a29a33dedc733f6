"""The benchmarks' process helpers: the tree under a process, and runs that signals stop cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from benchmarks import processes


def test_descendants_are_children_and_theirs() -> None:
    # A child that starts a grandchild and prints its pid: both sleep until killed.
    child = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(grandchild.pid, flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert {child.pid, grandchild} <= processes.descendants(os.getpid())
        assert processes.descendants(child.pid) == {grandchild}
    finally:
        os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()


def test_a_signal_cancels_the_run_so_its_finally_stops_what_it_started() -> None:
    stopped = []

    async def run() -> None:
        with processes.on_stop_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.sleep(30)
            finally:
                stopped.append(True)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(run())
    assert stopped == [True]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the loop's handler is gone again


def test_a_signal_calls_the_action_given_and_the_handlers_go_on_the_way_out() -> None:
    async def run() -> bool:
        stop = asyncio.Event()
        with processes.on_stop_signals(stop.set):
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), 30)
        return stop.is_set()

    assert asyncio.run(run())
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
