"""A user's first minutes with kubectl on a cluster where the project runs: install, wait, read.

The sandbox here runs everything (`--nodes 2 --serve-resource-metrics`): with `--apiserver kube`
that is the real kube-apiserver, its aggregator and its APIService availability controller, the
operator replicas behind the Service's endpoints, and agents reporting. The test applies crds/
and the manifests (with the components the sandbox enabled) as a user would, then reads every API
the project serves through the aggregation layer, with kubectl only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from tests.e2e.conftest import REPO, Kubectl, sandbox_kind_args
from tests.e2e.kube import start_sandbox_process
from tests.e2e.test_kubectl_scenario import applied, table
from tests.timing import eventually

pytestmark = pytest.mark.kubectl

COMPONENTS = ("resource-metrics", "custom-metrics")
APISERVICES = ("v1alpha1.metrics.colocation.dev", "v1beta1.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io",
               "v1beta1.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("kubectl-cluster")
    args = [*sandbox_kind_args(request.config), "--nodes", "2", "--pods-per-node", "3",
            "--serve-resource-metrics", "--agent-arg=--report-interval=1", "--agent-arg=--max-report-interval=5"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig


@pytest.fixture
def user_kubectl(kubectl: Kubectl, cluster: Path) -> Kubectl:
    return Kubectl(kubectl.binary, cluster, kubectl.cache_dir)


def overlay(tmp_path: Path) -> Path:
    """manifests/ with the optional components, through an overlay as docs/install.md shows."""
    folder = tmp_path / "overlay"
    folder.mkdir()
    base = os.path.relpath(REPO / "manifests", folder)  # kustomize refuses an absolute base
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [base],
        "components": [f"{base}/components/{name}" for name in COMPONENTS]}))
    return folder


def test_install_then_read_every_api_through_the_aggregator(user_kubectl: Kubectl, tmp_path: Path,
                                                            real_cluster: bool) -> None:
    kubectl = user_kubectl
    kubectl.run("apply", "-f", str(REPO / "crds"))
    again = applied(kubectl.run("apply", "-k", str(overlay(tmp_path))).stdout)
    assert "deployment.apps/colocation-operator" in again and "apiservice.apiregistration.k8s.io/" \
        "v1alpha1.metrics.colocation.dev" in again
    if real_cluster:
        # The sandbox installed the same objects with kubectl apply: nothing is left to change but
        # the PodDisruptionBudget, whose selector kubectl always sends (patchStrategy "replace").
        changed = {name for name, verb in again.items() if verb != "unchanged"}
        assert changed <= {"poddisruptionbudget.policy/colocation-operator"}, again

    waited = kubectl.run("wait", "--for=condition=Available", "--timeout=180s",
                         *(f"apiservice/{name}" for name in APISERVICES), timeout=200).stdout
    assert len(waited.strip().splitlines()) == len(APISERVICES), waited

    nodes = set(kubectl.run("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split())
    assert len(nodes) == 2, nodes

    def nodemetrics() -> list[list[str]] | None:
        header, rows = table(kubectl.run("get", "nodemetrics").stdout)
        return rows if header[:3] == ["NAME", "CPU", "MEMORY"] and {r[0] for r in rows} == nodes else None

    # No sleep between the calls (interval=0): each runs kubectl, which takes its own time.
    eventually(nodemetrics, 90, interval=0, message="every node's NodeMetric listed")

    def top() -> list[list[str]] | None:
        result = kubectl.run("top", "nodes", check=False)
        if result.returncode != 0:
            return None
        header, rows = table(result.stdout)
        return rows if header[:1] == ["NAME"] and {r[0] for r in rows} == nodes else None

    rows = eventually(top, 90, interval=0, message="kubectl top nodes")
    assert all(row[1].endswith("m") for row in rows), rows

    raw = orjson.loads(kubectl.run("get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2/nodes/*/cpu_usage").stdout)
    assert raw["kind"] == "MetricValueList"
    assert {item["describedObject"]["name"] for item in raw["items"]} == nodes

    listed = kubectl.run("api-resources")
    assert listed.returncode == 0
    assert "nodemetrics" in listed.stdout and "noderesources" in listed.stdout
