"""A replica's copy of the NodeMetric stream: every write applied to its store, in the stream's order.

It reads as every stream reader does (`stream_reader`). When the stream holds less than the
replica has applied (its messages were lost), it moves the stream's next sequence above it
(`restart_after_loss`); every follower then ends its watches: clients list again, and no
resourceVersion is ever lower than one they saw.

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from nats.js.client import JetStreamContext

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
from colocation.jetstream.stream_reader import BATCH, IDLE_SECONDS, StreamReader
from colocation.nodemetrics.report_schema import UsageFigures


class LogTarget(Protocol):
    def apply_logged(self, name: str, position: int, value: bytes | None, *, received_at: float,
                     figures: UsageFigures | None = None) -> None: ...

    def caught_up(self, position: int) -> None: ...

    def log_restarted(self, position: int) -> None: ...


class LogFollower(StreamReader):
    def __init__(self, js: JetStreamContext, target: LogTarget, *, batch: int = BATCH,
                 idle: float = IDLE_SECONDS, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 confirmed: Callable[[float], None] | None = None) -> None:
        super().__init__(js, stream=STREAM, subjects=ALL_SUBJECTS, what="the NodeMetric stream", batch=batch,
                         idle=idle, monotonic=monotonic, confirmed=confirmed)
        self._target = target
        self._wall = wall
        # Each node's last sequence: what the next write of it compares with (none once deleted).
        self.last_written: dict[str, int] = {}

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
        if removed:  # its marker expires: a later write of the node finds no last sequence
            self.last_written.pop(name, None)
        else:
            self.last_written[name] = position
        self.position = position

    async def _quiet(self) -> None:
        """Nothing came for a while: the copy is current once the servers say the stream did not lose
        what it had (else the RESTART_KEY write comes next, to every follower). Cut off, the question
        times out: the copy is not confirmed."""
        if await restart_after_loss(self._js, above=self.position, wall=self._wall) is not None:
            return
        self._caught_up()

    def _lost(self, restarted: int) -> None:
        self.last_written.clear()
        self.position = restarted
        self._target.log_restarted(restarted)

    def _caught_up(self) -> None:
        self._target.caught_up(self.position)
        super()._caught_up()
