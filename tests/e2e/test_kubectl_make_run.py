"""`make run` as a user meets it: `kubectl top nodes` and `kubectl top pods -A` answer at once.

The sandbox is started exactly as `make run` starts it (`colocation sandbox` with no flags but the
state directory, the log format, and a free port instead of 6443), so the defaults are what is
tested: the operators serve metrics.k8s.io and its APIService is registered, with no flag.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from tests.e2e.conftest import Kubectl, apiserver_kind
from tests.e2e.kube import start_sandbox_process
from tests.e2e.test_kubectl_scenario import table
from tests.timing import eventually

pytestmark = pytest.mark.kubectl


@pytest.fixture(scope="module")
def make_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig") or apiserver_kind(request.config) == "kube":
        pytest.skip("`make run` starts the builtin sandbox")
    state = tmp_path_factory.mktemp("make-run")
    with start_sandbox_process(state, []) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
def kubectl_run(make_run: tuple[Path, Path], tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("no kubectl: neither built by hack/kube/build.sh (needs Go) nor on the PATH")
    return Kubectl(binary, make_run[0], tmp_path / "kubectl-cache")


def test_kubectl_top_works_on_make_run_without_a_flag(kubectl_run: Kubectl, make_run: tuple[Path, Path]) -> None:
    kubectl = kubectl_run
    nodes = {node for agent in json.loads((make_run[1] / "agents.json").read_text()) for node in agent["nodes"]}
    assert len(nodes) == 3  # make run's default: this machine and two simulated nodes

    def available() -> bool:
        result = kubectl.run("get", "apiservice", "v1beta1.metrics.k8s.io", "-o",
                             "jsonpath={.status.conditions[?(@.type=='Available')].status}", check=False)
        return result.returncode == 0 and result.stdout == "True"

    # Registered by default, and its replicas ready (interval=0: each call runs kubectl).
    eventually(available, 60, interval=0, message="the metrics.k8s.io APIService Available")

    def top_nodes() -> list[list[str]] | None:
        result = kubectl.run("top", "nodes", check=False)
        if result.returncode != 0:
            return None
        header, rows = table(result.stdout)
        if header[:2] != ["NAME", "CPU(cores)"] or {row[0] for row in rows} != nodes:
            return None
        # A node is listed at once, with <unknown> figures until its agent's first report is in.
        return rows if all(re.fullmatch(r"\d+m?", row[1]) and row[3].endswith(("Mi", "Ki", "Gi")) for row in rows) \
            else None

    eventually(top_nodes, 90, interval=0, message="kubectl top nodes")

    def top_pods() -> list[list[str]] | None:
        result = kubectl.run("top", "pods", "-A", check=False)
        if result.returncode != 0:
            return None
        header, rows = table(result.stdout)
        if header[:4] != ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]:
            return None
        return rows if rows and all(re.fullmatch(r"\d+m?", row[2]) for row in rows) else None

    eventually(top_pods, 90, interval=0, message="kubectl top pods -A")


def test_make_run_pods_are_ready_with_an_address_of_their_node(kubectl_run: Kubectl) -> None:
    """`kubectl get pods -A -o wide` shows what a user expects of nodes that run their pods:
    every pod Running and 1/1 ready, with an IP from its node's pod CIDR, no two alike (the
    operator replicas are processes on this machine's loopback: host network, the host's IP)."""
    kubectl = kubectl_run
    pods = json.loads(kubectl.run("get", "pods", "-A", "-o", "json").stdout)["items"]
    nodes = {node["metadata"]["name"]: node["spec"]["podCIDR"]
             for node in json.loads(kubectl.run("get", "nodes", "-o", "json").stdout)["items"]}
    assert pods and len(nodes) == 3
    addresses = []
    for pod in pods:
        status = pod["status"]
        assert status["phase"] == "Running", pod["metadata"]["name"]
        assert all(c["ready"] for c in status["containerStatuses"]) and status["containerStatuses"]
        ready = {c["type"]: c["status"] for c in status["conditions"]}
        assert ready["Ready"] == ready["ContainersReady"] == "True"
        if pod["spec"].get("hostNetwork"):
            assert status["podIP"] == status["hostIP"] == "127.0.0.1"
            continue
        cidr = nodes[pod["spec"]["nodeName"]]
        assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(cidr)
        addresses.append(status["podIP"])
    assert addresses and len(set(addresses)) == len(addresses)
    header, rows = table(kubectl.run("get", "pods", "-A", "-o", "wide").stdout)
    ready_column, ip_column = header.index("READY"), header.index("IP")
    assert all(row[ready_column] == "1/1" and row[ip_column] != "<none>" for row in rows)
