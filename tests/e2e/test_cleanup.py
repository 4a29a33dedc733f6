"""`colocation cleanup` end to end: the operator writes batch and mid resources, stops, and cleanup
leaves no Node with them and no colocation Lease.

The sandbox runs one operator and two nodes with their agents. The operator is stopped the way an
uninstall stops it where the sandbox allows: on the real control plane its Deployment is scaled
to zero (the kubelet stops the pod, which frees the Lease) and the agents' DaemonSet deleted; on
the builtin one, whose replicas and agents are the launcher's processes (it would start a replica
that exits again), they are frozen with SIGSTOP, so the leader Lease is left held and lapses.
The simulated node's agent is a process on both, frozen alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import apiserver_kind, sandbox_kind_args
from tests.e2e.kube import TIME_FACTOR, Kube, get, start_sandbox_process
from tests.timing import eventually_async

NS = "colocation-system"
KEYS = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory", "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory")
LEADER_LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/colocation-operator"
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/colocation-node-lease/leases"
SANDBOX_ARGS = ["--operators", "1", "--nodes", "2", "--pods-per-node", "2", "--probe-interval", "0.2",
                "--operator-arg=--evaluation-interval=0.5", "--agent-arg=--report-interval=1",
                "--agent-arg=--prediction-cold-start=0"]


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("stops the operator and the agents of the sandbox it starts")
    state = tmp_path_factory.mktemp("cleanup-sandbox")
    with start_sandbox_process(state, [*sandbox_kind_args(request.config), *SANDBOX_ARGS]) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
async def admin(sandbox: tuple[Path, Path]) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(sandbox[0]) as kube:
        yield kube


def processes(state: Path, kind: str) -> list[dict[str, Any]]:
    return list(json.loads((state / f"{kind}.json").read_text()))


@contextlib.contextmanager
def frozen(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:  # the sandbox stops them with SIGTERM, which a stopped process only sees once resumed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def cleanup(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "colocation", "cleanup", "--kubeconfig", str(kubeconfig),
                           "--log-format", "text", *args], capture_output=True, text=True,
                          timeout=300 * TIME_FACTOR, check=False)


async def nodes_offering(admin: Kube) -> dict[str, list[str]]:
    """Each Node's batch and mid keys, in capacity or allocatable."""
    found = {}
    for node in (await get(admin, "/api/v1/nodes"))["items"]:
        status = node.get("status") or {}
        keys = sorted({key for field in ("capacity", "allocatable") for key in status.get(field) or {}
                       if key in KEYS})
        found[node["metadata"]["name"]] = keys
    return found


async def stop_on_the_real_control_plane(admin: Kube) -> None:
    status, body = await admin.request("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/colocation-operator/scale",
                                       {"spec": {"replicas": 0}}, content_type="application/merge-patch+json")
    assert status == 200, body
    status, body = await admin.request("DELETE", f"/apis/apps/v1/namespaces/{NS}/daemonsets/colocation-agent")
    assert status == 200, body

    async def no_pods() -> bool:
        pods = (await get(admin, f"/api/v1/namespaces/{NS}/pods"))["items"]
        names = [pod["metadata"]["name"] for pod in pods]
        return not [name for name in names if name.startswith(("colocation-operator", "colocation-agent"))]

    await eventually_async(no_pods, timeout=60)


async def test_cleanup_refuses_while_the_operator_leads_then_leaves_nothing_behind(
        admin: Kube, sandbox: tuple[Path, Path], request: pytest.FixtureRequest) -> None:
    kubeconfig, state = sandbox

    async def every_node_offers() -> dict[str, list[str]] | None:
        offering = await nodes_offering(admin)
        agents = {node for agent in processes(state, "agents") for node in agent["nodes"]}
        return offering if agents and all(offering.get(node) == sorted(KEYS) for node in agents) else None

    await eventually_async(every_node_offers, timeout=60)
    slos = (await get(admin, "/apis/slo.colocation.dev/v1alpha1/nodeslos"))["items"]
    assert slos

    refused = cleanup(kubeconfig)
    assert refused.returncode == 1
    assert [line for line in refused.stderr.splitlines() if line.strip()] == [refused.stderr.strip()]
    assert "leads (Lease renewed" in refused.stderr and "stop the operator first" in refused.stderr
    assert await every_node_offers(), "a refused cleanup touched a Node"

    real = apiserver_kind(request.config) == "kube"
    simulated = [agent["pid"] for agent in processes(state, "agents") if agent["simulated"] or not real]
    operators = [] if real else [replica["pid"] for replica in processes(state, "operators")]
    with frozen(simulated + operators):
        if real:
            await stop_on_the_real_control_plane(admin)
        done = cleanup(kubeconfig, "--wait-for-leader", str(60 * TIME_FACTOR), "--delete-custom-resources",
                       "--page-size", "1")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[-1].startswith("clean: no Node offers batch or mid resources and no colocation Lease is left")
        assert any(line.startswith("nodes: ") for line in lines)

        offering = await nodes_offering(admin)
        assert offering and {name: keys for name, keys in offering.items() if keys} == {}
        assert (await get(admin, NODE_LEASES))["items"] == []
        status, _ = await admin.request("GET", LEADER_LEASE)
        assert status == 404
        for plural in ("nodeslos", "noderesources"):
            assert (await get(admin, f"/apis/slo.colocation.dev/v1alpha1/{plural}"))["items"] == []
