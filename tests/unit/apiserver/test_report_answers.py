"""What a report's PUT answers: the stored object, or only its metadata when the writer asks."""

from __future__ import annotations

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
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.nodemetrics.nodemetric_store import NodeMetricStore

BASE = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
AGENT = Caller("system:serviceaccount:colocation-system:colocation-agent",
               extra={"authentication.kubernetes.io/node-name": ("node-1",)})
NODES = {"node-1": {"pool": "batch"}}


class Leader:
    is_leader = True
    leader_identity = "operator-0"


async def review(token: str) -> TokenReviewResult:
    return TokenReviewResult(token == "agent", AGENT if token == "agent" else None)


async def may(spec: SubjectAccessSpec) -> bool:
    return spec.user == AGENT.username


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    metrics = ServerMetrics()
    authorizer = DelegatingAuthorizer(may)
    group = NodeMetricGroup(NodeMetricStore(lambda: 1e9, lambda: 100.0), authorizer, Leader(),
                            NODES.__contains__, NODES.get, metrics)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, Leader(), metrics, [group])
    test_client: TestClient[Any, Any] = TestClient(TestServer(api.application()))
    await test_client.start_server()
    yield test_client
    await test_client.close()


def report(cpu: str) -> bytes:
    return orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                         "metadata": {"name": "node-1"},
                         "status": {"updateTime": "2026-11-22T10:00:00Z",
                                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}}})


async def put(client: TestClient[Any, Any], cpu: str, accept: str) -> tuple[int, Any]:
    async with client.put(f"{BASE}/node-1/status", data=report(cpu),
                          headers={"Authorization": "Bearer agent", "Content-Type": "application/json",
                                   "Accept": accept}) as response:
        return response.status, await response.json()


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
