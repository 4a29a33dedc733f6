"""Reading one JetStream stream in order, from where the reader left off: the one consumer loop.

A reader has a pull consumer of its own (no acknowledgements; it holds nothing on the servers once
it stops) and fetches a batch at a time, so one that falls behind reads slower instead of losing
messages as a push subscription's slow consumer would. After any error it subscribes again from
the sequence after the last it applied, with backoff. Subclasses say what a message does
(`_apply`), and what a quiet stream means (`_quiet`, `_caught_up`). Each time a fetch finds the
reader caught up, or within one batch of the stream's end (a stream written faster than a fetch
empties it), it tells `confirmed` when that fetch was sent. Cut off from the servers, those calls
stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from colocation.jetstream.nats_connection import raise_if_cancelled
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

BATCH = 1024  # messages per fetch
IDLE_SECONDS = 1.0  # a fetch that gets nothing for this long: the reader is current
CONSUMER_INACTIVE_SECONDS = 30.0  # the servers drop a consumer nobody fetched from for this long


class StreamReader:
    def __init__(self, js: JetStreamContext, *, stream: str, subjects: str, what: str, batch: int = BATCH,
                 idle: float = IDLE_SECONDS, monotonic: Callable[[], float] = time.monotonic,
                 confirmed: Callable[[float], None] | None = None) -> None:
        self._js = js
        self._stream = stream
        self._subjects = subjects
        self._what = what  # for the log: "the NodeMetric stream"
        self._batch = batch
        self._idle = idle
        self.position = 0  # the last sequence applied
        self._monotonic = monotonic
        self._confirmed = confirmed
        self._asked_at = monotonic()  # when the last fetch was sent
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
                log.warning(f"following {self._what} failed, retrying",
                            extra={"error": repr(error), "retry_in": round(delay, 2), "position": self.position})
                await asyncio.sleep(delay)

    async def wait_for(self, position: int, timeout: float) -> bool:
        """Whether the reader reaches `position` within `timeout` seconds."""
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
        subscription = await self._js.pull_subscribe(self._subjects, stream=self._stream, config=config)
        behind = True  # a batch fetch returns what is there at once, but waits its whole timeout
        try:  # for more once it got one: when nothing is pending, fetch one message, which returns at once
            while True:
                self._asked_at = self._monotonic()
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
                pending = messages[-1].metadata.num_pending if messages else 0
                behind = bool(messages) and pending > 0
                if messages and not behind:
                    self._caught_up()
                elif messages and pending <= self._batch:
                    self._confirm()  # a busy stream: within a batch of its end, which the next fetch takes
                retry.reset()
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    def _apply(self, message: Any) -> None:
        """Apply one message, and move `position` to its sequence."""
        raise NotImplementedError

    async def _quiet(self) -> None:
        """Nothing came for a while: the reader is current. Subclasses ask the servers first whether
        the stream lost what it had; that answer is what confirms it (`_caught_up`)."""
        self._caught_up()

    def _caught_up(self) -> None:
        """The reader held the whole stream when the last fetch was sent (a subclass's `_quiet`
        calls this only once the servers answered it: an idle fetch also times out when cut off)."""
        self._confirm()
        self.synced.set()

    def _confirm(self) -> None:
        if self._confirmed is not None:
            self._confirmed(self._asked_at)
