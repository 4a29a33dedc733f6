"""The NodeMetric stream: one JetStream key-value bucket, a key per node, its sequence the resourceVersion.

The stream keeps a node's latest write only (history 1). It is created with its first sequence
at the wall clock in microseconds, so its resourceVersions start above any a replica served
before it (the in-memory store's come from the same clock) and above any of a stream that was
lost: a sequence grows by one per write, far slower than the clock. Writes are compare-and-set
on the node's last sequence, so a replica never writes over a write it has not seen.

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError

from colocation.nodemetrics.report_schema import UsageFigures
from colocation.nodemetrics.resource_versions import MICROSECONDS

log = logging.getLogger(__name__)

BUCKET = "colocation-nodemetrics"
STREAM = f"KV_{BUCKET}"  # nats-py's name for a bucket's stream
SUBJECT_PREFIX = f"$KV.{BUCKET}."
ALL_SUBJECTS = f"{SUBJECT_PREFIX}>"
EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
OPERATION = "KV-Operation"  # "DEL" on a delete marker, as nats-py's KeyValue writes it
# The key of the first write after `restart_after_loss` (no node is named so: names are DNS
# subdomains): every follower learns from it, in order, that what came before is gone.
RESTART_KEY = "~restarted"
REMOVED = ("DEL", "PURGE")  # the KV-Operation of a deletion
# The figures the controllers read (`UsageFigures`), sent along with a report so that a replica
# applies it without parsing it: "cpu_millis memory_bytes pod_count update_time".
FIGURES = "Colocation-Figures"
# JetStream's error codes when EXPECTED_LAST does not match (with the sequence, and without).
WRONG_LAST_SEQUENCE = (10071, 10164)
STREAM_NAME_IN_USE = 10058
# An empty stream whose sequence is this many seconds behind the clock is moved to the clock.
EMPTY_MARGIN = 60
# JetStream's per-message time to live, in seconds (the stream allows it: `allow_msg_ttl`).
MESSAGE_TTL = "Nats-TTL"
# A deleted node's marker is kept this long: a replica that did not read the stream for longer
# (cut off from NATS for an hour) may keep the node's NodeMetric until it restarts.
DELETE_MARKER_TTL = 3600


@dataclass(frozen=True, kw_only=True)
class LogSettings:
    replicas: int = 3  # RAFT: a write is acknowledged once a majority has it
    # File storage survives a restart of every server; memory storage loses the stream then
    # (the sequence restarts, see `restart_after_loss`).
    storage: Literal["file", "memory"] = "file"


def subject_of(name: str) -> str:
    return SUBJECT_PREFIX + name


def name_of(subject: str) -> str:
    return subject[len(SUBJECT_PREFIX):]


def stream_config(settings: LogSettings, *, first_seq: int) -> StreamConfig:
    """A key-value bucket's stream as nats-py's `create_key_value` makes one, with history 1 and
    the first sequence given."""
    return StreamConfig(
        name=STREAM, subjects=[ALL_SUBJECTS], max_msgs_per_subject=1, allow_rollup_hdrs=True, deny_delete=True,
        discard=DiscardPolicy.NEW, allow_direct=True, allow_msg_ttl=True, num_replicas=settings.replicas,
        storage=StorageType.FILE if settings.storage == "file" else StorageType.MEMORY, first_seq=first_seq)


def clock_position(wall: Callable[[], float]) -> int:
    """The wall clock as a resourceVersion (microseconds), as the in-memory store's clock counts."""
    return int(wall() * MICROSECONDS)


async def last_sequence(js: JetStreamContext) -> int:
    """The sequence of the stream's last write (0 when it holds none yet), from its leader. Not
    JetStream's last sequence of an empty stream: that is one below its first write's (the clock,
    for a new stream), which no copy reaches before that write, so a consistent read would wait
    for it in vain."""
    state = (await js.stream_info(STREAM)).state
    return int(state.last_seq) if state.messages else 0


async def ensure_stream(js: JetStreamContext, settings: LogSettings, *, wall: Callable[[], float]) -> int:
    """Create the stream unless it exists; its last sequence (0 when it holds nothing yet).

    A stream that exists but holds nothing starts at the clock too: the servers keep a memory
    stream's settings when they all restart, not its messages, and its sequence would start again
    from its first, below what replicas that restarted as well served before (no replica is left
    to find the loss). Moving an empty stream loses nothing; one made in the last EMPTY_MARGIN
    seconds (by another replica, starting beside this one) is left as it is."""
    try:
        state = (await js.stream_info(STREAM)).state
    except NotFoundError:
        pass
    else:
        now = clock_position(wall)
        if state.messages == 0 and int(state.last_seq) < now - EMPTY_MARGIN * MICROSECONDS:
            await js.purge_stream(STREAM, seq=now)
            log.info("the NodeMetric stream was empty: it starts at the clock", extra={"next_sequence": now})
        return await last_sequence(js)
    first = clock_position(wall)
    try:
        await js.add_stream(stream_config(settings, first_seq=first))
        log.info("created the NodeMetric stream", extra={"stream": STREAM, "first_sequence": first})
    except BadRequestError as error:
        if error.err_code != STREAM_NAME_IN_USE:  # another replica created it first: use that one
            raise
    return await last_sequence(js)


async def restart_after_loss(js: JetStreamContext, *, above: int, wall: Callable[[], float],
                             known_lost: bool = False) -> int | None:
    """When the stream holds nothing past `above` (the highest resourceVersion this replica
    applied) although it had reached it, its messages are gone (memory storage on servers that
    all restarted: its sequence starts again from its first). Move its next sequence above both
    `above` and the clock, so that no resourceVersion is ever lower than one served, and write
    RESTART_KEY there for every follower; return that sequence. None when the stream still
    reaches `above` (nothing was lost, or another replica did this first); with `known_lost` (a
    write landed at or below `above`), only when it holds more. Two replicas that find
    the loss at the same moment may both do it: a report written between the two is lost, and
    its node's next report (seconds later) stands in for it."""
    # JetStream's own last sequence: between another replica's purge and its RESTART_KEY write the
    # stream holds nothing, but its sequence has moved above `above` already.
    last = int((await js.stream_info(STREAM)).state.last_seq)
    if last > above or (last == above and not known_lost):
        return None
    restart = max(above + 1, clock_position(wall))
    await js.purge_stream(STREAM, seq=restart)
    await js.publish(subject_of(RESTART_KEY), str(restart).encode())
    log.warning("the NodeMetric stream had lost its messages: it starts again above every resourceVersion served",
                extra={"stream": STREAM, "next_sequence": restart, "highest_applied": above})
    return restart


def encode_figures(figures: UsageFigures) -> str:
    return f"{figures.cpu_millis} {figures.memory_bytes} {figures.pod_count} {figures.update_time!r}"


def decode_figures(header: str | None) -> UsageFigures | None:
    """The figures a write carries; None when it carries none, or none this version reads."""
    try:
        cpu, memory, pods, update_time = (header or "").split(" ")
        return UsageFigures(cpu_millis=int(cpu), memory_bytes=int(memory), pod_count=int(pods),
                            update_time=float(update_time))
    except ValueError:
        return None


class Conflict(Exception):
    """The node's last write is no longer the one given: another replica wrote since."""


class NodeMetricLog:
    """Appends to the stream; each call returns the write's sequence once JetStream acknowledged it."""

    def __init__(self, js: JetStreamContext, *, timeout: float, marker_ttl: int = DELETE_MARKER_TTL) -> None:
        self._js = js
        self._timeout = timeout
        self._marker_ttl = marker_ttl

    async def append(self, name: str, value: bytes, *, last: int, figures: UsageFigures | None = None) -> int:
        """Write `value` as node `name`'s if its last write is still at sequence `last` (0: none)."""
        headers = {EXPECTED_LAST: str(last)}
        if figures is not None:
            headers[FIGURES] = encode_figures(figures)
        return await self._publish(name, value, headers)

    async def remove(self, name: str, *, last: int) -> int:
        """Delete node `name`'s NodeMetric (a delete marker, which readers see as DELETED). The
        servers remove the marker after `marker_ttl` seconds: with history 1 it would stay forever."""
        return await self._publish(name, b"", {EXPECTED_LAST: str(last), OPERATION: "DEL",
                                               MESSAGE_TTL: str(self._marker_ttl)})

    async def restart_above(self, above: int, *, wall: Callable[[], float]) -> int | None:
        """`restart_after_loss` on this log's stream, which a write at or below `above` proved lost."""
        return await restart_after_loss(self._js, above=above, wall=wall, known_lost=True)

    async def last(self, name: str) -> tuple[int, bytes | None]:
        """Node `name`'s last write as the stream has it: (its sequence, its value), (0, None) for
        none and (sequence, None) for a deletion. What to compare with after a Conflict, when this
        replica has not applied the other replica's write yet."""
        try:
            message = await self._js.get_last_msg(STREAM, subject_of(name), direct=True)
        except NotFoundError:
            return 0, None
        removed = (message.headers or {}).get(OPERATION) in REMOVED
        return int(message.seq or 0), None if removed else message.data

    async def _publish(self, name: str, value: bytes, headers: dict[str, str]) -> int:
        try:
            ack = await self._js.publish(subject_of(name), value, headers=headers, timeout=self._timeout)
        except BadRequestError as error:
            if error.err_code in WRONG_LAST_SEQUENCE:
                raise Conflict(f"{name}: {error.description}") from error
            raise
        return int(ack.seq)
