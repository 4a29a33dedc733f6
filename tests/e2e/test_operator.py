"""The operator's NodeMetric API end to end: real operator processes behind the sandbox's APIService.

The sandbox runs two `colocation operator` replicas with the manifests' ServiceAccount and RBAC
(and the Deployment's lease timings): on the builtin server as its own processes, on the
real control plane (`--apiserver kube`) as the Deployment's pods that the launcher's kubelet runs,
behind the Service's endpoints. Reports are sent as an agent sends them, with a ServiceAccount
token bound to a pod on the node, straight to the leader or through the aggregation layer.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import os
import random
import signal
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from colocation.kube.permissions import METRICS_GROUP, NODE_LEASE_NAMESPACE
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from tests.e2e.conftest import Kubectl, apiserver_kind, sandbox_kind_args, store_kind
from tests.e2e.kube import (
    TIME_FACTOR,
    Kube,
    WatchRefused,
    apiservice_available,
    as_client_go,
    bound_token,
    get_from_replica,
    put_as_client_go,
    ready_operator_endpoints,
    scrape_samples,
    start_sandbox_process,
    token_client,
)
from tests.timing import eventually_async

NS = "colocation-system"
BASE = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
# The Deployment's lease timings (15 s / 10 s / 2 s): a crashed leader's pod restarts it, and the new
# process frees the lease, so a failover never waits for the 15 s to run out.
LEASE_ARGS = ["--probe-interval=0.1"]


@pytest.fixture(scope="module")
def operator_sandbox(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the operator replicas are processes the test starts and kills")
    state = tmp_path_factory.mktemp("operator-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "2", "--nodes", "0", *LEASE_ARGS]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
async def admin(operator_sandbox: tuple[Path, Path], request: pytest.FixtureRequest) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(operator_sandbox[0]) as kube:
        await eventually_async(lambda: apiservice_available(kube), timeout=30)
        if store_kind(request.config) == "nats":  # the leader takes reports once connected to NATS
            await eventually_async(lambda: ready_operator_endpoints(kube, 2), timeout=30)
        yield kube


def replicas(state: Path) -> list[dict[str, Any]]:
    return list(json.loads((state / "operators.json").read_text()))


async def leader(kube: Kube) -> tuple[str, str, ssl.SSLContext]:
    """(pod name, endpoint, TLS context) of the current leader, from the Lease annotations.

    A replica holds the Lease as POD_NAME_SUFFIX, the suffix new for every process.
    """
    status, lease = await kube.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/"
                                              "colocation-operator")
    assert status == 200, lease
    annotations = lease["metadata"].get("annotations") or {}
    ca = annotations.get("colocation.dev/leader-ca")  # absent while nobody leads
    context = ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else ssl.create_default_context()
    context.check_hostname = False
    pod = (lease["spec"].get("holderIdentity") or "").rpartition("_")[0]
    return pod, annotations.get("colocation.dev/leader-endpoint", ""), context


async def make_node(kube: Kube, labels: dict[str, str] | None = None) -> tuple[str, str]:
    """A Node and an agent pod on it; returns (node name, the pod-bound agent token)."""
    node = f"node-{uuid.uuid4().hex[:6]}"
    status, body = await kube.request("POST", "/api/v1/nodes", {"metadata": {"name": node, "labels": labels or {}}})
    assert status == 201, body
    pod = {"metadata": {"name": f"agent-{node}", "namespace": NS},
           "spec": {"nodeName": node, "serviceAccountName": "colocation-agent",
                    "containers": [{"name": "agent", "image": "colocation:test"}]}}
    status, body = await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    assert status == 201, body
    return node, await agent_token(kube, node, body["metadata"]["uid"])


async def agent_token(kube: Kube, node: str, pod_uid: str) -> str:
    """A token bound to make_node's agent pod on `node`, as its kubelet requests (and renews) it."""
    request = {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
        "kind": "Pod", "apiVersion": "v1", "name": f"agent-{node}", "uid": pod_uid}}}
    status, token = await kube.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/colocation-agent/token",
                                       request)
    assert status == 201, token
    return str(token["status"]["token"])


def report(node: str, cpu: str = "1500m", memory: str = "2Gi", pods: int = 3) -> dict[str, Any]:
    now = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    usage = {"resources": {"cpu": cpu, "memory": memory}}
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
            "status": {"updateTime": now,
                       "nodeMetric": {"nodeUsage": usage, "systemUsage": {"resources": {"cpu": "100m"}},
                                      "aggregatedNodeUsages": [{"duration": "5m0s", "usage": {
                                          "avg": usage, "p50": usage, "p90": usage, "p95": usage, "p99": usage}}]},
                       "podsMetric": [{"namespace": "default", "name": f"pod-{i}", "priority": "koord-batch",
                                       "qos": "BE", "podUsage": {"resources": {"cpu": "100m", "memory": "64Mi"}}}
                                      for i in range(pods)]}}


async def put_direct(endpoint: str, context: ssl.SSLContext, node: str, body: Any,
                     token: str | None, subresource: str = "status") -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, session.put(
            f"{endpoint}{BASE}/{node}/{subresource}", data=data, headers=headers, ssl=context) as response:
        raw = await response.read()
        return response.status, orjson.loads(raw) if raw else None


@pytest.fixture
async def reader_token(admin: Kube) -> str:
    """A token that may read NodeMetrics, to ask a replica directly."""
    return await bound_token(admin, "e2e-nodemetrics-reader", [{
        "apiGroups": ["metrics.colocation.dev"], "resources": ["nodemetrics"], "verbs": ["get", "list", "watch"]}])


def address(replica: dict[str, Any]) -> str:
    """Where a replica listens: loopback on the builtin sandbox, its pod's address on the real one."""
    return f"https://{replica.get('host', '127.0.0.1')}:{replica['port']}"


@pytest.fixture
def kubectl_here(operator_sandbox: tuple[Path, Path], tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("no kubectl: neither built by hack/kube/build.sh (needs Go) nor on the PATH")
    return Kubectl(binary, operator_sandbox[0], tmp_path / "kubectl-cache")


async def test_reports_appear_through_the_apiservice_with_node_labels(admin: Kube, kubectl_here: Kubectl) -> None:
    node, token = await make_node(admin, {"pool": "batch-" + uuid.uuid4().hex[:4]})
    _, endpoint, context = await leader(admin)
    status, stored = await put_direct(endpoint, context, node, report(node), token)
    assert status == 200, stored
    status, got, _ = await as_client_go(admin, "GET", f"{BASE}/{node}")
    assert status == 200, got
    assert got["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "1500m"
    pool = got["metadata"]["labels"]["pool"]
    status, listed, _ = await as_client_go(admin, "GET", BASE, params={"labelSelector": f"pool={pool}"})
    assert [item["metadata"]["name"] for item in listed["items"]] == [node]

    output = kubectl_here.run("get", "nodemetrics", node).stdout
    header, row = output.splitlines()[:2]
    assert header.split() == ["NAME", "CPU", "MEMORY", "PODS", "DATA", "AGE", "AGE"]
    assert row.split()[:4] == [node, "1.50", "2.00Gi", "3"]  # cores and Gi, read at a glance


async def test_reports_through_kube_apiserver_are_accepted_too(admin: Kube,
                                                              operator_sandbox: tuple[Path, Path]) -> None:
    node, token = await make_node(admin)
    async with token_client(operator_sandbox[0], token) as agent:  # the token alone, as an agent has it
        status, body, attempts = await put_as_client_go(agent, f"{BASE}/{node}/status", report(node, cpu="700m"))
    assert status == 200, body
    # Any ready replica may get it; a standby answers 503 with Retry-After, which client-go retries.
    assert 1 <= attempts <= 10, attempts
    status, got = await admin.request("GET", f"{BASE}/{node}")
    assert got["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "700m"


async def _pod_token(admin: Kube, node: str) -> str:
    """Another token bound to the agent pod now on `node`."""
    status, pod = await admin.request("GET", f"/api/v1/namespaces/{NS}/pods/agent-{node}")
    assert status == 200, pod
    return await agent_token(admin, node, pod["metadata"]["uid"])


async def _leader_sample(endpoint: str, context: ssl.SSLContext, name: str, **labels: str) -> float:
    """The sum of the samples `name` with (at least) `labels` on the leader's /metrics, 0 if none."""
    return sum(sample.value for sample in await scrape_samples(f"{endpoint}/metrics", context)
               if sample.name == name and labels.items() <= sample.labels.items())


async def _evaluated(endpoint: str, context: ssl.SSLContext) -> bool:
    return await _leader_sample(endpoint, context, "colocation_reconcile_duration_seconds_count") >= 1


async def _locally_accepted(endpoint: str, context: ssl.SSLContext) -> float:
    """The leader's count of tokens it accepted without kube-apiserver."""
    return await _leader_sample(endpoint, context, "colocation_token_authentications_total",
                                method="local", result="accepted")


async def _until_accepted_locally(endpoint: str, context: ssl.SSLContext, node: str, token: str) -> None:
    """Report until the leader accepts `token` without TokenReview: until its caches hold the
    token's pod and ServiceAccount, the token goes to TokenReview."""
    async def accepted_locally() -> bool:
        before = await _locally_accepted(endpoint, context)
        status, _ = await put_direct(endpoint, context, node, report(node), token)
        return status == 200 and await _locally_accepted(endpoint, context) > before
    await eventually_async(accepted_locally, timeout=30, interval=0.2)


async def _token_reviews(admin: Kube, request: pytest.FixtureRequest) -> int:
    """TokenReviews kube-apiserver has answered so far: the builtin sandbox's request counters, or
    the real kube-apiserver's apiserver_request_total."""
    review = ("authentication.k8s.io", "tokenreviews")
    if apiserver_kind(request.config) == "kube":
        status, text = await admin.request("GET", "/metrics")
        assert status == 200, text
        return sum(int(float(line.rpartition(" ")[2])) for line in str(text).splitlines()
                   if line.startswith("apiserver_request_total{") and f'resource="{review[1]}"' in line)
    status, stats = await admin.request("GET", "/sandbox/stats")
    assert status == 200, stats
    return sum(int(item["requests"]) for item in stats["items"] if (item["group"], item["resource"]) == review)


async def test_reports_from_new_nodes_cost_no_authorization_review(admin: Kube) -> None:
    """One SubjectAccessReview per ServiceAccount, not per node: the node rule holds each token to
    its node, so a report is authorized for the collection, and every agent shares the answer.

    Counted on the leader, by what each review asked: kube-apiserver's own count also has the
    reviews both replicas send for the aggregator's and controllers' discovery requests."""
    _, endpoint, context = await leader(admin)
    nodes = [await make_node(admin) for _ in range(4)]

    def accepted(node: str, token: str) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            status, _ = await put_direct(endpoint, context, node, report(node), token)
            return status == 200
        return probe

    def report_reviews() -> Awaitable[float]:
        return _leader_sample(endpoint, context, "colocation_subject_access_reviews_total",
                              group=METRICS_GROUP, verb="update", result="allowed")

    # Whatever the leader's cache holds at the start, at most one review for all four agents: the
    # account's answer is cached for minutes, so it can expire at most once during the test.
    reviews_before = await report_reviews()
    for node, token in nodes:
        await eventually_async(accepted(node, token), timeout=30, interval=0.2)
    reviews_after = await report_reviews()
    assert reviews_after >= 1  # the counter counts: some report of this account was reviewed
    assert reviews_after - reviews_before <= 1, (reviews_before, reviews_after)


async def test_the_leader_gives_its_heaps_free_pages_back_once_a_minute(admin: Kube) -> None:
    """glibc keeps pages freed below blocks in use in the RSS; every replica calls malloc_trim once
    a minute and counts it (the RSS given back may be 0 on a small cluster)."""
    _, endpoint, context = await leader(admin)

    async def trimmed() -> bool:
        return await _leader_sample(endpoint, context, "colocation_heap_trims_total") >= 1

    await eventually_async(trimmed, timeout=90, interval=1.0)  # one interval after the process started, at most
    assert await _leader_sample(endpoint, context, "colocation_heap_trim_seconds_total") < 5.0


async def test_an_agent_may_write_only_its_own_nodes_lease(admin: Kube, real_cluster: bool) -> None:
    """manifests/agent-lease-policy.yaml: RBAC grants the agents every Lease of the namespace; the
    ValidatingAdmissionPolicy holds each to the node its token is bound to."""
    if not real_cluster:
        pytest.skip("the builtin sandbox stores ValidatingAdmissionPolicies but does not evaluate them")
    (node_a, token_a), (node_b, _) = await make_node(admin), await make_node(admin)

    def lease(name: str) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}}

    leases = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
    async with admin.with_token(token_a) as agent_a:
        status, body = await agent_a.request("POST", leases, lease(node_b))
        assert status == 403, body
        assert f"not Lease {node_b}" in body["message"], body
        status, body = await agent_a.request("POST", leases, lease(node_a))
        assert status == 201, body
        status, body = await admin.request("POST", leases, lease(node_b))  # an administrator is not held
        assert status == 201, body
        renewed = {**body, "spec": {**body["spec"], "holderIdentity": node_a}}
        status, body = await agent_a.request("PUT", f"{leases}/{node_b}", renewed)
        assert status == 403, body
        assert f"not Lease {node_b}" in body["message"], body


async def test_reports_cost_no_token_review(admin: Kube, request: pytest.FixtureRequest) -> None:
    """The leader checks an agent's bound token itself (the issuer's keys, its pod cache): reports
    sent with tokens it has never seen, so that no cached review can answer them, cost kube-apiserver
    no TokenReview."""
    node, first = await make_node(admin)
    _, endpoint, context = await leader(admin)
    await _until_accepted_locally(endpoint, context, node, first)

    fresh = [await _pod_token(admin, node) for _ in range(3)]
    reviews_before = await _token_reviews(admin, request)
    accepted_before = await _locally_accepted(endpoint, context)
    for token in fresh:
        status, body = await put_direct(endpoint, context, node, report(node, cpu="900m"), token)
        assert status == 200, body
    assert await _locally_accepted(endpoint, context) >= accepted_before + len(fresh)
    assert await _token_reviews(admin, request) == reviews_before
    status, got = await admin.request("GET", f"{BASE}/{node}")
    assert got["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "900m"


async def test_a_token_of_a_replaced_pod_is_refused(admin: Kube) -> None:
    """Revocation: once the agent pod is deleted and another takes its name, the old pod's token
    is refused (kube-apiserver refuses it too), as soon as the leader's pod watch sees the change."""
    node, token = await make_node(admin)
    _, endpoint, context = await leader(admin)
    assert (await put_direct(endpoint, context, node, report(node), token))[0] == 200
    status, body = await admin.request("DELETE", f"/api/v1/namespaces/{NS}/pods/agent-{node}",
                                       {"gracePeriodSeconds": 0})
    assert status == 200, body
    replacement = {"metadata": {"name": f"agent-{node}", "namespace": NS},
                   "spec": {"nodeName": node, "serviceAccountName": "colocation-agent",
                            "containers": [{"name": "agent", "image": "colocation:test"}]}}

    async def recreated() -> bool:
        return (await admin.request("POST", f"/api/v1/namespaces/{NS}/pods", replacement))[0] == 201
    await eventually_async(recreated, timeout=30, interval=0.2)  # once the old pod is gone from the API

    async def refused() -> bool:
        return (await put_direct(endpoint, context, node, report(node), token))[0] == 401
    await eventually_async(refused, timeout=30, interval=0.2)
    assert (await put_direct(endpoint, context, node, report(node), await _pod_token(admin, node)))[0] == 200


async def test_a_token_of_a_deleted_service_account_is_refused(admin: Kube) -> None:
    """Revocation: kube-apiserver refuses every token of a deleted ServiceAccount, and so does the
    leader once its ServiceAccount watch sees the deletion, though it had accepted the token locally.
    (A token that went to TokenReview, before the leader's caches held its pod and account, is
    remembered for the review cache's 120 s, as kube-apiserver's webhook authenticator does.)"""
    account = f"agent-probe-{uuid.uuid4().hex[:6]}"
    status, body = await admin.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts",
                                       {"metadata": {"name": account, "namespace": NS}})
    assert status == 201, body
    binding = f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{account}"
    status, body = await admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "colocation-agent"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NS}]})
    assert status == 201, body
    try:
        node = f"node-{uuid.uuid4().hex[:6]}"
        status, body = await admin.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
        assert status == 201, body
        status, pod = await admin.request("POST", f"/api/v1/namespaces/{NS}/pods", {
            "metadata": {"name": f"agent-{node}", "namespace": NS},
            "spec": {"nodeName": node, "serviceAccountName": account,
                     "containers": [{"name": "agent", "image": "colocation:test"}]}})
        assert status == 201, pod

        async def bound_token() -> str:
            status, issued = await admin.request(
                "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{account}/token",
                {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
                    "kind": "Pod", "apiVersion": "v1", "name": f"agent-{node}", "uid": pod["metadata"]["uid"]}}})
            assert status == 201, issued
            return str(issued["status"]["token"])
        token = await bound_token()
        _, endpoint, context = await leader(admin)
        await _until_accepted_locally(endpoint, context, node, token)
        token = await bound_token()  # never reviewed: only the leader's caches judge it
        before = await _locally_accepted(endpoint, context)
        assert (await put_direct(endpoint, context, node, report(node), token))[0] == 200
        assert await _locally_accepted(endpoint, context) > before

        status, body = await admin.request("DELETE", f"/api/v1/namespaces/{NS}/serviceaccounts/{account}")
        assert status == 200, body

        async def refused() -> bool:
            return (await put_direct(endpoint, context, node, report(node), token))[0] == 401
        await eventually_async(refused, timeout=30, interval=0.2)
    finally:
        await admin.request("DELETE", binding)


async def test_a_deleted_nodes_nodemetric_goes_at_once(admin: Kube) -> None:
    """Not after the metric TTL (600 s): the leader follows the Nodes and deletes their data."""
    node, token = await make_node(admin)
    _, endpoint, context = await leader(admin)
    assert (await put_direct(endpoint, context, node, report(node), token))[0] == 200
    assert (await admin.request("GET", f"{BASE}/{node}"))[0] == 200
    status, body = await admin.request("DELETE", f"/api/v1/nodes/{node}")
    assert status == 200, body

    async def gone() -> bool:
        return (await admin.request("GET", f"{BASE}/{node}"))[0] == 404
    await eventually_async(gone, timeout=10, interval=0.1)
    # An agent that still reports for it cannot bring it back: the Node is unknown (404), or, where
    # the pod garbage collector already deleted the agent's pod, its pod-bound token is void (401).
    assert (await put_direct(endpoint, context, node, report(node), token))[0] in (401, 404)
    assert (await admin.request("GET", f"{BASE}/{node}"))[0] == 404


async def test_rejected_reports_change_nothing(admin: Kube) -> None:
    node, token = await make_node(admin)
    other, _ = await make_node(admin)
    _, endpoint, context = await leader(admin)
    assert (await put_direct(endpoint, context, node, report(node), token))[0] == 200
    status, before = await admin.request("GET", BASE)
    cases = [
        ("a report for another node", other, report(other), token, 403),
        ("no token", node, report(node, cpu="9"), None, 401),
        ("malformed JSON", node, b'{"kind": "NodeMetric",', token, 400),
        ("negative usage", node, report(node, cpu="-1"), token, 422),
        ("wrong kind", node, report(node) | {"kind": "Pod"}, token, 400),
        ("over 1 MiB", node, b"{" + b" " * (1024 * 1024 + 10) + b"}", token, 413),
    ]
    for what, target, body, credential, expected in cases:
        status, answer = await put_direct(endpoint, context, target, body, credential)
        assert status == expected, (what, answer)
        assert answer["kind"] == "Status" and answer["code"] == expected, (what, answer)
    status, after = await admin.request("GET", BASE)
    assert after["items"] == before["items"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_bad_read_parameters_get_a_status_and_no_read_moves_the_resource_version(
        admin: Kube, operator_sandbox: tuple[Path, Path], reader_token: str) -> None:
    # Issue 17: watches up to 300 s ahead walked the leader's resourceVersion forward; malformed list
    # parameters got the whole list; a URL over 8,190 bytes got a text/plain 400.
    identity, _, _ = await leader(admin)
    replica = next(r for r in replicas(operator_sandbox[1]) if r["identity"] == identity)
    status, listed = await get_from_replica(replica, BASE, reader_token)
    assert status == 200, listed
    before = int(listed["metadata"]["resourceVersion"])
    for step in (1, 2, 3):
        ahead = before + step * 290_000_000
        status, answer = await get_from_replica(replica, f"{BASE}?watch=1&resourceVersion={ahead}", reader_token)
        assert (status, answer["reason"]) == (504, "Timeout"), answer
    for query in ("resourceVersion=abc", "limit=abc", "limit=-1", "continue=garbage"):
        status, answer = await get_from_replica(replica, f"{BASE}?{query}", reader_token)
        assert (status, answer["kind"], answer["reason"]) == (400, "Status", "BadRequest"), (query, answer)
    status, answer = await get_from_replica(replica, f"{BASE}?labelSelector=a%20in%20({'x,' * 4600}y)", reader_token)
    assert (status, answer["kind"], answer["code"]) == (431, "Status", 431), answer
    status, again = await get_from_replica(replica, f"{BASE}?resourceVersion=0", reader_token)
    assert int(again["metadata"]["resourceVersion"]) == before


@pytest.mark.memory_store_only(reason="with --store nats every replica takes reports")
async def test_a_standby_refuses_reports_and_names_the_leader(admin: Kube, operator_sandbox: tuple[Path, Path]) -> None:
    node, token = await make_node(admin)
    identity, _, _ = await leader(admin)
    standby = next(r for r in replicas(operator_sandbox[1]) if r["identity"] != identity)
    # The standby's certificate comes from its own CA, which only a leader publishes.
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE

    async def refused_naming_the_leader() -> tuple[int, Any] | None:
        # A standby restarted by an earlier test names the leader once its election has seen the Lease.
        status, answer = await put_direct(address(standby), unverified, node, report(node), token)
        return (status, answer) if status != 503 or identity in answer["message"] else None

    status, answer = await eventually_async(refused_naming_the_leader, timeout=10, interval=0.2)
    assert status == 503, answer
    assert answer["reason"] == "ServiceUnavailable" and identity in answer["message"]
    # ... and where it serves, so that an agent goes there without reading the Lease.
    _, endpoint, _ = await leader(admin)
    [cause] = answer["details"]["causes"]
    assert cause["reason"] == "Leader" and cause["message"] == endpoint and cause["field"].startswith(identity)


async def test_with_the_nats_store_a_standby_takes_a_report_and_every_replica_serves_it(
        admin: Kube, operator_sandbox: tuple[Path, Path], reader_token: str, request: pytest.FixtureRequest) -> None:
    if store_kind(request.config) != "nats":
        pytest.skip("--store nats only: otherwise a standby refuses reports (the test above)")
    node, token = await make_node(admin)
    identity, _, _ = await leader(admin)
    everyone = replicas(operator_sandbox[1])
    standby = next(r for r in everyone if r["identity"] != identity)
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    status, answer = await put_direct(address(standby), unverified, node, report(node, cpu="1700m"), token)
    assert status == 200, answer
    version = answer["metadata"]["resourceVersion"]
    for replica in everyone:  # a read without a resourceVersion waits for the replica's copy
        status, served = await get_from_replica(replica, f"{BASE}/{node}", reader_token)
        assert status == 200, served
        assert served["metadata"]["resourceVersion"] == version
        assert served["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "1700m"


async def test_the_leader_publishes_its_standbys_and_they_are_warm(
        admin: Kube, operator_sandbox: tuple[Path, Path], request: pytest.FixtureRequest) -> None:
    identity, _, context = await leader(admin)
    expected = {address(r) for r in replicas(operator_sandbox[1])}
    annotations: dict[str, str] = {}

    async def published() -> dict[str, str] | None:
        _, lease = await admin.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/"
                                              "colocation-operator")
        annotations.update(lease["metadata"].get("annotations") or {})
        listed = json.loads(annotations.get("colocation.dev/replica-endpoints") or "{}")
        return listed if set(listed.values()) == expected else None

    # Agents that lose the leader ask these replicas, not kube-apiserver, who leads now; with
    # --store nats each agent reports to one of them (its node ranks them).
    listed = await eventually_async(published, timeout=20 * TIME_FACTOR, interval=0.2)
    assert len(listed) == 2 and any(name.startswith(identity) for name in listed)
    reports_to = "any-replica" if store_kind(request.config) == "nats" else None
    assert annotations.get("colocation.dev/reports") == reports_to
    standby = next(r for r in replicas(operator_sandbox[1]) if r["identity"] != identity)

    async def warm() -> bool:  # its informers listed and its configuration read, before it leads
        return await _leader_sample(address(standby), context, "colocation_controllers_warm") == 1

    await eventually_async(warm, timeout=30 * TIME_FACTOR, interval=0.2)
    assert await _leader_sample(address(standby), context, "colocation_reconcile_duration_seconds_count") == 0


async def _complete(kube: Kube, nodes: set[str]) -> bool:
    status, body = await kube.request("GET", BASE)
    return status == 200 and nodes <= {item["metadata"]["name"] for item in body["items"]}


class Reader:
    """A client listing NodeMetrics through the APIService every 100 ms during a failover.

    A request that fails is retried once after a short backoff with jitter (the aggregator may
    still dial the dead replica's address until its endpoint goes); retries are counted, and a
    list that fails twice is a failure the test reports.
    """

    def __init__(self, kube: Kube, nodes: set[str]) -> None:
        self.kube, self.nodes = kube, nodes
        self.lists = self.retries = 0
        self.failures: list[str] = []
        self.versions: list[int] = []

    async def run(self) -> None:
        while True:
            for attempt in (1, 2):
                status, body = await self.kube.request("GET", BASE)
                if status == 200:
                    break
                if attempt == 1:
                    self.retries += 1
                    await asyncio.sleep(random.uniform(0.2, 0.4))  # the client's retry backoff
            self.lists += 1
            if status != 200:
                self.failures.append(f"{status}: {body}")
            elif not self.nodes <= {item["metadata"]["name"] for item in body["items"]}:
                self.failures.append(f"incomplete: {sorted(item['metadata']['name'] for item in body['items'])}")
            else:
                self.versions.append(int(body["metadata"]["resourceVersion"]))
            await asyncio.sleep(0.1)  # the reader's pace, not synchronisation


@pytest.mark.parametrize("how", ["kill", "terminate"])
async def test_failover_keeps_serving_reads_and_watches(
        admin: Kube, operator_sandbox: tuple[Path, Path], how: str, reader_token: str, real_cluster: bool,
        record_property: Any) -> None:
    nodes = {}
    for _ in range(3):
        node, token = await make_node(admin)
        nodes[node] = token
    identity, endpoint, context = await leader(admin)
    for node, token in nodes.items():
        assert (await put_direct(endpoint, context, node, report(node), token))[0] == 200
    _, listed = await admin.request("GET", BASE)
    list_rv = int(listed["metadata"]["resourceVersion"])
    standby = next(r for r in replicas(operator_sandbox[1]) if r["identity"] != identity)
    old = next(r for r in replicas(operator_sandbox[1]) if r["identity"] == identity)
    # Both replicas serve complete data and are behind the Service before the failover (a replica
    # restarted by an earlier test may still be catching up).
    await eventually_async(lambda: _standby_complete(reader_token, standby, set(nodes)), timeout=40, interval=0.1)
    await eventually_async(lambda: ready_operator_endpoints(admin, 2), timeout=30, interval=0.1)

    logged_before, standby_logged_before = _log_size(old["log"]), _log_size(standby["log"])
    restarts_before = await _restart_count(admin, old["identity"])
    reader = Reader(admin, set(nodes))
    reading = asyncio.create_task(reader.run())
    async with admin.watch(BASE, resourceVersion=str(list_rv)) as events:
        old_endpoint, old_context = endpoint, context
        os.kill(old["pid"], signal.SIGKILL if how == "kill" else signal.SIGTERM)
        started = time.monotonic()
        await eventually_async(lambda: _led_by(admin, standby["identity"]), timeout=20, interval=0.02)
        if how == "terminate":
            # Draining after it released the Lease, the old replica still answers for a few
            # seconds (unless a loaded machine let them pass): it must not count as a leader.
            with contextlib.suppress(aiohttp.ClientConnectionError):
                assert await _leader_sample(old_endpoint, old_context, "colocation_leader") == 0
        node, token = next(iter(nodes.items()))
        _, endpoint, context = await leader(admin)
        assert (await put_direct(endpoint, context, node, report(node, cpu="2"), token))[0] == 200
        accepted = time.monotonic() - started
        # The standby was warm: as leader it evaluates every node at once, not after listing them.
        await eventually_async(lambda: _evaluated(endpoint, context), timeout=5 * TIME_FACTOR, interval=0.05)
        evaluated = time.monotonic() - started
        # The watch opened before the failover: it either carries on (served by the standby) or
        # ends, and is then resumed from the last resourceVersion it saw, on whichever replica.
        seen_rv, modified = list_rv, None
        while modified is None:
            event = await asyncio.wait_for(events.get(), 10 * TIME_FACTOR)
            if event is None:
                break
            seen_rv = max(seen_rv, int(event["object"]["metadata"].get("resourceVersion") or 0))
            if event["type"] == "MODIFIED" and event["object"]["metadata"]["name"] == node:
                modified = event
    rewatches = 0
    while modified is None:
        # Resumed as a reflector resumes it: from the last resourceVersion seen, again after a
        # jittered backoff if the aggregator still dialed the replica that went (counted).
        rewatches += 1
        assert rewatches <= 5, "the watch could not be resumed"
        try:
            async with admin.watch(BASE, resourceVersion=str(seen_rv)) as events:
                while modified is None:
                    event = await asyncio.wait_for(events.get(), 10 * TIME_FACTOR)
                    assert event is not None and event["type"] != "ERROR", event
                    if event["type"] == "MODIFIED" and event["object"]["metadata"]["name"] == node:
                        modified = event
        except WatchRefused as refused:
            assert refused.status == 503, refused
            await asyncio.sleep(random.uniform(0.2, 0.4))  # the client's retry backoff
    assert modified["object"]["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "2"
    await eventually_async(lambda: _reads_after(reader, 5), timeout=10)
    reading.cancel()
    record_property(f"failover_{how}_report_accepted_seconds", round(accepted, 3))
    record_property(f"failover_{how}_first_evaluation_seconds", round(evaluated, 3))
    record_property(f"failover_{how}_list_retries", reader.retries)
    record_property(f"failover_{how}_watch_resumes", rewatches)
    print(f"failover after {how}: a report accepted by the new leader {accepted:.2f}s and its first evaluation "
          f"finished {evaluated:.2f}s after the signal; "
          f"{reader.lists} lists through the APIService, {reader.retries} retried once")
    assert reader.failures == []
    assert reader.versions == sorted(reader.versions), "a list's resourceVersion went backwards"
    assert reader.versions[0] >= list_rv
    if how == "kill":
        # The kubelet reports the container's death and its restart, as `kubectl get pods` shows them.
        await eventually_async(lambda: _restarted_since(admin, old["identity"], restarts_before), timeout=20)
        # Nobody waited for the lease to expire: the standby took it once the kubelet reported the
        # leader's container stopped or restarted, or the restarted process freed its predecessor's.
        restarted = _log_since(old["log"], logged_before)
        took_over = _log_since(standby["log"], standby_logged_before)
        assert "taking over from" in took_over or "freed the lease" in restarted, \
            (took_over[-2000:], restarted[-2000:])


async def _restart_count(kube: Kube, pod: str) -> int:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods/{pod}")
    assert status == 200, body
    return int(body["status"]["containerStatuses"][0].get("restartCount") or 0)


async def _restarted_since(kube: Kube, pod: str, restarts_before: int) -> bool:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods/{pod}")
    container = body["status"]["containerStatuses"][0] if status == 200 else {}
    return (int(container.get("restartCount") or 0) > restarts_before and "running" in container.get("state", {})
            and "finishedAt" in (container.get("lastState") or {}).get("terminated", {}))


def _log_size(path: str) -> int:
    return Path(path).stat().st_size


def _log_since(path: str, offset: int) -> str:
    with Path(path).open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


async def _reads_after(reader: Reader, count: int) -> bool:
    return reader.lists >= count


async def _standby_complete(token: str, replica: dict[str, Any], nodes: set[str]) -> bool:
    status, body = await get_from_replica(replica, BASE, token)
    return status == 200 and nodes <= {item["metadata"]["name"] for item in body["items"]}


async def _led_by(kube: Kube, identity: str) -> bool:
    return (await leader(kube))[0] == identity
