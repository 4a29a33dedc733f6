"""A standby's SampleFollower against leaders' real API servers over HTTPS, in this process.

Each replica is test_custom_metrics_api's Harness (its custom metrics API behind its API server)
served with TLS from a CA of its own, as the leader Lease publishes it; the follower applies the
feed to the standby replica's store, which that replica then answers reads from. Waits are on
conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from colocation.apimachinery import certificates
from colocation.apimachinery.watch_stream import WatchServing
from colocation.custommetrics.sample_batches import validate_batch
from colocation.custommetrics.sample_feed import FEED_PATH, SampleFeed
from colocation.custommetrics.sample_follower import SampleFollower
from colocation.custommetrics.series_metrics import StoreMetrics
from colocation.custommetrics.series_store import SeriesStore
from colocation.kube.backoff import Backoff
from colocation.kube.leader_connection import LeaderAddress
from tests.timing import eventually_async
from tests.unit.custommetrics.test_custom_metrics_api import (
    ADMIN,
    CUSTOM,
    NOW,
    OPERATOR,
    PODS,
    VIEWER,
    WEB_REQUESTS,
    Harness,
    sample_batch,
)


class Replica:
    """A Harness served over HTTPS, with the address a leader publishes."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.harness = Harness()
        ca = certificates.new_ca(f"{identity}-ca")
        self.ca_pem = ca.cert_pem
        # The Service's name only: a follower dials the address and must not check the name.
        self.cert = certificates.issue_certificate(ca, "colocation-operator", dns_names=("colocation-operator",))
        self.server = TestServer(self.harness.api.application(), host="127.0.0.1")
        self.address: LeaderAddress | None = None

    async def start(self) -> Replica:
        await self.harness.add_pods(*PODS)
        await self.server.start_server(ssl=certificates.ssl_server_context(self.cert))
        self.address = LeaderAddress(self.identity, f"https://127.0.0.1:{self.server.port}", self.ca_pem)
        return self

    def ingest(self, body: dict[str, Any]) -> None:
        """As the samples endpoint accepts a batch (validated, stored, fed)."""
        self.harness.custom.ingest(validate_batch(orjson.dumps(body), body["node"]))

    @property
    def feed(self) -> SampleFeed:
        return self.harness.custom.feed

    async def get(self, path: str, token: str = ADMIN, **params: str) -> tuple[int, Any]:
        assert self.address is not None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, session.get(
                self.address.endpoint + path, params=params, ssl=self.address.ssl_context,
                headers={"Authorization": f"Bearer {token}"}) as response:
            return response.status, orjson.loads(await response.read())


@pytest.fixture
async def replicas() -> AsyncIterator[Callable[[str], Any]]:
    started: list[Replica] = []

    async def start(identity: str) -> Replica:
        replica = await Replica(identity).start()
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.server.close()


def contents(store: SeriesStore) -> dict[Any, list[tuple[float, float]]]:
    return {series.key: list(zip(series.timestamps, series.values, strict=True)) for series in store}


REGISTRIES: dict[int, CollectorRegistry] = {}


def follower_into(store: SeriesStore, leader: Callable[[], LeaderAddress | None],
                  token: str = OPERATOR) -> SampleFollower:
    registry = CollectorRegistry()
    follower = SampleFollower(store, leader, lambda: token, metrics=StoreMetrics(registry, store.__len__),
                              poll_interval=0.02, backoff=Backoff(initial=0.01, maximum=0.05, jitter=0.5))
    REGISTRIES[id(follower)] = registry
    return follower


def counted(follower: SampleFollower, name: str, **labels: str) -> float:
    return REGISTRIES[id(follower)].get_sample_value(f"colocation_custom_metrics_replica_{name}_total", labels) or 0.0


@pytest.fixture
async def running() -> AsyncIterator[Callable[[SampleFollower], None]]:
    tasks: list[asyncio.Task[None]] = []
    yield lambda follower: tasks.append(asyncio.create_task(follower.run()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def later(second: float, value: float) -> dict[str, Any]:
    return sample_batch("node-1", ("http_requests", {"method": "GET"}, ("team-a", "web-2"),
                                   [(NOW + second, value)]))


async def test_a_standby_copies_the_leaders_samples_then_follows_and_answers_reads(
        replicas: Any, running: Any) -> None:
    leader, standby = await replicas("operator-0"), await replicas("operator-1")
    standby.harness.leader.is_leader = False
    leader.ingest(WEB_REQUESTS)
    follower = follower_into(standby.harness.series, lambda: leader.address)
    running(follower)
    await eventually_async(lambda: follower.synced, interval=0.01)
    assert contents(standby.harness.series) == contents(leader.harness.series) and len(standby.harness.series) == 6

    leader.ingest(later(1, 20.0))
    leader.ingest(later(2, 30.0))
    await eventually_async(lambda: follower.seq == leader.feed.seq, interval=0.01)
    assert contents(standby.harness.series) == contents(leader.harness.series)
    assert leader.feed.followers == 1 and follower.synced
    assert counted(follower, "snapshots") == 1
    # The standby answers from its copy, as the leader does.
    path = f"{CUSTOM}/namespaces/team-a/pods/*/http_requests"
    assert await standby.get(path, labelSelector="app=web") == await leader.get(path, labelSelector="app=web")
    status, listed = await standby.get(path, labelSelector="app=web")
    assert status == 200 and [i["value"] for i in listed["items"]] == ["15500m", "30"]


async def test_a_standby_that_falls_behind_starts_again_from_a_snapshot(replicas: Any, running: Any) -> None:
    leader = await replicas("operator-0")
    dropped: list[int] = []
    leader.harness.custom.feed = SampleFeed(leader.harness.series, max_bytes=4096,
                                            on_dropped=lambda: dropped.append(1))
    leader.ingest(WEB_REQUESTS)
    follower = follower_into(SeriesStore(lambda: NOW, retention_seconds=600), lambda: leader.address)
    running(follower)
    await eventually_async(lambda: follower.synced, interval=0.01)
    for second in range(60):  # at once, without letting the stream run: the feed forgets its place
        leader.ingest(later(second, float(second)))
    assert leader.feed.held_bytes <= 4096

    await eventually_async(lambda: counted(follower, "snapshots") == 2 and follower.seq == leader.feed.seq,
                           interval=0.01)
    assert contents(follower.series) == contents(leader.harness.series)
    assert dropped == [1] and counted(follower, "failures", reason="expired") == 1


async def test_another_leader_means_a_snapshot_of_its_copy(replicas: Any, running: Any) -> None:
    first, second = await replicas("operator-0"), await replicas("operator-1")
    first.ingest(WEB_REQUESTS)
    second.ingest(later(5, 42.0))
    leading: list[LeaderAddress | None] = [first.address]
    follower = follower_into(SeriesStore(lambda: NOW, retention_seconds=600), lambda: leading[0])
    running(follower)
    await eventually_async(lambda: follower.synced, interval=0.01)
    first_epoch = follower.epoch

    leading[0] = second.address
    await eventually_async(lambda: follower.synced and follower.epoch == second.feed.epoch, interval=0.01)
    assert first_epoch == first.feed.epoch != second.feed.epoch
    assert contents(follower.series) == contents(second.harness.series)
    leading[0] = None  # nobody leads: not following
    await eventually_async(lambda: not follower.synced, interval=0.01)


async def test_the_feed_is_authorized_and_served_by_the_leader_only(replicas: Any, running: Any) -> None:
    leader = await replicas("operator-0")
    status, denied = await leader.get(FEED_PATH, token=VIEWER)
    assert (status, denied["reason"]) == (403, "Forbidden")
    assert 'cannot watch resource "samplebatches" in API group "metrics.colocation.dev"' in denied["message"]
    status, bad = await leader.get(FEED_PATH, token=OPERATOR, after="ten")
    assert (status, bad["reason"]) == (400, "BadRequest")
    intruder = follower_into(SeriesStore(lambda: NOW, retention_seconds=600), lambda: leader.address, token=VIEWER)
    running(intruder)
    await eventually_async(lambda: counted(intruder, "failures", reason="http-403") >= 2, interval=0.01)
    assert not intruder.synced
    asked = {(s.user, s.verb, s.api_group, s.resource) for s in leader.harness.authorizations.asked}
    assert ("system:serviceaccount:colocation-system:colocation-operator", "watch", "metrics.colocation.dev",
            "samplebatches") in asked

    leader.harness.leader.is_leader = False
    status, refused = await leader.get(FEED_PATH, token=OPERATOR)
    assert (status, refused["reason"]) == (503, "ServiceUnavailable") and "operator-0" in refused["message"]


async def test_a_standby_that_stops_reading_is_cut_off_and_the_leader_holds_no_more_for_it(replicas: Any) -> None:
    leader = await replicas("operator-0")
    leader.harness.custom.feed = SampleFeed(leader.harness.series, max_bytes=256 * 1024)
    leader.harness.custom.feed_serving = WatchServing(bookmark_interval=5, batch=16, write_timeout=0.5)
    assert leader.address is not None
    port = int(leader.address.endpoint.rpartition(":")[2])
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the leader's writes block soon
    raw.connect(("127.0.0.1", port))
    context = ssl.create_default_context(cadata=leader.ca_pem.decode())
    context.check_hostname = False
    _, writer = await asyncio.open_connection(sock=raw, ssl=context, server_hostname="colocation-operator")
    writer.write(f"GET {FEED_PATH}?allowWatchBookmarks=true HTTP/1.1\r\nHost: leader\r\n"
                 f"Authorization: Bearer {OPERATOR}\r\n\r\n".encode())
    await writer.drain()
    await eventually_async(lambda: leader.feed.followers == 1, interval=0.01)

    labels = {f"l{index}": "v" * 1000 for index in range(30)}  # ~30 KiB a series
    deadline = time.monotonic() + 20
    second = 0
    while leader.feed.followers:  # the standby reads nothing; the leader carries on accepting
        assert time.monotonic() < deadline, "the stuck standby was never cut off"
        second += 1
        leader.ingest(sample_batch("node-1", *(("big", {**labels, "n": str(n)}, ("team-a", "web-1"),
                                                [(NOW - 300 + second * 0.01, 1.0)]) for n in range(4))))
        assert leader.feed.held_bytes <= 256 * 1024
        await asyncio.sleep(0.01)  # the pace of the agents' batches; the leader serves meanwhile
    writer.close()
