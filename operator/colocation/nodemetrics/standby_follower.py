"""The warm standby: a standby follows the leader's NodeMetric watch and keeps a full copy.

A promoted standby then serves complete data at once, and since the copy carries the leader's
resourceVersions (and the store continues above them), informers resume across the handover
instead of relisting from nothing. The standby reads the leader directly over HTTPS: the address
and CA bundle are published on the leader Lease, and the standby authenticates with its own
ServiceAccount token, like any other client of the API. The leader serves that feed as any
watch (the API server's); this is its client, applying what it reads to a `ReplicaTarget`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from colocation.apimachinery import certificates
from colocation.kube.informer import Informer
from colocation.kube.leaderelection import LEADER_CA_ANNOTATION, LEADER_ENDPOINT_ANNOTATION
from colocation.kube.transport import https_transport
from colocation.nodemetrics.report_schema import COLLECTION_PATH
from colocation.nodemetrics.storage_interface import ReplicaTarget
from colocation.nodemetrics.storage_metrics import StorageMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderAddress:
    identity: str
    endpoint: str  # https://HOST:PORT
    ca_pem: bytes

    @classmethod
    def from_annotations(cls, identity: str, annotations: dict[str, str]) -> LeaderAddress | None:
        endpoint = annotations.get(LEADER_ENDPOINT_ANNOTATION, "")
        ca = annotations.get(LEADER_CA_ANNOTATION, "")
        if not identity or not endpoint.startswith("https://") or not ca:
            return None
        try:
            return cls(identity, endpoint.rstrip("/"), base64.b64decode(ca, validate=True))
        except ValueError:
            return None


class LeaderFollower:
    """Keeps `store` a copy of the leader's NodeMetrics.

    `on_unreachable` is called when the leader refuses connections (its process is gone), so
    the election can look at the Lease sooner. `serving_copy()` says whether the copy may be
    served: it was complete once and has been current within `stale_after` seconds, which
    covers a failover (the copy then lags by seconds) but not a leader unreachable for long.
    """

    def __init__(self, store: ReplicaTarget, leader: Callable[[], LeaderAddress | None],
                 token: Callable[[], str], metrics: StorageMetrics, *, poll_interval: float = 0.5,
                 on_unreachable: Callable[[], None] = lambda: None, stale_after: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.leader = leader
        self.token = token
        self.metrics = metrics
        self.poll_interval = poll_interval
        self.on_unreachable = on_unreachable
        self.stale_after = stale_after
        self.clock = clock
        self.following: LeaderAddress | None = None
        self._informer: Informer | None = None
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
        async with aiohttp.ClientSession() as session:
            while True:
                address = self.leader()
                if address is None:
                    await asyncio.sleep(self.poll_interval)  # the poll period while no leader is known
                    continue
                task = asyncio.create_task(self._follow(session, address))
                try:
                    while self.leader() == address and not task.done():
                        await asyncio.wait({task}, timeout=self.poll_interval)
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    self.following = None

    async def _follow(self, session: aiohttp.ClientSession, address: LeaderAddress) -> None:
        context = certificates.ssl_client_context(address.ca_pem)
        context.check_hostname = False  # the certificate names the Service, we dial the pod address
        context.verify_mode = ssl.CERT_REQUIRED
        transport = https_transport(session, lambda: address.endpoint, lambda: context, self.token)
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
            self._informer = None

    def _failed(self, reason: str) -> None:
        if reason == "connection":
            self.on_unreachable()

    async def _sync(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self.metrics.replication_relists.inc()
        self.store.replace_all([orjson.dumps(item) for item in items], int(resource_version or 0))
        self._current_at = self.clock()

    async def _event(self, type_: str, obj: dict[str, Any]) -> None:
        self.metrics.replication_events.inc()
        self.store.apply_event(type_, orjson.dumps(obj))
        self._current_at = self.clock()
