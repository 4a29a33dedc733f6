"""Custom metric samples on NATS JetStream (`--store nats`): every replica takes an agent's batch and
every replica applies every other replica's.

The replica that takes a batch stores it at once, then publishes what it kept (opaque bytes, the
custom metrics stage's encoding) to one stream, a subject per node, and answers once JetStream
acknowledged it. Every replica reads the stream (`SampleLogFollower`) and applies the messages the
others wrote. The stream keeps the samples' retention (its max age) and at most `MAX_BYTES`; it
starts from nothing when its servers lost it, as the samples do. Applying the same samples twice
changes nothing (a series keeps one value per timestamp), so a batch retried on another replica is
harmless.

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError

from colocation.jetstream.nodemetric_log import STREAM_NAME_IN_USE, LogSettings
from colocation.jetstream.stream_reader import StreamReader

log = logging.getLogger(__name__)

SAMPLE_STREAM = "colocation-samples"
SAMPLE_SUBJECTS = "colocation.samples.>"
WRITER = "Colocation-Writer"  # the replica that wrote a message, which applied it already
MAX_BYTES = 1 << 30  # a bound on the stream whatever the retention: the oldest go first


def sample_subject(node: str) -> str:
    return f"colocation.samples.{node}"


async def ensure_sample_stream(js: JetStreamContext, settings: LogSettings, *, retention: float) -> None:
    """Create the samples' stream unless it exists (one made by another replica is used as it is)."""
    try:
        await js.stream_info(SAMPLE_STREAM)
        return
    except NotFoundError:
        pass
    config = StreamConfig(name=SAMPLE_STREAM, subjects=[SAMPLE_SUBJECTS], max_age=retention, max_bytes=MAX_BYTES,
                          discard=DiscardPolicy.OLD, num_replicas=settings.replicas,
                          storage=StorageType.FILE if settings.storage == "file" else StorageType.MEMORY)
    try:
        await js.add_stream(config)
        log.info("created the custom metric samples' stream", extra={"stream": SAMPLE_STREAM})
    except BadRequestError as error:
        if error.err_code != STREAM_NAME_IN_USE:
            raise


class SampleLog:
    """What one replica writes to the samples' stream."""

    def __init__(self, js: JetStreamContext, *, writer: str, timeout: float) -> None:
        self._js = js
        self._writer = writer
        self._timeout = timeout

    async def append(self, node: str, chunks: Iterable[bytes]) -> None:
        """Publish `chunks` (what a batch of `node` kept); raises unless JetStream acknowledged each."""
        for chunk in chunks:
            await self._js.publish(sample_subject(node), chunk, headers={WRITER: self._writer}, timeout=self._timeout)


class StreamLost(RuntimeError):
    """The stream holds less than this replica read: read it again from its start."""


class SampleLogFollower(StreamReader):
    """Applies every message another replica wrote (`apply`), in the stream's order."""

    def __init__(self, js: JetStreamContext, apply: Callable[[bytes], None], *, writer: str) -> None:
        super().__init__(js, stream=SAMPLE_STREAM, subjects=SAMPLE_SUBJECTS, what="the custom metric samples' stream")
        self._apply_data = apply
        self._writer = writer

    def _apply(self, message: Any) -> None:
        self.position = int(message.metadata.sequence.stream)
        if (message.headers or {}).get(WRITER) != self._writer:
            self._apply_data(message.data)

    async def _quiet(self) -> None:
        if self.position and int((await self._js.stream_info(SAMPLE_STREAM)).state.last_seq) < self.position:
            self.position = 0  # its servers lost it: what it holds now is all there is
            raise StreamLost("the custom metric samples' stream restarted")
        self._caught_up()
