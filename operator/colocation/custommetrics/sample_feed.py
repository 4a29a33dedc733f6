"""The leader's replication feed of custom metric samples, and the stream a standby reads it as.

What the leader keeps of each accepted batch is appended here, encoded once, for every standby.
A standby (`sample_follower`) watches `samplebatches` (leader only) and gets a snapshot, or a
resume point, then every batch; one that falls behind the oldest line held gets 410 and starts
again from a snapshot. The feed is bounded by `max_bytes` and `max_lines`, and kept only while
someone follows or did within `linger_seconds`. Appending never waits for a follower.
Single-threaded (the event loop).

The wire format, and why: docs/metrics-apis.md#standbys
"""

from __future__ import annotations

import asyncio
import time
import uuid
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.watch_queue import Bookmark
from colocation.custommetrics.sample_batches import API_VERSION, GROUP
from colocation.custommetrics.series_store import NODES, PODS, SeriesKey, SeriesSamples, SeriesStore
from colocation.kube import permissions

RESOURCE = "samplebatches"
FEED_PATH = f"/apis/{API_VERSION}/{RESOURCE}"
# What a standby's follower asks and the leader authorizes (a resource of ours, never stored).
WATCH_SAMPLE_BATCHES = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall(
    group=GROUP, resource=RESOURCE, verb="watch", namespace=None))
HEARTBEAT_SECONDS = 5.0
LINE_BYTES = 64 * 1024  # aiohttp reads lines of up to 128 KiB; one series is at most about 56 KiB
KEPT_CHUNK_BYTES = 512 * 1024

SNAPSHOT, SERIES, SYNCED, RESUME, BATCH = "SNAPSHOT", "SERIES", "SYNCED", "RESUME", "BATCH"


# -- the wire ------------------------------------------------------------------------------------

def _as_list(value: object) -> list[float]:
    if isinstance(value, array):
        return value.tolist()
    raise TypeError(f"cannot encode {type(value).__name__}")


def encode_series(samples: SeriesSamples) -> bytes:
    key = samples.key
    return orjson.dumps({"metric": key.metric, "resource": key.resource, "namespace": key.namespace,
                         "name": key.name, "labels": dict(key.labels), "timestamps": samples.timestamps,
                         "values": samples.values}, default=_as_list)


def decode_series(obj: Mapping[str, Any]) -> SeriesSamples:
    """A SERIES of the stream; ValueError if it is not one."""
    try:
        labels = tuple(sorted((str(name), str(value)) for name, value in obj["labels"].items()))
        key = SeriesKey(metric=str(obj["metric"]), resource=str(obj["resource"]), namespace=str(obj["namespace"]),
                        name=str(obj["name"]), labels=labels)
        timestamps, values = array("d", obj["timestamps"]), array("d", obj["values"])
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a series: {error!r}") from None
    if key.resource not in (PODS, NODES) or len(timestamps) != len(values):
        raise ValueError(f"not a series: {key}")
    return SeriesSamples(key, timestamps, values)


def encode_kept(kept: Sequence[SeriesSamples], *, chunk_bytes: int = KEPT_CHUNK_BYTES) -> list[bytes]:
    """What a batch kept, as JSON arrays of `encode_series`, each about `chunk_bytes` at most (a
    NATS message is 1 MiB at most): how replicas pass samples to each other with --store nats."""
    chunks: list[bytes] = []
    group: list[bytes] = []
    size = 0
    for part in map(encode_series, kept):
        if group and size + len(part) > chunk_bytes:
            chunks.append(b"[" + b",".join(group) + b"]")
            group, size = [], 0
        group.append(part)
        size += len(part) + 1
    if group:
        chunks.append(b"[" + b",".join(group) + b"]")
    return chunks


def decode_kept(data: bytes) -> list[SeriesSamples]:
    """An `encode_kept` chunk read back; ValueError if it is not one."""
    try:
        objects = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"not a chunk of series: {error}") from None
    if not isinstance(objects, list):
        raise ValueError("not a chunk of series")
    return [decode_series(obj) for obj in objects]


def event(type_: str, **fields: object) -> bytes:
    return orjson.dumps({"type": type_, "object": fields}) + b"\n"


def _series_lines(type_: str, parts: Iterable[bytes], fields: Callable[[], bytes]) -> Iterator[bytes]:
    """Events of `type_` carrying the encoded series, about LINE_BYTES each; `fields` gives what
    comes before the series in each one's object (`"seq":n,`)."""
    group: list[bytes] = []
    size = 0
    for part in parts:
        if group and size + len(part) > LINE_BYTES:
            yield _series_line(type_, fields(), group)
            group, size = [], 0
        group.append(part)
        size += len(part) + 1
    if group:
        yield _series_line(type_, fields(), group)


def _series_line(type_: str, fields: bytes, parts: list[bytes]) -> bytes:
    return b"".join((b'{"type":"', type_.encode(), b'","object":{', fields, b'"series":[', b",".join(parts),
                     b"]}}\n"))


# -- the feed ------------------------------------------------------------------------------------

class SampleFeed:
    def __init__(self, store: SeriesStore, *, max_bytes: int = 32 * 1024 * 1024, max_lines: int = 65_536,
                 linger_seconds: float = 60.0, monotonic: Callable[[], float] = time.monotonic,
                 on_dropped: Callable[[], None] = lambda: None, epoch: str = "") -> None:
        self.store = store
        self.epoch = epoch or uuid.uuid4().hex
        self.seq = 0  # the last line's
        self.max_bytes = max_bytes
        self.max_lines = max(1, max_lines)
        self.linger_seconds = linger_seconds
        self._monotonic = monotonic
        self._lines: deque[bytes] = deque()  # seq - len + 1 … seq
        self._bytes = 0
        self._followers = 0
        self._followed_until = -float("inf")
        self._appended = asyncio.Event()
        self.on_dropped = on_dropped  # a follower fell behind

    @property
    def first(self) -> int:
        """The sequence number of the oldest line held (seq + 1 when none is)."""
        return self.seq - len(self._lines) + 1

    @property
    def held_bytes(self) -> int:
        return self._bytes

    @property
    def followers(self) -> int:
        return self._followers

    def append(self, kept: Sequence[SeriesSamples]) -> None:
        """What the store kept of an accepted batch; nothing is encoded while nobody follows."""
        if not kept:
            return
        if not self._followers and self._monotonic() > self._followed_until:
            self.seq += 1  # not held: a follower that comes back from before it needs a snapshot
            self._lines.clear()
            self._bytes = 0
            return
        for line in _series_lines(BATCH, map(encode_series, kept), lambda: b'"seq":%d,' % (self.seq + 1)):
            self.seq += 1
            self._lines.append(line)
            self._bytes += len(line)
        while self._lines and (self._bytes > self.max_bytes or len(self._lines) > self.max_lines):
            self._bytes -= len(self._lines.popleft())
        self._appended.set()  # wakes every follower waiting; later ones wait on a new event
        self._appended = asyncio.Event()

    def line(self, seq: int) -> bytes:
        return self._lines[seq - self.first]

    async def wait(self, seq: int, timeout: float | None) -> None:
        """Return once a line after `seq` is held, or after `timeout` seconds."""
        if self.seq > seq:
            return
        appended = self._appended
        try:
            async with asyncio.timeout(timeout):
                await appended.wait()
        except TimeoutError:
            pass

    def open(self, epoch: str = "", after: int | None = None) -> FeedCursor:
        """A follower's stream: resumed after `after` if this feed still holds what follows it,
        else from a snapshot. Call `stop()` on it when done."""
        self._followers += 1
        if epoch == self.epoch and after is not None and self.first - 1 <= after <= self.seq:
            return FeedCursor(self, after, iter((event(RESUME, epoch=self.epoch, seq=after),)))
        return FeedCursor(self, self.seq, self._snapshot(self.seq, self.store.snapshot_marks()))

    def _snapshot(self, seq: int, marks: Mapping[SeriesKey, tuple[float, float]]) -> Iterator[bytes]:
        yield event(SNAPSHOT, epoch=self.epoch, seq=seq)
        parts = (encode_series(samples) for key, mark in marks.items()
                 if (samples := self.store.snapshot_of(key, mark)) is not None)
        yield from _series_lines(SERIES, parts, lambda: b"")
        yield event(SYNCED, epoch=self.epoch, seq=seq)

    def _closed(self) -> None:
        self._followers -= 1
        self._followed_until = self._monotonic() + self.linger_seconds


class FeedCursor:
    """One follower's place in the feed: the lines it still has to get (a `WatchSource` of lines)."""

    def __init__(self, feed: SampleFeed, seq: int, opening: Iterator[bytes]) -> None:
        self._feed = feed
        self.seq = seq  # the last batch line taken (or the snapshot's)
        self._opening: Iterator[bytes] | None = opening
        self.ended = False
        self.error: Obj | None = None  # what the stream ends with: 410 when it fell behind

    @property
    def pending(self) -> bool:
        return not self.ended and (self._opening is not None or self._feed.seq > self.seq)

    def take(self, limit: int) -> list[bytes | Bookmark]:
        """Up to `limit` lines: the snapshot (or RESUME) first, then the batches after `seq`."""
        taken: list[bytes | Bookmark] = []
        if self._behind():
            return taken
        while self._opening is not None and len(taken) < limit:
            line = next(self._opening, None)
            if line is None:
                self._opening = None
            else:
                taken.append(line)
        feed = self._feed
        while len(taken) < limit and self.seq < feed.seq:
            self.seq += 1
            taken.append(feed.line(self.seq))
        return taken

    def _behind(self) -> bool:
        if not self.ended and self.seq + 1 < self._feed.first:
            self._feed.on_dropped()
            self._end(ApiError.gone(f"too far behind: the next line ({self.seq + 1}) is no longer held; "
                                    "start again from a snapshot").status())
        return self.ended

    async def wait(self, timeout: float | None) -> None:
        if not self.pending and not self._behind():
            await self._feed.wait(self.seq, timeout)

    def bookmark(self) -> Obj | None:
        """The heartbeat of an idle stream: where it stands."""
        return None if self.pending or self.ended else {"seq": self.seq}

    def stop(self) -> None:
        self._end(None)

    def _end(self, error: Obj | None) -> None:
        if self.ended:
            return
        self.ended, self.error, self._opening = True, error, None
        self._feed._closed()
