"""A replica's copy of the NodeMetric stream: every write applied to its store, in the stream's order.

It reads with a pull consumer of its own (no acknowledgements; it holds nothing on the servers
once it stops), a batch at a time, so a replica that falls behind reads slower instead of losing
messages as a push subscription's slow consumer would. After any error it subscribes again from
the last sequence it applied. When the stream holds less than the replica has applied (its
messages were lost), it moves the stream's next sequence above it (`restart_after_loss`); every
follower then ends its watches: clients list again, and no resourceVersion is ever lower than
one they saw.

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from colocation.jetstream.nats_connection import raise_if_cancelled
from colocation.jetstream.nodemetric_log import (
    ALL_SUBJECTS,
    FIGURES,
    OPERATION,
    REMOVED,
    RESTART_KEY,
    STREAM,
    decode_figures,
    name_of,
    restart_after_loss,
)
from colocation.kube.backoff import Backoff
from colocation.nodemetrics.report_schema import UsageFigures

log = logging.getLogger(__name__)

BATCH = 1024  # messages per fetch
IDLE_SECONDS = 1.0  # a fetch that gets nothing for this long: the copy is current
CONSUMER_INACTIVE_SECONDS = 30.0  # the servers drop a consumer nobody fetched from for this long


class LogTarget(Protocol):
    def apply_logged(self, name: str, position: int, value: bytes | None, *, received_at: float,
                     figures: UsageFigures | None = None) -> None: ...

    def caught_up(self, position: int) -> None: ...

    def log_restarted(self, position: int) -> None: ...


class LogFollower:
    def __init__(self, js: JetStreamContext, target: LogTarget, *, batch: int = BATCH,
                 idle: float = IDLE_SECONDS, wall: Callable[[], float] = time.time) -> None:
        self._js = js
        self._target = target
        self._batch = batch
        self._idle = idle
        self._wall = wall
        self.position = 0  # the last sequence applied
        # Each node's last sequence, deletions included: what the next write of it compares with.
        self.last_written: dict[str, int] = {}
        self.synced = asyncio.Event()  # set once it first caught up with the stream
        self._advanced = asyncio.Event()

    async def run(self) -> None:
        retry = Backoff(0.2, 5.0, jitter=0.5)
        while True:
            try:
                await self._follow(retry)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the servers or the connection failed: subscribe again
                raise_if_cancelled(error)
                delay = retry.next_delay()
                log.warning("following the NodeMetric stream failed, retrying",
                            extra={"error": repr(error), "retry_in": round(delay, 2), "position": self.position})
                await asyncio.sleep(delay)

    async def wait_for(self, position: int, timeout: float) -> bool:
        """Whether the copy reaches `position` within `timeout` seconds."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.position < position:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            self._advanced.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), left)
        return True

    async def _follow(self, retry: Backoff) -> None:
        start = self.position + 1 if self.position else None
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start else DeliverPolicy.ALL, opt_start_seq=start,
            ack_policy=AckPolicy.NONE, inactive_threshold=CONSUMER_INACTIVE_SECONDS, mem_storage=True,
            num_replicas=1)
        subscription = await self._js.pull_subscribe(ALL_SUBJECTS, stream=STREAM, config=config)
        behind = True  # a batch fetch returns what is there at once, but waits its whole timeout
        try:  # for more once it got one: when nothing is pending, fetch one message, which returns at once
            while True:
                try:
                    messages = await subscription.fetch(self._batch if behind else 1, timeout=self._idle)
                except nats.errors.TimeoutError as timeout:
                    raise_if_cancelled(timeout)
                    behind = False
                    await self._quiet()
                    retry.reset()
                    continue
                for message in messages:
                    self._apply(message)
                self._advanced.set()
                behind = bool(messages) and messages[-1].metadata.num_pending > 0
                if messages and not behind:
                    self._caught_up()
                retry.reset()
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    def _apply(self, message: Any) -> None:
        metadata = message.metadata
        position, name = int(metadata.sequence.stream), name_of(message.subject)
        if name == RESTART_KEY:
            self._lost(position)
            return
        headers = message.headers or {}
        removed = headers.get(OPERATION) in REMOVED
        self._target.apply_logged(name, position, None if removed else message.data,
                                  received_at=metadata.timestamp.timestamp(),
                                  figures=decode_figures(headers.get(FIGURES)))
        self.last_written[name] = position
        self.position = position

    async def _quiet(self) -> None:
        """Nothing came for a while: the copy is current, unless the stream lost what it had (then
        the RESTART_KEY write comes next, to every follower)."""
        if self.position and await restart_after_loss(self._js, above=self.position, wall=self._wall) is not None:
            return
        self._caught_up()

    def _lost(self, restarted: int) -> None:
        self.last_written.clear()
        self.position = restarted
        self._target.log_restarted(restarted)

    def _caught_up(self) -> None:
        self._target.caught_up(self.position)
        self.synced.set()
