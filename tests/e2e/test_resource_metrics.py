"""`kubectl top` without metrics-server: the operator's metrics.k8s.io behind the sandbox's aggregation layer.

The sandbox runs with `--serve-resource-metrics` (the operators get the flag, the component's
APIService v1beta1.metrics.k8s.io is registered); reports are sent as agents send them, with a
token bound to a pod on the node, and the real kubectl reads the figures back.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from tests.e2e.conftest import Kubectl, sandbox_kind_args
from tests.e2e.kube import (
    Kube,
    apiservice_available,
    create,
    node_agent_token,
    pod_manifest,
    put_as_client_go,
    start_sandbox_process,
)
from tests.timing import eventually_async

NS = "colocation-system"
METRICS = "/apis/metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the operators are processes the test starts, with flags of its own")
    state = tmp_path_factory.mktemp("resource-metrics-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "2", "--serve-resource-metrics", "--probe-interval=0.2"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig


@pytest.fixture
async def admin(sandbox: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(sandbox) as kube:
        await eventually_async(lambda: apiservice_available(kube, "v1beta1.metrics.k8s.io"), timeout=30)
        yield kube


@pytest.fixture
def top(sandbox: Path, tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("no kubectl: neither built by hack/kube/build.sh (needs Go) nor on the PATH")
    return Kubectl(binary, sandbox, tmp_path / "kubectl-cache")


async def make_node(kube: Kube, pool: str, allocatable: dict[str, str], capacity: dict[str, str]) -> tuple[str, str]:
    """A Node with capacity and allocatable, and a pod-bound agent token for it."""
    node = f"node-{uuid.uuid4().hex[:6]}"
    await create(kube, "/api/v1/nodes", {"metadata": {"name": node, "labels": {"pool": pool}}})
    status, body = await kube.request("PATCH", f"/api/v1/nodes/{node}/status",
                                      {"status": {"allocatable": allocatable, "capacity": capacity}},
                                      content_type="application/merge-patch+json")
    assert status == 200, body
    return node, await node_agent_token(kube, node, NS)


def report(node: str, cpu: str, memory: str, pods: dict[tuple[str, str], tuple[str, str]]) -> dict[str, Any]:
    now = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    usage = {"resources": {"cpu": cpu, "memory": memory}}
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
            "status": {"updateTime": now,
                       "nodeMetric": {"nodeUsage": usage, "aggregatedNodeUsages": [
                           {"duration": "5m0s", "usage": {"avg": usage}}]},
                       "podsMetric": [{"namespace": ns, "name": name, "priority": "koord-batch", "qos": "BE",
                                       "podUsage": {"resources": {"cpu": pod_cpu, "memory": pod_memory}}}
                                      for (ns, name), (pod_cpu, pod_memory) in pods.items()]}}


async def send(admin: Kube, node: str, token: str, body: dict[str, Any]) -> None:
    # Through kube-apiserver, as an agent does when the leader cannot be reached directly: any ready
    # replica may get it, and a standby's 503 with Retry-After is retried, as client-go does.
    async with admin.with_token(token) as agent:
        status, answer, _ = await put_as_client_go(
            agent, f"/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{node}/status", body)
    assert status == 200, answer


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()]


async def test_kubectl_top_node_and_pod_print_the_reported_usage(admin: Kube, top: Kubectl) -> None:
    pool = f"pool-{uuid.uuid4().hex[:6]}"
    # kubectl's percentages are of allocatable, not capacity.
    busy, busy_token = await make_node(admin, pool, {"cpu": "4", "memory": "8Gi"}, {"cpu": "5", "memory": "10Gi"})
    idle, idle_token = await make_node(admin, pool, {"cpu": "2", "memory": "4Gi"}, {"cpu": "2", "memory": "4Gi"})
    namespace = f"top-{uuid.uuid4().hex[:6]}"
    await create(admin, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    for name, app, node in (("web-0", "web", busy), ("web-1", "web", busy), ("db-0", "db", idle)):
        await create(admin, f"/api/v1/namespaces/{namespace}/pods",
                     pod_manifest(name, labels={"app": app}, node_name=node))

    await send(admin, busy, busy_token, report(busy, "1500m", "2Gi", {
        (namespace, "web-0"): ("100m", "64Mi"), (namespace, "web-1"): ("250m", "128Mi"),
        (namespace, "deleted-0"): ("900m", "1Gi"),  # still in the report, but its Pod is gone
    }))
    await send(admin, idle, idle_token, report(idle, "500m", "1Gi", {(namespace, "db-0"): ("50m", "512Mi")}))

    async def pods_served() -> bool:
        status, listed = await admin.request("GET", f"{METRICS}/namespaces/{namespace}/pods")
        return status == 200 and len(listed["items"]) == 3

    await eventually_async(pods_served, timeout=15)  # the operator's Pod informer has seen the pods

    # 1500m of 4 cores is 37 % (kubectl truncates), 2Gi of 8Gi is 25 %; 500m of 2 is 25 %, 1Gi of 4Gi 25 %.
    header, *nodes = rows(top.run("top", "node", "-l", f"pool={pool}").stdout)
    assert header == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
    assert sorted(nodes) == sorted([[busy, "1500m", "37%", "2048Mi", "25%"], [idle, "500m", "25%", "1024Mi", "25%"]])
    _, single = rows(top.run("top", "node", busy).stdout)
    assert single == [busy, "1500m", "37%", "2048Mi", "25%"]

    header, *pods = rows(top.run("top", "pod", "-A").stdout)
    assert header == ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert [row for row in pods if row[0] == namespace] == [[namespace, "db-0", "50m", "512Mi"],
                                                            [namespace, "web-0", "100m", "64Mi"],
                                                            [namespace, "web-1", "250m", "128Mi"]]
    # Label selectors reach the operator, which answers them from the Pods' labels.
    _, *web = rows(top.run("top", "pod", "-n", namespace, "-l", "app=web", "--sum").stdout)
    assert web[:2] == [["web-0", "100m", "64Mi"], ["web-1", "250m", "128Mi"]]
    assert web[-1] == ["350m", "192Mi"]  # the --sum line, under a separator
    _, *containers = rows(top.run("top", "pod", "db-0", "-n", namespace, "--containers").stdout)
    assert containers == [["db-0", "pod", "50m", "512Mi"]]


async def test_reading_metrics_needs_rbac_on_metrics_k8s_io(admin: Kube) -> None:
    sa = f"reader-{uuid.uuid4().hex[:6]}"
    await create(admin, "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": sa}})
    token = await create(admin, f"/api/v1/namespaces/default/serviceaccounts/{sa}/token", {"spec": {}})
    async with admin.with_token(token["status"]["token"]) as reader:
        status, answer = await reader.request("GET", f"{METRICS}/nodes")
        assert (status, answer["reason"]) == (403, "Forbidden"), answer
        await create(admin, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": sa},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "colocation:aggregated-metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}]})

        async def allowed() -> bool:
            # The operator caches a denial for a few seconds, as upstream's delegating authorizer does.
            status, _ = await reader.request("GET", f"{METRICS}/nodes")
            return status == 200

        await eventually_async(allowed, timeout=30, interval=0.5)
