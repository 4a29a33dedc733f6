"""`kubectl top nodes` follows a load step within 30 s, while NodeMetric's nodeUsage (300 s) lags.

A sandbox with one operator serving metrics.k8s.io (`--serve-resource-metrics`) and no nodes of
its own; the test makes one node (annotated for kwok on the real control plane) with a token bound
to its agent pod, and runs a real `colocation agent` process with the default report interval,
heartbeat and aggregation, measuring a fake /proc that the test writes under a temporary directory
(`--proc-root`, `--cgroup-root`, as the eviction e2e does): the node's cpu counters advance in real
time at 1 core, then at 3 cores. The real kubectl (the one `make kube` builds) reads
`kubectl top nodes`, which comes from the agents' short-window `recentUsage` (10 s).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from colocation.apimachinery.quantity import cpu_millis
from colocation_sandbox.launcher.controlplane.components import KWOK_NODE_ANNOTATION
from colocation_sandbox.launcher.port_claims import free_port
from tests.e2e.conftest import Kubectl, sandbox_kind_args
from tests.e2e.kube import (
    Kube,
    create,
    get,
    node_agent_token,
    start_agent_process,
    start_sandbox_process,
)
from tests.timing import eventually_async
from tests.unit.agent.test_collector import Machine

NS = "colocation-system"
NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
BEFORE, AFTER = 1000, 3000  # milli-cpus of the node before and after the step
TOLERANCE = 0.1  # a 10 s average of 1 s samples of counters written every 0.2 s
IDLE_BEFORE_STEP = 40.0  # seconds of 1 core the agent sees first: the 300 s average then lags the step


@pytest.fixture(scope="module")
def kubeconfig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's sandbox (conftest's `kubectl` fixture then reads it)."""
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the agent is a process the test starts, on a node the test makes")
    state = tmp_path_factory.mktemp("kubectl-top-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "1", "--nodes", "0", "--serve-resource-metrics"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig


@pytest.fixture
async def admin(kubeconfig: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(kubeconfig) as kube:
        yield kube


class CpuStep:
    """The node's /proc/stat counters, advanced in real time at BEFORE milli-cpus, then at AFTER
    once `step()` was asked and the agent has seen IDLE_BEFORE_STEP seconds of BEFORE."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.started = time.monotonic()
        self.step_wanted = False
        self.stepped_at: float | None = None  # monotonic

    def busy_ticks(self, now: float) -> int:
        # A counter is cumulative: its value is a function of time, so a late write loses nothing.
        at_before = (self.stepped_at if self.stepped_at is not None else now) - self.started
        at_after = now - self.stepped_at if self.stepped_at is not None else 0.0
        return 1000 + int((at_before * BEFORE + at_after * AFTER) / 1000 * self.ticks)

    def write(self) -> None:
        now = time.monotonic()
        if self.step_wanted and self.stepped_at is None and now - self.started >= IDLE_BEFORE_STEP:
            self.stepped_at = now
        self.machine.cpu(busy=self.busy_ticks(now), cpus=4)

    async def run(self) -> None:
        while True:
            self.write()
            await asyncio.sleep(0.2)  # the rate of the counters' writes, not a synchronisation


async def top_cpu(top: Kubectl, node: str) -> int | None:
    """The node's CPU(cores) in `kubectl top node`, in milli-cpus; None while it has no metrics."""
    # In a thread: the counters' writer runs on this event loop meanwhile.
    result = await asyncio.to_thread(top.run, "top", "node", node, "--no-headers", check=False, timeout=30)
    fields = result.stdout.split()
    return cpu_millis(fields[1]) if result.returncode == 0 and len(fields) >= 2 and fields[0] == node else None


def near(value: int | None, expected: int) -> bool:
    return value is not None and abs(value - expected) <= TOLERANCE * expected


async def test_kubectl_top_nodes_follows_a_load_step_within_30_seconds(
        admin: Kube, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path) -> None:
    node = f"top-{uuid.uuid4().hex[:6]}"
    resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    await create(admin, "/api/v1/nodes", {"metadata": {"name": node,
                                                       "annotations": {KWOK_NODE_ANNOTATION: "fake"}}})
    status, body = await admin.request("PATCH", f"/api/v1/nodes/{node}/status",
                                       {"status": {"capacity": resources, "allocatable": resources}},
                                       content_type="application/merge-patch+json")
    assert status == 200, body
    token = await node_agent_token(admin, node, NS)
    machine = Machine(tmp_path)
    cpu = CpuStep(machine)
    cpu.write()
    load = asyncio.create_task(cpu.run())
    process = await start_agent_process(
        kubeconfig, token, node, tmp_path, "--proc-root", str(machine.proc), "--cgroup-root", str(machine.cgroup),
        "--metrics-port", str(free_port()), "--metrics-bind-address", "127.0.0.1", "--cpu-suppress-interval", "0",
        "--batch-cgroups-interval", "0", "--scrape-interval", "0")
    try:
        async def shows(expected: int) -> int | None:
            value = await top_cpu(kubectl, node)
            return value if near(value, expected) else None

        await eventually_async(lambda: shows(BEFORE), timeout=60, interval=1)
        cpu.step_wanted = True

        async def stepped() -> bool:
            return cpu.stepped_at is not None

        await eventually_async(stepped, timeout=IDLE_BEFORE_STEP + 10, interval=0.2)
        assert cpu.stepped_at is not None
        await eventually_async(lambda: shows(AFTER), timeout=30, interval=1)
        followed_in = time.monotonic() - cpu.stepped_at

        # The 300 s average still lags: at least 40 s of 1 core against at most 30 s x TIME_FACTOR
        # of 3, where the 10 s window already shows 3 cores.
        status = (await get(admin, f"{NODEMETRICS}/{node}"))["status"]
        node_usage = cpu_millis(status["nodeMetric"]["nodeUsage"]["resources"]["cpu"])
        assert node_usage < AFTER * (1 - 2 * TOLERANCE), (node_usage, followed_in)
        recent = status["nodeMetric"]["recentUsage"]
        assert near(cpu_millis(recent["resources"]["cpu"]), AFTER) and recent["windowSeconds"] == 10, recent

        # metrics.k8s.io says which window it is and when it was measured (the report's updateTime,
        # of the report before or after the read), as metrics-server does.
        status_code, metrics = await admin.request("GET", f"/apis/metrics.k8s.io/v1beta1/nodes/{node}")
        assert status_code == 200, metrics
        after = (await get(admin, f"{NODEMETRICS}/{node}"))["status"]["updateTime"]
        assert metrics["window"] == "10s"
        assert metrics["timestamp"] in (status["updateTime"], after), (metrics, status["updateTime"], after)
    finally:
        load.cancel()
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 30)
        await admin.request("DELETE", f"/api/v1/nodes/{node}")
        await admin.request("DELETE", f"/api/v1/namespaces/{NS}/pods/agent-{node}")
