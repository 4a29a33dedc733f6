"""Which replicas take reports now (`--store nats`): each Ready replica announces itself in a small bucket.

Every replica puts "IDENTITY ENDPOINT" under its own key every `interval` while it is Ready, and
reads the whole bucket back. The bucket forgets a key `FORGET_AFTER` seconds after its last put
(its max age), so a replica that died drops out by itself; one that stops withdraws at once. The
leader publishes what it read on its Lease, and every replica tells agents whose list differs
(lease_record.REPLICAS_HEADER). It is only a hint: agents verify every replica against the CA.

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Callable

from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import BadRequestError
from nats.js.kv import KeyValue

from colocation.jetstream.nats_connection import raise_if_cancelled
from colocation.jetstream.nodemetric_log import STREAM_NAME_IN_USE
from colocation.kube.lease_record import MAX_REPLICAS, AdvertisedReplicas, parse_replica_header

log = logging.getLogger(__name__)

PRESENCE_BUCKET = "colocation-replicas"
ANNOUNCE_INTERVAL = 5.0
FORGET_AFTER = 3 * ANNOUNCE_INTERVAL  # three announcements missed: the replica is gone
READ_TIMEOUT = 2.0


class ReplicaPresence:
    def __init__(self, *, identity: str, endpoint: str, ready: Callable[[], bool], replicas: int,
                 interval: float = ANNOUNCE_INTERVAL, rng: random.Random | None = None) -> None:
        self.identity = identity
        self.endpoint = endpoint
        self._ready = ready
        self._replicas = replicas  # of the bucket's stream, as the NodeMetric stream's
        self._interval = interval
        self._rng = rng or random.Random()
        self._key = hashlib.sha256(identity.encode()).hexdigest()[:32]  # any identity, a valid key
        self._known: dict[str, str] = {}
        self._advertised: tuple[tuple[tuple[str, str], ...], AdvertisedReplicas] | None = None
        self._kv: KeyValue | None = None
        self._announced = False

    def endpoints(self) -> dict[str, str]:
        """identity -> endpoint of the replicas that announced themselves lately, this one too while Ready."""
        known = dict(self._known)
        if self._ready():
            known[self.identity] = self.endpoint
        else:
            known.pop(self.identity, None)
        return known

    def advertised(self) -> AdvertisedReplicas | None:
        """`endpoints()` as agents are told of them (None while there are none); made once per change:
        every report's answer asks."""
        endpoints = self.endpoints()
        if not endpoints:
            return None
        key = tuple(sorted(endpoints.items()))
        if self._advertised is None or self._advertised[0] != key:
            self._advertised = (key, AdvertisedReplicas.of(endpoints))
        return self._advertised[1]

    async def run(self, js: JetStreamContext) -> None:
        """Announce and read every `interval` (jittered) until cancelled; failures are logged and retried."""
        while True:
            try:
                await self._round(js)
            except Exception as error:  # NATS down or cut off: the last list stands meanwhile
                raise_if_cancelled(error)
                log.info("announcing this replica failed", extra={"error": repr(error)})
            await asyncio.sleep(self._interval * self._rng.uniform(0.8, 1.0))

    async def withdraw(self) -> None:
        """Stopping: leave the bucket now, not FORGET_AFTER later (best effort)."""
        if self._kv is not None and self._announced:
            try:
                await asyncio.wait_for(self._kv.delete(self._key), READ_TIMEOUT)
                self._announced = False
            except Exception as error:
                raise_if_cancelled(error)
                log.info("withdrawing this replica failed", extra={"error": repr(error)})

    async def _round(self, js: JetStreamContext) -> None:
        kv = self._kv = self._kv or await _bucket(js, self._replicas)
        if self._ready():
            await kv.put(self._key, f"{self.identity} {self.endpoint}".encode())
            self._announced = True
        elif self._announced:
            await self.withdraw()
        self._known = await _read_all(kv)


async def _bucket(js: JetStreamContext, replicas: int) -> KeyValue:
    config = KeyValueConfig(bucket=PRESENCE_BUCKET, history=1, ttl=FORGET_AFTER, storage=StorageType.MEMORY,
                            replicas=replicas)
    try:
        return await js.create_key_value(config)
    except BadRequestError as error:  # made by a replica of another version or settings: use it as it is
        if error.err_code != STREAM_NAME_IN_USE:
            raise
        return await js.key_value(PRESENCE_BUCKET)


async def _read_all(kv: KeyValue) -> dict[str, str]:
    """Every announcement the bucket holds: its first MAX_REPLICAS well-formed ones."""
    watcher = await kv.watchall(ignore_deletes=True)
    known: dict[str, str] = {}
    try:
        while (entry := await watcher.updates(timeout=READ_TIMEOUT)) is not None:  # type: ignore[no-untyped-call]
            replica = parse_replica_header((entry.value or b"").decode(errors="replace"))
            if replica is not None and len(known) < MAX_REPLICAS:
                known[replica[0]] = replica[1]
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    return known
