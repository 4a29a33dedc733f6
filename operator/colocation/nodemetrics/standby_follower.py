"""The warm standby: a standby follows the leader's NodeMetric watch and keeps a full copy.

A promoted standby then serves complete data at once, and since the copy carries the leader's
resourceVersions (and the store continues above them), informers resume across the handover
instead of relisting from nothing. The standby reads the leader directly over HTTPS
(`kube.leader_connection`: the address and CA bundle the leader publishes on its Lease, our own
ServiceAccount token). The leader serves that feed as any watch (the API server's); this is its
client, applying what it reads to a `ReplicaTarget`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from colocation.kube.informer import Informer, Transport
from colocation.kube.leader_connection import LeaderAddress, follow_leader
from colocation.kube.lease_record import REPLICA_HEADER
from colocation.nodemetrics.report_schema import COLLECTION_PATH
from colocation.nodemetrics.storage_interface import ReplicaTarget
from colocation.nodemetrics.storage_metrics import StorageMetrics

log = logging.getLogger(__name__)

_NO_NODE = "-"  # not a valid Node name: selecting it lists nothing


class LeaderFollower:
    """Keeps `store` a copy of the leader's NodeMetrics.

    `on_unreachable` is called when the leader refuses connections (its process is gone), so
    the election can look at the Lease sooner. `serving_copy()` says whether the copy may be
    served: it was complete once and has been current within `stale_after` seconds, which
    covers a failover (the copy then lags by seconds) but not a leader unreachable for long.
    `leader_version()` asks the leader its resourceVersion and `on_applied` runs after every
    change applied: together they make a standby's reads consistent (`consistent_reads`).
    `stream_silence`: seconds without a byte on the feed (events and bookmarks both count) after
    which the connection is taken for dead and the feed resumed, so a connection that died
    silently does not leave the copy stale while it still looks current; set it to a few of the
    leader's bookmark intervals.
    """

    def __init__(self, store: ReplicaTarget, leader: Callable[[], LeaderAddress | None],
                 token: Callable[[], str], *, metrics: StorageMetrics, poll_interval: float = 0.5,
                 on_unreachable: Callable[[], None] = lambda: None, stale_after: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_applied: Callable[[], Awaitable[None]] | None = None,
                 stream_silence: float | None = None, announce: str | None = None) -> None:
        self.store = store
        self.announce = announce  # "IDENTITY ENDPOINT": the leader publishes it for agents (REPLICA_HEADER)
        self.leader = leader
        self.token = token
        self.metrics = metrics
        self.poll_interval = poll_interval
        self.on_unreachable = on_unreachable
        self.stale_after = stale_after
        self.clock = clock
        self.following: LeaderAddress | None = None
        self.on_applied = on_applied
        self.stream_silence = stream_silence
        self._informer: Informer[dict[str, Any]] | None = None
        self._transport: Transport | None = None
        self._current_at: float | None = None  # the last moment the copy was known current

    def _is_current(self) -> bool:
        informer = self._informer
        return informer is not None and informer.synced.is_set() and not informer.failing

    def serving_copy(self) -> bool:
        now = self.clock()
        if self._is_current():
            self._current_at = now
            return True
        return self._current_at is not None and now - self._current_at < self.stale_after

    async def run(self) -> None:
        """Follow whoever leads (never ourselves: the caller stops this task on promotion)."""
        await follow_leader(self.leader, self._follow, self.poll_interval, on_stop=self._stopped)

    def _stopped(self) -> None:
        self.following = None

    async def _follow(self, session: aiohttp.ClientSession, address: LeaderAddress) -> None:
        headers = {REPLICA_HEADER: self.announce} if self.announce else None
        transport = self._transport = address.transport(session, self.token, stream_silence=self.stream_silence,
                                                         headers=headers)
        self.following = address
        log.info("following the leader's NodeMetrics", extra={"leader": address.identity,
                                                              "endpoint": address.endpoint})
        informer = Informer(transport, COLLECTION_PATH, on_sync=self._sync,
                            on_event=self._event, name="leader-nodemetrics", on_error=self._failed)
        self._informer = informer
        try:
            await informer.run()
        finally:
            self.serving_copy()  # remember when it was last current
            self._informer = self._transport = None

    async def leader_version(self) -> int | None:
        """The followed leader's resourceVersion now; None while none is followed or it does not answer."""
        transport = self._transport
        return None if transport is None else await _list_version(transport)

    async def version_at(self, address: LeaderAddress) -> int | None:
        """The resourceVersion of a leader this replica does not follow yet (a one-off request)."""
        async with aiohttp.ClientSession() as session:
            return await _list_version(address.transport(session, self.token))

    def _failed(self, reason: str) -> None:
        if reason == "connection":
            self.on_unreachable()

    async def _sync(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self.metrics.replication_relists.inc()
        self.store.replace_all([orjson.dumps(item) for item in items], int(resource_version or 0))
        self._current_at = self.clock()
        if self.on_applied is not None:
            await self.on_applied()

    async def _event(self, type_: str, obj: dict[str, Any]) -> None:
        self.metrics.replication_events.inc()
        self.store.apply_event(type_, orjson.dumps(obj))
        self._current_at = self.clock()
        if self.on_applied is not None:
            await self.on_applied()


async def _list_version(transport: Transport) -> int | None:
    """A leader's resourceVersion: a list that selects no object carries the number alone."""
    try:
        async with transport(COLLECTION_PATH, {"fieldSelector": f"metadata.name={_NO_NODE}"}, False) as response:
            if response.status != 200:
                return None
            body = orjson.loads(await response.read())
    except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError):
        return None
    return int((body.get("metadata") or {}).get("resourceVersion") or 0)
