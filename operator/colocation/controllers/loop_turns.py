"""Many coroutines run concurrently without holding the event loop, and a bounded number at once.

Started all at once, a round's reconciliations ran their formulas in one turn of the loop, and
at 10,000 nodes that is seconds without a report read or the Lease renewed (at 2,500 simulated
nodes on a loaded 2-core machine the leader lost its Lease in steady state that way, and kept it
with turns: one sandbox run each). And every node's reconciliation was a task at once: at
startup, when each one waits for its writes (16 in flight, `writers`), thousands of tasks with
their frames and pending requests lived together, and the memory they freed stayed with the
process, held in place by what was allocated beside it meanwhile. At most `IN_FLIGHT` run now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

NODES_PER_TURN = 100  # a few tens of ms of formulas per turn
# Reconciliations in flight: well above the writers' 16 requests in flight (a reconciliation
# that writes waits on them, one that does not returns within its turn).
IN_FLIGHT = 128


async def gather_in_turns(work: Sequence[Coroutine[Any, Any, None]], per_turn: int = NODES_PER_TURN,
                          in_flight: int = IN_FLIGHT) -> None:
    """Run `work` concurrently, as `asyncio.gather` does, at most `in_flight` at a time, starting
    `per_turn` of them per turn of the event loop, so that what arrived meanwhile (reports, watch
    events, API answers) is read between. The first exception is raised once all are done: one
    node's failure stops no other's. Cancelled, it cancels what runs and closes what it did not
    start."""
    pending = iter(work)
    running: set[asyncio.Future[None]] = set()
    slot_free = asyncio.Event()
    errors: list[BaseException] = []

    def finished(task: asyncio.Future[None]) -> None:
        running.discard(task)
        slot_free.set()
        error = None if task.cancelled() else task.exception()
        if error is not None:
            errors.append(error)

    async def until_fewer_than(count: int) -> None:
        while len(running) >= count:
            slot_free.clear()
            await slot_free.wait()

    try:
        for index, item in enumerate(pending, 1):
            task = asyncio.ensure_future(item)
            running.add(task)
            task.add_done_callback(finished)
            if index % per_turn == 0:
                await asyncio.sleep(0)  # one turn: the started ones run, and the loop reads its sockets
            await until_fewer_than(in_flight)
        await until_fewer_than(1)
    except asyncio.CancelledError:
        for started in list(running):
            started.cancel()
        for unstarted in pending:
            unstarted.close()
        raise
    if errors:
        raise errors[0]
