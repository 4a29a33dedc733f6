"""metrics.k8s.io/v1beta1 from the NodeMetric store: the objects metrics-server serves, over HTTP.

Expectations are metrics-server's and k8s.io/metrics' (NodeMetrics, PodMetrics, their lists),
with the documented differences: the window, one "pod" container per pod, pods that exist only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.goduration import format_go_duration, parse_go_duration
from colocation.apimachinery.served_apigroups import ApiGroup, Caller
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.apiserver.resource_metrics_routes import PodDirectory, ResourceMetricsApi, pod_metrics
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from colocation.nodemetrics.resource_metrics_view import ResourceMetricsView, node_usage_of
from tests.clock import FakeClock

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z: creationTimestamp is the time of the request
CREATED = "2027-01-15T08:00:00Z"
SECOND = 10**9


def nodemetric(node: str, *, cpu: str = "1500m", memory: str = "2Gi", update_time: str = "2027-01-15T07:59:50Z",
               durations: tuple[str, ...] = ("5m0s", "10m0s", "30m0s"),
               pods: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
               recent: tuple[str, int] | None = None,
               recent_pods: Mapping[tuple[str, str], Mapping[str, str]] | None = None) -> dict[str, Any]:
    """`recent` is (node cpu, windowSeconds) of recentUsage; `recent_pods` the pods' recentUsage."""
    usage = {"resources": {"cpu": cpu, "memory": memory}}
    status: dict[str, Any] = {"updateTime": update_time, "nodeMetric": {"nodeUsage": usage}}
    if recent is not None:
        status["nodeMetric"]["recentUsage"] = {"resources": {"cpu": recent[0], "memory": memory},
                                               "windowSeconds": recent[1]}
    if durations:
        status["nodeMetric"]["aggregatedNodeUsages"] = [{"duration": d, "usage": {"avg": usage}} for d in durations]
    status["podsMetric"] = [{"namespace": ns, "name": name, "podUsage": {"resources": dict(resources)},
                             "priority": "koord-batch", "qos": "BE"}
                            for (ns, name), resources in (pods or {}).items()]
    for entry in status["podsMetric"]:
        if (entry["namespace"], entry["name"]) in (recent_pods or {}):
            entry["recentUsage"] = {"resources": dict((recent_pods or {})[(entry["namespace"], entry["name"])])}
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
            "status": status}


def put(store: NodeMetricStore, obj: dict[str, Any], labels: Mapping[str, str] | None = None) -> None:
    name = obj["metadata"]["name"]
    store.put(validate_report(orjson.dumps(obj), name), labels or {})


# ---- Go durations -----------------------------------------------------------------------------

@pytest.mark.parametrize(("nanos", "text"), [
    (0, "0s"), (10 * SECOND, "10s"), (300 * SECOND, "5m0s"), (3600 * SECOND, "1h0m0s"),
    (90 * SECOND + SECOND // 2, "1m30.5s"), (1_500_000, "1.5ms"), (250_000_000, "250ms"), (2_000, "2µs"),
    (7, "7ns"), (26 * 3600 * SECOND + 61 * SECOND, "26h1m1s"),
])
def test_durations_are_written_as_go_writes_them(nanos: int, text: str) -> None:
    assert format_go_duration(nanos) == text


@pytest.mark.parametrize(("text", "nanos"), [
    ("5m0s", 300 * SECOND), ("5m", 300 * SECOND), ("300s", 300 * SECOND), ("1h30m", 5400 * SECOND),
    ("1.5h", 5400 * SECOND), ("250ms", 250_000_000), ("0", 0), ("2us", 2_000), ("2µs", 2_000),
    ("", None), ("5", None), ("5x", None), ("m", None), (".s", None), ("5m 0s", None),
])
def test_durations_are_read_as_go_reads_them(text: str, nanos: int | None) -> None:
    assert parse_go_duration(text) == nanos


# ---- conversion ---------------------------------------------------------------------------------

def test_node_usage_takes_cpu_and_memory_the_update_time_and_the_shortest_aggregation_window() -> None:
    obj = nodemetric("node-a", durations=("30m0s", "5m0s", "10m0s"))
    obj["status"]["nodeMetric"]["nodeUsage"]["resources"]["kubernetes.io/batch-cpu"] = "3000"
    node = node_usage_of({**obj, "metadata": {"name": "node-a", "labels": {"pool": "web"}}})
    assert (node.name, dict(node.labels)) == ("node-a", {"pool": "web"})
    assert (node.timestamp, node.window) == ("2027-01-15T07:59:50Z", "5m0s")
    assert dict(node.usage) == {"cpu": "1500m", "memory": "2Gi"}


def test_without_aggregated_usages_the_window_is_a_report_interval() -> None:
    assert node_usage_of(nodemetric("node-a", durations=())).window == "10s"


def test_the_short_window_is_served_when_reported_and_koordinators_otherwise() -> None:
    obj = nodemetric("node-a", cpu="1067m", recent=("3", 10),
                     pods={("default", "web"): {"cpu": "567m"}, ("default", "new"): {"cpu": "20m"}},
                     recent_pods={("default", "web"): {"cpu": "2500m"}})
    node = node_usage_of(obj)
    assert node.served() == ({"cpu": "3", "memory": "2Gi"}, "10s")
    assert (dict(node.usage), node.window) == ({"cpu": "1067m", "memory": "2Gi"}, "5m0s")  # custom metrics' figures
    web, new = sorted(node.pods, key=lambda pod: pod.name, reverse=True)
    assert node.served_pod(web) == ({"cpu": "2500m"}, "10s")
    assert node.served_pod(new) == ({"cpu": "20m"}, "5m0s")  # no sample in the short window: its own figure
    older_agent = node_usage_of(nodemetric("node-a", cpu="1067m", pods={("default", "web"): {"cpu": "567m"}}))
    assert older_agent.served() == ({"cpu": "1067m", "memory": "2Gi"}, "5m0s")
    assert older_agent.served_pod(older_agent.pods[0]) == ({"cpu": "567m"}, "5m0s")


def test_a_resource_the_report_lacks_is_left_out_not_zero() -> None:
    # The HPA skips a pod whose metrics lack the resource; a zero would pull its average down.
    obj = nodemetric("node-a", pods={("default", "web"): {"cpu": "250m"}})
    node = node_usage_of(obj)
    (pod,) = node.pods
    item = pod_metrics(node, pod, {"app": "web"}, created=CREATED)
    assert item == {
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": CREATED, "labels": {"app": "web"}},
        "timestamp": "2027-01-15T07:59:50Z", "window": "5m0s",
        "containers": [{"name": "pod", "usage": {"cpu": "250m"}}],
    }


# ---- the view over the store ----------------------------------------------------------------------

@pytest.fixture
def store() -> NodeMetricStore:
    return NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0)


def test_a_pod_reported_by_two_nodes_has_the_figures_received_last() -> None:
    # It moved: the old node's last report still lists it until that node reports again. The
    # nodes' clocks are not comparable (node-a's runs an hour ahead): receipt decides.
    clock = FakeClock(NOW)
    store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=lambda: 100.0)
    put(store, nodemetric("node-a", update_time="2027-01-15T09:00:00Z", pods={("default", "web"): {"cpu": "1"}}))
    clock.advance(10)
    put(store, nodemetric("node-b", update_time="2027-01-15T08:00:10Z", pods={("default", "web"): {"cpu": "2"}}))
    view = ResourceMetricsView(store)
    node, pod = view.pods()[("default", "web")]
    assert (node.name, dict(pod.usage)) == ("node-b", {"cpu": "2"})


def test_the_view_parses_a_stored_object_once_per_resource_version(store: NodeMetricStore) -> None:
    put(store, nodemetric("node-a", cpu="1"))
    view = ResourceMetricsView(store)
    first = view.node("node-a")
    assert first is not None and view.node("node-a") is first and view.nodes() == [first]
    put(store, nodemetric("node-a", cpu="2"))
    second = view.node("node-a")
    assert second is not None and dict(second.usage)["cpu"] == "2"
    store.delete("node-a")
    assert view.node("node-a") is None and view.nodes() == [] and view.pods() == {}


# ---- HTTP ---------------------------------------------------------------------------------------

ADMIN, VIEWER, STRANGER = "admin-token", "viewer-token", "stranger-token"
CALLERS = {ADMIN: Caller(username="admin", groups=("system:masters",)), VIEWER: Caller(username="viewer"),
           STRANGER: Caller(username="stranger")}


class Leader:
    is_leader = True
    leader_identity = "me"
    leader_endpoint = ""


class Authorizations:
    """SubjectAccessReview answers: the viewer may read pod metrics in namespace "team-a" only."""

    def __init__(self) -> None:
        self.asked: list[SubjectAccessSpec] = []

    async def __call__(self, spec: SubjectAccessSpec) -> bool:
        self.asked.append(spec)
        return (spec.user, spec.api_group, spec.resource, spec.namespace) == ("viewer", "metrics.k8s.io", "pods",
                                                                               "team-a")


async def review(token: str) -> TokenReviewResult:
    caller = CALLERS.get(token)
    return TokenReviewResult(caller is not None, caller)


async def serve(store: NodeMetricStore, pods: PodDirectory | None) -> tuple[TestClient[Any, Any], Authorizations]:
    authorizations = Authorizations()
    authorizer = DelegatingAuthorizer(authorizations)
    resource_metrics = ResourceMetricsApi(ResourceMetricsView(store), authorizer, pods, wall=lambda: NOW) \
        if pods is not None else None
    metrics, leader = ServerMetrics(), Leader()
    nodemetric = NodeMetricGroup(store, authorizer, leader, known_node=lambda node: True, node_labels=lambda node: {},
                                 metrics=metrics,
                                 wall=lambda: NOW)
    groups: list[ApiGroup] = [nodemetric] if resource_metrics is None else [nodemetric, resource_metrics]
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=leader,
                              metrics=metrics, groups=groups)
    client: TestClient[Any, Any] = TestClient(TestServer(api.application()))
    await client.start_server()
    return client, authorizations


async def pod_directory(*pods: tuple[str, str, dict[str, str]]) -> PodDirectory:
    directory = PodDirectory()
    await directory.on_sync([{"metadata": {"namespace": ns, "name": name, "labels": labels}}
                             for ns, name, labels in pods], "1")
    return directory


@pytest.fixture
async def client(store: NodeMetricStore) -> AsyncIterator[TestClient[Any, Any]]:
    put(store, nodemetric("node-b", cpu="700m", memory="1Gi", pods={
        ("team-a", "web-1"): {"cpu": "100m", "memory": "64Mi"},
        ("team-b", "batch-1"): {"cpu": "300m", "memory": "256Mi"},
        ("team-a", "gone"): {"cpu": "5", "memory": "1Gi"},  # no Pod any more: not served
    }), {"pool": "batch"})
    put(store, nodemetric("node-a", update_time="2027-01-15T07:59:40Z", durations=(), pods={
        ("team-a", "api-1"): {"cpu": "200m", "memory": "128Mi"},
    }), {"pool": "web"})
    pods = await pod_directory(("team-a", "web-1", {"app": "web"}), ("team-b", "batch-1", {"app": "batch"}),
                               ("team-a", "api-1", {"app": "api"}))
    client, _ = await serve(store, pods)
    yield client
    await client.close()


async def get(client: TestClient[Any, Any], path: str, token: str = ADMIN, **params: str) -> tuple[int, Any]:
    response = await client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})
    return response.status, orjson.loads(await response.read())


BASE = "/apis/metrics.k8s.io/v1beta1"


async def test_discovery_announces_nodes_and_pods_read_only(client: TestClient[Any, Any]) -> None:
    status, groups = await get(client, "/apis")
    assert status == 200
    assert [g["name"] for g in groups["groups"]] == ["metrics.colocation.dev", "metrics.k8s.io"]
    status, group = await get(client, "/apis/metrics.k8s.io")
    assert group["preferredVersion"] == {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}
    status, resources = await get(client, BASE)
    assert status == 200 and resources["groupVersion"] == "metrics.k8s.io/v1beta1"
    assert [(r["name"], r["kind"], r["namespaced"], r["verbs"]) for r in resources["resources"]] == [
        ("nodes", "NodeMetrics", False, ["get", "list"]), ("pods", "PodMetrics", True, ["get", "list"])]


async def test_node_metrics_list_is_metrics_servers_shape_in_name_order(client: TestClient[Any, Any]) -> None:
    status, listed = await get(client, f"{BASE}/nodes")
    assert status == 200
    assert listed == {"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": [
        {"metadata": {"name": "node-a", "creationTimestamp": CREATED, "labels": {"pool": "web"}},
         "timestamp": "2027-01-15T07:59:40Z", "window": "10s", "usage": {"cpu": "1500m", "memory": "2Gi"}},
        {"metadata": {"name": "node-b", "creationTimestamp": CREATED, "labels": {"pool": "batch"}},
         "timestamp": "2027-01-15T07:59:50Z", "window": "5m0s", "usage": {"cpu": "700m", "memory": "1Gi"}},
    ]}


async def test_node_metrics_by_label_field_and_name(client: TestClient[Any, Any]) -> None:
    _, by_label = await get(client, f"{BASE}/nodes", labelSelector="pool=batch")
    assert [i["metadata"]["name"] for i in by_label["items"]] == ["node-b"]
    _, by_field = await get(client, f"{BASE}/nodes", fieldSelector="metadata.name!=node-b")
    assert [i["metadata"]["name"] for i in by_field["items"]] == ["node-a"]
    status, one = await get(client, f"{BASE}/nodes/node-b")
    assert status == 200 and (one["kind"], one["apiVersion"]) == ("NodeMetrics", "metrics.k8s.io/v1beta1")
    assert one["usage"] == {"cpu": "700m", "memory": "1Gi"}
    status, missing = await get(client, f"{BASE}/nodes/node-z")
    assert (status, missing["kind"], missing["reason"]) == (404, "Status", "NotFound")
    assert missing["message"] == 'nodes.metrics.k8s.io "node-z" not found'
    status, bad = await get(client, f"{BASE}/nodes", labelSelector="pool in (")
    assert (status, bad["reason"]) == (400, "BadRequest")


async def test_pod_metrics_of_existing_pods_one_pod_container_each(client: TestClient[Any, Any]) -> None:
    status, listed = await get(client, f"{BASE}/pods")
    assert status == 200 and (listed["kind"], listed["metadata"]) == ("PodMetricsList", {})
    assert [(i["metadata"]["namespace"], i["metadata"]["name"], i["containers"]) for i in listed["items"]] == [
        ("team-a", "api-1", [{"name": "pod", "usage": {"cpu": "200m", "memory": "128Mi"}}]),
        ("team-a", "web-1", [{"name": "pod", "usage": {"cpu": "100m", "memory": "64Mi"}}]),
        ("team-b", "batch-1", [{"name": "pod", "usage": {"cpu": "300m", "memory": "256Mi"}}]),
    ]
    web = listed["items"][1]
    assert web["metadata"] == {"name": "web-1", "namespace": "team-a", "creationTimestamp": CREATED,
                               "labels": {"app": "web"}}
    assert (web["timestamp"], web["window"]) == ("2027-01-15T07:59:50Z", "5m0s")


async def test_metrics_k8s_io_serves_the_short_window_with_its_window_and_sample_time(
        store: NodeMetricStore) -> None:
    put(store, nodemetric("node-c", cpu="1067m", update_time="2027-01-15T07:59:58Z", recent=("2980m", 7),
                          pods={("team-a", "web-1"): {"cpu": "567m", "memory": "64Mi"}},
                          recent_pods={("team-a", "web-1"): {"cpu": "2480m", "memory": "64Mi"}}))
    client, _ = await serve(store, await pod_directory(("team-a", "web-1", {"app": "web"})))
    try:
        status, node = await get(client, f"{BASE}/nodes/node-c")
        assert status == 200
        assert (node["timestamp"], node["window"], node["usage"]) == (
            "2027-01-15T07:59:58Z", "7s", {"cpu": "2980m", "memory": "2Gi"})
        status, pod = await get(client, f"{BASE}/namespaces/team-a/pods/web-1")
        assert status == 200
        assert (pod["timestamp"], pod["window"], pod["containers"]) == (
            "2027-01-15T07:59:58Z", "7s", [{"name": "pod", "usage": {"cpu": "2480m", "memory": "64Mi"}}])
        # NodeMetric's own API is Koordinator's object, with the extension beside it.
        status, stored = await get(client, "/apis/metrics.colocation.dev/v1alpha1/nodemetrics/node-c")
        assert status == 200
        assert stored["status"]["nodeMetric"]["nodeUsage"] == {"resources": {"cpu": "1067m", "memory": "2Gi"}}
        assert stored["status"]["nodeMetric"]["recentUsage"]["windowSeconds"] == 7
    finally:
        await client.close()


async def test_pod_metrics_by_namespace_label_field_and_name(client: TestClient[Any, Any]) -> None:
    _, team_a = await get(client, f"{BASE}/namespaces/team-a/pods")
    assert [i["metadata"]["name"] for i in team_a["items"]] == ["api-1", "web-1"]
    _, by_label = await get(client, f"{BASE}/namespaces/team-a/pods", labelSelector="app in (web,batch)")
    assert [i["metadata"]["name"] for i in by_label["items"]] == ["web-1"]
    _, by_field = await get(client, f"{BASE}/pods", fieldSelector="metadata.namespace=team-b")
    assert [i["metadata"]["name"] for i in by_field["items"]] == ["batch-1"]
    status, one = await get(client, f"{BASE}/namespaces/team-b/pods/batch-1")
    assert status == 200 and one["kind"] == "PodMetrics" and one["containers"][0]["usage"]["cpu"] == "300m"
    for missing in ("team-a/gone", "team-b/web-1", "team-a/nothing"):
        status, answer = await get(client, f"{BASE}/namespaces/{missing.replace('/', '/pods/')}")
        assert (status, answer["message"]) == (404, f'pods.metrics.k8s.io "{missing}" not found')


async def test_watch_is_not_supported(client: TestClient[Any, Any]) -> None:
    for path in (f"{BASE}/nodes", f"{BASE}/pods"):
        status, answer = await get(client, path, watch="true")
        assert (status, answer["reason"]) == (405, "MethodNotAllowed")


async def test_list_options_are_read_as_kube_apiserver_reads_them(client: TestClient[Any, Any]) -> None:
    status, answer = await get(client, f"{BASE}/nodes", watch="")  # a flag is false only absent, "0" or "false"
    assert (status, answer["reason"]) == (405, "MethodNotAllowed")
    status, answer = await get(client, f"{BASE}/pods", limit="many")
    assert (status, answer["message"]) == (400, 'strconv.ParseInt: parsing "many": invalid syntax')


@pytest.mark.parametrize("params", [{"resourceVersion": "abc"}, {"limit": "-1"}, {"continue": "garbage"}])
async def test_a_malformed_list_parameter_is_400_not_the_whole_list(
        client: TestClient[Any, Any], params: dict[str, str]) -> None:
    for path in (f"{BASE}/nodes", f"{BASE}/pods"):
        status, answer = await get(client, path, **params)
        assert (status, answer["kind"], answer["reason"]) == (400, "Status", "BadRequest"), path


async def test_reads_are_authorized_for_the_metrics_group_and_namespace(store: NodeMetricStore) -> None:
    put(store, nodemetric("node-a", pods={("team-a", "web-1"): {"cpu": "1"}, ("team-b", "db-1"): {"cpu": "1"}}))
    client, authorizations = await serve(store, await pod_directory(("team-a", "web-1", {}), ("team-b", "db-1", {})))
    try:
        status, listed = await get(client, f"{BASE}/namespaces/team-a/pods", VIEWER)
        assert status == 200 and [i["metadata"]["name"] for i in listed["items"]] == ["web-1"]
        status, denied = await get(client, f"{BASE}/pods", VIEWER)
        assert (status, denied["reason"]) == (403, "Forbidden")
        assert denied["message"] == ('pods.metrics.k8s.io is forbidden: User "viewer" cannot list resource "pods" '
                                     'in API group "metrics.k8s.io" at the cluster scope')
        assert (await get(client, f"{BASE}/namespaces/team-b/pods/db-1", VIEWER))[0] == 403
        assert (await get(client, f"{BASE}/nodes", VIEWER))[0] == 403
        assert (await get(client, f"{BASE}/nodes", "no-such-token"))[0] == 401
        asked = [(s.verb, s.api_group, s.resource, s.namespace, s.name) for s in authorizations.asked]
        assert asked == [("list", "metrics.k8s.io", "pods", "team-a", ""),
                         ("list", "metrics.k8s.io", "pods", "", ""),
                         ("get", "metrics.k8s.io", "pods", "team-b", "db-1"),
                         ("list", "metrics.k8s.io", "nodes", "", "")]
    finally:
        await client.close()


async def test_without_the_flag_the_group_is_not_served(store: NodeMetricStore) -> None:
    client, _ = await serve(store, None)
    try:
        _, groups = await get(client, "/apis")
        assert [g["name"] for g in groups["groups"]] == ["metrics.colocation.dev"]
        assert (await get(client, f"{BASE}/nodes"))[0] == 404
    finally:
        await client.close()


async def test_pod_directory_follows_pod_events() -> None:
    directory = await pod_directory(("ns", "a", {"app": "x"}))
    await directory.on_event("ADDED", {"metadata": {"namespace": "ns", "name": "b"}})
    await directory.on_event("MODIFIED", {"metadata": {"namespace": "ns", "name": "a", "labels": {"app": "y"}}})
    assert directory.labels("ns", "a") == {"app": "y"} and directory.labels("ns", "b") == {}
    await directory.on_event("DELETED", {"metadata": {"namespace": "ns", "name": "a"}})
    assert directory.labels("ns", "a") is None and len(directory) == 1
