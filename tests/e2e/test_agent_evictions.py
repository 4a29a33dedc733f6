"""Eviction by node pressure end to end: a real agent finds its node short of memory, or its best-effort
pods short of cpu, and the leader evicts.

A sandbox with the operator and no nodes of its own; each test makes one node (labelled so that
only its NodeSLO enables the eviction tested, through the ConfigMap's nodeStrategies; annotated for
kwok on the real control plane, which then runs its pods as a kubelet would), with a bound token
for its agent, best-effort pods (`be-*`, labelled BE and koord-batch) and one LS pod. The node's
usage is the test's input: a real `colocation agent` process measures a fake /proc (meminfo, stat)
and a fake cgroup v2 tree (each pod's memory.stat and cpu.stat) that the test writes under a
temporary directory (`--proc-root`, `--cgroup-root`), so nothing here touches this machine.

Memory (10 GiB, threshold 70 %, lower 60 %):
- 78 %: 1.8 GiB to release; `be-big` (2 GiB, the largest) alone covers it, and only it goes;
  at 58 % afterwards nothing more goes (the agent's rounds are counted on its /metrics);
- 75 %: 1.5 GiB; `be-guarded` (1.5 GiB) comes first but a PodDisruptionBudget forbids its
  eviction: the leader answers deferred, the agent holds it back and takes `be-mid` instead;
  `be-guarded` stays, and the LS pod (4 GiB, the largest of all) is never asked for.

CPU (4 cpus, no CPU suppress: BE pods may use all 4; satisfaction lower 40 %, upper 60 %): BE pods
request 10 cpus of batch-cpu and use 3.7: satisfaction 40 %, usage 92 % of the limit. 2 cpus of
requests must go: `be-mid` (2 cpus requested, the largest usage per request) alone, after the 20 s
that follow the agent's start.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from colocation_sandbox.launcher.controlplane.components import KWOK_NODE_ANNOTATION
from colocation_sandbox.launcher.port_claims import free_port
from tests.e2e.conftest import apiserver_kind, sandbox_kind_args
from tests.e2e.kube import (
    Kube,
    create,
    fresh_namespace,
    get,
    make_pod_ready,
    node_agent_token,
    scrape_samples,
    start_agent_process,
    start_sandbox_process,
)
from tests.timing import eventually_async
from tests.unit.agent.test_collector import Machine

GI = 2**30
NS = "colocation-system"
LABEL = "e2e.colocation.dev/eviction"
NODESLOS = "/apis/slo.colocation.dev/v1alpha1/nodeslos"
PDBS = "/apis/policy/v1/namespaces/{}/poddisruptionbudgets"
ROUNDS, EVICTIONS = "colocation_agent_eviction_rounds_total", "colocation_agent_evictions_total"
# name → (QoS, priority class, memory usage) on the memory node
MEMORY_PODS = {"be-big": ("BE", "koord-batch", 2 * GI), "be-guarded": ("BE", "koord-batch", 3 * GI // 2),
        "be-mid": ("BE", "koord-batch", GI), "ls-web": ("LS", "koord-prod", 4 * GI)}
# name → (QoS, priority class, batch-cpu request, cpu usage) on the cpu node, in milli-cpus
CPU_PODS = {"be-big": ("BE", "koord-batch", 6000, 2000), "be-mid": ("BE", "koord-batch", 2000, 1000),
            "be-small": ("BE", "koord-batch", 2000, 700), "ls-web": ("LS", "koord-prod", 0, 200)}
RULES = [
    {"name": "e2e-memory", "nodeSelector": {"matchLabels": {LABEL: "memory"}}, "enable": True,
     "memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 60},
    {"name": "e2e-cpu", "nodeSelector": {"matchLabels": {LABEL: "cpu"}}, "enable": True,
     "cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 60,
     "cpuEvictTimeWindowSeconds": 3},
]


@pytest.fixture(scope="module")
def evict_sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the agent is a process the test starts, on a node the test makes")
    state = tmp_path_factory.mktemp("memory-evict-sandbox")
    with start_sandbox_process(state, [*sandbox_kind_args(request.config), "--operators", "1", "--nodes", "0",
                                       "--operator-arg=--evaluation-interval=0.5"]) as kubeconfig:
        yield kubeconfig


@pytest.fixture
async def admin(evict_sandbox: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(evict_sandbox) as kube:
        yield kube


async def enable_evictions(kube: Kube) -> None:
    """Nodes labelled LABEL=memory get memory eviction in their NodeSLO, LABEL=cpu cpu eviction; no other."""
    status, body = await kube.request(
        "PATCH", f"/api/v1/namespaces/{NS}/configmaps/colocation-config",
        {"data": {"resource-threshold-config": json.dumps({"nodeStrategies": RULES})}},
        content_type="application/merge-patch+json")
    assert status == 200, body


async def make_node(kube: Kube, kind: str) -> tuple[str, str]:
    """A node of 4 cpus and 10 GiB (kwok runs its pods on the real control plane) and a token bound to its agent pod."""
    node = f"evict-{kind}-{uuid.uuid4().hex[:6]}"
    resources = {"cpu": "4", "memory": "10Gi", "pods": "110"}
    await create(kube, "/api/v1/nodes", {"metadata": {"name": node, "labels": {LABEL: kind},
                                                      "annotations": {KWOK_NODE_ANNOTATION: "fake"}}})
    status, body = await kube.request("PATCH", f"/api/v1/nodes/{node}/status",
                                      {"status": {"capacity": resources, "allocatable": resources}},
                                      content_type="application/merge-patch+json")
    assert status == 200, body
    return node, await node_agent_token(kube, node, NS)


def pod_body(name: str, node: str, qos: str, priority: str, batch_cpu: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
    if batch_cpu:
        amount = {"kubernetes.io/batch-cpu": str(batch_cpu)}
        container["resources"] = {"requests": amount, "limits": amount}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name, "koordinator.sh/qosClass": qos,
                                                  "koordinator.sh/priority-class": priority}},
            "spec": {"nodeName": node, "containers": [container]}}


def cgroup_path(uid: str, qos: str) -> str:
    tier = "besteffort" if qos == "BE" else "burstable"
    return f"kubepods.slice/kubepods-{tier}.slice/kubepods-{tier}-pod{uid.replace('-', '_')}.slice"


def use(machine: Machine, percent: int) -> None:
    machine.memory(total=10 * GI, free=GI // 2, available=10 * GI * (100 - percent) // 100, inactive_file=0)


async def leaving(kube: Kube, namespace: str, name: str) -> bool:
    """Evicted: gone, or terminating (a kubelet, or kwok, then removes it)."""
    status, pod = await kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return status == 404 or bool(status == 200 and pod["metadata"].get("deletionTimestamp"))


async def removed_as_a_kubelet_would(kube: Kube, machine: Machine, namespace: str, name: str, path: str) -> None:
    """An evicted pod's containers stop: its cgroup goes, and the pod object with it (kwok, or here)."""
    shutil.rmtree(machine.cgroup / path)
    await kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})


async def agent_value(port: int, name: str, **labels: str) -> float | None:
    """The sum of the agent's samples of `name` with `labels`; None while it does not serve /metrics yet."""
    try:
        samples = await scrape_samples(f"http://127.0.0.1:{port}/metrics")
    except aiohttp.ClientConnectionError:
        return None
    return sum(sample.value for sample in samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


async def rounds_after(port: int, rounds: float, reason: str = "MemoryPressure") -> None:
    """Wait until the agent has judged `rounds` more fresh samples (past the strategy's cool-down)."""
    async def served() -> tuple[float] | None:  # a tuple: a count of 0 is an answer too
        value = await agent_value(port, ROUNDS, reason=reason)
        return None if value is None else (value,)

    (start,) = await eventually_async(served, timeout=30, interval=0.5)

    async def done() -> bool:
        value = await agent_value(port, ROUNDS, reason=reason)
        return value is not None and value >= start + rounds

    await eventually_async(done, timeout=rounds + 30, interval=0.5)


async def start_agent(kubeconfig: Path, token: str, node: str, machine: Machine, work: Path,
                      port: int) -> asyncio.subprocess.Process:
    return await start_agent_process(
        kubeconfig, token, node, work, "--proc-root", str(machine.proc), "--cgroup-root", str(machine.cgroup),
        "--metrics-port", str(port), "--metrics-bind-address", "127.0.0.1", "--cpu-suppress-interval", "0",
        "--batch-cgroups-interval", "0", "--scrape-interval", "0", "--report-interval", "1")


async def enforced(kube: Kube, node: str) -> dict[str, Any] | None:
    """The node's NodeSLO, once it enables resourceUsedThresholdWithBE."""
    status, slo = await kube.request("GET", f"{NODESLOS}/{node}")
    spec = (slo.get("spec") or {}) if status == 200 else {}
    return slo if (spec.get("resourceUsedThresholdWithBE") or {}).get("enable") is True else None


async def stop(kube: Kube, process: asyncio.subprocess.Process | None, node: str) -> None:
    if process is not None and process.returncode is None:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)
    await kube.request("DELETE", f"/api/v1/nodes/{node}")
    await kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods/agent-{node}")


async def test_memory_pressure_evicts_exactly_the_expected_best_effort_pods(
        request: pytest.FixtureRequest, admin: Kube, evict_sandbox: Path, tmp_path: Path) -> None:
    await enable_evictions(admin)
    node, token = await make_node(admin, "memory")
    machine = Machine(tmp_path)
    use(machine, 50)
    process = None
    try:
        async with fresh_namespace(admin) as namespace:
            paths: dict[str, str] = {}
            for name, (qos, priority, usage) in MEMORY_PODS.items():
                created = await create(admin, f"/api/v1/namespaces/{namespace}/pods",
                                       pod_body(name, node, qos, priority))
                paths[name] = cgroup_path(created["metadata"]["uid"], qos)
                machine.pod(paths[name], usage_usec=1, anon=usage, active_file=0, inactive_file=0)
            if apiserver_kind(request.config) != "kube":  # kwok makes them ready on the real control plane
                await make_pod_ready(admin, namespace, "be-guarded")
            await create(admin, PDBS.format(namespace), {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-guarded"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "be-guarded"}}}})

            async def budget_holds() -> bool:
                status = (await get(admin, f"{PDBS.format(namespace)}/keep-guarded")).get("status") or {}
                return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0

            await eventually_async(budget_holds, timeout=30)
            port = free_port()
            process = await start_agent(evict_sandbox, token, node, machine, tmp_path, port)
            await eventually_async(lambda: enforced(admin, node), timeout=30)
            await rounds_after(port, 2)  # the agent follows the NodeSLO and measures: at 50 %, nothing goes

            # 78 %: 1.8 GiB to release, the largest best-effort pod (2 GiB) covers it.
            use(machine, 78)
            await eventually_async(lambda: leaving(admin, namespace, "be-big"), timeout=30, interval=0.2)
            use(machine, 58)
            await removed_as_a_kubelet_would(admin, machine, namespace, "be-big", paths["be-big"])
            await rounds_after(port, 6)
            for name in ("be-guarded", "be-mid", "ls-web"):
                assert not await leaving(admin, namespace, name), name
            status, events = await admin.request("GET", f"/api/v1/namespaces/{namespace}/events", params={
                "fieldSelector": "involvedObject.name=be-big,reason=EvictPodByMemoryPressure"})
            assert status == 200 and len(events["items"]) == 1, events
            assert node in events["items"][0]["message"]

            # 75 %: "be-guarded" is first, its budget forbids it; "be-mid" goes instead.
            use(machine, 75)
            await eventually_async(lambda: leaving(admin, namespace, "be-mid"), timeout=40, interval=0.2)
            use(machine, 65)
            await removed_as_a_kubelet_would(admin, machine, namespace, "be-mid", paths["be-mid"])
            assert (await agent_value(port, EVICTIONS, reason="MemoryPressure", result="deferred") or 0) >= 1
            await rounds_after(port, 6)
            assert not await leaving(admin, namespace, "be-guarded")
            assert not await leaving(admin, namespace, "ls-web")
            assert await agent_value(port, EVICTIONS, reason="MemoryPressure", result="evicted") == 2
    finally:
        await stop(admin, process, node)


class CpuLoad:
    """Writes the node's and the pods' cpu counters as if they used the given milli-cpus, in real time."""

    def __init__(self, machine: Machine, paths: dict[str, str]) -> None:
        self.machine = machine
        self.paths = dict(paths)
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.started = time.monotonic()

    def stop_pod(self, name: str) -> None:
        shutil.rmtree(self.machine.cgroup / self.paths.pop(name))

    def write(self) -> None:
        elapsed = time.monotonic() - self.started
        node_millis = min(4000, 100 + sum(CPU_PODS[name][3] for name in self.paths))
        self.machine.cpu(busy=1000 + int(elapsed * node_millis / 1000 * self.ticks), cpus=4)
        for name, path in self.paths.items():
            self.machine.pod(path, usage_usec=1 + int(elapsed * CPU_PODS[name][3] * 1000), anon=64 * 2**20)

    async def run(self) -> None:
        while True:
            self.write()
            await asyncio.sleep(0.2)  # the rate of the counters' writes, not a synchronisation


async def test_starved_best_effort_pods_lose_the_one_whose_requests_bring_the_rest_back(
        admin: Kube, evict_sandbox: Path, tmp_path: Path) -> None:
    await enable_evictions(admin)
    node, token = await make_node(admin, "cpu")
    machine = Machine(tmp_path)
    process, load = None, None
    try:
        async with fresh_namespace(admin) as namespace:
            paths: dict[str, str] = {}
            for name, (qos, priority, batch_cpu, _) in CPU_PODS.items():
                created = await create(admin, f"/api/v1/namespaces/{namespace}/pods",
                                       pod_body(name, node, qos, priority, batch_cpu))
                paths[name] = cgroup_path(created["metadata"]["uid"], qos)
            cpu = CpuLoad(machine, paths)
            cpu.write()
            load = asyncio.create_task(cpu.run())
            port = free_port()
            process = await start_agent(evict_sandbox, token, node, machine, tmp_path, port)
            await eventually_async(lambda: enforced(admin, node), timeout=30)

            # 4 cpus for 10 requested: 40 %; back to 60 %: 2 cpus of requests, "be-mid" (1000m of 2000m used).
            await eventually_async(lambda: leaving(admin, namespace, "be-mid"), timeout=60, interval=0.2)
            cpu.stop_pod("be-mid")
            await admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/be-mid", {"gracePeriodSeconds": 0})
            await rounds_after(port, 25, reason="CPUSatisfaction")  # past the 20 s cool-down
            for name in ("be-big", "be-small", "ls-web"):
                assert not await leaving(admin, namespace, name), name
            assert await agent_value(port, EVICTIONS, reason="CPUSatisfaction", result="evicted") == 1
            status, events = await admin.request("GET", f"/api/v1/namespaces/{namespace}/events", params={
                "fieldSelector": "involvedObject.name=be-mid,reason=EvictPodByBECPUSatisfaction"})
            assert status == 200 and len(events["items"]) == 1, events
    finally:
        if load is not None:
            load.cancel()
        await stop(admin, process, node)
