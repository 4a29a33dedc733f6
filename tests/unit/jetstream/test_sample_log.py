"""Custom metric samples between replicas on a real NATS cluster: what one replica writes, every other
applies, once, in order, and a replica that starts later gets what the stream still holds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from colocation.apimachinery.errors import ApiError
from colocation.jetstream.jetstream_store import JetStreamNodeMetrics
from colocation.jetstream.nats_connection import NatsOptions
from colocation.jetstream.nodemetric_log import LogSettings
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.resource_versions import LogPositions
from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.timing import eventually_async
from tests.unit.jetstream.test_nodemetric_log import DEADLINE


@contextlib.asynccontextmanager
async def replica(url: str, name: str, applied: list[bytes]) -> AsyncIterator[JetStreamNodeMetrics]:
    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic, versions=LogPositions())
    shared = JetStreamNodeMetrics(store, NatsOptions(servers=(url,), timeout=1.0), LogSettings(), name=name)
    shared.follow_samples(applied.append, retention=600.0)
    task = asyncio.create_task(shared.run(asyncio.Event()))
    try:
        await eventually_async(lambda: shared.synced and shared.samples_synced, DEADLINE,
                               message=f"{name} caught up with both streams")
        yield shared
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_what_one_replica_writes_every_other_applies_once_in_order(nats_cluster: NatsCluster) -> None:
    a_applied: list[bytes] = []
    b_applied: list[bytes] = []
    async with replica(nats_cluster.urls[0], "op-a", a_applied) as a, \
            replica(nats_cluster.urls[1], "op-b", b_applied) as b:
        await a.put_samples("node-1", [b"[1]", b"[2]"])
        await b.put_samples("node-2", [b"[3]"])
        await eventually_async(lambda: b_applied == [b"[1]", b"[2]"] and a_applied == [b"[3]"], DEADLINE,
                               message="each applied the other's, in order")
        late_applied: list[bytes] = []
        async with replica(nats_cluster.urls[2], "op-c", late_applied):
            assert late_applied == [b"[1]", b"[2]", b"[3]"]  # ready only once it read what the stream holds
    assert a_applied == [b"[3]"]  # never its own


async def test_without_a_quorum_a_batch_is_refused_with_503(nats_cluster: NatsCluster) -> None:
    async with replica(nats_cluster.urls[0], "op-a", []) as a:
        for server in nats_cluster.servers[1:]:
            await nats_cluster.stop_server(server)
        try:
            await a.put_samples("node-1", [b"[1]"])
        except ApiError as refused:
            assert refused.code == 503 and refused.details["retryAfterSeconds"] == 1
        else:
            raise AssertionError("a batch was taken without a quorum")
