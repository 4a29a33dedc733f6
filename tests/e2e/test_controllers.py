"""The controllers end to end: a sandbox with a real operator process and real agents.

The sandbox runs `colocation operator` with short thresholds (grace period 3 s and eviction timeout
4 s, both times the time factor; an evaluation every 0.5 s) and two nodes with their agents: this
machine, measured by a real `colocation agent` process, and a simulated node run by a second agent process. An agent is
"stopped" with SIGSTOP, which freezes it exactly as a hung or partitioned agent looks from the
operator: no Lease renewal, no report, no goodbye. SIGCONT brings it back. One test drives a
node of its own, renewing its Lease and sending its reports itself, to control the load exactly.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import functools
import json
import os
import re
import signal
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from colocation.agent import selfcheck
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from tests.e2e.conftest import Kubectl, sandbox_kind_args
from tests.e2e.kube import (
    TIME_FACTOR,
    Kube,
    condition,
    fresh_namespace,
    start_agent_process,
    start_sandbox_process,
)
from tests.timing import eventually_async

NS = "colocation-system"
LEASE_NS = "colocation-node-lease"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
MID_CPU = "kubernetes.io/mid-cpu"
MID_MEMORY = "kubernetes.io/mid-memory"
# Short, so the tests are quick, and scaled like every deadline: the grace period is how long an
# agent heartbeating every second may go unheard, which a loaded machine stretches past 3 s now and
# then; the eviction timeout is also how long a node may take to recover after the others end a
# full disruption (its timer then restarts): an agent resumed from SIGSTOP can need several seconds.
GRACE, EVICTION_TIMEOUT = 3.0 * TIME_FACTOR, 4.0 * TIME_FACTOR
NODERESOURCES = "/apis/slo.colocation.dev/v1alpha1/noderesources"
NODESLOS = "/apis/slo.colocation.dev/v1alpha1/nodeslos"
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/colocation-node-lease/leases"
SANDBOX_ARGS = [
    "--operators", "1", "--nodes", "2", "--pods-per-node", "4", "--probe-interval", "0.2",
    f"--operator-arg=--node-grace-period={GRACE}", f"--operator-arg=--eviction-timeout={EVICTION_TIMEOUT}",
    "--operator-arg=--evaluation-interval=0.5", "--operator-arg=--eviction-rate=10",
    "--agent-arg=--report-interval=1", "--agent-arg=--lease-renew-interval=1",
    # Prod pods' requests may be reclaimed for Mid-tier resources from their first samples on.
    "--agent-arg=--prediction-cold-start=0",
]


@pytest.fixture(scope="module")
def controller_sandbox(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the agents are processes the test starts and freezes")
    state = tmp_path_factory.mktemp("controllers-sandbox")
    with start_sandbox_process(state, [*sandbox_kind_args(request.config), *SANDBOX_ARGS]) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
async def admin(controller_sandbox: tuple[Path, Path]) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(controller_sandbox[0]) as kube:
        yield kube


@pytest.fixture
async def workloads(admin: Kube) -> AsyncIterator[str]:
    """A fresh namespace in this sandbox for the test's pods, deleted afterwards."""
    async with fresh_namespace(admin) as name:
        yield name


@pytest.fixture
def kubectl_here(controller_sandbox: tuple[Path, Path], tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("no kubectl: neither built by hack/kube/build.sh (needs Go) nor on the PATH")
    return Kubectl(binary, controller_sandbox[0], tmp_path / "kubectl-cache")


def agents(state: Path) -> list[dict[str, Any]]:
    return list(json.loads((state / "agents.json").read_text()))


def real_node(state: Path) -> tuple[str, int]:
    agent = next(a for a in agents(state) if not a["simulated"])
    return agent["nodes"][0], agent["pid"]


def simulated_node(state: Path) -> tuple[str, int]:
    agent = next(a for a in agents(state) if a["simulated"])
    return agent["nodes"][0], agent["pid"]


@contextlib.contextmanager
def frozen(*pids: int) -> Iterator[None]:
    """The agents stop dead (no renewal, no report, no goodbye) until the block ends."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


async def get(kube: Kube, path: str) -> dict[str, Any] | None:
    status, body = await kube.request("GET", path)
    return body if status == 200 else None


def batch_of(node: dict[str, Any], where: str = "allocatable") -> tuple[str | None, str | None]:
    resources = (node.get("status") or {}).get(where) or {}
    return resources.get(BATCH_CPU), resources.get(BATCH_MEMORY)


def mid_of(node: dict[str, Any], where: str = "allocatable") -> tuple[str | None, str | None]:
    resources = (node.get("status") or {}).get(where) or {}
    return resources.get(MID_CPU), resources.get(MID_MEMORY)


def mid_values(node: dict[str, Any]) -> tuple[int, int]:
    """The Node's mid-cpu (milli-cores) and mid-memory (bytes): kube-apiserver stores quantities in
    their canonical form ("2000" reads back "2k", 1073741824 "1Gi")."""
    from colocation.apimachinery.quantity import byte_value

    cpu, memory = mid_of(node)
    return byte_value(cpu or "0"), byte_value(memory or "0")


async def offered(kube: Kube, node: str) -> dict[str, Any] | None:
    """The Node, once both batch and both mid resources are in both capacity and allocatable."""
    obj = await get(kube, f"/api/v1/nodes/{node}")
    if obj is None:
        return None
    for read in (batch_of, mid_of):
        if None in read(obj) or read(obj) != read(obj, "capacity"):
            return None
    return obj


async def withdrawn(kube: Kube, node: str) -> bool:
    """Whether the Node offers neither batch nor mid resources, in capacity or allocatable."""
    obj = await get(kube, f"/api/v1/nodes/{node}")
    return obj is not None and all(read(obj, where) == (None, None) for read in (batch_of, mid_of)
                                   for where in ("allocatable", "capacity"))


async def events(kube: Kube, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    status, body = await kube.request("GET", f"/api/v1/namespaces/{namespace}/events",
                                      params={"fieldSelector": f"involvedObject.name={name},reason={reason}"})
    assert status == 200, body
    return list(body["items"])


def pod(name: str, node: str, priority: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"koordinator.sh/priority-class": priority, **(labels or {})}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}


async def create_pod(kube: Kube, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    status, created = await kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    assert status == 201, created
    return created  # type: ignore[no-any-return]


async def pod_exists(kube: Kube, namespace: str, name: str) -> bool:
    return await get(kube, f"/api/v1/namespaces/{namespace}/pods/{name}") is not None


async def healthy(kube: Kube, node: str) -> bool:
    resource = await get(kube, f"{NODERESOURCES}/{node}")
    return bool(resource and (resource.get("status") or {}).get("healthy") is True
                and condition(resource, "AgentReady") == "True")


def shown_batch(resource: dict[str, Any]) -> tuple[int | None, int | None]:
    status = resource.get("status") or {}
    return status.get("batchCPU"), status.get("batchMemory")


async def shows_what_the_node_offers(kube: Kube, node: str) -> dict[str, Any] | None:
    """The NodeResource, once its batch figures are the Node's (both present)."""
    obj = await offered(kube, node)
    resource = await get(kube, f"{NODERESOURCES}/{node}")
    if obj is None or resource is None:
        return None
    cpu, memory = batch_of(obj)
    return resource if shown_batch(resource) == (int(cpu or 0), int(memory or 0)) else None


# ---- batch resources appear ----------------------------------------------------------------------

async def test_batch_resources_appear_on_every_node_with_their_nodeslo(
        admin: Kube, controller_sandbox: tuple[Path, Path], kubectl_here: Kubectl) -> None:
    state = controller_sandbox[1]
    nodes = [real_node(state)[0], simulated_node(state)[0]]
    for node in nodes:
        obj = await eventually_async(functools.partial(offered, admin, node), timeout=30)
        cpu, memory = batch_of(obj)
        assert cpu is not None and memory is not None and int(cpu) >= 0 and int(memory) >= 0
        # Kopf keeps no state on the objects it watches: no annotation, no finalizer.
        assert not [key for key in obj["metadata"].get("annotations") or {} if "kopf" in key]
        assert not obj["metadata"].get("finalizers")
        slo = await eventually_async(functools.partial(get, admin, f"{NODESLOS}/{node}"), timeout=10)
        assert slo["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
        assert slo["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] == 60
    # A simulated node has room to spare: it offers batch cpu.
    assert int(batch_of(await get(admin, f"/api/v1/nodes/{nodes[1]}") or {})[0] or 0) > 0

    # Its agent predicts its prod pods' peak: what they request beyond it becomes mid cpu.
    async def mid_cpu() -> int | None:
        metric = await get(admin, f"/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{nodes[1]}") or {}
        reclaimable = ((metric.get("status") or {}).get("prodReclaimableMetric") or {}).get("resource")
        obj = await offered(admin, nodes[1])
        millis = mid_values(obj)[0] if obj is not None and reclaimable else 0
        return millis or None

    await eventually_async(mid_cpu, timeout=30)

    rows = kubectl_here.run("get", "noderesources", *nodes).stdout.splitlines()
    assert rows[0].split() == ["NAME", "BATCH-CPU", "BATCH-MEMORY", "MID-CPU", "MID-MEMORY", "HEALTHY", "AGE"]
    by_name = {row.split()[0]: row.split() for row in rows[1:]}
    for node in nodes:
        assert by_name[node][5] == "true"
        # Human units: cores with two decimals, memory in Mi or Gi, of the figures the status holds.
        resource = await get(admin, f"{NODERESOURCES}/{node}") or {}
        millis, _ = shown_batch(resource)
        assert by_name[node][1] == f"{(millis or 0) / 1000:.2f}", by_name[node]
        assert by_name[node][3] == f"{(resource['status'].get('midCPU') or 0) / 1000:.2f}", by_name[node]
        for column in (2, 4):
            assert re.fullmatch(r"\d+Mi|\d+\.\d\d[GT]i", by_name[node][column]), by_name[node]


# ---- the threshold -------------------------------------------------------------------------------

async def leader_metrics(kube: Kube) -> str:
    """The leader's /metrics, as text."""
    endpoint, context = await eventually_async(lambda: _leader(kube), timeout=10)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, session.get(
            f"{endpoint}/metrics", ssl=context) as response:
        return await response.text()


async def leader_evaluations(kube: Kube) -> float:
    """How many evaluations of every node the leader has finished (its /metrics)."""
    text = await leader_metrics(kube)
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("colocation_reconcile_duration_seconds_count"))


async def _leader(kube: Kube) -> tuple[str, ssl.SSLContext] | None:
    lease = await get(kube, f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/colocation-operator")
    annotations = (lease or {}).get("metadata", {}).get("annotations") or {}
    if "colocation.dev/leader-ca" not in annotations:
        return None  # nobody leads yet
    context = ssl.create_default_context(cadata=base64.b64decode(annotations["colocation.dev/leader-ca"]).decode())
    context.check_hostname = False
    return annotations["colocation.dev/leader-endpoint"], context


class FakeAgent:
    """A node whose agent is this test: it renews the node's Lease and reports exactly the load given."""

    def __init__(self, kube: Kube, node: str, token: str) -> None:
        self.kube = kube
        self.node = node
        self.token = token
        self._renewals: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, kube: Kube) -> FakeAgent:
        node = f"e2e-{uuid.uuid4().hex[:6]}"
        resources = {"cpu": "10", "memory": "10Gi", "pods": "110"}
        status, body = await kube.request("POST", "/api/v1/nodes", {
            "metadata": {"name": node}, "status": {"capacity": resources, "allocatable": resources}})
        assert status == 201, body
        # The status of a create is dropped (status subresource): set it as the kubelet does.
        status, body = await kube.request("PATCH", f"/api/v1/nodes/{node}/status",
                                          {"status": {"capacity": resources, "allocatable": resources}},
                                          content_type="application/merge-patch+json")
        assert status == 200, body
        status, agent_pod = await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", {
            "metadata": {"name": f"agent-{node}"},
            "spec": {"nodeName": node, "serviceAccountName": "colocation-agent",
                     "containers": [{"name": "agent", "image": "colocation:test"}]}})
        assert status == 201, agent_pod
        status, token = await kube.request(
            "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/colocation-agent/token",
            {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": f"agent-{node}", "uid": agent_pod["metadata"]["uid"]}}})
        assert status == 201, token
        agent = cls(kube, node, token["status"]["token"])
        agent._renewals = asyncio.create_task(agent._renew())
        return agent

    async def _renew(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"
        while True:
            now = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            lease: dict[str, Any] = {"metadata": {"name": self.node}, "spec": {
                "holderIdentity": self.node, "leaseDurationSeconds": 40, "renewTime": now}}
            # kube-apiserver refuses an update of a Lease without its resourceVersion: read, then write.
            status, current = await self.kube.request("GET", f"{path}/{self.node}")
            if status == 404:
                await self.kube.request("POST", path, lease)
            elif status == 200:
                lease["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                await self.kube.request("PUT", f"{path}/{self.node}", lease)
            await asyncio.sleep(0.5)  # the renewal period of this agent

    async def report(self, system_cpu: str, prod_reclaimable: tuple[str, str] | None = None) -> None:
        now = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        usage = {"resources": {"cpu": system_cpu, "memory": "1Gi"}}
        body: dict[str, Any] = {
            "apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": self.node},
            "status": {"updateTime": now, "nodeMetric": {
                "nodeUsage": usage, "systemUsage": usage,
                "aggregatedNodeUsages": [{"duration": "5m0s", "usage": {
                    "avg": usage, "p50": usage, "p90": usage, "p95": usage, "p99": usage}}]},
                "podsMetric": []}}
        if prod_reclaimable is not None:
            body["status"]["prodReclaimableMetric"] = {"resource": {"resources": {
                "cpu": prod_reclaimable[0], "memory": prod_reclaimable[1]}}}
        endpoint, context = await eventually_async(lambda: _leader(self.kube), timeout=10)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, session.put(
                f"{endpoint}/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{self.node}/status",
                data=orjson.dumps(body), headers=headers, ssl=context) as response:
            assert response.status == 200, await response.text()

    async def stop(self) -> None:
        if self._renewals is not None:
            self._renewals.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewals
        await self.kube.request("DELETE", f"/api/v1/nodes/{self.node}")


async def daemonset_requests(kube: Kube, node: str) -> tuple[int, int]:
    """(cpu millis, memory bytes) the agent DaemonSet's pod on `node` requests. A real cluster puts
    one on every node (its toleration takes any taint); the builtin sandbox runs no DaemonSet
    controller. The batch formula counts its requests like any high-priority pod's."""
    from colocation.apimachinery.quantity import byte_value, cpu_millis

    status, pods = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods",
                                      params={"fieldSelector": f"spec.nodeName={node}",
                                              "labelSelector": "app.kubernetes.io/component=agent"})
    assert status == 200, pods
    requests = [c.get("resources", {}).get("requests", {}) for p in pods["items"] for c in p["spec"]["containers"]]
    return (sum(cpu_millis(r.get("cpu", "0")) for r in requests),
            sum(byte_value(r.get("memory", "0")) for r in requests))


async def placed_daemonset(kube: Kube, node: str, real_cluster: bool) -> tuple[int, int]:
    """On a real cluster, wait until the DaemonSet controller and the scheduler have placed the agent's
    pod on `node`; what it requests ((0, 0) in the builtin sandbox)."""

    async def scheduled() -> tuple[int, int] | None:
        requests = await daemonset_requests(kube, node)
        return requests if requests[0] > 0 else None

    return await eventually_async(scheduled, timeout=30) if real_cluster else (0, 0)


async def test_the_node_follows_load_only_beyond_the_threshold_and_its_objects_go_with_it(
        admin: Kube, real_cluster: bool) -> None:
    agent = await FakeAgent.start(admin)
    try:
        pod_cpu, pod_memory = await placed_daemonset(admin, agent.node, real_cluster)
        # 10 cpus, 60 % reclaimable: batch = 10000m - 4000m (safety margin) - system usage - the
        # DaemonSet pod's request. Memory: 10Gi - ceil(10Gi * 35 %) - 1Gi system - that pod's
        # request = 5905580032 bytes - its request, whatever the cpu does.
        memory = str(5905580032 - pod_memory)

        def cpu(millis: int) -> str:
            return str(millis - pod_cpu)

        await agent.report(system_cpu="500m")
        node = await eventually_async(lambda: offered(admin, agent.node), timeout=15)
        assert batch_of(node) == (cpu(5500), memory)

        async def status_cpu(value: int) -> bool:
            resource = await get(admin, f"{NODERESOURCES}/{agent.node}")
            return bool(resource and (resource.get("status") or {}).get("batchCPU") == value)

        await eventually_async(lambda: status_cpu(int(cpu(5500))), timeout=10)

        # 5200m: 5.5 % less, within resourceDiffThreshold (10 %): after two evaluations neither the Node
        # nor its NodeResource was written (their status shows what the Node offers).
        evaluations = await leader_evaluations(admin)
        await agent.report(system_cpu="800m")

        async def evaluated_twice_more() -> bool:
            return await leader_evaluations(admin) >= evaluations + 2

        await eventually_async(evaluated_twice_more, timeout=10)
        node = await get(admin, f"/api/v1/nodes/{agent.node}") or {}
        assert batch_of(node) == batch_of(node, "capacity") == (cpu(5500), memory)
        assert await status_cpu(int(cpu(5500)))

        # 4500m: 18 % less than what the Node offers: written, to capacity and allocatable alike.
        await agent.report(system_cpu="1500m")

        async def node_cpu(value: str) -> bool:
            obj = await get(admin, f"/api/v1/nodes/{agent.node}")
            return bool(obj and batch_of(obj) == batch_of(obj, "capacity") == (value, memory))

        await eventually_async(lambda: node_cpu(cpu(4500)), timeout=10)
        await eventually_async(lambda: status_cpu(int(cpu(4500))), timeout=10)
        resource = await get(admin, f"{NODERESOURCES}/{agent.node}") or {}
        assert condition(resource, "ColocationReady") == "True"
        assert resource["metadata"]["ownerReferences"][0]["name"] == agent.node
    finally:
        await agent.stop()

    async def gone(path: str) -> bool:
        return await get(admin, path) is None

    await eventually_async(lambda: gone(f"{NODESLOS}/{agent.node}"), timeout=10)
    await eventually_async(lambda: gone(f"{NODERESOURCES}/{agent.node}"), timeout=10)


# ---- Mid-tier resources ----------------------------------------------------------------------------

async def test_a_node_gets_mid_resources_from_its_reports_and_loses_them_when_colocation_is_disabled(
        admin: Kube, real_cluster: bool) -> None:
    agent = await FakeAgent.start(admin)
    try:
        await placed_daemonset(admin, agent.node, real_cluster)  # as the threshold test does, first
        # 10 cpus and 10Gi, 500m and 1Gi used: unused 9500m and 9Gi. The agent predicts its prod pods
        # leave 2 cpus and 1Gi of their requests: both below the unused, so the Node offers them whole
        # (midUnallocatedPercent 0 adds nothing of the unallocated; the caps are 100 % of capacity).
        await agent.report(system_cpu="500m", prod_reclaimable=("2", "1Gi"))

        async def offers_mid(expected: tuple[int, int]) -> dict[str, Any] | None:
            obj = await offered(admin, agent.node)
            return obj if obj is not None and mid_values(obj) == expected else None

        await eventually_async(lambda: offers_mid((2000, 2**30)), timeout=15)

        async def shown(expected: tuple[int | None, int | None]) -> dict[str, Any] | None:
            resource = await get(admin, f"{NODERESOURCES}/{agent.node}") or {}
            status = resource.get("status") or {}
            return resource if (status.get("midCPU"), status.get("midMemory")) == expected else None

        resource = await eventually_async(lambda: shown((2000, 2**30)), timeout=10)
        assert resource["status"]["display"]["midCPU"] == "2.00"
        assert resource["status"]["display"]["midMemory"] == "1.00Gi"

        # The node's strategy disables colocation: batch and mid resources leave the Node together.
        status, body = await admin.request("PATCH", f"{NODERESOURCES}/{agent.node}",
                                           {"spec": {"disableColocation": True}},
                                           content_type="application/merge-patch+json")
        assert status == 200, body
        await eventually_async(lambda: withdrawn(admin, agent.node), timeout=10)
        resource = await eventually_async(lambda: shown((None, None)), timeout=10)
        assert condition(resource, "ColocationReady") == "False"
    finally:
        await agent.stop()


# ---- the exit process ----------------------------------------------------------------------------

async def test_a_silent_agent_loses_batch_resources_then_batch_pods_then_recovers(
        admin: Kube, workloads: str, controller_sandbox: tuple[Path, Path]) -> None:
    namespace = workloads
    node, pid = real_node(controller_sandbox[1])
    await eventually_async(lambda: offered(admin, node), timeout=30)
    await eventually_async(lambda: healthy(admin, node), timeout=10)
    batch = await create_pod(admin, namespace, pod("batch", node, "koord-batch"))
    free = await create_pod(admin, namespace, pod("free", node, "koord-free"))
    await create_pod(admin, namespace, pod("prod", node, "koord-prod"))
    # A batch pod its PodDisruptionBudget protects: Running and Ready, and the budget needs it.
    await create_pod(admin, namespace, pod("protected", node, "koord-batch", {"app": "protected"}))
    now = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status, body = await admin.request(
        "PATCH", f"/api/v1/namespaces/{namespace}/pods/protected/status",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                                        "lastTransitionTime": now}]}},
        content_type="application/merge-patch+json")
    assert status == 200, body
    status, body = await admin.request("POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
        "metadata": {"name": "protected"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}})
    assert status == 201, body

    with frozen(pid):
        stopped = time.monotonic()
        await eventually_async(lambda: withdrawn(admin, node), timeout=GRACE + 5)
        assert time.monotonic() - stopped <= GRACE + 5 * TIME_FACTOR

        async def unhealthy() -> dict[str, Any] | None:
            resource = await get(admin, f"{NODERESOURCES}/{node}") or {}
            return resource if (resource.get("status") or {}).get("healthy") is False else None

        resource = await eventually_async(unhealthy, timeout=2)  # written in the same evaluation, just after the Node
        assert shown_batch(resource) == (None, None)  # what the Node offers: nothing
        assert condition(resource, "AgentReady") == "False"
        assert condition(resource, "ColocationReady") == "False"
        # Posted just after the status is written: it may follow the status by a moment.
        await eventually_async(lambda: events(admin, "default", node, "ColocationAgentNotReady"), timeout=5)

        async def evicted() -> bool:
            return not await pod_exists(admin, namespace, "batch") and not await pod_exists(admin, namespace, "free")

        await eventually_async(evicted, timeout=EVICTION_TIMEOUT + 10)
        assert time.monotonic() - stopped > EVICTION_TIMEOUT  # not before the timeout
        assert await pod_exists(admin, namespace, "prod")
        assert await pod_exists(admin, namespace, "protected")  # 429 from its budget: retried later, not forced
        resource = await get(admin, f"{NODERESOURCES}/{node}") or {}
        assert condition(resource, "Evicting") == "True"
        assert shown_batch(resource) == (None, None) and await withdrawn(admin, node)
        # Posted once the eviction is answered: the pod may be gone a moment before its Event exists.
        await eventually_async(lambda: events(admin, namespace, "batch", "ColocationEvicted"), timeout=5)
        assert batch["metadata"]["uid"] and free["metadata"]["uid"]

    await eventually_async(lambda: offered(admin, node), timeout=10)
    await eventually_async(lambda: healthy(admin, node), timeout=10)
    resource = await eventually_async(lambda: shows_what_the_node_offers(admin, node), timeout=5)
    assert condition(resource, "Evicting") == "False"
    await eventually_async(lambda: events(admin, "default", node, "ColocationRecovered"), timeout=5)


async def test_reports_are_the_agents_heartbeat_and_their_leases_are_left_alone(
        admin: Kube, controller_sandbox: tuple[Path, Path]) -> None:
    state = controller_sandbox[1]
    nodes = [node for agent in agents(state) for node in agent["nodes"]]
    for node in nodes:
        await eventually_async(functools.partial(healthy, admin, node), timeout=30)
    before = await selfcheck.read_sandbox(state)
    leases_before = {node: (await get(admin, f"{NODE_LEASES}/{node}") or {}).get("spec", {}) for node in nodes}
    assert all(spec.get("renewTime") for spec in leases_before.values()), leases_before  # registered

    async def reported_ten_times() -> dict[str, selfcheck.AgentHealth] | None:
        now = await selfcheck.read_sandbox(state)
        grown = all(now[name].reports - before[name].reports >= 10 * now[name].nodes for name in before)
        return now if grown else None

    # One report a second per node (--heartbeat-interval).
    after = await eventually_async(reported_ten_times, timeout=30)
    reports = sum(after[name].reports - before[name].reports for name in before)
    renewals = sum(after[name].renewals - before[name].renewals for name in before)
    # While the leader accepts reports, a Lease is renewed only to register (every 10 minutes);
    # a busy machine may delay a report past the fallback's 1.5 s now and then, never often.
    assert renewals * 5 <= reports, (renewals, reports)
    for node in nodes:
        assert await healthy(admin, node)
        lease = (await get(admin, f"{NODE_LEASES}/{node}") or {}).get("spec", {})
        # A registration promises the next one (leaseDurationSeconds covers the 10 minutes between
        # two): a live agent's Lease never looks expired to those who read it as client-go does.
        renewed = dt.datetime.fromisoformat(lease["renewTime"]).timestamp()
        assert renewed + lease["leaseDurationSeconds"] > time.time() + 60, lease


async def test_an_agent_whose_reports_are_refused_stays_ready_through_its_lease(
        admin: Kube, controller_sandbox: tuple[Path, Path], tmp_path: Path) -> None:
    # The agent's token is bound to a pod on another node: the leader refuses its reports (403),
    # so it falls back to renewing its Lease, which the leader watches. The token is of another
    # ServiceAccount with the agents' RBAC: the agents' own is held to its node's Lease by the
    # install's ValidatingAdmissionPolicy (on a real kube-apiserver), which would refuse this one's.
    token = await agent_token_elsewhere(admin)
    node = f"fallback-{uuid.uuid4().hex[:6]}"
    status, body = await admin.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
    assert status == 201, body
    agent = await start_agent_process(controller_sandbox[0], token, node, tmp_path, "--report-interval", "0.5",
                                      "--heartbeat-interval", "1", "--lease-duration", str(int(GRACE)),
                                      "--scrape-interval", "0")
    try:
        async def agent_ready() -> dict[str, Any] | None:
            resource = await get(admin, f"{NODERESOURCES}/{node}")
            return resource if resource and condition(resource, "AgentReady") == "True" else None

        await eventually_async(agent_ready, timeout=30)
        assert await node_metric_absent(admin, node)  # nothing it reported was taken
        # Several grace periods on, it is still judged alive: the Lease carries its heartbeat.
        deadline = time.monotonic() + 3 * GRACE
        while time.monotonic() < deadline:
            resource = await get(admin, f"{NODERESOURCES}/{node}") or {}
            assert condition(resource, "AgentReady") == "True", resource.get("status")
            await asyncio.sleep(0.5)  # sampling the condition over the interval, not waiting for an event
        lease = await get(admin, f"{NODE_LEASES}/{node}") or {}
        assert lease["spec"]["leaseDurationSeconds"] == int(GRACE)  # the fallback's, not a registration's
    finally:
        agent.kill()
        await agent.wait()

    async def silent() -> bool:
        resource = await get(admin, f"{NODERESOURCES}/{node}") or {}
        return condition(resource, "AgentReady") == "False"

    await eventually_async(silent, timeout=GRACE + 5)
    await admin.request("DELETE", f"/api/v1/nodes/{node}")


async def agent_token_elsewhere(admin: Kube) -> str:
    """A token with the agents' RBAC, bound to a pod on another (new) node, of a ServiceAccount
    that is not the agents' (idempotent: the account and its bindings are shared by callers)."""
    account = "colocation-agent-elsewhere"
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": NS}]
    for path, body in [
        (f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": account}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": account}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "colocation-agent"}}),
        ("/apis/rbac.authorization.k8s.io/v1/namespaces/colocation-node-lease/rolebindings", {
            "metadata": {"name": account}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "colocation-agent"}}),
    ]:
        status, created = await admin.request("POST", path, body)
        assert status in (201, 409), created
    other = f"elsewhere-{uuid.uuid4().hex[:6]}"
    status, body = await admin.request("POST", "/api/v1/nodes", {"metadata": {"name": other}})
    assert status == 201, body
    pod = {"metadata": {"name": f"agent-{other}", "namespace": NS},
           "spec": {"nodeName": other, "serviceAccountName": account,
                    "containers": [{"name": "agent", "image": "colocation:test"}]}}
    status, body = await admin.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    assert status == 201, body
    request = {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
        "kind": "Pod", "apiVersion": "v1", "name": f"agent-{other}", "uid": body["metadata"]["uid"]}}}
    status, token = await admin.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{account}/token", request)
    assert status == 201, token
    return str(token["status"]["token"])


async def node_metric_absent(kube: Kube, node: str) -> bool:
    status, _ = await kube.request("GET", f"/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{node}")
    return status == 404


ZONE_LABEL = "topology.kubernetes.io/zone"


@pytest.fixture(params=[True], ids=["two-zones"])
async def two_zones(admin: Kube, controller_sandbox: tuple[Path, Path],
                    request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    """The real node in zone-a, the simulated one in zone-b (labels removed afterwards): node → zone.

    Parametrized indirectly with False: no labels, every node in the zone of nodes without one.
    """
    if not request.param:
        yield {}
        return
    zones = {real_node(controller_sandbox[1])[0]: "zone-a", simulated_node(controller_sandbox[1])[0]: "zone-b"}

    async def label(node: str, value: str | None) -> None:
        status, body = await admin.request("PATCH", f"/api/v1/nodes/{node}",
                                           {"metadata": {"labels": {ZONE_LABEL: value}}},
                                           content_type="application/merge-patch+json")
        assert status == 200, body

    for node, zone in zones.items():
        await label(node, zone)
    try:
        yield zones
    finally:
        for node in zones:
            await label(node, None)


async def evicting_reason(kube: Kube, node: str) -> tuple[str | None, str | None]:
    resource = await get(kube, f"{NODERESOURCES}/{node}") or {}
    evicting: dict[str, Any] = next((c for c in (resource.get("status") or {}).get("conditions") or ()
                                     if c["type"] == "Evicting"), {})
    return evicting.get("status"), evicting.get("reason")


async def zone_in_state(kube: Kube, zone: str, state: str) -> bool:
    """Whether the leader's metrics show the zone in this disruption state."""
    return any(sample.name == "colocation_zone_state" and sample.labels == {"zone": zone, "state": state}
               and sample.value == 1.0
               for family in text_string_to_metric_families(await leader_metrics(kube)) for sample in family.samples)


@pytest.mark.parametrize("two_zones", [False, True], ids=["one-zone", "two-zones"], indirect=True)
async def test_every_agent_silent_at_once_evicts_nothing(
        admin: Kube, workloads: str, controller_sandbox: tuple[Path, Path], two_zones: dict[str, str]) -> None:
    namespace = workloads
    zones = two_zones
    (real, real_pid), (simulated, simulated_pid) = real_node(controller_sandbox[1]), \
        simulated_node(controller_sandbox[1])
    for node in (real, simulated):
        await eventually_async(functools.partial(healthy, admin, node), timeout=15)
        await create_pod(admin, namespace, pod(f"batch-{node}", node, "koord-batch"))

    async def held_back(node: str) -> bool:
        return await evicting_reason(admin, node) == ("False", "FullDisruption")

    with frozen(real_pid, simulated_pid):
        # Both are past the eviction timeout, and the guard holds the exit process back: every
        # zone (the one of nodes without a zone label, or zone-a and zone-b) is down.
        for node in (real, simulated):
            await eventually_async(functools.partial(held_back, node), timeout=GRACE + EVICTION_TIMEOUT + 10)
            await eventually_async(functools.partial(withdrawn, admin, node), timeout=1)
            assert shown_batch(await get(admin, f"{NODERESOURCES}/{node}") or {}) == (None, None)
        for zone in set(zones.values()) or {""}:
            assert await zone_in_state(admin, zone, "FullDisruption")
        for node in (real, simulated):
            assert await pod_exists(admin, namespace, f"batch-{node}")

    for node in (real, simulated):
        await eventually_async(functools.partial(offered, admin, node), timeout=15)
        assert await pod_exists(admin, namespace, f"batch-{node}")


async def test_a_zone_down_whole_is_evicted_while_the_other_zone_is_up(
        admin: Kube, workloads: str, controller_sandbox: tuple[Path, Path], two_zones: dict[str, str]) -> None:
    namespace = workloads
    (real, _), (simulated, simulated_pid) = real_node(controller_sandbox[1]), simulated_node(controller_sandbox[1])
    for node in (real, simulated):
        await eventually_async(functools.partial(healthy, admin, node), timeout=15)
        await create_pod(admin, namespace, pod(f"batch-{node}", node, "koord-batch"))

    with frozen(simulated_pid):
        # zone-b is fully disrupted, zone-a is not: zone-b is evicted at the normal rate.
        await eventually_async(lambda: zone_in_state(admin, two_zones[simulated], "FullDisruption"), timeout=GRACE + 10)
        assert await zone_in_state(admin, two_zones[real], "Normal")

        async def evicted() -> bool:
            return not await pod_exists(admin, namespace, f"batch-{simulated}")

        await eventually_async(evicted, timeout=GRACE + EVICTION_TIMEOUT + 10)
        assert await evicting_reason(admin, simulated) == ("True", "EvictingPods")
        assert await pod_exists(admin, namespace, f"batch-{real}")

    await eventually_async(lambda: offered(admin, simulated), timeout=15)
    await eventually_async(lambda: zone_in_state(admin, two_zones[simulated], "Normal"), timeout=10)


# ---- the configuration ---------------------------------------------------------------------------

async def test_configmap_edits_rerender_every_nodeslo_and_invalid_values_keep_the_last_good(
        admin: Kube, controller_sandbox: tuple[Path, Path]) -> None:
    nodes = [real_node(controller_sandbox[1])[0], simulated_node(controller_sandbox[1])[0]]
    path = f"/api/v1/namespaces/{NS}/configmaps/colocation-config"
    original = await get(admin, path) or {}
    colocation = json.loads(original["data"]["colocation-config"])
    colocation["clusterStrategy"]["metricReportIntervalSeconds"] = 30

    async def report_interval_everywhere(value: int) -> bool:
        for node in nodes:
            slo = await get(admin, f"{NODESLOS}/{node}") or {}
            if (slo.get("spec") or {}).get("metricCollectPolicy", {}).get("reportIntervalSeconds") != value:
                return False
        return True

    try:
        status, body = await admin.request("PATCH", path, {"data": {"colocation-config": json.dumps(colocation)}},
                                           content_type="application/merge-patch+json")
        assert status == 200, body
        await eventually_async(lambda: report_interval_everywhere(30), timeout=10)

        status, body = await admin.request("PATCH", path, {"data": {"cpu-burst-config": '{"clusterStrategy": '}},
                                           content_type="application/merge-patch+json")
        assert status == 200, body
        warnings = await eventually_async(lambda: events(admin, NS, "colocation-config", "InvalidConfiguration"),
                                          timeout=10)
        assert warnings[0]["type"] == "Warning"
        assert warnings[0]["message"].startswith("cpu-burst-config: invalid JSON")
        assert warnings[0]["reportingComponent"] == "colocation-operator"
        for node in nodes:  # the last good cpu-burst-config stands, and so does the rest
            slo = await get(admin, f"{NODESLOS}/{node}") or {}
            assert slo["spec"]["cpuBurstStrategy"]["policy"] == "none"
            assert slo["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] == 30
    finally:
        status, body = await admin.request("PATCH", path, {"data": original["data"]},
                                           content_type="application/merge-patch+json")
        assert status == 200, body
    await eventually_async(lambda: report_interval_everywhere(60), timeout=10)


async def test_one_configmap_key_turns_colocation_off_on_every_node_at_once(
        admin: Kube, controller_sandbox: tuple[Path, Path]) -> None:
    """The cluster-wide switch (docs/install.md): clusterStrategy.enable false in colocation-config
    removes batch and mid resources from every Node at the next evaluation; true offers them again."""
    nodes = [real_node(controller_sandbox[1])[0], simulated_node(controller_sandbox[1])[0]]
    for node in nodes:
        await eventually_async(functools.partial(offered, admin, node), timeout=30)
    path = f"/api/v1/namespaces/{NS}/configmaps/colocation-config"
    original = await get(admin, path) or {}
    colocation = json.loads(original["data"]["colocation-config"])
    colocation["clusterStrategy"]["enable"] = False

    async def nothing_offered() -> bool:
        for node in nodes:
            obj = await get(admin, f"/api/v1/nodes/{node}") or {}
            if any(value is not None for where in ("capacity", "allocatable")
                   for value in (*batch_of(obj, where), *mid_of(obj, where))):
                return False
        return True

    try:
        status, body = await admin.request("PATCH", path, {"data": {"colocation-config": json.dumps(colocation)}},
                                           content_type="application/merge-patch+json")
        assert status == 200, body
        await eventually_async(nothing_offered, timeout=10)
    finally:
        status, body = await admin.request("PATCH", path, {"data": original["data"]},
                                           content_type="application/merge-patch+json")
        assert status == 200, body
    for node in nodes:
        await eventually_async(functools.partial(offered, admin, node), timeout=30)
