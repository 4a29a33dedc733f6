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
