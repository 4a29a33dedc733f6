"""The follower's loop, with a stand-in for nats-py: a cancelled follower stops, whatever nats-py makes
of the cancellation."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
import pytest

from colocation.jetstream.log_follower import LogFollower
from tests.timing import TIME_FACTOR, eventually_async


class Subscription:
    """A pull subscription whose fetch, as nats-py's does, turns a cancellation into its own timeout
    (the first one: a second ends the test's task whatever the follower does)."""

    def __init__(self) -> None:
        self.fetching = asyncio.Event()
        self.cancellations = 0

    async def fetch(self, batch: int, timeout: float) -> list[Any]:
        self.fetching.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancellations += 1
            if self.cancellations > 1:
                raise
            raise nats.errors.TimeoutError from None
        return []

    async def unsubscribe(self) -> None:
        pass


class JetStream:
    def __init__(self) -> None:
        self.subscription = Subscription()

    async def pull_subscribe(self, *args: Any, **kwargs: Any) -> Subscription:
        return self.subscription


class Target:
    def apply_logged(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing to apply")

    def caught_up(self, position: int) -> None:
        pass

    def log_restarted(self, position: int) -> None:
        pass


async def test_a_cancelled_follower_stops_though_nats_py_turns_the_cancellation_into_a_timeout() -> None:
    js = JetStream()
    task = asyncio.create_task(LogFollower(js, Target()).run())  # type: ignore[arg-type]
    await eventually_async(js.subscription.fetching.is_set, message="the follower fetching")
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5 * TIME_FACTOR)
    if not done:  # it went on fetching: end it, and fail
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        pytest.fail("the follower did not stop when cancelled")
    assert task.cancelled()
