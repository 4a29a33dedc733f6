"""What a report's PUT answers: the stored object, or only its metadata when the writer asks; a
Warning header when the updateTime was stored as the receipt time (issue 34)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.served_apigroups import Caller
from colocation.apimachinery.tables import metadata_only_accept
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import NodeMetricGroup, update_time_warning, warning_header
from colocation.kube.lease_record import REPLICA_HEADER
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import MAX_UPDATE_TIME_AHEAD
from tests.clock import FakeClock
from tests.unit.nodemetrics.test_nodemetric_store import T0

BASE = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
AGENT = Caller(username="system:serviceaccount:colocation-system:colocation-agent",
               extra={"authentication.kubernetes.io/node-name": ("node-1",)})
NODES = {"node-1": {"pool": "batch"}}


class Leader:
    is_leader = True
    leader_identity = "operator-0"
    leader_endpoint = ""


async def review(token: str) -> TokenReviewResult:
    return TokenReviewResult(token == "agent", AGENT if token == "agent" else None)


async def may(spec: SubjectAccessSpec) -> bool:
    return spec.user == AGENT.username


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0, wall=T0)  # at T0, the reports' updateTime


@pytest.fixture
async def client(clock: FakeClock) -> AsyncIterator[TestClient[Any, Any]]:
    metrics = ServerMetrics()
    authorizer = DelegatingAuthorizer(may)
    group = NodeMetricGroup(NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic), authorizer,
                            Leader(), known_node=NODES.__contains__, node_labels=NODES.get, metrics=metrics,
                            wall=clock.wall)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=Leader(),
                              metrics=metrics, groups=[group])
    test_client: TestClient[Any, Any] = TestClient(TestServer(api.application()))
    await test_client.start_server()
    yield test_client
    await test_client.close()


def report(cpu: str, update_time: str = "2026-11-22T10:00:00Z") -> bytes:
    return orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                         "metadata": {"name": "node-1"},
                         "status": {"updateTime": update_time,
                                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}}})


async def put_answer(client: TestClient[Any, Any], cpu: str, accept: str,
                     update_time: str = "2026-11-22T10:00:00Z") -> tuple[int, Any, str | None]:
    """The status, the body and the Warning header of a report's PUT."""
    async with client.put(f"{BASE}/node-1/status", data=report(cpu, update_time),
                          headers={"Authorization": "Bearer agent", "Content-Type": "application/json",
                                   "Accept": accept}) as response:
        return response.status, await response.json(), response.headers.get("Warning")


async def put(client: TestClient[Any, Any], cpu: str, accept: str) -> tuple[int, Any]:
    status, answer, _ = await put_answer(client, cpu, accept)
    return status, answer


async def stored(client: TestClient[Any, Any]) -> Any:
    async with client.get(f"{BASE}/node-1", headers={"Authorization": "Bearer agent"}) as response:
        return await response.json()


async def test_a_report_is_answered_with_the_stored_object(client: TestClient[Any, Any]) -> None:
    status, answer = await put(client, "2", "application/json")
    assert status == 200 and answer == await stored(client)
    assert answer["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "2"


async def test_a_writer_that_asks_for_metadata_only_gets_just_that(client: TestClient[Any, Any]) -> None:
    status, answer = await put(client, "3", metadata_only_accept())
    whole = await stored(client)
    assert status == 200
    assert answer == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": whole["metadata"]}
    assert answer["metadata"]["labels"] == {"pool": "batch"}
    assert whole["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "3"  # stored all the same


async def test_an_answer_nobody_can_serve_is_406_and_stores_nothing(client: TestClient[Any, Any]) -> None:
    assert (await put(client, "1", "application/json"))[0] == 200
    status, answer = await put(client, "5", "application/json;as=Table;g=meta.k8s.io;v=v1")
    assert status == 406 and answer["kind"] == "Status" and answer["reason"] == "NotAcceptable"
    assert (await stored(client))["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "1"


# ---- an updateTime from the future (issue 34) -------------------------------------------------------

FAR_AHEAD = 253_402_300_799 - int(T0)  # 9999-12-31T23:59:59Z, seen at T0


async def test_an_update_time_far_ahead_is_served_as_the_receipt_time_with_a_warning(
        client: TestClient[Any, Any], clock: FakeClock) -> None:
    status, answer, warning = await put_answer(client, "2", "application/json", "9999-12-31T23:59:59Z")
    assert status == 200 and answer == await stored(client)
    assert answer["status"]["updateTime"] == "2026-11-22T10:00:00Z"  # T0, when the report arrived
    assert warning == (f'299 - "status.updateTime was {FAR_AHEAD} s ahead of the server\'s clock (more than 300 s): '
                       'stored as the time the report was received, 2026-11-22T10:00:00Z"')
    async with client.get(BASE, headers={"Authorization": "Bearer agent"}) as response:
        [item] = (await response.json())["items"]
    assert item["status"]["updateTime"] == "2026-11-22T10:00:00Z"
    # The metadata-only answer the agents ask for carries the warning too.
    clock.wall_now += 10
    status, answer, warning = await put_answer(client, "3", metadata_only_accept(), "9999-12-31T23:59:59Z")
    assert status == 200 and answer["kind"] == "PartialObjectMetadata"
    assert warning is not None and warning.startswith(f'299 - "status.updateTime was {FAR_AHEAD - 10} s ahead')
    assert (await stored(client))["status"]["updateTime"] == "2026-11-22T10:00:10Z"


@pytest.mark.parametrize(("sent", "served"), [
    ("2026-11-22T10:05:00Z", "2026-11-22T10:05:00Z"),  # T0 + 300 s, just under the bound: as sent
    ("2026-11-22T10:05:01Z", "2026-11-22T10:00:00Z"),  # T0 + 301 s, just over: the receipt time
])
async def test_the_bound_is_judged_on_the_servers_clock(client: TestClient[Any, Any], sent: str, served: str) -> None:
    assert MAX_UPDATE_TIME_AHEAD == 300
    status, answer, warning = await put_answer(client, "2", "application/json", sent)
    assert status == 200 and answer["status"]["updateTime"] == served
    assert (await stored(client))["status"]["updateTime"] == served
    assert (warning is None) == (served == sent)


def test_the_warning_is_written_as_kube_apiserver_writes_one() -> None:
    assert update_time_warning(3601, T0) == (
        '299 - "status.updateTime was 3601 s ahead of the server\'s clock (more than 300 s): '
        'stored as the time the report was received, 2026-11-22T10:00:00Z"')
    # As k8s.io/apimachinery's util/net.NewWarningHeader quotes the text: only " and \ are escaped.
    assert warning_header('a "b" \\ c') == '299 - "a \\"b\\" \\\\ c"'


# ---- a new leader evaluates before it takes the agents' writes in --------------------------------

async def test_a_report_waits_for_the_hold_and_a_replica_that_lost_the_lease_meanwhile_refuses_it(
        clock: FakeClock) -> None:
    leader = Leader()
    metrics = ServerMetrics()
    authorizer = DelegatingAuthorizer(may)
    store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic)
    group = NodeMetricGroup(store, authorizer, leader, known_node=NODES.__contains__, node_labels=NODES.get,
                            metrics=metrics, wall=clock.wall)
    arrived, released = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        arrived.set()
        await released.wait()

    group.first_evaluation_hold = hold
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=leader,
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application())) as client:
        answer = asyncio.create_task(put(client, "2", "application/json"))
        await asyncio.wait_for(arrived.wait(), 10)
        assert store.node_count == 0 and not answer.done()  # held: nothing stored yet
        released.set()
        assert (await answer)[0] == 200 and store.node_count == 1
        entry = store.get("node-1")
        assert entry is not None
        version = entry.resource_version
        arrived.clear()
        released.clear()
        refused = asyncio.create_task(put(client, "3", "application/json"))
        await asyncio.wait_for(arrived.wait(), 10)
        leader.is_leader = False  # the Lease lost while the write waited
        released.set()
        status, body = await refused
        assert status == 503 and body["kind"] == "Status"
        entry = store.get("node-1")
        assert entry is not None and entry.resource_version == version  # nothing stored


async def test_a_standbys_feed_waits_for_the_hold_and_other_reads_do_not(clock: FakeClock) -> None:
    metrics = ServerMetrics()
    authorizer = DelegatingAuthorizer(may)
    group = NodeMetricGroup(NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic), authorizer,
                            Leader(), known_node=NODES.__contains__, node_labels=NODES.get, metrics=metrics,
                            wall=clock.wall)
    arrived, released = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        arrived.set()
        await released.wait()

    group.first_evaluation_hold = hold
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=Leader(),
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application())) as client:
        async def list_status(headers: dict[str, str]) -> int:
            async with client.get(BASE, headers={"Authorization": "Bearer agent", **headers}) as response:
                return response.status

        assert await list_status({}) == 200 and not arrived.is_set()  # a reader's list: served at once
        feed = asyncio.create_task(list_status({REPLICA_HEADER: "operator-1 https://10.0.0.2:6443"}))
        await asyncio.wait_for(arrived.wait(), 10)
        assert not feed.done()
        released.set()
        assert await feed == 200
