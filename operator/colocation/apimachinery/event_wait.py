"""Waiting on an asyncio.Event for at most a while: the pause of every periodic loop that a stop,
or a wake-up, may end early."""

from __future__ import annotations

import asyncio
import contextlib


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Wait until `event` is set or `seconds` have passed; whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()
