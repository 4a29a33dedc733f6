"""Coroutines started a batch per turn of the event loop (that other work runs between the batches:
`test_reconciler.test_a_long_evaluation_lets_the_event_loop_read_in_between`)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from colocation.controllers.loop_turns import gather_in_turns


async def test_cancelled_midway_it_starts_nothing_more_and_leaves_nothing_unawaited() -> None:
    started: list[int] = []
    two_turns_in = asyncio.Event()

    async def node(index: int) -> None:
        started.append(index)
        if len(started) == 200:
            two_turns_in.set()
        await asyncio.sleep(0)

    work = [node(index) for index in range(1000)]
    task = asyncio.create_task(gather_in_turns(work, per_turn=100))
    await two_turns_in.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    at_cancel = len(started)
    for _ in range(20):
        await asyncio.sleep(0)
    assert 200 <= at_cancel < 1000 and len(started) == at_cancel  # nothing started after the cancel
    assert all(inspect.getcoroutinestate(cr) == inspect.CORO_CLOSED for cr in work)  # none left unawaited


async def test_at_most_in_flight_run_at_once_and_every_one_runs() -> None:
    running, most, done = 0, 0, []
    release = asyncio.Event()

    async def node(index: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()  # a reconciliation waiting for its writes
        running -= 1
        done.append(index)

    task = asyncio.create_task(gather_in_turns([node(index) for index in range(1000)], in_flight=16))
    for _ in range(50):
        await asyncio.sleep(0)
    assert running == 16  # the other 984 are not started: no task, no frame of theirs yet
    release.set()
    await task
    assert most == 16 and sorted(done) == list(range(1000))


async def test_a_failing_one_stops_no_other_and_its_error_is_raised_after_them() -> None:
    done: list[int] = []

    async def node(index: int) -> None:
        await asyncio.sleep(0)
        if index == 3:
            raise RuntimeError("node 3")
        done.append(index)

    with pytest.raises(RuntimeError, match="node 3"):
        await gather_in_turns([node(index) for index in range(300)], in_flight=8)
    assert sorted(done) == [index for index in range(300) if index != 3]
