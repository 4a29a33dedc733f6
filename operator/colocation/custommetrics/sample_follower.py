"""A standby's copy of the custom metric samples: it follows the leader's replication feed.

It reads `sample_feed`'s stream from the leader (as `nodemetrics.standby_follower` does, over
`kube.leader_connection`) into its own `SeriesStore`. A snapshot is built aside and then replaces
the copy whole, so the old copy serves meanwhile. After a failure it reconnects with backoff and
jitter, and resumes where it stopped if the leader still holds that, else takes a snapshot. Each
line must arrive within `read_timeout`. `synced` is true from a snapshot applied (or a resume
confirmed) until the stream fails or the leader changes; the stream's normal end keeps it.

The feed: docs/metrics-apis.md#standbys
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from colocation.custommetrics.sample_feed import (
    BATCH,
    FEED_PATH,
    HEARTBEAT_SECONDS,
    RESUME,
    SERIES,
    SNAPSHOT,
    SYNCED,
    decode_series,
)
from colocation.custommetrics.series_metrics import StoreMetrics
from colocation.custommetrics.series_store import SeriesStore
from colocation.kube.backoff import Backoff
from colocation.kube.informer import RequestFailed, Transport, describe_error, failure_reason
from colocation.kube.leader_connection import LeaderAddress, follow_leader

log = logging.getLogger(__name__)


class FeedError(Exception):
    """The leader's stream ended with an error, or broke the protocol; `reason` labels the failure."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class SampleFollower:
    def __init__(self, series: SeriesStore, leader: Callable[[], LeaderAddress | None], token: Callable[[], str],
                 *, metrics: StoreMetrics, poll_interval: float = 0.5,
                 read_timeout: float = 4 * HEARTBEAT_SECONDS, watch_seconds: int = 300,
                 backoff: Backoff | None = None) -> None:
        self.series = series
        self.leader = leader
        self.token = token
        self.metrics = metrics
        self.poll_interval = poll_interval
        self.read_timeout = read_timeout
        self.watch_seconds = watch_seconds
        self.backoff = backoff or Backoff(initial=0.2, maximum=10.0, jitter=0.5)
        self.synced = False
        self.ever_synced = False  # a copy was complete once (readiness: it stays servable meanwhile)
        # Where the copy stands in the leader's feed: its epoch and the last line applied (None:
        # no copy to resume, the next stream starts from a snapshot).
        self.epoch = ""
        self.seq: int | None = None
        self._staging: SeriesStore | None = None  # a snapshot being assembled

    async def run(self) -> None:
        """Follow whoever leads (never ourselves: the caller stops this task on promotion)."""
        try:
            await follow_leader(self.leader, self._follow, self.poll_interval, on_stop=self._stopped)
        finally:
            self._stopped()

    def _stopped(self) -> None:
        self.synced = False
        self._staging = None

    async def _follow(self, session: aiohttp.ClientSession, address: LeaderAddress) -> None:
        transport = address.transport(session, self.token)
        log.info("following the leader's custom metric samples", extra={"leader": address.identity,
                                                                        "endpoint": address.endpoint})
        while True:
            try:
                await self._stream(transport)
                self.backoff.reset()  # the stream reached its timeout: resume at once
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any transport, server or protocol failure: wait, then again
                self._stopped()
                reason = error.reason if isinstance(error, FeedError) else failure_reason(error)
                self.metrics.replica_failures.labels(reason).inc()
                delay = self.backoff.next_delay()
                log.warning("following the leader's samples failed, retrying", extra={
                    "leader": address.identity, "error": describe_error(error), "retry_in": round(delay, 2)})
                await asyncio.sleep(delay)  # backoff before the retry, not synchronisation

    async def _stream(self, transport: Transport) -> None:
        params = {"allowWatchBookmarks": "true", "timeoutSeconds": str(self.watch_seconds)}
        if self.seq is not None:
            params |= {"epoch": self.epoch, "after": str(self.seq)}
        async with transport(FEED_PATH, params, True) as response:
            if response.status != 200:
                raise RequestFailed(response.status, await response.read())
            lines = aiter(response.lines())
            while True:
                async with asyncio.timeout(self.read_timeout):
                    line = await anext(lines, None)
                if line is None:
                    return
                if line.strip():
                    self.apply(orjson.loads(line))
                    await asyncio.sleep(0)  # a snapshot comes as fast as it is read: let others run

    def apply(self, event: dict[str, Any]) -> None:
        """Apply one event of the stream; FeedError when it cannot follow what it has."""
        type_, obj = event.get("type"), event.get("object") or {}
        if type_ == SNAPSHOT:
            self.synced, self.seq = False, None
            self.epoch = str(obj.get("epoch", ""))
            self._staging = self.series.empty_like()
        elif type_ == SERIES:
            self._apply_series(self._assembling(type_), obj)
        elif type_ == SYNCED:
            self.series.replace_contents(self._assembling(type_))
            self._staging, self.seq, self.synced = None, int(obj["seq"]), True
            self.ever_synced = True
            self.metrics.replica_snapshots.inc()
            log.info("custom metric samples synced from the leader's snapshot", extra={
                "series": len(self.series), "epoch": self.epoch, "seq": self.seq})
        elif type_ == RESUME:
            if (obj.get("epoch"), obj.get("seq")) != (self.epoch, self.seq):
                raise self._broken(f"resumed at {obj} instead of {self.epoch}/{self.seq}")
            self.synced = True
        elif type_ == BATCH:
            if self.seq is None or self._staging is not None or obj.get("seq") != self.seq + 1:
                raise self._broken(f"batch {obj.get('seq')} after {self.seq}")
            self._apply_series(self.series, obj)
            self.seq += 1
        elif type_ == "ERROR":
            self.seq = None  # 410: too far behind; anything else: start clean as well
            raise FeedError("expired" if obj.get("code") == 410 else f"http-{obj.get('code')}",
                            str(obj.get("message", obj)))
        elif type_ != "BOOKMARK":
            raise self._broken(f"unknown event type {type_!r}")

    def _assembling(self, type_: str) -> SeriesStore:
        if self._staging is None:
            raise self._broken(f"{type_} outside a snapshot")
        return self._staging

    def _apply_series(self, store: SeriesStore, obj: dict[str, Any]) -> None:
        try:
            added = sum(store.apply(decode_series(series)) for series in obj["series"])
        except (KeyError, TypeError, ValueError) as error:
            raise self._broken(f"bad series: {error}") from None
        self.metrics.replica_samples.inc(added)

    def _broken(self, message: str) -> FeedError:
        self.seq = None
        return FeedError("protocol", f"the leader's feed broke its protocol: {message}")
