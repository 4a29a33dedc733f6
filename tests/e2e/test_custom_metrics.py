"""custom.metrics.k8s.io and external.metrics.k8s.io from the operators' memory, through the aggregation layer.

The sandbox enables both APIs by default (operators with --serve-custom-metrics, the APIServices of
manifests/components/custom-metrics); this module runs it with a short retention and two replicas
with short lease timings. Samples are sent as agents send them (a token bound to a pod on the
node, through kube-apiserver, so to the leader), and the real kubectl reads them back as the HPA
would ask. The last test reads a standby directly, then kills the leader.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from tests.e2e.conftest import Kubectl, sandbox_kind_args, store_kind
from tests.e2e.kube import (
    Kube,
    apiservice_available,
    bound_token,
    create,
    get_from_replica,
    pod_manifest,
    put_as_client_go,
    ready_operator_endpoints,
    start_sandbox_process,
)
from tests.e2e.test_operator import LEASE_ARGS, leader, put_direct, replicas
from tests.e2e.test_resource_metrics import make_node, report, send
from tests.timing import eventually_async

RETENTION = 12  # seconds: long enough for a test's reads, short enough to watch series expire
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
APISERVICES = ("v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io")


@pytest.fixture(scope="module")
def sandbox_and_state(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the operators are processes the test starts, with flags of its own")
    state = tmp_path_factory.mktemp("custom-metrics-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "2", "--nodes", "0", *LEASE_ARGS,
            f"--operator-arg=--custom-metrics-retention={RETENTION}"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture(scope="module")
def sandbox(sandbox_and_state: tuple[Path, Path]) -> Path:
    return sandbox_and_state[0]


@pytest.fixture
async def admin(sandbox: Path, request: pytest.FixtureRequest) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(sandbox) as kube:
        for name in APISERVICES:
            await eventually_async(functools.partial(apiservice_available, kube, name), timeout=30)
        if store_kind(request.config) == "nats":  # the leader takes batches once connected to NATS
            await eventually_async(lambda: ready_operator_endpoints(kube, 2), timeout=30)
        yield kube


@pytest.fixture
def kubectl(sandbox: Path, tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("no kubectl: neither built by hack/kube/build.sh (needs Go) nor on the PATH")
    return Kubectl(binary, sandbox, tmp_path / "kubectl-cache")


def raw(kubectl: Kubectl, path: str) -> Any:
    return json.loads(kubectl.run("get", "--raw", path).stdout)


def batch(node: str, *series: tuple[str, dict[str, str], str | None, list[tuple[float, float]]],
          namespace: str = "") -> dict[str, Any]:
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "MetricSampleBatch", "node": node,
            "series": [{"metric": metric, "labels": labels,
                        **({"pod": {"namespace": namespace, "name": pod}} if pod else {}),
                        "samples": [{"timestamp": t, "value": v} for t, v in samples]}
                       for metric, labels, pod, samples in series]}


async def put_samples(admin: Kube, node: str, token: str, body: Any) -> tuple[int, Any]:
    """Straight to the leader the Lease names, as an agent sends them (through kube-apiserver, a
    standby may get them first and answer 503 with Retry-After: see test_samples_through_the_aggregator).
    A 503 is sent again, as an agent does: with --store nats a replica takes batches only once it
    is connected to NATS, which may come after the sandbox is ready."""
    _, endpoint, context = await eventually_async(lambda: _leader_endpoint(admin), timeout=20, interval=0.1)

    async def answered() -> tuple[int, Any] | None:
        status, answer = await put_direct(endpoint, context, node, body, token, subresource="samples")
        return None if status == 503 else (status, answer)

    return await eventually_async(answered, timeout=10, interval=0.5, message="a batch not refused with 503")


async def _leader_endpoint(admin: Kube) -> tuple[str, str, ssl.SSLContext] | None:
    found = await leader(admin)
    return found if found[1] else None


async def test_samples_through_the_aggregator_reach_the_leader_as_client_go_retries_them(
        admin: Kube, web: dict[str, str]) -> None:
    node, token, namespace = web["node"], web["token"], web["namespace"]
    body = batch(node, ("via_aggregator", {}, "web-0", [(time.time(), 3.0)]), namespace=namespace)
    async with admin.with_token(token) as agent:
        status, answer, attempts = await put_as_client_go(
            agent, f"/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{node}/samples", body)
    assert (status, answer["message"]) == (200, "stored 1 of 1 samples (1 new series)"), answer
    assert 1 <= attempts <= 10


@pytest.fixture
async def web(admin: Kube, sandbox_and_state: tuple[Path, Path]) -> dict[str, str]:
    """A node with its agent token, and pods web-0, web-1 (app=web) and db-0 (app=db) on it; with the
    sandbox's state directory and a token that reads custom metrics from the replicas directly."""
    node, token = await make_node(admin, f"pool-{uuid.uuid4().hex[:6]}", {"cpu": "4", "memory": "8Gi"},
                                  {"cpu": "4", "memory": "8Gi"})
    namespace = f"cm-{uuid.uuid4().hex[:6]}"
    await create(admin, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    for name, app in (("web-0", "web"), ("web-1", "web"), ("db-0", "db")):
        await create(admin, f"/api/v1/namespaces/{namespace}/pods", pod_manifest(name, labels={"app": app},
                                                                                   node_name=node))
    reader = await bound_token(admin, "e2e-custom-metrics-reader", [{
        "apiGroups": ["custom.metrics.k8s.io", "external.metrics.k8s.io"], "resources": ["*"],
        "verbs": ["get", "list"]}])
    return {"node": node, "token": token, "namespace": namespace, "state": str(sandbox_and_state[1]),
            "reader": reader}


async def seen_pods(admin: Kube, web: dict[str, str], metric: str, count: int) -> None:
    """Wait until every replica's Pod informer knows the pods and it holds the samples: the selector
    query finds them all on each. The metrics APIs are eventually consistent across replicas (a
    standby's copy trails the leader by its feed), so a test reads on only once all agree."""
    path = f"{CUSTOM}/namespaces/{web['namespace']}/pods/*/{metric}"

    async def found() -> bool:
        for replica in replicas(Path(web["state"])):
            status, listed = await get_from_replica(replica, path, web["reader"])
            if status != 200 or len(listed["items"]) != count:
                return False
        return True

    await eventually_async(found, timeout=15)


async def test_an_hpa_request_over_a_label_selector_returns_the_selected_pods(
        admin: Kube, kubectl: Kubectl, web: dict[str, str]) -> None:
    node, token, namespace = web["node"], web["token"], web["namespace"]
    now = time.time()
    status, answer = await put_samples(admin, node, token, batch(
        node,
        ("http_requests", {"method": "GET"}, "web-0", [(now - 4, 10.0), (now - 2, 12.5)]),
        ("http_requests", {"method": "POST"}, "web-0", [(now - 2, 0.5)]),
        ("http_requests", {"method": "GET"}, "web-1", [(now - 2, 3.0)]),
        ("http_requests", {"method": "GET"}, "db-0", [(now - 2, 99.0)]),
        namespace=namespace))
    assert status == 200, answer
    await seen_pods(admin, web, "http_requests", 3)

    listed = raw(kubectl, f"{CUSTOM}/namespaces/{namespace}/pods/*/http_requests?labelSelector=app%3Dweb")
    assert (listed["kind"], listed["apiVersion"]) == ("MetricValueList", "custom.metrics.k8s.io/v1beta2")
    assert [(item["describedObject"], item["metric"], item["value"]) for item in listed["items"]] == [
        ({"kind": "Pod", "namespace": namespace, "name": "web-0", "apiVersion": "/v1"},
         {"name": "http_requests", "selector": None}, "13"),  # GET 12.5 + POST 0.5: each series' newest
        ({"kind": "Pod", "namespace": namespace, "name": "web-1", "apiVersion": "/v1"},
         {"name": "http_requests", "selector": None}, "3")]
    # The HPA's metricSelector narrows the series; v1beta1 answers too.
    listed = raw(kubectl, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/"
                          f"{namespace}/pods/*/http_requests?labelSelector=app%3Dweb&metricLabelSelector=method%3DGET")
    assert [(item["describedObject"]["name"], item["metricName"], item["value"]) for item in listed["items"]] == [
        ("web-0", "http_requests", "12500m"), ("web-1", "http_requests", "3")]
    missing = kubectl.run("get", "--raw", f"{CUSTOM}/namespaces/{namespace}/pods/web-1/queue_length", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr

    resources = {r["name"] for r in raw(kubectl, CUSTOM)["resources"]}
    assert {"pods/http_requests", "pods/cpu_usage", "nodes/cpu_usage"} <= resources


async def test_external_metrics_by_label_and_an_aggregation_suffix(
        admin: Kube, kubectl: Kubectl, web: dict[str, str]) -> None:
    node, token, namespace = web["node"], web["token"], web["namespace"]
    now = time.time()
    status, answer = await put_samples(admin, node, token, batch(
        node,
        ("queue_depth", {"queue": "orders"}, "web-0", [(now - 6, 4.0), (now - 4, 9.0), (now - 2, 5.0)]),
        ("queue_depth", {"queue": "emails"}, "web-1", [(now - 2, 1.0)]),
        namespace=namespace))
    assert status == 200, answer

    listed = raw(kubectl, f"{EXTERNAL}/namespaces/{namespace}/queue_depth?labelSelector=queue%3Dorders")
    assert listed["kind"] == "ExternalMetricValueList"
    assert [(i["metricName"], i["metricLabels"], i["value"]) for i in listed["items"]] == [
        ("queue_depth", {"queue": "orders"}, "5")]
    listed = raw(kubectl, f"{EXTERNAL}/namespaces/{namespace}/queue_depth_agg_max?labelSelector=queue%3Dorders")
    assert [(i["metricName"], i["value"], i["window"]) for i in listed["items"]] == [("queue_depth_agg_max", "9", 4)]
    await seen_pods(admin, web, "queue_depth", 2)
    listed = raw(kubectl, f"{CUSTOM}/namespaces/{namespace}/pods/web-0/queue_depth_agg_avg")
    assert listed["items"][0]["value"] == "6"  # (4 + 9 + 5) / 3


async def test_a_bad_batch_is_refused_with_a_status_and_changes_nothing(
        admin: Kube, kubectl: Kubectl, web: dict[str, str]) -> None:
    node, token, namespace = web["node"], web["token"], web["namespace"]
    now = time.time()
    good = batch(node, ("temperature", {}, "web-0", [(now - 2, 40.0)]), namespace=namespace)
    assert (await put_samples(admin, node, token, good))[0] == 200
    path = f"{CUSTOM}/namespaces/{namespace}/pods/*/temperature"
    await seen_pods(admin, web, "temperature", 1)
    before = raw(kubectl, path)["items"]

    invalid = batch(node, ("temperature", {}, "web-0", [(now - 1, 99.0)]),
                    ("bad-metric-name", {}, "web-1", [(now - 1, 1.0)]), namespace=namespace)
    status, answer = await put_samples(admin, node, token, invalid)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    assert [c["field"] for c in answer["details"]["causes"]] == ["series[1].metric"]
    status, answer = await put_samples(admin, node, token, {**good, "kind": "NodeMetric"})
    assert (status, answer["reason"]) == (400, "BadRequest")
    status, answer = await put_samples(admin, node, token, batch("node-elsewhere", ("m", {}, None, [(now, 1.0)])))
    assert status in (400, 403)  # a batch for another node: never stored
    assert raw(kubectl, path)["items"] == before
    assert before[0]["value"] == "40"


async def test_builtin_cpu_usage_matches_the_reported_nodemetric(
        admin: Kube, kubectl: Kubectl, web: dict[str, str]) -> None:
    node, token, namespace = web["node"], web["token"], web["namespace"]
    await send(admin, node, token, report(node, "1500m", "2Gi", {
        (namespace, "web-0"): ("250m", "64Mi"), (namespace, "web-1"): ("100m", "32Mi")}))
    await seen_pods(admin, web, "cpu_usage", 2)
    listed = raw(kubectl, f"{CUSTOM}/namespaces/{namespace}/pods/*/cpu_usage?labelSelector=app%3Dweb")
    assert [(i["describedObject"]["name"], i["value"]) for i in listed["items"]] == [("web-0", "250m"),
                                                                                    ("web-1", "100m")]
    listed = raw(kubectl, f"{CUSTOM}/nodes/{node}/cpu_usage")
    assert (listed["items"][0]["describedObject"]["kind"], listed["items"][0]["value"]) == ("Node", "1500m")
    listed = raw(kubectl, f"{CUSTOM}/nodes/{node}/memory_usage")
    assert listed["items"][0]["value"] == str(2 * 1024**3)


async def test_retention_drops_old_series(admin: Kube, kubectl: Kubectl, web: dict[str, str]) -> None:
    node, token, namespace = web["node"], web["token"], web["namespace"]
    now = time.time()
    # One sample near the end of its retention, one fresh: only the first series should go.
    status, answer = await put_samples(admin, node, token, batch(
        node, ("short_lived", {}, "web-0", [(now - RETENTION + 6, 1.0)]),
        ("short_lived", {}, "web-1", [(now, 2.0)]), namespace=namespace))
    assert (status, answer["message"]) == (200, "stored 2 of 2 samples (2 new series)"), answer
    await seen_pods(admin, web, "short_lived", 2)

    async def expired() -> bool:
        status, listed = await admin.request("GET", f"{CUSTOM}/namespaces/{namespace}/pods/*/short_lived")
        return status == 200 and [i["describedObject"]["name"] for i in listed["items"]] == ["web-1"]

    await eventually_async(expired, timeout=RETENTION)
    gone = kubectl.run("get", "--raw", f"{CUSTOM}/namespaces/{namespace}/pods/web-0/short_lived", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


async def _value(replica: dict[str, Any], path: str, token: str) -> str | None:
    status, listed = await get_from_replica(replica, path, token)
    return listed["items"][0]["value"] if status == 200 and listed["items"] else None


# Last in the module: it kills the leader (the sandbox starts it again 10 s later, as a kubelet).
async def test_a_standby_serves_the_samples_and_the_new_leader_keeps_them_after_the_old_one_is_killed(
        admin: Kube, web: dict[str, str], sandbox_and_state: tuple[Path, Path]) -> None:
    node, token, namespace = web["node"], web["token"], web["namespace"]
    reader = web["reader"]
    # Stamped ahead (the leader takes up to 5 min ahead), so that this module's short retention
    # does not expire them during the failover.
    ahead = time.time() + 60
    status, answer = await put_samples(admin, node, token, batch(
        node, ("failover_rps", {"method": "GET"}, "web-0", [(ahead - 1, 4.0), (ahead, 6.5)]), namespace=namespace))
    assert (status, answer["message"]) == (200, "stored 2 of 2 samples (1 new series)"), answer
    await send(admin, node, token, report(node, "1500m", "2Gi", {(namespace, "web-0"): ("250m", "64Mi")}))
    identity, _, _ = await leader(admin)
    everyone = replicas(sandbox_and_state[1])
    old = next(r for r in everyone if r["identity"] == identity)
    standby = next(r for r in everyone if r["identity"] != identity)

    # The standby answers from its own copy: the scraped samples from the leader's feed, the
    # built-ins' history from its own sampling of the NodeMetric it replicated.
    samples = f"{CUSTOM}/namespaces/{namespace}/pods/web-0/failover_rps"
    assert await eventually_async(lambda: _value(standby, samples, token=reader), timeout=20, interval=0.1) == "6500m"
    assert await _value(standby, f"{samples}_agg_avg", reader) == "5250m"
    history = f"{CUSTOM}/namespaces/{namespace}/pods/web-0/cpu_usage_agg_max"
    assert await eventually_async(lambda: _value(standby, history, token=reader), timeout=10, interval=0.1) == "250m"
    status, external = await get_from_replica(standby, f"{EXTERNAL}/namespaces/{namespace}/failover_rps", reader)
    assert status == 200 and [i["value"] for i in external["items"]] == ["6500m"]

    os.kill(old["pid"], signal.SIGKILL)

    async def led_by_standby() -> bool:
        return bool((await leader(admin))[0] == standby["identity"])

    await eventually_async(led_by_standby, timeout=15, interval=0.05)
    assert await _value(standby, samples, reader) == "6500m"  # now the leader, it kept what it had copied

    async def served_through_the_aggregator() -> bool:
        status, listed = await admin.request("GET", samples)
        return status == 200 and [i["value"] for i in listed["items"]] == ["6500m"]

    await eventually_async(served_through_the_aggregator, timeout=30, interval=0.1)  # the endpoints follow readiness
