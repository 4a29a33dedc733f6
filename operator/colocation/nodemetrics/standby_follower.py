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
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from colocation.kube.informer import Informer
from colocation.kube.leader_connection import LeaderAddress, follow_leader
from colocation.nodemetrics.report_schema import COLLECTION_PATH
from colocation.nodemetrics.storage_interface import ReplicaTarget
from colocation.nodemetrics.storage_metrics import StorageMetrics

log = logging.getLogger(__name__)


class LeaderFollower:
    def __init__(self, store: ReplicaTarget, leader: Callable[[], LeaderAddress | None],
                 token: Callable[[], str], metrics: StorageMetrics, *, poll_interval: float = 0.5) -> None:
        self.store = store
        self.leader = leader
        self.token = token
        self.metrics = metrics
        self.poll_interval = poll_interval
        self.following: LeaderAddress | None = None

    async def run(self) -> None:
        """Follow whoever leads (never ourselves: the caller stops this task on promotion)."""
        await follow_leader(self.leader, self._follow, self.poll_interval, on_stop=self._stopped)

    def _stopped(self) -> None:
        self.following = None

    async def _follow(self, session: aiohttp.ClientSession, address: LeaderAddress) -> None:
        transport = address.transport(session, self.token)
        self.following = address
        log.info("following the leader's NodeMetrics", extra={"leader": address.identity,
                                                              "endpoint": address.endpoint})
        informer = Informer(transport, COLLECTION_PATH, on_sync=self._sync,
                            on_event=self._event, name="leader-nodemetrics")
        await informer.run()

    async def _sync(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self.metrics.replication_relists.inc()
        self.store.replace_all([orjson.dumps(item) for item in items], int(resource_version or 0))

    async def _event(self, type_: str, obj: dict[str, Any]) -> None:
        self.metrics.replication_events.inc()
        self.store.apply_event(type_, orjson.dumps(obj))
