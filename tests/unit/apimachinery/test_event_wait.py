"""Waiting on an event for at most a while."""

from __future__ import annotations

import asyncio

from colocation.apimachinery.event_wait import wait_set


def test_an_event_set_meanwhile_ends_the_wait_and_a_timeout_says_unset() -> None:
    async def run() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        unset = await wait_set(event, 0.01)
        asyncio.get_running_loop().call_soon(event.set)
        ended = await asyncio.wait_for(wait_set(event, 30.0), 5.0)  # the set ends it, not the 30 s
        return unset, ended, await wait_set(event, 0)

    assert asyncio.run(run()) == (False, True, True)
