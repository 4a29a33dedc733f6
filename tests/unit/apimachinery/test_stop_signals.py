"""SIGTERM and SIGINT handled in the running loop: for the loop's life, or only inside a block whose
run they stop cleanly."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from colocation.apimachinery.stop_signals import install_stop_signal_handlers, on_stop_signals


def test_either_signal_calls_the_action_from_the_loop_until_it_closes() -> None:
    async def run() -> bool:
        for sig in (signal.SIGINT, signal.SIGTERM):
            stop = asyncio.Event()
            install_stop_signal_handlers(stop.set)
            os.kill(os.getpid(), sig)
            await asyncio.wait_for(stop.wait(), 30)
        return True

    assert asyncio.run(run())
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the closed loop took its handlers with it


def test_a_signal_cancels_the_run_so_its_finally_stops_what_it_started() -> None:
    stopped = []

    async def run() -> None:
        with on_stop_signals():
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
        with on_stop_signals(stop.set):
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), 30)
        return stop.is_set()

    assert asyncio.run(run())
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
