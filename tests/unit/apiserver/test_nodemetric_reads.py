"""The NodeMetric API's reads over HTTP: lists and watches as kube-apiserver reads their parameters and
serves them (apimachinery.watch_params and watch_stream), Tables included."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.served_apigroups import Caller
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import ApiOptions, NodeMetricGroup
from colocation.apiserver.replica_followers import ReplicaFollowers
from colocation.kube.lease_record import MAX_REPLICAS, REPLICA_HEADER
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import COLLECTION_PATH, ValidatedReport, validate_report
from colocation.nodemetrics.storage_interface import Entry
from tests.timing import eventually_async

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
ADMIN = Caller(username="admin", groups=("system:masters",))


class Leader:
    is_leader = True
    leader_identity = "me"
    leader_endpoint = ""


async def review(token: str) -> TokenReviewResult:
    return TokenReviewResult(True, ADMIN)


async def allowed(spec: SubjectAccessSpec) -> bool:
    return True


def report(node: str, cpu: str = "1500m") -> bytes:
    return orjson.dumps({
        "apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
        "status": {"updateTime": "2027-01-15T07:59:50Z",
                   "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "2Gi"}}}, "podsMetric": []}})


@pytest.fixture
def store() -> NodeMetricStore:
    store = NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0)
    store.put(validate_report(report("node-a"), "node-a"), {"pool": "web"})
    return store


@pytest.fixture
async def client(store: NodeMetricStore) -> AsyncIterator[TestClient[Any, Any]]:
    authorizer = DelegatingAuthorizer(allowed)
    metrics, leader = ServerMetrics(), Leader()
    group = NodeMetricGroup(store, authorizer, leader, known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, options=ApiOptions(bookmark_interval=0.05), wall=lambda: NOW)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=leader,
                              metrics=metrics, groups=[group])
    client: TestClient[Any, Any] = TestClient(TestServer(api.application()),
                                              headers={"Authorization": "Bearer token"})
    await client.start_server()
    yield client
    await client.close()


async def next_event(response: Any) -> dict[str, Any]:
    line = await asyncio.wait_for(response.content.readline(), 10)
    assert line, "the stream ended"
    event: dict[str, Any] = orjson.loads(line)
    return event


async def test_a_watch_streams_the_current_objects_then_changes_with_kube_apiserver_headers(
        client: TestClient[Any, Any], store: NodeMetricStore) -> None:
    async with client.get(COLLECTION_PATH, params={"watch": "true"}) as response:
        assert response.status == 200
        assert (response.headers["Content-Type"], response.headers["Cache-Control"]) == (
            "application/json", "no-cache, private")
        first = await next_event(response)
        store.put(validate_report(report("node-a", cpu="2"), "node-a"), {"pool": "web"})
        second = await next_event(response)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in (first, second)] == [
        ("ADDED", "node-a"), ("MODIFIED", "node-a")]


async def test_initial_events_need_no_bookmarks_and_end_unmarked_without_them(client: TestClient[Any, Any]) -> None:
    query = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "1"}
    async with client.get(COLLECTION_PATH, params=query) as response:
        assert response.status == 200
        events = [orjson.loads(line) for line in (await response.read()).splitlines()]
    assert [e["type"] for e in events] == ["ADDED"]
    async with client.get(COLLECTION_PATH, params={**query, "allowWatchBookmarks": "true"}) as response:
        added, end = await next_event(response), await next_event(response)
    assert (added["type"], end["type"]) == ("ADDED", "BOOKMARK")
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


@pytest.mark.parametrize(("params", "code", "message"), [
    ({"watch": "1", "sendInitialEvents": "true"}, 422,
     'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting '
     "resourceVersionMatch to NotOlderThan"),
    ({"sendInitialEvents": "true"}, 422,
     'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list'),
    ({"watch": "1", "timeoutSeconds": "soon"}, 400, 'strconv.ParseInt: parsing "soon": invalid syntax'),
    ({"limit": ""}, 400, 'strconv.ParseInt: parsing "": invalid syntax'),
    ({"watch": "1", "resourceVersion": "x"}, 400,
     'resourceVersion: Invalid value: "x": strconv.ParseUint: parsing "x": invalid syntax'),
])
async def test_lists_and_watches_are_refused_as_kube_apiserver_refuses_them(
        client: TestClient[Any, Any], params: dict[str, str], code: int, message: str) -> None:
    async with client.get(COLLECTION_PATH, params=params) as response:
        assert (response.status, (await response.json())["message"]) == (code, message)


async def test_a_resource_version_out_of_the_window_is_expired_in_the_stream(client: TestClient[Any, Any]) -> None:
    async with client.get(COLLECTION_PATH, params={"watch": "1", "resourceVersion": "1"}) as response:
        assert response.status == 200
        events = [orjson.loads(line) for line in (await response.read()).splitlines()]
    assert [(e["type"], e["object"]["code"], e["object"]["reason"]) for e in events] == [("ERROR", 410, "Expired")]


async def test_a_table_watch_sends_each_event_and_bookmark_as_a_table_of_one_row(
        client: TestClient[Any, Any], store: NodeMetricStore) -> None:
    async with client.get(COLLECTION_PATH, params={"watch": "1", "allowWatchBookmarks": "1"},
                          headers={"Accept": TABLE}) as response:
        added = await next_event(response)
        store.put(validate_report(report("node-a", cpu="250m"), "node-a"), {"pool": "web"})
        later: dict[str, dict[str, Any]] = {}
        while len(later) < 2:  # a bookmark may come before or after the change
            event = await next_event(response)
            later[event["type"]] = event
    modified, bookmark = later["MODIFIED"], later["BOOKMARK"]
    assert [c["name"] for c in added["object"]["columnDefinitions"]] == [
        "Name", "CPU", "Memory", "Pods", "Data Age", "Age"]
    assert added["object"]["rows"][0]["cells"][:5] == ["node-a", "1.50", "2.00Gi", 0, "10s"]
    assert added["object"]["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert (modified["type"], modified["object"]["columnDefinitions"]) == ("MODIFIED", None)
    assert modified["object"]["rows"][0]["cells"][1] == "0.25"
    assert (bookmark["type"], bookmark["object"]["kind"], bookmark["object"]["columnDefinitions"]) == (
        "BOOKMARK", "Table", None)
    assert bookmark["object"]["rows"][0]["cells"][:5] == ["", None, None, None, None]  # a bookmark has only metadata


async def test_tables_carry_the_object_as_include_object_asks(client: TestClient[Any, Any]) -> None:
    async with client.get(COLLECTION_PATH, params={"includeObject": "Object"}, headers={"Accept": TABLE}) as response:
        [row] = (await response.json())["rows"]
    assert row["object"]["kind"] == "NodeMetric" and row["object"]["status"]["updateTime"] == "2027-01-15T07:59:50Z"
    async with client.get(f"{COLLECTION_PATH}/node-a", params={"includeObject": "None"},
                          headers={"Accept": TABLE}) as response:
        table = await response.json()
    assert table["rows"][0]["object"] is None
    async with client.get(COLLECTION_PATH, params={"watch": "1", "includeObject": "All"},
                          headers={"Accept": TABLE}) as response:
        assert response.status == 400


class Standby:
    is_leader = False
    leader_identity = "operator-0_1a2b3c4d"
    leader_endpoint = ""


async def test_a_standby_serves_reads_and_sends_writes_back_with_retry_after(store: NodeMetricStore) -> None:
    authorizer = DelegatingAuthorizer(allowed)
    metrics, standby = ServerMetrics(), Standby()
    group = NodeMetricGroup(store, authorizer, standby, known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, options=ApiOptions(bookmark_interval=0.05), wall=lambda: NOW)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=standby,
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application()), headers={"Authorization": "Bearer token"}) as client:
        listed = await client.get(COLLECTION_PATH)
        assert listed.status == 200
        assert [item["metadata"]["name"] for item in (await listed.json())["items"]] == ["node-a"]
        written = await client.put(f"{COLLECTION_PATH}/node-a/status", data=report("node-a", cpu="2"))
        answer = await written.json()
        assert written.status == 503 and written.headers["Retry-After"] == "1"
        assert answer["reason"] == "ServiceUnavailable" and "operator-0_1a2b3c4d" in answer["message"]
        assert answer["details"] == {"retryAfterSeconds": 1}  # where the leader serves is not known yet
        standby.leader_endpoint = "https://10.0.0.7:8443"
        named = await (await client.put(f"{COLLECTION_PATH}/node-a/status", data=report("node-a", cpu="2"))).json()
        # An agent that dialed the standby goes straight to the leader the Status names.
        assert named["details"] == {"retryAfterSeconds": 1, "causes": [
            {"reason": "Leader", "field": "operator-0_1a2b3c4d", "message": "https://10.0.0.7:8443"}]}
    entry = store.get("node-a")
    assert entry is not None and b'"cpu":"1500m"' in entry.body  # nothing written


class Rejoining:
    """A leader that lost its Lease to an API outage: it names itself until it renews it."""
    is_leader = False
    leader_identity = "operator-0_1a2b3c4d"
    leader_endpoint = "https://10.0.0.7:8443"


async def test_a_leader_waiting_to_renew_holds_writes_then_asks_for_them_again_at_once(
        store: NodeMetricStore, monkeypatch: pytest.MonkeyPatch) -> None:
    authorizer = DelegatingAuthorizer(allowed)
    metrics, leadership, renewed = ServerMetrics(), Rejoining(), asyncio.Event()
    holding = 0

    async def hold() -> bool | None:
        nonlocal holding
        holding += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(renewed.wait(), 0.2)
        return leadership.is_leader

    group = NodeMetricGroup(store, authorizer, leadership, known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, options=ApiOptions(bookmark_interval=0.05), wall=lambda: NOW)
    group.rejoin_hold = hold
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=leadership,
                              metrics=metrics, groups=[group])
    names_itself = [{"reason": "Leader", "field": "operator-0_1a2b3c4d", "message": "https://10.0.0.7:8443"}]
    path = f"{COLLECTION_PATH}/node-a/status"
    async with TestClient(TestServer(api.application()), headers={"Authorization": "Bearer token"}) as client:
        # Still waiting when the hold ends: the agent asks again at once, and is held again.
        waited = await client.put(path, data=report("node-a", cpu="2"))
        answer = await waited.json()
        assert waited.status == 503 and waited.headers["Retry-After"] == "0" and holding == 1
        assert "does not lead now" in answer["message"]
        assert answer["details"] == {"retryAfterSeconds": 0, "causes": names_itself}
        # It leads again while holding: every held write is asked for again, with current figures.
        held = [asyncio.create_task(client.put(path, data=report("node-a", cpu="2"))) for _ in range(3)]
        await eventually_async(lambda: holding == 4)
        leadership.is_leader = True
        renewed.set()
        for response in await asyncio.gather(*held):
            answer = await response.json()
            assert response.status == 503 and answer["details"]["retryAfterSeconds"] == 0
            assert answer["message"] == "this replica leads again: send the write again, with current figures"
        # More writes than it holds at once are refused at once, as a standby refuses them.
        leadership.is_leader = False
        renewed.clear()
        monkeypatch.setattr("colocation.apiserver.nodemetric_routes.MAX_HELD_WRITES", 0)
        refused = await client.put(path, data=report("node-a", cpu="2"))
        assert refused.headers["Retry-After"] == "1" and holding == 4
        assert (await refused.json())["details"] == {"retryAfterSeconds": 1, "causes": names_itself}
    entry = store.get("node-a")
    assert entry is not None and b'"cpu":"1500m"' in entry.body  # nothing written


class Upload:
    """An agent's other write that only the leader takes (an eviction request)."""
    subresource = "samplebatches"
    any_replica = False
    rejected = ServerMetrics().reports_rejected

    def validate(self, raw: bytes, node: str) -> bytes:
        return raw

    def accept(self, validated: bytes) -> Any:
        return {"kind": "Status", "status": "Success"}


async def test_with_a_store_every_replica_writes_a_standby_takes_reports_and_serves_its_copy_stale_or_not(
        store: NodeMetricStore) -> None:
    authorizer = DelegatingAuthorizer(allowed)
    metrics, standby, written = ServerMetrics(), Standby(), list[tuple[str, dict[str, str]]]()

    async def shared(report: ValidatedReport, labels: Mapping[str, str]) -> Entry:
        written.append((report.name, dict(labels)))
        return store.put(report, labels)

    group = NodeMetricGroup(store, authorizer, standby, known_node=lambda node: True,
                            node_labels=lambda node: {"pool": "web"}, metrics=metrics,
                            options=ApiOptions(bookmark_interval=0.05), wall=lambda: NOW, uploads=[Upload()],
                            shared_writes=shared, stale_warning=lambda: stale[0])
    stale: list[str | None] = [None]
    agent = Caller(username="system:serviceaccount:colocation-system:colocation-agent",
                   extra={"authentication.kubernetes.io/node-name": ("node-a",)})

    async def agent_review(token: str) -> TokenReviewResult:
        return TokenReviewResult(True, agent)

    api = AggregatedApiServer(DelegatingAuthenticator(agent_review), authorizer, lambda: None, leadership=standby,
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application()), headers={"Authorization": "Bearer token"}) as client:
        taken = await client.put(f"{COLLECTION_PATH}/node-a/status", data=report("node-a", cpu="2"),
                                 headers={"Content-Type": "application/json"})
        assert taken.status == 200 and written == [("node-a", {"pool": "web"})]
        answer = await taken.json()
        assert answer["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "2"
        refused = await client.put(f"{COLLECTION_PATH}/node-a/samplebatches", data=b"{}")
        assert refused.status == 503 and "does not lead now" in (await refused.json())["message"]
        # Cut off from the shared store, a replica still serves its copy, and says it may be stale.
        for path in (f"{COLLECTION_PATH}/node-a", COLLECTION_PATH):
            assert "Warning" not in (await client.get(path)).headers
        stale[0] = "this replica is not connected to NATS: its NodeMetrics may be stale"
        for path in (f"{COLLECTION_PATH}/node-a", COLLECTION_PATH):
            served = await client.get(path)
            assert served.status == 200
            assert served.headers["Warning"] == '299 - "this replica is not connected to NATS: its NodeMetrics ' \
                                                'may be stale"'


async def test_the_leader_publishes_the_replicas_whose_feeds_are_open_and_only_theirs(store: NodeMetricStore) -> None:
    async def replicas_only(spec: SubjectAccessSpec) -> bool:  # only replicas may follow the sample feed
        return spec.resource != "samplebatches" or spec.user == "system:serviceaccount:ns:operator"

    async def two_users(token: str) -> TokenReviewResult:
        name = "system:serviceaccount:ns:operator" if token == "replica" else "reader"
        return TokenReviewResult(True, Caller(username=name, groups=("system:authenticated",)))

    authorizer, metrics, leader, followers = DelegatingAuthorizer(replicas_only), ServerMetrics(), Leader(), \
        ReplicaFollowers()
    group = NodeMetricGroup(store, authorizer, leader, known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, options=ApiOptions(bookmark_interval=0.05), wall=lambda: NOW,
                            followers=followers)
    api = AggregatedApiServer(DelegatingAuthenticator(two_users), authorizer, lambda: None, leadership=leader,
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application())) as client:
        watch = {"watch": "1", "allowWatchBookmarks": "true"}
        announce = {REPLICA_HEADER: "operator-1_b https://10.0.0.8:8443"}
        async with client.get(COLLECTION_PATH, params=watch,
                              headers={"Authorization": "Bearer reader", **announce}) as response:
            await next_event(response)
            assert followers.endpoints() == {}  # a reader's word is not taken
        async with client.get(COLLECTION_PATH, params=watch,
                              headers={"Authorization": "Bearer replica", **announce}) as response:
            await next_event(response)
            assert followers.endpoints() == {"operator-1_b": "https://10.0.0.8:8443"}
        await eventually_async(lambda: followers.endpoints() == {}, timeout=5, interval=0.01)  # gone with its feed


def test_replica_followers_are_counted_per_open_feed_bounded_and_well_formed() -> None:
    followers = ReplicaFollowers()
    with followers.following("op-1 https://10.0.0.8:8443"), followers.following("op-1 https://10.0.0.8:8443/"):
        with followers.following("op-2 http://10.0.0.9:80"), followers.following("no-endpoint"):
            assert followers.endpoints() == {"op-1": "https://10.0.0.8:8443"}  # plain HTTP and nonsense ignored
        assert followers.endpoints() == {"op-1": "https://10.0.0.8:8443"}
    assert followers.endpoints() == {}
    with contextlib.ExitStack() as stack:
        for i in range(MAX_REPLICAS + 3):
            stack.enter_context(followers.following(f"op-{i} https://10.0.0.{i}:8443"))
        assert len(followers.endpoints()) == MAX_REPLICAS


async def test_reads_that_want_the_most_recent_data_pass_the_read_barrier(store: NodeMetricStore) -> None:
    passed: list[int] = []

    async def barrier(resource_version: int) -> None:
        passed.append(resource_version)

    authorizer = DelegatingAuthorizer(allowed)
    metrics, standby = ServerMetrics(), Standby()
    group = NodeMetricGroup(store, authorizer, standby, known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, options=ApiOptions(bookmark_interval=0.05), wall=lambda: NOW,
                            read_barrier=barrier)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=standby,
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application()), headers={"Authorization": "Bearer token"}) as client:
        for path, most_recent in ((COLLECTION_PATH, True), (f"{COLLECTION_PATH}/node-a", True),
                                  (f"{COLLECTION_PATH}?resourceVersion=0", False)):
            before = len(passed)
            assert (await client.get(path)).status == 200
            assert passed[before:] == ([0] if most_recent else []), path
        # A version ahead of the copy waits at the barrier for it; one the copy has does not.
        ahead, held = store.resource_version + 5, store.resource_version
        assert (await client.get(f"{COLLECTION_PATH}?resourceVersion={ahead}")).status == 200
        assert (await client.get(f"{COLLECTION_PATH}/node-a?resourceVersion={held}")).status == 200
        assert passed[-1:] == [ahead] and len(passed) == 3


async def test_a_replica_closing_its_watchers_ends_every_open_watch_at_once(
        client: TestClient[Any, Any], store: NodeMetricStore) -> None:
    # What a replica does when it loses leadership or stops: its clients resume on another replica
    # instead of waiting out a watch of 30 to 60 minutes.
    async with client.get(COLLECTION_PATH, params={"watch": "1", "allowWatchBookmarks": "true"}) as response:
        assert (await next_event(response))["type"] == "ADDED"
        store.close_watchers()
        rest = await asyncio.wait_for(response.read(), 5)
    assert {orjson.loads(line)["type"] for line in rest.splitlines()} <= {"BOOKMARK"}
