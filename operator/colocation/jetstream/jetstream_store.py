"""A replica's NodeMetrics on NATS JetStream (`--store nats`): what the operator process holds.

It connects (retrying until a server answers), creates the stream if it is missing, and runs the
follower that keeps this replica's store current, the replica's announcement (`presence`) and,
with custom metrics served, the samples' stream (`follow_samples`, `put_samples`).
Any replica takes an agent's report (`put`); the leader's deletions (a deleted Node, a node
silent for the TTL) are writes too, so every replica applies them. A read without a
resourceVersion waits until the copy has the stream's last write (`read_barrier`).

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from nats.aio.client import Client
from nats.js.client import JetStreamContext

from colocation.apimachinery.confirmed_clock import ConfirmedClock
from colocation.apimachinery.errors import ApiError
from colocation.jetstream.log_follower import LogFollower
from colocation.jetstream.log_ingest import LogIngest
from colocation.jetstream.nats_connection import NatsOptions, connect, raise_if_cancelled
from colocation.jetstream.nodemetric_log import Conflict, LogSettings, NodeMetricLog, ensure_stream, last_sequence
from colocation.jetstream.replica_presence import ReplicaPresence
from colocation.jetstream.sample_log import SampleLog, SampleLogFollower, ensure_sample_stream
from colocation.kube.backoff import Backoff
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import ValidatedReport
from colocation.nodemetrics.resource_versions import too_large
from colocation.nodemetrics.storage_interface import Entry

log = logging.getLogger(__name__)

REMOVE_TRIES = 5
READ_BARRIER_TIMEOUT = 3.0  # as a standby's consistent read waits for its copy
STALE_MEMORY = 10.0  # reads are marked stale this long after NATS last failed to answer one
# The follower confirms the copy about every second (an idle fetch waits 1 s; a stream leader's
# election takes a few): node health stands still past this (`ConfirmedClock`).
COPY_TOLERANCE = 3.0


class JetStreamNodeMetrics:
    def __init__(self, store: NodeMetricStore, options: NatsOptions, settings: LogSettings, *, name: str,
                 presence: ReplicaPresence | None = None, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self._monotonic = monotonic
        # Node health runs on it (`Controllers`): it stands still while the copy is not confirmed.
        self.copy_clock = ConfirmedClock(monotonic, tolerance=COPY_TOLERANCE)
        self._unanswered_at: float | None = None  # monotonic: NATS did not answer a consistent read
        self.presence = presence
        self.options = options
        self.settings = settings
        self.name = name
        self._wall = wall
        self._client: Client | None = None
        self._js: JetStreamContext | None = None
        self.follower: LogFollower | None = None
        self._log: NodeMetricLog | None = None
        self._ingest: LogIngest | None = None
        self._apply_samples: Callable[[bytes], None] | None = None
        self._sample_retention = 0.0
        self.sample_follower: SampleLogFollower | None = None
        self._sample_log: SampleLog | None = None

    def follow_samples(self, apply: Callable[[bytes], None], *, retention: float) -> None:
        """Before `run`: keep custom metric samples in a stream too; `apply` takes what others wrote."""
        self._apply_samples, self._sample_retention = apply, retention

    @property
    def samples_synced(self) -> bool:
        """Whether the samples' copy caught up with their stream once (True when not followed)."""
        follower = self.sample_follower
        return self._apply_samples is None or (follower is not None and follower.synced.is_set())

    @property
    def synced(self) -> bool:
        """Whether the copy caught up with the stream once: the replica may serve it."""
        return self.follower is not None and self.follower.synced.is_set()

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, then keep the copy current until cancelled."""
        retry = Backoff(0.5, 10.0, jitter=0.5)
        while self._client is None and not stop.is_set():
            client = None
            try:
                client = await connect(self.options, name=self.name)
                js = client.jetstream(timeout=self.options.timeout)
                await ensure_stream(js, self.settings, wall=self._wall)
                if self._apply_samples is not None:
                    await ensure_sample_stream(js, self.settings, retention=self._sample_retention)
            except Exception as error:  # no server answers yet: keep trying, the log says why
                raise_if_cancelled(error)
                if client is not None:  # connected, but the streams were not there in time
                    with contextlib.suppress(Exception):
                        await client.close()
                delay = retry.next_delay()
                log.warning("connecting to NATS failed, retrying",
                            extra={"error": repr(error), "retry_in": round(delay, 2)})
                await asyncio.sleep(delay)
                continue
            self._client, self._js = client, js
            self.follower = LogFollower(js, self.store, wall=self._wall, monotonic=self._monotonic,
                                        confirmed=self.copy_clock.confirm)
            self._log = NodeMetricLog(js, timeout=self.options.timeout)
            self._ingest = LogIngest(self._log, self.follower, self.store)
            if self._apply_samples is not None:
                self._sample_log = SampleLog(js, writer=self.name, timeout=self.options.timeout)
                self.sample_follower = SampleLogFollower(js, self._apply_samples, writer=self.name)
        if self.follower is not None and self._js is not None:
            beside = [asyncio.create_task(self.presence.run(self._js))] if self.presence is not None else []
            if self.sample_follower is not None:
                beside.append(asyncio.create_task(self.sample_follower.run()))
            try:
                await self.follower.run()
            finally:
                for task in beside:
                    task.cancel()
                await asyncio.gather(*beside, return_exceptions=True)
                if self.presence is not None:
                    await self.presence.withdraw()  # agents stop choosing a replica that stops
                if self._client is not None:
                    await self._client.close()

    def stale_warning(self) -> str | None:
        """Why this replica's copy may be behind, for a read's Warning header: it is not connected
        to NATS, or NATS did not answer its last consistent read (within STALE_MEMORY seconds)."""
        client = self._client
        if client is None or not client.is_connected:
            return "this replica is not connected to NATS: its NodeMetrics may be stale"
        if self._unanswered_at is not None and self._monotonic() - self._unanswered_at < STALE_MEMORY:
            return "NATS did not answer this replica: its NodeMetrics may be stale"
        return None

    async def put(self, report: ValidatedReport, labels: Mapping[str, str]) -> Entry:
        """An agent's report, through any replica; 503 until connected."""
        if self._ingest is None:
            raise ApiError.service_unavailable("this replica is not connected to NATS yet", retry_after=1)
        try:
            return await self._ingest.put(report, labels)
        except Exception as error:  # no quorum, a timeout, the connection lost, replicas writing it over and over
            raise_if_cancelled(error)
            log.warning("a report was not written to the NodeMetric stream",
                        extra={"node": report.name, "error": repr(error)})
            raise ApiError.service_unavailable(f"the NodeMetric stream did not take the report: {error!r}",
                                               retry_after=1) from error

    async def put_samples(self, node: str, chunks: list[bytes]) -> None:
        """What a batch of `node` kept, for every other replica; 503 unless JetStream took it all."""
        if self._sample_log is None:
            raise ApiError.service_unavailable("this replica is not connected to NATS yet", retry_after=1)
        try:
            await self._sample_log.append(node, chunks)
        except Exception as error:
            raise_if_cancelled(error)
            log.warning("a sample batch was not written to the samples' stream",
                        extra={"node": node, "error": repr(error)})
            raise ApiError.service_unavailable(f"the samples' stream did not take the batch: {error!r}",
                                               retry_after=1) from error

    async def remove(self, name: str) -> bool:
        """Delete node `name`'s NodeMetric on every replica (the leader's decision); whether it was there."""
        if self._log is None or self.follower is None or self.store.get(name) is None:
            return False
        last = self.follower.last_written.get(name, 0)
        for _ in range(REMOVE_TRIES):
            try:
                await self._log.remove(name, last=last)
                return True
            except Conflict:
                last, value = await self._log.last(name)
                if value is None:
                    return False  # deleted already
        return False

    async def read_barrier(self, since: int) -> None:
        """Before a read: with 0, wait until the copy holds the stream's last write (503 past
        READ_BARRIER_TIMEOUT); with a resourceVersion, until the copy reaches it (504 past it, as
        the watch cache answers a version it does not reach). 503 before the first sync. When NATS
        does not answer, the copy is served as it is, marked stale (`stale_warning`): with NATS down
        nobody can write, and a replica cut off alone keeps its last copy until it is back."""
        if self.follower is None or self._js is None or not self.synced:
            raise ApiError.service_unavailable("this replica has not read the NodeMetric stream yet", retry_after=1)
        if since:
            if not await self.follower.wait_for(since, READ_BARRIER_TIMEOUT):
                raise too_large(since, self.follower.position)
            return
        try:
            last = await last_sequence(self._js)
        except Exception as error:  # NATS does not answer: serve the copy, marked stale
            raise_if_cancelled(error)
            log.warning("NATS did not answer a consistent read: serving the copy", extra={"error": repr(error)})
            self._unanswered_at = self._monotonic()
            return
        self._unanswered_at = None
        if not await self.follower.wait_for(last, READ_BARRIER_TIMEOUT):
            raise ApiError.service_unavailable("this replica's copy of the NodeMetric stream is behind", retry_after=1)
