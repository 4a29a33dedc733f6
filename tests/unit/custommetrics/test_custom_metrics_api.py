"""custom.metrics.k8s.io and external.metrics.k8s.io over HTTP, and the agents' samples endpoint.

Shapes are k8s.io/metrics' as the HPA's metrics client reads them; authorization as
custom-metrics-apiserver resolves it (get for one object, list for "*").
"""

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
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.apiserver.resource_metrics_routes import PodDirectory
from colocation.custommetrics.builtin_metrics import BuiltinMetrics
from colocation.custommetrics.custom_metrics_routes import CustomMetricsApi
from colocation.custommetrics.metrics_query import MetricsQuery
from colocation.custommetrics.series_metrics import StoreMetrics
from colocation.custommetrics.series_store import SeriesStore
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from colocation.nodemetrics.resource_metrics_view import ResourceMetricsView
from tests.clock import FakeClock

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
ADMIN, AGENT, OTHER_AGENT, VIEWER, OPERATOR = "admin", "agent-node-1", "agent-node-2", "viewer", "operator"
CALLERS = {
    OPERATOR: Caller(username="system:serviceaccount:colocation-system:colocation-operator"),
    ADMIN: Caller(username="admin", groups=("system:masters",)),
    AGENT: Caller(username="system:serviceaccount:colocation-system:colocation-agent",
                  extra={"authentication.kubernetes.io/node-name": ("node-1",)}),
    OTHER_AGENT: Caller(username="system:serviceaccount:colocation-system:colocation-agent",
                        extra={"authentication.kubernetes.io/node-name": ("node-2",)}),
    VIEWER: Caller(username="viewer"),
}
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
SAMPLES = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{}/samples"


class Leader:
    is_leader = True
    leader_identity = "operator-0"
    leader_endpoint = ""


class Authorizations:
    """Agents may update nodemetrics/samples; operators (standbys) may watch samplebatches; the viewer
    may list pods/http_requests in team-a only."""

    def __init__(self) -> None:
        self.asked: list[SubjectAccessSpec] = []

    async def __call__(self, spec: SubjectAccessSpec) -> bool:
        self.asked.append(spec)
        if spec.user == CALLERS[OPERATOR].username:
            return (spec.verb, spec.api_group, spec.resource) == ("watch", "metrics.colocation.dev", "samplebatches")
        if spec.user.startswith("system:serviceaccount"):
            return (spec.verb, spec.resource, spec.subresource) == ("update", "nodemetrics", "samples")
        return (spec.user, spec.verb, spec.resource, spec.subresource, spec.namespace) == (
            "viewer", "list", "pods", "http_requests", "team-a")


async def review(token: str) -> TokenReviewResult:
    caller = CALLERS.get(token)
    return TokenReviewResult(caller is not None, caller)


class Harness:
    """One replica's custom metrics API behind its API server; `leader.is_leader` says which it is."""

    def __init__(self) -> None:
        self.clock = FakeClock(NOW)
        self.nodemetrics = NodeMetricStore(clock_wall=self.clock.wall, clock_monotonic=lambda: 100.0)
        self.series = SeriesStore(self.clock.wall, retention_seconds=600)
        self.history = SeriesStore(self.clock.wall, retention_seconds=600)
        self.pods = PodDirectory()
        self.builtins = BuiltinMetrics(self.nodemetrics, ResourceMetricsView(self.nodemetrics), self.history)
        node_labels = {"node-1": {"pool": "web"}, "node-2": {"pool": "batch"}}
        self.query = MetricsQuery(self.series, self.builtins, self.pods, node_labels=node_labels.get)
        self.server_metrics = ServerMetrics()
        self.leader = Leader()
        self.authorizations = Authorizations()
        authorizer = DelegatingAuthorizer(self.authorizations)
        self.custom = CustomMetricsApi(self.series, self.builtins, self.query, authorizer=authorizer,
                                       leadership=self.leader,
                                       metrics=StoreMetrics(self.server_metrics.registry, self.series.__len__))
        nodemetric = NodeMetricGroup(self.nodemetrics, authorizer, self.leader, known_node=node_labels.__contains__,
                                     node_labels=node_labels.get, metrics=self.server_metrics, wall=self.clock.wall,
                                     uploads=[self.custom.samples_upload()])
        self.api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None,
                                       leadership=self.leader, metrics=self.server_metrics,
                                       groups=[nodemetric, self.custom])

    async def add_pods(self, *pods: tuple[str, str, dict[str, str]]) -> None:
        for namespace, name, labels in pods:
            await self.pods.on_event("ADDED", {"metadata": {"namespace": namespace, "name": name, "labels": labels}})


PODS = (("team-a", "web-1", {"app": "web"}), ("team-a", "web-2", {"app": "web"}), ("team-a", "db-1", {"app": "db"}),
        ("team-b", "web-1", {"app": "web"}))


@pytest.fixture
async def harness() -> AsyncIterator[tuple[Harness, TestClient[Any, Any]]]:
    harness = Harness()
    await harness.add_pods(*PODS)
    client: TestClient[Any, Any] = TestClient(TestServer(harness.api.application()))
    await client.start_server()
    yield harness, client
    await client.close()


def sample_batch(node: str, *series: tuple[str, dict[str, str], tuple[str, str] | None, list[tuple[float, float]]]
                 ) -> dict[str, Any]:
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "MetricSampleBatch", "node": node,
            "series": [{"metric": metric, "labels": labels,
                        **({"pod": {"namespace": pod[0], "name": pod[1]}} if pod else {}),
                        "samples": [{"timestamp": t, "value": v} for t, v in samples]}
                       for metric, labels, pod, samples in series]}


async def put_samples(client: TestClient[Any, Any], node: str, body: Any, token: str = AGENT) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    response = await client.put(SAMPLES.format(node), data=raw, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return response.status, orjson.loads(await response.read())


async def get(client: TestClient[Any, Any], path: str, token: str = ADMIN, **params: str) -> tuple[int, Any]:
    response = await client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})
    return response.status, orjson.loads(await response.read())


WEB_REQUESTS = sample_batch(
    "node-1",
    ("http_requests", {"method": "GET"}, ("team-a", "web-1"), [(NOW - 20, 10.0), (NOW - 10, 12.0), (NOW - 5, 14.5)]),
    ("http_requests", {"method": "POST"}, ("team-a", "web-1"), [(NOW - 5, 1.0)]),
    ("http_requests", {"method": "GET"}, ("team-a", "web-2"), [(NOW - 5, 3.25)]),
    ("http_requests", {"method": "GET"}, ("team-a", "db-1"), [(NOW - 5, 100.0)]),
    ("http_requests", {"method": "GET"}, ("team-b", "web-1"), [(NOW - 5, 7.0)]),
    ("node_temperature", {}, None, [(NOW - 5, 61.5)]),
)


# ---- the samples endpoint ----------------------------------------------------------------------

async def test_an_agent_batch_is_stored_and_answered_with_a_success_status(harness: Any) -> None:
    h, client = harness
    status, answer = await put_samples(client, "node-1", WEB_REQUESTS)
    assert status == 200, answer
    assert (answer["kind"], answer["status"], answer["details"]["name"]) == ("Status", "Success", "node-1")
    assert answer["message"] == "stored 8 of 8 samples (6 new series)"
    assert len(h.series) == 6
    exposition = h.server_metrics.exposition().decode()
    assert "colocation_custom_metrics_samples_accepted_total 8.0" in exposition
    assert "colocation_custom_metrics_series 6.0" in exposition


async def test_samples_too_old_or_from_the_future_are_counted_not_stored(harness: Any) -> None:
    h, client = harness
    status, answer = await put_samples(client, "node-1", sample_batch(
        "node-1", ("m", {}, None, [(NOW - 601, 1.0), (NOW - 1, 2.0), (NOW + 301, 3.0)])))
    assert status == 200
    assert answer["message"] == "stored 1 of 3 samples (1 new series)"
    assert {c["reason"] for c in answer["details"]["causes"]} == {"too-old", "future"}
    assert 'colocation_custom_metrics_samples_dropped_total{reason="too-old"} 1.0' in \
        h.server_metrics.exposition().decode()


@pytest.mark.parametrize(("node", "body", "token", "code", "reason"), [
    ("node-1", b"{", AGENT, 400, "BadRequest"),
    ("node-1", sample_batch("node-1", ("bad-name", {}, None, [(NOW, 1.0)])), AGENT, 422, "Invalid"),
    ("node-1", sample_batch("node-2", ("m", {}, None, [(NOW, 1.0)])), AGENT, 400, "BadRequest"),
    ("node-2", sample_batch("node-2", ("m", {}, None, [(NOW, 1.0)])), AGENT, 403, "Forbidden"),  # not its node
    ("node-1", sample_batch("node-1", ("m", {}, None, [(NOW, 1.0)])), "nobody", 401, "Unauthorized"),
    ("node-9", sample_batch("node-9", ("m", {}, None, [(NOW, 1.0)])), AGENT, 403, "Forbidden"),
])
async def test_a_refused_batch_gets_a_status_and_stores_nothing(harness: Any, node: str, body: Any, token: str,
                                                                code: int, reason: str) -> None:
    h, client = harness
    status, answer = await put_samples(client, node, body, token)
    assert (status, answer["kind"], answer["reason"]) == (code, "Status", reason), answer
    assert len(h.series) == 0


async def test_an_unknown_node_is_404_and_a_standby_refuses_samples_but_answers_reads(harness: Any) -> None:
    h, client = harness
    CALLERS["agent-node-9"] = Caller(username="system:serviceaccount:colocation-system:colocation-agent",
                                     extra={"authentication.kubernetes.io/node-name": ("node-9",)})
    try:
        status, answer = await put_samples(client, "node-9", sample_batch("node-9", ("m", {}, None, [(NOW, 1.0)])),
                                            "agent-node-9")
        assert (status, answer["reason"]) == (404, "NotFound")
    finally:
        del CALLERS["agent-node-9"]
    assert len(h.series) == 0
    assert (await put_samples(client, "node-1", WEB_REQUESTS))[0] == 200
    h.leader.is_leader = False
    later = sample_batch("node-1", ("http_requests", {"method": "GET"}, ("team-a", "web-2"), [(NOW, 99.0)]))
    status, answer = await put_samples(client, "node-1", later)
    assert (status, answer["reason"]) == (503, "ServiceUnavailable") and "operator-0" in answer["message"]
    # Reads are answered from this replica's copy (a standby's follows the leader's feed).
    status, listed = await get(client, f"{CUSTOM}/namespaces/team-a/pods/*/http_requests", labelSelector="app=web")
    assert status == 200
    assert [(i["describedObject"]["name"], i["value"]) for i in listed["items"]] == [("web-1", "15500m"),
                                                                                    ("web-2", "3250m")]
    status, listed = await get(client, f"{EXTERNAL}/namespaces/team-a/http_requests", labelSelector="method=POST")
    assert (status, [i["value"] for i in listed["items"]]) == (200, ["1"])


# ---- custom.metrics.k8s.io ---------------------------------------------------------------------

async def test_an_hpa_request_over_a_pod_label_selector_sums_each_pods_newest_samples(harness: Any) -> None:
    _, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    status, listed = await get(client, f"{CUSTOM}/namespaces/team-a/pods/*/http_requests", labelSelector="app=web")
    assert status == 200, listed
    assert (listed["kind"], listed["apiVersion"], listed["metadata"]) == (
        "MetricValueList", "custom.metrics.k8s.io/v1beta2", {})
    assert listed["items"] == [
        {"describedObject": {"kind": "Pod", "namespace": "team-a", "name": "web-1", "apiVersion": "/v1"},
         "metric": {"name": "http_requests", "selector": None}, "timestamp": "2027-01-15T07:59:55Z",
         "value": "15500m"},  # GET 14.5 + POST 1.0
        {"describedObject": {"kind": "Pod", "namespace": "team-a", "name": "web-2", "apiVersion": "/v1"},
         "metric": {"name": "http_requests", "selector": None}, "timestamp": "2027-01-15T07:59:55Z",
         "value": "3250m"},
    ]


async def test_a_metric_label_selector_picks_series_and_is_echoed(harness: Any) -> None:
    _, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    status, listed = await get(client, f"{CUSTOM}/namespaces/team-a/pods/*/http_requests",
                               labelSelector="app=web", metricLabelSelector="method in (POST)")
    assert status == 200
    assert [(i["describedObject"]["name"], i["value"]) for i in listed["items"]] == [("web-1", "1")]
    assert listed["items"][0]["metric"]["selector"] == {
        "matchExpressions": [{"key": "method", "operator": "In", "values": ["POST"]}]}


async def test_one_pod_by_name_in_v1beta1_and_a_missing_metric_is_404(harness: Any) -> None:
    _, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    status, listed = await get(client, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/team-a/pods/web-2/http_requests")
    assert status == 200
    assert listed["items"] == [{
        "describedObject": {"kind": "Pod", "namespace": "team-a", "name": "web-2", "apiVersion": "/v1"},
        "metricName": "http_requests", "timestamp": "2027-01-15T07:59:55Z", "value": "3250m", "selector": None}]
    status, missing = await get(client, f"{CUSTOM}/namespaces/team-a/pods/web-2/queue_length")
    assert (status, missing["reason"]) == (404, "NotFound")
    assert missing["message"] == "the server could not find the metric queue_length for pods web-2"
    status, unknown = await get(client, f"{CUSTOM}/namespaces/team-a/pods/*/queue_length")
    assert status == 404 and "descriptor for metric queue_length" in unknown["message"]
    status, _ = await get(client, f"{CUSTOM}/namespaces/team-a/deployments.apps/web/http_requests")
    assert status == 404


async def test_node_metrics_by_name_and_by_node_label_selector(harness: Any) -> None:
    _, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    status, listed = await get(client, f"{CUSTOM}/nodes/node-1/node_temperature")
    assert status == 200
    assert listed["items"][0]["describedObject"] == {"kind": "Node", "name": "node-1", "apiVersion": "/v1"}
    assert listed["items"][0]["value"] == "61500m"
    status, listed = await get(client, f"{CUSTOM}/nodes/*/node_temperature", labelSelector="pool=web")
    assert [(i["describedObject"]["name"], i["value"]) for i in listed["items"]] == [("node-1", "61500m")]
    status, listed = await get(client, f"{CUSTOM}/nodes/*/node_temperature", labelSelector="pool=batch")
    assert (status, listed["items"]) == (200, [])


async def test_aggregation_suffixes_reduce_each_series_over_the_retention(harness: Any) -> None:
    _, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    path = f"{CUSTOM}/namespaces/team-a/pods/web-1/http_requests"
    expected = {"avg": "12167m", "max": "14500m", "min": "10", "latest": "14500m", "p90": "14500m", "p50": None}
    for aggregation, value in expected.items():
        status, listed = await get(client, f"{path}_agg_{aggregation}", metricLabelSelector="method=GET")
        if value is None:
            assert status == 404  # not a supported suffix: a metric nobody sends
            continue
        assert status == 200 and listed["items"][0]["value"] == value, (aggregation, listed)
        assert listed["items"][0]["windowSeconds"] == 15  # from NOW-20 to NOW-5
        assert listed["items"][0]["metric"]["name"] == f"http_requests_agg_{aggregation}"


async def test_selector_errors_are_400(harness: Any) -> None:
    _, client = harness
    status, answer = await get(client, f"{CUSTOM}/namespaces/team-a/pods/*/http_requests", labelSelector="app in (")
    assert (status, answer["reason"]) == (400, "BadRequest") and "labelSelector" in answer["message"]
    status, answer = await get(client, f"{EXTERNAL}/namespaces/team-a/http_requests", labelSelector="==")
    assert status == 400


async def test_reads_are_authorized_as_custom_metrics_apiserver_resolves_them(harness: Any) -> None:
    h, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    status, _ = await get(client, f"{CUSTOM}/namespaces/team-a/pods/*/http_requests", token=VIEWER)
    assert status == 200
    status, denied = await get(client, f"{CUSTOM}/namespaces/team-a/pods/web-1/http_requests", token=VIEWER)
    assert status == 403
    assert denied["message"].startswith('pods.custom.metrics.k8s.io "web-1" is forbidden: User "viewer" cannot '
                                        'get resource "pods/http_requests"')
    status, _ = await get(client, f"{CUSTOM}/namespaces/team-b/pods/*/http_requests", token=VIEWER)
    assert status == 403
    status, _ = await get(client, f"{EXTERNAL}/namespaces/team-a/http_requests", token=VIEWER)
    assert status == 403
    external = [s for s in h.authorizations.asked if s.api_group == "external.metrics.k8s.io"]
    assert [(s.verb, s.resource, s.namespace) for s in external] == [("list", "http_requests", "team-a")]


# ---- external.metrics.k8s.io -------------------------------------------------------------------

async def test_external_metrics_are_one_value_per_series_selected_by_its_labels(harness: Any) -> None:
    _, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    status, listed = await get(client, f"{EXTERNAL}/namespaces/team-a/http_requests", labelSelector="method=GET")
    assert status == 200
    assert (listed["kind"], listed["apiVersion"]) == ("ExternalMetricValueList", "external.metrics.k8s.io/v1beta1")
    assert sorted(item["value"] for item in listed["items"]) == ["100", "14500m", "3250m"]
    assert listed["items"][0] == {"metricName": "http_requests", "metricLabels": {"method": "GET"},
                                  "timestamp": "2027-01-15T07:59:55Z", "value": listed["items"][0]["value"]}
    status, listed = await get(client, f"{EXTERNAL}/namespaces/team-a/http_requests_agg_max",
                               labelSelector="method=POST")
    assert [(i["metricName"], i["value"], i["window"]) for i in listed["items"]] == [
        ("http_requests_agg_max", "1", 0)]
    status, listed = await get(client, f"{EXTERNAL}/namespaces/team-c/http_requests")
    assert (status, listed["items"]) == (200, [])


# ---- discovery ---------------------------------------------------------------------------------

async def test_discovery_lists_a_resource_per_metric_and_both_groups(harness: Any) -> None:
    _, client = harness
    await put_samples(client, "node-1", WEB_REQUESTS)
    _, groups = await get(client, "/apis")
    names = [g["name"] for g in groups["groups"]]
    assert {"custom.metrics.k8s.io", "external.metrics.k8s.io"} <= set(names)
    _, group = await get(client, "/apis/custom.metrics.k8s.io")
    assert [v["version"] for v in group["versions"]] == ["v1beta2", "v1beta1"]
    assert group["preferredVersion"]["version"] == "v1beta2"
    _, resources = await get(client, CUSTOM)
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["pods/http_requests"] == {"name": "pods/http_requests", "singularName": "", "namespaced": True,
                                             "kind": "MetricValueList", "verbs": ["get"]}
    assert by_name["nodes/node_temperature"]["namespaced"] is False
    assert {"pods/cpu_usage", "nodes/memory_usage_p99"} <= set(by_name)
    _, external = await get(client, EXTERNAL)
    assert [(r["name"], r["kind"]) for r in external["resources"]] == [("http_requests", "ExternalMetricValueList")]


# ---- built-in metrics --------------------------------------------------------------------------

def nodemetric(node: str, update_time: str, cpu: str, memory: str, pods: dict[tuple[str, str], tuple[str, str]],
               p90: tuple[str, str] | None = None) -> bytes:
    usage = {"resources": {"cpu": cpu, "memory": memory}}
    node_metric: dict[str, Any] = {"nodeUsage": usage}
    if p90 is not None:
        node_metric["aggregatedNodeUsages"] = [
            {"duration": "10m0s", "usage": {"p90": {"resources": {"cpu": "9", "memory": "9Gi"}}}},
            {"duration": "5m0s", "usage": {"p90": {"resources": {"cpu": p90[0], "memory": p90[1]}}}}]
    return orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                         "metadata": {"name": node}, "status": {
                             "updateTime": update_time, "nodeMetric": node_metric,
                             "podsMetric": [{"namespace": ns, "name": name,
                                             "podUsage": {"resources": {"cpu": c, "memory": m}}}
                                            for (ns, name), (c, m) in pods.items()]}})


async def test_builtin_cpu_and_memory_come_from_the_latest_report(harness: Any) -> None:
    h, client = harness
    h.nodemetrics.put(validate_report(nodemetric("node-1", "2027-01-15T07:59:50Z", "1500m", "2Gi", {
        ("team-a", "web-1"): ("250m", "64Mi"), ("team-a", "web-2"): ("100m", "32Mi")}, p90=("1800m", "3Gi")),
        "node-1"), {})
    status, listed = await get(client, f"{CUSTOM}/namespaces/team-a/pods/*/cpu_usage", labelSelector="app=web")
    assert status == 200
    assert [(i["describedObject"]["name"], i["value"], i["timestamp"]) for i in listed["items"]] == [
        ("web-1", "250m", "2027-01-15T07:59:50Z"), ("web-2", "100m", "2027-01-15T07:59:50Z")]
    _, listed = await get(client, f"{CUSTOM}/nodes/*/cpu_usage", labelSelector="pool=web")
    assert [(i["describedObject"]["name"], i["value"]) for i in listed["items"]] == [("node-1", "1500m")]
    _, listed = await get(client, f"{CUSTOM}/nodes/node-1/memory_usage")
    assert listed["items"][0]["value"] == str(2 * 1024**3)
    _, listed = await get(client, f"{CUSTOM}/nodes/node-1/cpu_usage_p90")
    assert (listed["items"][0]["value"], listed["items"][0]["windowSeconds"]) == ("1800m", 300)  # the 5m figure
    status, _ = await get(client, f"{CUSTOM}/nodes/node-1/cpu_usage_p99")
    assert status == 404  # the report has no p99


async def test_builtin_pod_percentiles_are_over_the_sampled_history(harness: Any) -> None:
    h, client = harness
    for second, cpu in enumerate(("100m", "400m", "200m", "300m", "900m")):
        h.nodemetrics.put(validate_report(nodemetric(
            "node-1", f"2027-01-15T07:59:{50 + second:02d}Z", "1", "1Gi", {("team-a", "web-1"): (cpu, "1Mi")}),
            "node-1"), {})
        h.builtins.sample_history()
        h.clock.advance(1)  # the history is kept by the time reports were received
    h.builtins.sample_history()  # nothing changed: nothing recorded twice
    _, listed = await get(client, f"{CUSTOM}/namespaces/team-a/pods/web-1/cpu_usage_p90")
    assert (listed["items"][0]["value"], listed["items"][0]["windowSeconds"]) == ("900m", 4)
    _, listed = await get(client, f"{CUSTOM}/namespaces/team-a/pods/web-1/cpu_usage_agg_avg")
    assert listed["items"][0]["value"] == "380m"
    _, listed = await get(client, f"{CUSTOM}/nodes/node-1/cpu_usage_agg_max")
    assert listed["items"][0]["value"] == "1"
