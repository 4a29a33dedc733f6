"""Many coroutines run concurrently without holding the event loop: started a batch per turn.

Started all at once, a round's reconciliations ran their formulas in one turn of the loop, and
at 10,000 nodes that is seconds without a report read or the Lease renewed (at 2,500 simulated
nodes on a loaded 2-core machine the leader lost its Lease in steady state that way, and kept it
with turns: one sandbox run each).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

NODES_PER_TURN = 100  # a few tens of ms of formulas per turn


async def gather_in_turns(work: Sequence[Coroutine[Any, Any, None]], per_turn: int = NODES_PER_TURN) -> None:
    """Run `work` concurrently, as `asyncio.gather` does, starting `per_turn` of them per turn of the
    event loop, so that what arrived meanwhile (reports, watch events, API answers) is read between.
    Cancelled, it cancels what it started and closes the rest."""
    tasks: list[asyncio.Future[None]] = []
    try:
        for index, item in enumerate(work, 1):
            tasks.append(asyncio.ensure_future(item))
            if index % per_turn == 0:
                await asyncio.sleep(0)  # one turn: the started ones run, and the loop reads its sockets
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        for unstarted in work[len(tasks):]:
            unstarted.close()
        raise
