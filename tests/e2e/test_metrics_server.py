"""metrics-server serves `kubectl top node` for the kwok nodes, with our agents' numbers.

A sandbox on the real control plane with `--metrics-server 2`: kwok serves kubelet-style resource
metrics for the simulated nodes from their pods' usage annotations, two metrics-server processes
scrape them behind v1beta1.metrics.k8s.io, and the simulated agents report the same annotations
to the operator (whose own metrics.k8s.io is then not registered). The test computes each node's
usage from the annotations alone and asks both sides; then it raises one pod's cpu annotation and
waits for both to follow. Last, it SIGKILLs one metrics-server replica. Only with `--apiserver
kube`, and skipped when metrics-server is not built (`make metrics-server`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation.agent.synthetic import (
    CPU_USAGE_ANNOTATION,
    MEMORY_USAGE_ANNOTATION,
    SYSTEM_CPU_ANNOTATION,
    SYSTEM_MEMORY_ANNOTATION,
)
from colocation.apimachinery.quantity import byte_value, cpu_millis, format_millis, parse_quantity
from colocation_sandbox.launcher.controlplane import metricsserver
from tests.e2e.conftest import Kubectl, apiserver_kind, sandbox_kind_args
from tests.e2e.kube import Kube, get, start_sandbox_process
from tests.timing import eventually_async

NODES = ("sim-node-1", "sim-node-2")
NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
STEP_MILLIS = 2000
# metrics-server's cpu is the rate of kwok's counter between two scrapes, over the times it started
# them (the series carry no timestamp); kwok computes the counter when its answer is made, some
# milliseconds later, and that delay varies: a few per mille of the rate. Ours is exact (whole
# milli-cpus, the annotations' own); memory is the same integer on both sides.
CPU_TOLERANCE = 0.01


def near_cpu(served_millis: float, expected: int) -> bool:
    return abs(served_millis - expected) <= 1 + CPU_TOLERANCE * expected


@pytest.fixture(scope="module")
def kubeconfig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("metrics-server and kwok run beside the sandbox this module starts")
    if apiserver_kind(request.config) != "kube":
        pytest.skip("metrics-server scrapes kwok's nodes: only with --apiserver kube")
    try:
        metricsserver.locate_metrics_server(build=False)
    except metricsserver.MetricsServerMissing:
        pytest.skip("metrics-server is not built (make metrics-server)")
    state = tmp_path_factory.mktemp("metrics-server-sandbox")
    args = [*sandbox_kind_args(request.config), "--nodes", str(len(NODES) + 1), "--pods-per-node", "5",
            "--operators", "1", "--metrics-server", "2", "--no-serve-custom-metrics"]
    with start_sandbox_process(state, args) as path:
        yield path


@pytest.fixture
async def admin(kubeconfig: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(kubeconfig) as kube:
        yield kube


async def annotated(admin: Kube, node: str) -> tuple[int, int, list[dict[str, Any]]]:
    """The node's usage as its annotations and its pods' say: (milli-cpus, bytes, its annotated pods)."""
    obj = await get(admin, f"/api/v1/nodes/{node}")
    system = obj["metadata"]["annotations"]
    pods = [pod for pod in (await get(admin, f"/api/v1/pods?fieldSelector=spec.nodeName={node}"))["items"]
            if CPU_USAGE_ANNOTATION in (pod["metadata"].get("annotations") or {})]
    cpu = cpu_millis(system[SYSTEM_CPU_ANNOTATION]) + sum(
        cpu_millis(pod["metadata"]["annotations"][CPU_USAGE_ANNOTATION]) for pod in pods)
    memory = byte_value(system[SYSTEM_MEMORY_ANNOTATION]) + sum(
        byte_value(pod["metadata"]["annotations"][MEMORY_USAGE_ANNOTATION]) for pod in pods)
    return cpu, memory, pods


async def both_show(admin: Kube, node: str, cpu: int, memory: int) -> dict[str, Any] | None:
    """metrics-server's NodeMetrics of `node` once it and our agents' recentUsage both say (cpu, memory)."""
    status, served = await admin.request("GET", f"/apis/metrics.k8s.io/v1beta1/nodes/{node}")
    if status != 200:
        return None
    served_cpu = parse_quantity(served["usage"]["cpu"]) * 1000
    if not near_cpu(float(served_cpu), cpu) or byte_value(served["usage"]["memory"]) != memory:
        return None
    ours = (await get(admin, f"{NODEMETRICS}/{node}"))["status"]["nodeMetric"].get("recentUsage") or {}
    resources = ours.get("resources") or {}
    if cpu_millis(resources.get("cpu", "0")) != cpu or byte_value(resources.get("memory", "0")) != memory:
        return None
    return served  # type: ignore[no-any-return]


async def test_kubectl_top_node_is_metrics_servers_and_agrees_with_our_agents(
        admin: Kube, kubectl: Kubectl) -> None:
    apiservice = await get(admin, "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io")
    assert apiservice["spec"]["service"]["name"] == "metrics-server", apiservice["spec"]
    for node in NODES:
        cpu, memory, pods = await annotated(admin, node)
        assert pods, f"{node} has no pod with usage annotations"
        served = await eventually_async(functools.partial(both_show, admin, node, cpu, memory),
                                        timeout=90, interval=2, message=f"{node}: metrics-server and ours at "
                                                                          f"{cpu}m, {memory} bytes")
        assert served["window"].endswith("s") and float(served["window"][:-1]) >= 10  # a scrape interval's rate
    top = kubectl.run("top", "node", "--no-headers").stdout.splitlines()
    rows = {fields[0]: fields for fields in (line.split() for line in top)}
    for node in NODES:
        cpu, memory, _ = await annotated(admin, node)
        assert near_cpu(cpu_millis(rows[node][1]), cpu), (rows[node], cpu)
        assert byte_value(rows[node][3]) == memory // 2**20 * 2**20, rows[node]  # kubectl shows whole Mi


async def test_a_load_step_in_the_annotations_reaches_metrics_server_and_our_agents(admin: Kube) -> None:
    node = NODES[0]
    cpu, memory, pods = await annotated(admin, node)
    await eventually_async(lambda: both_show(admin, node, cpu, memory), timeout=90, interval=2,
                           message=f"{node} before the step")
    pod = pods[0]["metadata"]
    raised = cpu_millis(pod["annotations"][CPU_USAGE_ANNOTATION]) + STEP_MILLIS
    status, body = await admin.request(
        "PATCH", f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}",
        {"metadata": {"annotations": {CPU_USAGE_ANNOTATION: format_millis(raised)}}},
        content_type="application/merge-patch+json")
    assert status == 200, body
    # metrics-server scrapes every 15 s and rates over the last two scrapes; our window is 10 s.
    await eventually_async(lambda: both_show(admin, node, cpu + STEP_MILLIS, memory), timeout=90, interval=2,
                           message=f"{node} after a step of {STEP_MILLIS}m")


def replica_pid(state_dir: Path, index: int) -> int | None:
    """The pid of the sandbox's metrics-server replica `index` (its certificate names it), if running."""
    certificate = str(state_dir / "pki" / f"metrics-server-{index}.crt")
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().split(b"\0")
            if Path(args[0].decode()).name == "metrics-server" and certificate.encode() in args:
                return int(cmdline.parent.name)
    return None


async def test_a_killed_replica_leaves_the_service_is_restarted_and_readers_stay_served(
        admin: Kube, kubeconfig: Path) -> None:
    """As a kubelet and the EndpointSlice controller would have it: out at once, back once ready."""
    slice_path = "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices/metrics-server-0"
    victim = replica_pid(kubeconfig.parent, 0)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)

    async def ready() -> bool:
        return bool((await get(admin, slice_path))["endpoints"][0]["conditions"]["ready"])

    async def out() -> bool:
        return not await ready()

    await eventually_async(out, timeout=5, interval=0.2, message="the killed replica out of its EndpointSlice")
    for _ in range(10):  # the other replica answers every read meanwhile
        status, body = await admin.request("GET", "/apis/metrics.k8s.io/v1beta1/nodes")
        assert status == 200, body
    await eventually_async(ready, timeout=60, interval=1, message="the restarted replica ready again")
    restarted = replica_pid(kubeconfig.parent, 0)
    assert restarted is not None and restarted != victim
