"""The follower's loop: a cancelled follower stops, whatever nats-py makes of the cancellation (a
stand-in for nats-py); a follower cut off from the servers stops confirming its copy, and confirms
it again once it has caught up (the stream model)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
import pytest

from colocation.jetstream.log_follower import LogFollower
from colocation.jetstream.nodemetric_log import LogSettings, NodeMetricLog, ensure_stream
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.resource_versions import LogPositions
from tests.clock import FakeClock
from tests.timing import TIME_FACTOR, eventually_async
from tests.unit.jetstream.stream_model import JetStreamModel, StreamModel, one_pass
from tests.unit.jetstream.test_stream_model import value


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


class Link:
    """One replica's way to the servers: while `cut`, every request times out, as nats-py's do when
    nothing comes back."""

    def __init__(self) -> None:
        self.cut = False
        self.requests = 0

    async def turn(self, what: str) -> None:
        self.requests += 1
        await one_pass(what)
        if self.cut:
            raise nats.errors.TimeoutError


async def test_a_follower_cut_off_from_the_servers_stops_confirming_its_copy_until_it_has_caught_up() -> None:
    clock = FakeClock()
    stream = StreamModel(wall=clock.wall)
    writer = JetStreamModel(stream).context()  # another replica, still connected
    await ensure_stream(writer, LogSettings(), wall=clock.wall)
    link = Link()
    store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic, versions=LogPositions())
    confirmed: list[float] = []  # when each fetch that showed the copy complete was sent
    follower = LogFollower(JetStreamModel(stream, turn=link.turn).context(), store, idle=0.01, wall=clock.wall,
                           monotonic=clock.monotonic, confirmed=confirmed.append)
    task = asyncio.create_task(follower.run())
    try:
        await eventually_async(lambda: clock.now in confirmed, message="the copy confirmed")
        link.cut = True
        cut_at = clock.now
        asked = link.requests
        clock.advance(30)
        written = await NodeMetricLog(writer, timeout=1.0).append("node-a", value("node-a", "1"), last=0)
        await eventually_async(lambda: link.requests >= asked + 3, message="the follower asking, cut off")
        assert max(confirmed) == cut_at  # a fetch sent before the cut may deliver: as of then
        link.cut = False
        await eventually_async(lambda: clock.now in confirmed, message="the copy confirmed again")
        entry = store.get("node-a")
        assert follower.position == written and entry is not None and entry.resource_version == written
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_follower_of_a_stream_written_as_fast_as_it_reads_still_confirms_its_copy() -> None:
    clock = FakeClock()
    stream = StreamModel(wall=clock.wall)
    writer = JetStreamModel(stream).context()
    await ensure_stream(writer, LogSettings(), wall=clock.wall)
    log = NodeMetricLog(writer, timeout=1.0)
    writes = [0]

    async def write(count: int) -> None:  # a new node each time: the stream keeps a node's last write only
        for _ in range(count):
            writes[0] += 1
            await log.append(f"node-{writes[0]}", value(f"node-{writes[0]}", "1"), last=0)

    async def busy(what: str) -> None:  # another replica writes a batch before every fetch
        await one_pass(what)
        if what == "fetch":
            await write(BATCH)
            clock.advance(1)

    BATCH = 4
    await write(2)  # two writes pending at every fetch: the follower is never caught up
    store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic, versions=LogPositions())
    confirmed: list[float] = []
    follower = LogFollower(JetStreamModel(stream, turn=busy).context(), store, batch=BATCH, idle=0.01,
                           wall=clock.wall, monotonic=clock.monotonic, confirmed=confirmed.append)
    task = asyncio.create_task(follower.run())
    try:
        await eventually_async(lambda: len(set(confirmed)) >= 5, message="confirmations while writes keep coming")
        assert not follower.synced.is_set()  # never caught up: every fetch left two writes pending
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
