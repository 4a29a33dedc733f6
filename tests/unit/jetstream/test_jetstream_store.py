"""What an operator replica holds with --store nats: reports through any replica, the leader's deletions,
consistent reads, and clear 503s while NATS is not there."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.jetstream import jetstream_store
from colocation.jetstream.jetstream_store import JetStreamNodeMetrics
from colocation.jetstream.nats_connection import NatsOptions
from colocation.jetstream.nodemetric_log import LogSettings
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.resource_versions import LogPositions
from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.timing import eventually_async
from tests.unit.jetstream.test_nodemetric_log import DEADLINE
from tests.unit.nodemetrics.test_nodemetric_store import report


def now() -> str:
    return format_time(time.time())


@contextlib.asynccontextmanager
async def replica(url: str, name: str) -> AsyncIterator[JetStreamNodeMetrics]:
    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic, versions=LogPositions())
    shared = JetStreamNodeMetrics(store, NatsOptions(servers=(url,), timeout=1.0), LogSettings(), name=name)
    stop = asyncio.Event()
    task = asyncio.create_task(shared.run(stop))
    try:
        await eventually_async(lambda: shared.synced, DEADLINE, message=f"{name} caught up with the stream")
        yield shared
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_before_it_reads_the_stream_a_replica_refuses_writes_and_consistent_reads() -> None:
    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic, versions=LogPositions())
    shared = JetStreamNodeMetrics(store, NatsOptions(servers=("nats://127.0.0.1:1",)), LogSettings(), name="alone")
    with pytest.raises(ApiError) as write:
        await shared.put(report("node-a", "1", now()), {})
    with pytest.raises(ApiError) as read:
        await shared.read_barrier(0)
    assert write.value.code == read.value.code == 503 and not shared.synced


async def test_reports_deletions_and_reads_through_any_replica(nats_cluster: NatsCluster,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    async with replica(nats_cluster.urls[0], "one") as one, replica(nats_cluster.urls[1], "two") as two:
        written = await one.put(report("node-a", "2", now()), {"pool": "web"})
        await two.read_barrier(0)  # a consistent read on the other replica sees it
        entry = two.store.get("node-a")
        assert entry is not None and entry.resource_version == written.resource_version
        assert entry.labels == {"pool": "web"}
        monkeypatch.setattr(jetstream_store, "READ_BARRIER_TIMEOUT", 0.2)
        with pytest.raises(ApiError) as ahead:
            await two.read_barrier(written.resource_version + 1000)
        assert ahead.value.code == 504
        assert await two.remove("node-a")  # the leader's decision, on any replica's copy
        await one.read_barrier(0)
        assert one.store.get("node-a") is None and not await one.remove("node-a")


async def test_without_a_quorum_writes_are_refused_with_503_and_reads_serve_the_copy_marked_once_cut_off(
        nats_cluster: NatsCluster) -> None:
    async with replica(nats_cluster.urls[0], "one") as one:
        written = await one.put(report("node-a", "2", now()), {})
        for server in nats_cluster.servers[1:]:
            await nats_cluster.stop_server(server)
        with pytest.raises(ApiError) as refused:
            await asyncio.wait_for(one.put(report("node-a", "3", now()), {}), DEADLINE)
        assert refused.value.code == 503 and refused.value.details.get("retryAfterSeconds") == 1
        await asyncio.wait_for(one.read_barrier(0), DEADLINE)  # nobody can write: the copy is current
        entry = one.store.get("node-a")
        assert entry is not None and entry.resource_version == written.resource_version
        # Cut off from every server: the copy is still served, marked as maybe stale.
        await nats_cluster.stop_server(nats_cluster.servers[0])
        await eventually_async(lambda: _read_stale(one), DEADLINE, message="a read served, marked stale")
        for server in nats_cluster.servers:
            await nats_cluster.start_server(server)
        await eventually_async(lambda: _answered(one), DEADLINE, message="a consistent read once NATS is back")
        assert one.stale_warning() is None


async def _answered(replica: JetStreamNodeMetrics) -> bool:
    try:
        await replica.read_barrier(0)
    except ApiError:
        return False
    return replica.stale_warning() is None


async def _read_stale(replica: JetStreamNodeMetrics) -> bool:
    await replica.read_barrier(0)  # never refused: the copy is served
    return replica.stale_warning() == "this replica is not connected to NATS: its NodeMetrics may be stale"
