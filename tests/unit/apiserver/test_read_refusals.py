"""Reads over HTTP never move the store's resourceVersion, and every malformed parameter is a Status.

Regression tests of issue 17: a watch up to 300 s ahead used to raise the store's counter (ten of
them moved it 2,900 s ahead, and after a failover the watches of its clients got 504), and a list
with a malformed resourceVersion, a negative limit or a continue token answered 200 with every item.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import ApiOptions, NodeMetricGroup
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import COLLECTION_PATH, validate_report
from tests.unit.apiserver.test_nodemetric_reads import NOW, Leader, allowed, next_event, report, review

SECOND = 1_000_000


class Wall:
    """A wall clock that stands still, or, once `tick()` is called, runs with the loop's clock."""

    def __init__(self) -> None:
        self.now = NOW
        self._ticking_from: float | None = None

    def tick(self) -> None:
        self._ticking_from = asyncio.get_running_loop().time()

    def __call__(self) -> float:
        if self._ticking_from is None:
            return self.now
        return self.now + asyncio.get_running_loop().time() - self._ticking_from


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def store(wall: Wall) -> NodeMetricStore:
    store = NodeMetricStore(clock_wall=wall, clock_monotonic=lambda: 100.0)
    store.put(validate_report(report("node-a"), "node-a"), {})
    return store


@pytest.fixture
async def client(store: NodeMetricStore, wall: Wall) -> AsyncIterator[TestClient[Any, Any]]:
    authorizer = DelegatingAuthorizer(allowed)
    metrics, leader = ServerMetrics(), Leader()
    group = NodeMetricGroup(store, authorizer, leader, known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, options=ApiOptions(bookmark_interval=60), wall=wall)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=leader,
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application()), headers={"Authorization": "Bearer token"}) as client:
        yield client


async def test_watches_ahead_of_the_clock_are_too_large_and_move_nothing(
        client: TestClient[Any, Any], store: NodeMetricStore) -> None:
    before = store.resource_version
    for step in range(1, 11):  # each 290 s beyond the last: once, this walked the counter forward
        ahead = before + step * 290 * SECOND
        async with client.get(COLLECTION_PATH, params={"watch": "1", "resourceVersion": str(ahead)}) as response:
            status = await response.json()
            assert (response.status, response.headers["Retry-After"]) == (504, "1")
        assert status["kind"] == "Status" and status["reason"] == "Timeout"
        assert status["message"] == f"Timeout: Too large resource version: {ahead}, current: {before}"
        assert status["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}]
    assert store.resource_version == before


@pytest.mark.parametrize("path", [COLLECTION_PATH, f"{COLLECTION_PATH}/node-a"])
async def test_gets_and_lists_ahead_of_the_clock_are_too_large(
        client: TestClient[Any, Any], store: NodeMetricStore, path: str) -> None:
    before = store.resource_version
    async with client.get(path, params={"resourceVersion": str(before + 60 * SECOND)}) as response:
        assert (response.status, (await response.json())["reason"]) == (504, "Timeout")
    assert store.resource_version == before


async def test_after_a_failover_a_watch_resumes_from_what_the_previous_leader_served(
        client: TestClient[Any, Any], store: NodeMetricStore, wall: Wall) -> None:
    # The previous leader served a version this store never got (its last write did not
    # replicate); 15 s later, this replica leads.
    before = store.resource_version
    seen_on_previous_leader = before + 5 * SECOND
    wall.now += 15
    params = {"watch": "1", "resourceVersion": str(seen_on_previous_leader)}
    async with client.get(COLLECTION_PATH, params=params) as response:
        assert response.status == 200
        listed = await client.get(COLLECTION_PATH)
        assert (await listed.json())["metadata"]["resourceVersion"] == str(before)  # the read moved nothing
        store.put(validate_report(report("node-a", cpu="2"), "node-a"), {})
        event = await next_event(response)
    assert event["type"] == "MODIFIED"
    assert int(event["object"]["metadata"]["resourceVersion"]) > seen_on_previous_leader


async def test_a_list_at_a_version_the_clock_has_passed_is_served(
        client: TestClient[Any, Any], store: NodeMetricStore) -> None:
    before = store.resource_version
    async with client.get(COLLECTION_PATH, params={"resourceVersion": str(int(NOW * SECOND))}) as response:
        assert response.status == 200
        assert (await response.json())["metadata"]["resourceVersion"] == str(before)


@pytest.mark.parametrize(("params", "message"), [
    ({"resourceVersion": "abc"}, 'resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": '
                                 "invalid syntax"),
    ({"resourceVersion": "-1"}, 'resourceVersion: Invalid value: "-1": strconv.ParseUint: parsing "-1": '
                                "invalid syntax"),
    ({"limit": "abc"}, 'strconv.ParseInt: parsing "abc": invalid syntax'),
    ({"limit": "-1"}, "limit: Invalid value: -1: must be greater than or equal to 0"),
    ({"continue": "garbage"}, 'invalid continue token: "garbage": this server returns every list whole and '
                              "never issues a continue token"),
    ({"timeoutSeconds": "1e3"}, 'strconv.ParseInt: parsing "1e3": invalid syntax'),
    ({"labelSelector": "a in (b"}, None),
    ({"fieldSelector": "spec.nodeName=x"}, "field label not supported: spec.nodeName"),
    ({"fieldSelector": "metadata.name"}, None),
])
async def test_a_list_with_a_malformed_parameter_is_400_not_the_whole_list(
        client: TestClient[Any, Any], params: dict[str, str], message: str | None) -> None:
    async with client.get(COLLECTION_PATH, params=params) as response:
        status = await response.json()
    assert (response.status, status["kind"], status["reason"]) == (400, "Status", "BadRequest"), status
    if message is not None:
        assert status["message"] == message


async def test_a_get_with_a_malformed_resource_version_is_400(client: TestClient[Any, Any]) -> None:
    async with client.get(f"{COLLECTION_PATH}/node-a", params={"resourceVersion": "1.5"}) as response:
        assert (response.status, (await response.json())["reason"]) == (400, "BadRequest")


async def test_a_bad_resource_version_match_is_refused_with_kube_apiservers_422(
        client: TestClient[Any, Any]) -> None:
    async with client.get(COLLECTION_PATH, params={"resourceVersion": "1", "resourceVersionMatch": "Newest"}) as got:
        status = await got.json()
    assert (got.status, status["reason"]) == (422, "Invalid")
    assert status["details"]["causes"][0]["field"] == "resourceVersionMatch"


async def test_a_positive_limit_is_ignored_and_the_list_is_whole_without_a_continue_token(
        client: TestClient[Any, Any], store: NodeMetricStore) -> None:
    store.put(validate_report(report("node-b"), "node-b"), {})
    async with client.get(COLLECTION_PATH, params={"limit": "1"}) as response:
        listed = orjson.loads(await response.read())
    assert [item["metadata"]["name"] for item in listed["items"]] == ["node-a", "node-b"]
    assert "continue" not in listed["metadata"]


async def test_a_watch_waits_briefly_for_a_version_the_clock_is_about_to_reach(
        client: TestClient[Any, Any], store: NodeMetricStore, wall: Wall) -> None:
    # A clock a little behind the previous leader's: as the watch cache waits for its cache, the
    # watch waits (up to 3 s) for the clock to pass the version, and starts from there.
    ahead = int(NOW * SECOND) + SECOND // 10
    loop = asyncio.get_running_loop()
    started = loop.time()
    wall.tick()
    before = store.resource_version
    params = {"watch": "1", "resourceVersion": str(ahead), "timeoutSeconds": "1"}
    async with client.get(COLLECTION_PATH, params=params) as response:
        assert response.status == 200
    assert loop.time() - started >= 0.1 and store.resource_version == before
