"""`PUT …/nodemetrics/{node}/evictions` over HTTP: authorized as reports are, validated, then judged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.served_apigroups import Caller
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.eviction_routes import EvictionRequestsUpload
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.controllers.cluster import ClusterState
from colocation.controllers.eviction_requests import EvictionRequestHandler
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from tests.unit.controllers.test_eviction_requests import FakeWriter, pod

PATH = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{}/evictions"
AGENT_1, AGENT_2, READER = "agent-node-1", "agent-node-2", "reader"
CALLERS = {
    AGENT_1: Caller(username="system:serviceaccount:colocation-system:colocation-agent",
                    extra={"authentication.kubernetes.io/node-name": ("node-1",)}),
    AGENT_2: Caller(username="system:serviceaccount:colocation-system:colocation-agent",
                    extra={"authentication.kubernetes.io/node-name": ("node-2",)}),
    READER: Caller(username="reader"),
}
NODES: dict[str, dict[str, str]] = {"node-1": {}, "node-2": {}}


class Leader:
    is_leader = True
    leader_identity = "operator-0"
    leader_endpoint = ""


async def review(token: str) -> TokenReviewResult:
    caller = CALLERS.get(token)
    return TokenReviewResult(caller is not None, caller)


async def may(spec: SubjectAccessSpec) -> bool:
    """The agents' ServiceAccount may update nodemetrics/evictions (agent-rbac.yaml); nobody else."""
    return spec.user.startswith("system:serviceaccount") and \
        (spec.verb, spec.resource, spec.subresource) == ("update", "nodemetrics", "evictions")


class Harness:
    def __init__(self) -> None:
        self.leader = Leader()
        self.metrics = ServerMetrics()
        self.state = ClusterState()
        self.writer = FakeWriter()
        self.upload = EvictionRequestsUpload(self.metrics.registry)
        authorizer = DelegatingAuthorizer(may)
        group = NodeMetricGroup(NodeMetricStore(clock_wall=lambda: 1e9, clock_monotonic=lambda: 100.0), authorizer,
                                self.leader, known_node=NODES.__contains__, node_labels=NODES.get, metrics=self.metrics,
                                uploads=[self.upload])
        self.api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None,
                                       leadership=self.leader, metrics=self.metrics, groups=[group])

    async def controllers_run(self, *pods: dict[str, Any]) -> None:
        await self.state.pods_synced_with(list(pods), "1")
        self.upload.handler = EvictionRequestHandler(self.state, self.writer, self.metrics.registry)


@pytest.fixture
async def harness() -> AsyncIterator[tuple[Harness, TestClient[Any, Any]]]:
    harness = Harness()
    client: TestClient[Any, Any] = TestClient(TestServer(harness.api.application()))
    await client.start_server()
    yield harness, client
    await client.close()


def body(node: str, *names: str, **changes: Any) -> dict[str, Any]:
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "EvictionRequest", "node": node,
            "reason": "MemoryPressure", "message": "node memory usage 91%",
            "pods": [{"namespace": "batch", "name": name, "uid": f"uid-{name}"} for name in names], **changes}


async def put(client: TestClient[Any, Any], node: str, document: Any, token: str = AGENT_1) -> tuple[int, Any]:
    raw = document if isinstance(document, bytes) else orjson.dumps(document)
    response = await client.put(PATH.format(node), data=raw, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return response.status, orjson.loads(await response.read())


async def test_the_leader_evicts_the_named_best_effort_pods_of_the_agents_node(harness: Any) -> None:
    h, client = harness
    await h.controllers_run(pod("big"), pod("small"), pod("web", qos="LS"))
    status, answer = await put(client, "node-1", body("node-1", "big", "small"))
    assert status == 200, answer
    assert answer["kind"] == "EvictionResult"
    assert [(entry["name"], entry["outcome"]) for entry in answer["pods"]] == [("big", "evicted"), ("small", "evicted")]
    assert [name for _, name, _ in h.writer.evicted] == ["big", "small"]


@pytest.mark.parametrize(("node", "document", "token", "code", "reason"), [
    ("node-1", b"{", AGENT_1, 400, "BadRequest"),
    ("node-1", body("node-1", "big", kind="Eviction"), AGENT_1, 400, "BadRequest"),
    ("node-1", body("node-2", "big"), AGENT_1, 400, "BadRequest"),  # the body names another node
    ("node-1", body("node-1"), AGENT_1, 422, "Invalid"),  # no pod
    ("node-1", body("node-1", "big", "big"), AGENT_1, 422, "Invalid"),
    ("node-1", body("node-1", "big", reason="Boredom"), AGENT_1, 422, "Invalid"),
    ("node-1", body("node-1", "Not_A_Name"), AGENT_1, 422, "Invalid"),
    ("node-2", body("node-2", "big"), AGENT_1, 403, "Forbidden"),  # another node's URL: the node rule
    ("node-1", body("node-1", "big"), READER, 403, "Forbidden"),  # no RBAC right
    ("node-1", body("node-1", "big"), "nobody", 401, "Unauthorized"),
    ("node-1", body("node-1", "web"), AGENT_1, 403, "Forbidden"),  # not a best-effort pod
    ("node-2", body("node-2", "big"), AGENT_2, 403, "Forbidden"),  # "big" is on node-1, not node-2
])
async def test_a_refused_request_gets_a_status_and_evicts_nothing(harness: Any, node: str, document: Any, token: str,
                                                                  code: int, reason: str) -> None:
    h, client = harness
    await h.controllers_run(pod("big"), pod("web", qos="LS"))
    status, answer = await put(client, node, document, token)
    assert (status, answer["kind"], answer["reason"]) == (code, "Status", reason), answer
    assert h.writer.evicted == []


async def test_a_standby_and_a_leader_whose_controllers_have_not_started_answer_503(harness: Any) -> None:
    h, client = harness
    status, answer = await put(client, "node-1", body("node-1", "big"))
    assert (status, answer["reason"]) == (503, "ServiceUnavailable")
    assert "controllers" in answer["message"]
    await h.controllers_run(pod("big"))
    h.leader.is_leader = False
    status, answer = await put(client, "node-1", body("node-1", "big"))
    assert (status, answer["reason"]) == (503, "ServiceUnavailable")
    assert "operator-0" in answer["message"]
    assert h.writer.evicted == []
    rejected = h.metrics.registry.get_sample_value("colocation_eviction_requests_rejected_total",
                                                   {"reason": "not-leader"})
    assert rejected == 1.0
