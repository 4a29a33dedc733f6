"""Property-based fuzz of the NodeMetric read path: get, list and watch with any query parameters.

Against the in-process aiohttp app (the leader, and a standby whose copy does not advance):
never a 5xx other than kube-apiserver's 504 "Too large resource version", every refusal a Status
whose code is the HTTP status, and no read moves the store's resourceVersion or its contents.

The budget is small by default; COLOCATION_FUZZ_EXAMPLES raises it for a longer run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import ApiOptions, NodeMetricGroup
from colocation.nodemetrics.consistent_reads import ConsistentReadMetrics, ConsistentReads
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import COLLECTION_PATH, validate_report
from tests.unit.apiserver.test_nodemetric_reads import NOW, TABLE, Leader, allowed, report, review

EXAMPLES = int(os.environ.get("COLOCATION_FUZZ_EXAMPLES", "150"))
NOW_RV = int(NOW * 1_000_000)
PARAMETERS = ("watch", "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "allowWatchBookmarks",
              "timeoutSeconds", "limit", "continue", "labelSelector", "fieldSelector", "includeObject", "pretty")

_printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
_any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
_numbers = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.integers(-3_000_000, 400_000_000).map(lambda offset: str(NOW_RV + offset)),  # about the store's
    st.sampled_from(["", "0", "+1", "-0", "1.5", "1e3", "0x10", " 1", "٣", "18446744073709551616"]),
)
_values = st.one_of(
    _numbers, _any_text,
    st.sampled_from(["true", "false", "1", "True", "NotOlderThan", "Exact", "Metadata", "Object", "None",
                     "pool=web", "pool in (web,db)", "!pool", "metadata.name=node-a", "metadata.name!=node-a",
                     "spec.nodeName=x", "a in (b"]),
)
_query = st.builds(
    lambda watch, version, others: [*watch, *version, *others],
    st.sampled_from([[], [("watch", "1")], [("watch", "true"), ("allowWatchBookmarks", "true")]]),
    st.one_of(st.just([]), _numbers.map(lambda number: [("resourceVersion", number)])),
    st.lists(st.tuples(st.one_of(st.sampled_from(PARAMETERS), _printable), _values), max_size=5),
)
_paths = st.one_of(
    st.just(COLLECTION_PATH),
    st.sampled_from(["node-a", "node-b", "node-a/status"]).map(lambda name: f"{COLLECTION_PATH}/{name}"),
    st.text(st.characters(whitelist_categories=("Ll", "Nd"), whitelist_characters="-._~"), min_size=1,
            max_size=20).map(lambda name: f"{COLLECTION_PATH}/{name}"),
)
_accept = st.one_of(st.none(), st.none(), st.sampled_from([
    "application/json", TABLE, "application/json;as=Table;v=v1beta1;g=meta.k8s.io", "text/html", "*/*"]), _printable)


class Standby:
    is_leader = False
    leader_identity = "operator-0_1a2b3c4d"
    leader_endpoint = ""


async def no_leader() -> int | None:
    return None  # a failover: nobody to ask, the copy is served as it is


@pytest.fixture(params=["leader", "standby"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[TestClient[Any, Any], NodeMetricStore]]:
    store = NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0)
    store.put(validate_report(report("node-a"), "node-a"), {"pool": "web"})
    store.put(validate_report(report("node-b"), "node-b"), {"pool": "db"})
    authorizer, metrics = DelegatingAuthorizer(allowed), ServerMetrics()
    leadership = Leader() if request.param == "leader" else Standby()
    # A standby's copy never advances here: a version ahead of it is 504 once the wait is over.
    barrier = None if request.param == "leader" else ConsistentReads(
        lambda: False, no_leader, lambda: store.resource_version, metrics=ConsistentReadMetrics(CollectorRegistry()),
        timeout=0.01, wall=lambda: NOW).wait
    # Watches without timeoutSeconds last 0.05-0.1 s, and a watch whose client left ends soon after.
    group = NodeMetricGroup(store, authorizer, leadership, known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, options=ApiOptions(bookmark_interval=0.02, min_request_timeout=0.05),
                            wall=lambda: NOW,
                            read_barrier=barrier)
    group.serving = dataclasses.replace(group.serving, client_check_interval=0.02)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=leadership,
                              metrics=metrics, groups=[group])
    async with TestClient(TestServer(api.application()), headers={"Authorization": "Bearer token"}) as client:
        yield client, store


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=_paths, query=_query, accept=_accept)
async def test_no_read_fails_the_server_refuses_without_a_status_or_moves_the_store(
        served: tuple[TestClient[Any, Any], NodeMetricStore], path: str, query: list[tuple[str, str]],
        accept: str | None) -> None:
    client, store = served
    before_version, before_list = store.resource_version, store.list_body()
    headers = {"Accept": accept} if accept is not None else {}
    async with client.get(path, params=query, headers=headers) as response:
        status = response.status
        streaming = status == 200 and response.headers.get("Transfer-Encoding") == "chunked"
        body = b"" if streaming else await response.read()
    event(f"{'watch' if streaming else 'read'} {status}")  # the spread, with --hypothesis-show-statistics
    assert status < 500 or status == 504, (status, body)
    if status >= 400:
        answer = orjson.loads(body)
        assert (answer["kind"], answer["apiVersion"], answer["status"], answer["code"]) == (
            "Status", "v1", "Failure", status), answer
        assert answer["reason"] and answer["message"], answer
        if status == 504:
            assert answer["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge", answer
    assert (store.resource_version, store.list_body()) == (before_version, before_list)
