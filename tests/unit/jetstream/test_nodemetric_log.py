"""NodeMetrics on a real NATS JetStream cluster: one order of writes for every replica, compare-and-set,
deletions, and resourceVersions that never go lower, even when the servers lose the stream.

Each replica here is what an operator replica holds: a connection to one server, a store whose
resourceVersions are the stream's sequence, and the follower that applies the stream to it.
NATS stamps its own time on each write, so these tests run on the real clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from colocation.apimachinery.clock import format_time
from colocation.jetstream.log_follower import LogFollower
from colocation.jetstream.log_ingest import LogIngest
from colocation.jetstream.nats_connection import NatsOptions, connect
from colocation.jetstream.nodemetric_log import (
    EMPTY_MARGIN,
    STREAM,
    Conflict,
    LogSettings,
    NodeMetricLog,
    decode_figures,
    encode_figures,
    ensure_stream,
)
from colocation.nodemetrics.nodemetric_store import NodeMetricStore, log_value
from colocation.nodemetrics.nodemetric_watch_window import Watcher
from colocation.nodemetrics.resource_versions import LogPositions
from colocation.nodemetrics.storage_interface import Entry
from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.timing import TIME_FACTOR, eventually_async
from tests.unit.nodemetrics.test_nodemetric_store import drain, report

DEADLINE = 10.0 * TIME_FACTOR  # for a copy to apply a write


class Replica:
    """One operator replica's part: a connection to one server, its store, and the follower."""

    def __init__(self, client: Client, settings: LogSettings) -> None:
        self.client = client
        self.js: JetStreamContext = client.jetstream(timeout=2.0)
        self.settings = settings
        self.store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic, versions=LogPositions())
        self.follower = LogFollower(self.js, self.store, idle=0.2)
        self.log = NodeMetricLog(self.js, timeout=2.0)
        self.ingest = LogIngest(self.log, self.follower, self.store)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await ensure_stream(self.js, self.settings, wall=time.time)
        self.task = asyncio.create_task(self.follower.run())
        await asyncio.wait_for(self.follower.synced.wait(), DEADLINE)  # as a replica is ready once it caught up

    async def write(self, node: str, cpu: str) -> int:
        """Append `node`'s report as an ingesting replica does: compare-and-set on the last write
        it has applied; when another replica wrote since, on the one the stream has."""
        last = self.follower.last_written.get(node, 0)
        for _ in range(20):
            try:
                return await self.log.append(node, log_value(report(node, cpu), {}, created="2026-11-29T00:00:00Z"),
                                             last=last)
            except Conflict:
                last, _ = await self.log.last(node)
        raise AssertionError(f"{node}: no write landed in 20 tries")

    async def stop_following(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def stop(self) -> None:
        await self.stop_following()
        await self.client.close()


@contextlib.asynccontextmanager
async def replicas(cluster: NatsCluster, settings: LogSettings | None = None) -> AsyncIterator[list[Replica]]:
    """A replica on each server of the cluster."""
    started = [Replica(await connect(NatsOptions(servers=(url,)), name=f"replica-{index}"),
                       settings or LogSettings())
               for index, url in enumerate(cluster.urls)]
    try:
        for replica in started:
            await replica.start()
        yield started
    finally:
        for replica in started:
            await replica.stop()


def served(store: NodeMetricStore) -> list[dict[str, Any]]:
    return [orjson.loads(entry.body) for entry in store.list()[0]]


async def test_every_replica_applies_every_write_in_the_same_order(nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster) as three:
        watchers = [replica.store.watch("0") for replica in three]
        rng = random.Random(7)

        async def reports(replica: Replica) -> list[int]:  # 40 reports of the same 4 nodes as the others
            return [await replica.write(f"node-{rng.randrange(4)}", f"{rng.randrange(1, 9)}") for _ in range(40)]

        positions = [position for written in await asyncio.gather(*map(reports, three)) for position in written]
        assert len(set(positions)) == len(positions) == 120  # one order: no two writes at one position
        last = max(positions)
        for replica in three:
            assert await replica.follower.wait_for(last, DEADLINE)
        first = served(three[0].store)
        assert len(first) == 4 and all(served(replica.store) == first for replica in three[1:])
        assert all(replica.store.list()[1] == last for replica in three)
        for watcher in watchers:
            versions = [int(version) for _, _, version in drain(watcher)]
            assert versions == sorted(versions) and len(set(versions)) == len(versions)  # strictly increasing


async def test_a_write_over_one_the_replica_has_not_applied_is_refused(nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster) as (one, two, _):
        first = await one.write("node-a", "1")
        assert await two.follower.wait_for(first, DEADLINE)
        second = await two.write("node-a", "2")
        with pytest.raises(Conflict):  # one has not applied `second` yet, or has: it names `first` all the same
            await one.log.append("node-a", log_value(report("node-a", "3"), {}, created=""), last=first)
        assert await one.follower.wait_for(second, DEADLINE)
        entry = one.store.get("node-a")
        assert entry is not None and entry.resource_version == second and entry.figures.cpu_millis == 2000


async def test_a_deleted_node_is_deleted_on_every_replica(nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster) as three:
        written = await three[0].write("node-a", "1")
        for replica in three:
            assert await replica.follower.wait_for(written, DEADLINE)
        watcher = three[2].store.watch("0")
        removed = await three[1].log.remove("node-a", last=three[1].follower.last_written["node-a"])
        for replica in three:
            assert await replica.follower.wait_for(removed, DEADLINE)
            assert replica.store.get("node-a") is None
        assert drain(watcher)[-1] == ("DELETED", "node-a", str(removed))


async def test_a_deleted_nodes_marker_expires_and_the_node_may_come_back(nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster) as (one, two, _):
        written = await one.write("node-a", "1")
        assert await one.follower.wait_for(written, DEADLINE)
        marking = NodeMetricLog(one.js, timeout=2.0, marker_ttl=1)
        removed = await marking.remove("node-a", last=written)
        assert await one.log.last("node-a") == (removed, None)  # the marker, until it expires
        await eventually_async(lambda: _gone(one, "node-a"), DEADLINE, message="the marker expired")
        assert await two.follower.wait_for(removed, DEADLINE) and two.store.get("node-a") is None
        back = await two.write("node-a", "2")  # a Node of that name again
        assert await one.follower.wait_for(back, DEADLINE)
        entry = one.store.get("node-a")
        assert entry is not None and entry.resource_version == back


async def _gone(replica: Replica, node: str) -> bool:
    return await replica.log.last(node) == (0, None)


async def test_the_stream_starts_at_the_clock_so_versions_never_go_below_the_in_memory_stores(
        nats_cluster: NatsCluster) -> None:
    before = int(time.time() * 1_000_000)
    async with replicas(nats_cluster) as (one, _, _):
        written = await one.write("node-a", "1")
        assert written >= before  # above any version the in-memory store issued before now
        assert await ensure_stream(one.js, LogSettings(), wall=time.time) == written  # there already: kept


async def test_a_stream_the_servers_lost_starts_again_above_every_version_served(nats_cluster: NatsCluster) -> None:
    memory = LogSettings(storage="memory")  # every server restarted: memory storage loses the messages
    async with replicas(nats_cluster, memory) as (one, two, _):
        for node in ("node-a", "node-b"):
            written = await one.write(node, "1")
        assert await two.follower.wait_for(written, DEADLINE)
        watcher: Watcher = two.store.watch(str(written))
        for server in nats_cluster.servers:
            await nats_cluster.stop_server(server)
        for server in nats_cluster.servers:
            await nats_cluster.start_server(server)
        await nats_cluster.wait_ready()
        await eventually_async(lambda: watcher.closed, 30.0, message="the watch ended when the stream was lost")
        assert drain(two.store.watch(str(written)))[0][:2] == ("ERROR", "410 Expired")

        async def reported_again() -> bool:
            # Two replicas may both find the loss, and the second restart erases a report written
            # after the first (its node reports again within seconds): report until one stays.
            again = await two.write("node-a", "2")
            assert again > written
            for replica in (one, two):
                assert await replica.follower.wait_for(again, DEADLINE)
            return all((entry := replica.store.get("node-a")) is not None and entry.figures.cpu_millis == 2000
                       and entry.resource_version > written for replica in (one, two))

        await eventually_async(reported_again, 30.0, message="node-a's report after the loss on every replica")
        for replica in (one, two):
            assert replica.store.get("node-b") is not None  # kept until node-b reports again
        info = await one.js.stream_info(STREAM)
        assert info.state.last_seq > written


async def test_a_report_taken_before_its_replica_finds_the_stream_lost_is_answered_above_every_version(
        nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster, LogSettings(storage="memory")) as (one, _, _):
        written = await one.write("node-a", "1")
        assert await one.follower.wait_for(written, DEADLINE)
        await one.stop_following()  # its copy has not read the loss when the next report comes
        for server in nats_cluster.servers:
            await nats_cluster.stop_server(server)
        for server in nats_cluster.servers:
            await nats_cluster.start_server(server)
        await nats_cluster.wait_ready()

        async def taken() -> Entry | None:
            with contextlib.suppress(Exception):  # until the restarted servers elect the stream's leader
                return await one.ingest.put(report("node-b", "2", format_time(time.time())), {})
            return None

        entry = await eventually_async(taken, 30.0, message="a report taken after the servers restarted")
        assert entry.resource_version > written
        info = await one.js.stream_info(STREAM)
        assert info.state.last_seq >= entry.resource_version  # written there, not only answered so


async def test_replicas_that_restarted_with_every_server_start_above_every_version_served(
        nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster, LogSettings(storage="memory")) as (one, _, _):
        written = await one.write("node-a", "1")
    for server in nats_cluster.servers:  # the servers keep the memory stream's settings, not its messages
        await nats_cluster.stop_server(server)
    for server in nats_cluster.servers:
        await nats_cluster.start_server(server)
    await nats_cluster.wait_ready()
    later = time.time() + EMPTY_MARGIN + 1  # the replicas start again after the margin a new stream gets
    client = await connect(NatsOptions(servers=(nats_cluster.urls[0],)), name="restarted")
    try:
        js = client.jetstream(timeout=2.0)
        await eventually_async(lambda: _ensured(js, lambda: later), 30.0, message="the stream there again")
        again = await NodeMetricLog(js, timeout=2.0).append("node-a", log_value(report("node-a", "2"), {}, created=""),
                                                            last=0)
    finally:
        await client.close()
    assert again >= int(later * 1_000_000) > written


async def _ensured(js: JetStreamContext, wall: Callable[[], float]) -> bool:
    with contextlib.suppress(Exception):  # until the restarted servers elect the stream's leader
        await ensure_stream(js, LogSettings(storage="memory"), wall=wall)
        return True
    return False


@pytest.mark.parametrize("header", [None, "", "1 2 3", "a b c d", "1 2 3 4 5"])
def test_figures_a_write_carries_are_read_back_or_left_to_the_report(header: str | None) -> None:
    figures = report("node-a", "3").figures
    assert decode_figures(encode_figures(figures)) == figures
    assert decode_figures(header) is None
