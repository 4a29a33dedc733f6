"""The standby's feed from the leader: a feed that falls silent is dropped and resumed, not trusted;
what the leader stored (an updateTime replaced by its receipt time included) is what a standby serves."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from colocation.apimachinery.served_apigroups import Caller
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.kube.informer import Transport
from colocation.kube.leader_connection import LeaderAddress
from colocation.kube.transport import https_transport
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import COLLECTION_PATH, validate_report
from colocation.nodemetrics.standby_follower import LeaderFollower
from colocation.nodemetrics.storage_metrics import StorageMetrics
from tests.unit.loopback import serve_on_loopback
from tests.unit.nodemetrics.test_report_bounds import report_body

NOW = 1_800_000_000.0


class PlainLeaderAddress(LeaderAddress):
    """The leader's address, over plain HTTP on loopback (the TLS part is not under test)."""

    def transport(self, session: aiohttp.ClientSession, token: Callable[[], str], *,
                  stream_silence: float | None = None, headers: Mapping[str, str] | None = None) -> Transport:
        return https_transport(session, lambda: self.endpoint, ssl.create_default_context, token=token,
                               stream_silence=stream_silence, headers=headers)


class FrozenLeader:
    """Answers the list, then holds every watch open without sending a byte, as a frozen process."""

    def __init__(self) -> None:
        self.watches = 0
        self.watched_again = asyncio.Event()
        self.release = asyncio.Event()

    async def nodemetrics(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "NodeMetricList", "apiVersion": "metrics.colocation.dev/v1alpha1",
                                      "metadata": {"resourceVersion": str(int(NOW * 1_000_000))}, "items": []})
        self.watches += 1
        if self.watches == 2:
            self.watched_again.set()
        response = web.StreamResponse()
        await response.prepare(request)
        await self.release.wait()
        return response


@pytest.fixture
async def frozen_leader() -> AsyncIterator[tuple[FrozenLeader, str]]:
    leader = FrozenLeader()
    app = web.Application()
    app.router.add_get(COLLECTION_PATH, leader.nodemetrics)
    try:
        async with serve_on_loopback(app) as base_url:
            yield leader, base_url
    finally:
        leader.release.set()


async def test_a_feed_silent_for_longer_than_its_limit_is_dropped_and_watched_again(
        frozen_leader: tuple[FrozenLeader, str]) -> None:
    leader, endpoint = frozen_leader
    address = PlainLeaderAddress("leader-pod_1", endpoint, b"")
    store = NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=time.monotonic)
    follower = LeaderFollower(store, lambda: address, lambda: "", metrics=StorageMetrics(CollectorRegistry()),
                              poll_interval=0.05, stream_silence=0.5)
    task = asyncio.create_task(follower.run())
    try:
        # The first watch is given up after its silence (its timeoutSeconds would be minutes)
        # and a new one opened.
        await asyncio.wait_for(leader.watched_again.wait(), timeout=20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Leading:
    is_leader = True
    leader_identity = "leader-pod_1"
    leader_endpoint = ""


async def any_token(token: str) -> TokenReviewResult:
    return TokenReviewResult(True, Caller(username="system:serviceaccount:colocation-system:colocation-operator"))


async def allowed(spec: SubjectAccessSpec) -> bool:
    return True


async def test_a_standby_serves_the_receipt_time_its_leader_stored_for_an_update_time_far_ahead() -> None:
    leader = NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=time.monotonic)
    entry = leader.put(validate_report(orjson.dumps(report_body(updateTime="9999-12-31T23:59:59Z")), "node-1"), {})
    metrics, authorizer = ServerMetrics(), DelegatingAuthorizer(allowed)
    group = NodeMetricGroup(leader, authorizer, Leading(), known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics,
                            wall=lambda: NOW)
    api = AggregatedApiServer(DelegatingAuthenticator(any_token), authorizer, lambda: None, leadership=Leading(),
                              metrics=metrics, groups=[group])
    standby = NodeMetricStore(clock_wall=lambda: NOW - 3600,
                              clock_monotonic=time.monotonic)  # a copy is the leader's object, whatever its clock
    applied = asyncio.Event()

    async def on_applied() -> None:
        applied.set()

    async with serve_on_loopback(api.application()) as endpoint:
        follower = LeaderFollower(standby, lambda: PlainLeaderAddress("leader-pod_1", endpoint, b""), lambda: "token",
                                  metrics=StorageMetrics(CollectorRegistry()), poll_interval=0.05,
                                  on_applied=on_applied)
        task = asyncio.create_task(follower.run())
        try:
            await asyncio.wait_for(applied.wait(), timeout=20)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    copy = standby.get("node-1")
    assert copy is not None and copy.body == entry.body and copy.figures == entry.figures
    assert orjson.loads(copy.body)["status"]["updateTime"] == "2027-01-15T08:00:00Z"  # the leader's receipt, NOW
