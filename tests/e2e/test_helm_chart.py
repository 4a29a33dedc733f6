"""`helm install` of charts/colocation on the real control plane, then `helm uninstall`.

The sandbox (`--apiserver kube --nodes 0 --operators 0`) starts kube-apiserver, its aggregator,
the controllers and this machine's node, whose kubelet runs the pods of our image as processes.
The test removes the kubectl install the sandbox made (CRDs too), so that the chart installs into
a cluster without the project, as a user's helm install would; then the chart's own Deployment
pods must serve the NodeMetric API for its APIService to become Available.

`helm uninstall` runs the chart's post-delete hook for real: the Job's pod runs `colocation cleanup`
on this machine's node, which marks it Succeeded when the command exits 0 (restartPolicy Never), and
the Job controller completes the Job. The test first has the chart's operator offer batch and mid
resources on a Node of its own (it reports a NodeMetric for it as the Node's agent would), so that
the hook has something to remove.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.e2e.conftest import REPO, Kubectl, apiserver_kind, sandbox_kind_args
from tests.e2e.kube import TIME_FACTOR, start_sandbox_process, token_kubeconfig
from tests.unit.charts.helm_chart import CHART, RELEASE, SKIP_REASON, helm_binary, render

pytestmark = pytest.mark.kubectl

APISERVICE = "v1alpha1.metrics.colocation.dev"
RESOURCE_METRICS_APISERVICE = "v1beta1.metrics.k8s.io"
CRDS = ("nodeslos.slo.colocation.dev", "noderesources.slo.colocation.dev")
RELEASE_NAMESPACE = "default"
NS = "colocation-system"
OFFERED_KEYS = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory", "kubernetes.io/mid-cpu",
                "kubernetes.io/mid-memory")


@pytest.fixture(scope="module")
def helm_path(request: pytest.FixtureRequest) -> str:
    if apiserver_kind(request.config) != "kube":
        pytest.skip("kube only: the builtin sandbox runs its operator replicas itself, not from the "
                    "Deployment's pods, so nothing would serve the chart's APIService")
    binary = helm_binary()
    if binary is None:
        pytest.skip(SKIP_REASON)
    return binary


@pytest.fixture(scope="module")
def cluster(helm_path: str, request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("helm-chart")
    args = [*sandbox_kind_args(request.config), "--nodes", "0", "--operators", "0",
            "--no-serve-resource-metrics", "--no-serve-custom-metrics"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig


class Helm:
    def __init__(self, binary: str, kubectl: Kubectl) -> None:
        self.binary = binary
        self.kubectl = kubectl  # for its environment: the cluster, and a HOME of the test's own

    def run(self, *args: str, timeout: float = 60) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.kubectl.kubeconfig), "HOME": str(self.kubectl.cache_dir),
               "HELM_CACHE_HOME": str(self.kubectl.cache_dir / "helm")}
        result = subprocess.run([self.binary, *args, "--namespace", RELEASE_NAMESPACE], capture_output=True,
                                text=True, env=env, timeout=timeout * TIME_FACTOR, check=False)
        assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


def installed(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `helm install` creates: the rendered objects but the hooks (created at uninstall)."""
    return [o for o in objects if not is_hook(o)]


def resource_of(obj: dict[str, Any]) -> str:
    """kubectl's name for the object's type, unambiguous: kind.group (kubectl resolves the kind)."""
    group = obj["apiVersion"].rpartition("/")[0]
    return f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()


def existing(kubectl: Kubectl, objects: list[dict[str, Any]]) -> list[str]:
    found = []
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        out = kubectl.run("get", resource_of(obj), obj["metadata"]["name"], "--ignore-not-found", "-o", "name",
                          *(["-n", namespace] if namespace else [])).stdout.strip()
        if out:
            found.append(f"{namespace or ''}/{out}")
    return found


def uninstall_kubectl_install(kubectl: Kubectl) -> None:
    """What the sandbox applied with kubectl, so that the chart owns every object it installs.

    The CRDs go only once each one's objects can be listed: a CRD deleted while kube-apiserver
    still initializes its storage kept its finalizer for minutes on a loaded machine (the CRD
    finalizer's first cleanup failed with "storage is (re)initializing")."""
    installed_crds = sorted(path.name.removesuffix(".yaml") for path in (REPO / "crds").glob("*.yaml"))
    kubectl.run("wait", "--for=condition=Established", *(f"crd/{name}" for name in installed_crds),
                f"--timeout={int(120 * TIME_FACTOR)}s", timeout=150 * TIME_FACTOR)
    deadline = time.monotonic() + 120 * TIME_FACTOR
    while (listed := kubectl.run("get", ",".join(installed_crds), "-A", "-o", "name", check=False)).returncode:
        assert time.monotonic() < deadline, f"our custom resources cannot be listed: {listed.stderr}"
    kubectl.run("delete", "-k", str(REPO / "manifests"), "--ignore-not-found", "--wait=true", "--timeout=300s",
                timeout=330 * TIME_FACTOR)
    kubectl.run("delete", "-f", str(REPO / "crds"), "--ignore-not-found", "--wait=true", "--timeout=120s",
                timeout=150 * TIME_FACTOR)


# Install, upgrade and an uninstall that waits for the cleanup Job: minutes on a loaded machine.
@pytest.mark.timeout(int(600 * TIME_FACTOR))
def test_helm_install_upgrade_and_uninstall(helm_path: str, cluster: Path, kubectl: Kubectl) -> None:
    kubectl = Kubectl(kubectl.binary, cluster, kubectl.cache_dir)
    helm = Helm(helm_path, kubectl)
    rendered = render(helm_path, namespace=RELEASE_NAMESPACE)
    objects = installed(rendered)
    uninstall_kubectl_install(kubectl)
    assert existing(kubectl, objects) == []

    helm.run("install", RELEASE, str(CHART), timeout=300)
    # helm installs crds/ first, then every object of the templates.
    kubectl.run("wait", "--for=condition=Established", *(f"crd/{name}" for name in CRDS), "--timeout=60s")
    assert len(existing(kubectl, objects)) == len(objects)
    waited = kubectl.run("wait", "--for=condition=Available", f"apiservice/{APISERVICE}",
                         f"--timeout={int(180 * TIME_FACTOR)}s", timeout=200 * TIME_FACTOR).stdout
    assert waited.strip() == f"apiservice.apiregistration.k8s.io/{APISERVICE} condition met"
    # Served by the chart's operator pods, through the aggregator (no agent runs: an empty list).
    assert kubectl.run("get", "nodemetrics", "-o", "name").returncode == 0
    status = orjson.loads(helm.run("status", RELEASE, "-o", "json"))
    assert status["info"]["status"] == "deployed"

    # An upgrade that turns a feature on: its APIService is registered and the rolled-out operator
    # pods serve it (the old leader hands its Lease over).
    helm.run("upgrade", RELEASE, str(CHART), "--reuse-values", "--set", "features.resourceMetrics=true",
             timeout=300)
    objects = installed(render(helm_path, {"features.resourceMetrics": True}, namespace=RELEASE_NAMESPACE))
    # The rollout is over once only new pods are left (both counts below are 2); until then a read
    # may still land on an old replica, which does not serve metrics.k8s.io, or on a stopping one.
    # Every replica with a current copy of the leader's data is Ready, the standbys too
    # (docs/operator.md#consistency-across-replicas).
    for field in ("updatedReplicas", "replicas"):
        kubectl.run("wait", f"--for=jsonpath={{.status.{field}}}=2", "deployment/colocation-operator",
                    "-n", "colocation-system", f"--timeout={int(180 * TIME_FACTOR)}s", timeout=200 * TIME_FACTOR)
    kubectl.run("wait", "--for=condition=Available", f"apiservice/{RESOURCE_METRICS_APISERVICE}",
                f"--timeout={int(180 * TIME_FACTOR)}s", timeout=200 * TIME_FACTOR)
    deadline = time.monotonic() + 60 * TIME_FACTOR
    while (read := kubectl.run("get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes", check=False)).returncode:
        assert time.monotonic() < deadline, f"metrics.k8s.io not served after the upgrade: {read.stderr}"
    assert orjson.loads(read.stdout)["kind"] == "NodeMetricsList"
    assert orjson.loads(helm.run("status", RELEASE, "-o", "json"))["version"] == 2

    node = offer_batch_resources_on_a_node_of_the_tests(kubectl)
    try:
        # The post-delete hook runs within uninstall, bounded by its --timeout: helm fails if the
        # Job fails or does not complete in time.
        helm.run("uninstall", RELEASE, "--wait", f"--timeout={int(300 * TIME_FACTOR)}s", timeout=330)
        deadline = time.monotonic() + 120 * TIME_FACTOR
        while left := existing(kubectl, objects):  # namespaces may still be terminating
            assert time.monotonic() < deadline, f"left behind by helm uninstall: {left}"
        # Helm never deletes what crds/ installed: NodeSLOs and NodeResources outlive the release.
        assert kubectl.run("get", *(f"crd/{name}" for name in CRDS), "-o", "name").stdout.split() == [
            f"customresourcedefinition.apiextensions.k8s.io/{name}" for name in CRDS]
        assert_the_cleanup_hook_ran(kubectl, [o for o in rendered if is_hook(o)])
        assert nodes_offering(kubectl) == {}
        assert colocation_leases(kubectl) == []
    finally:
        kubectl.run("delete", "node", node, "--ignore-not-found")


def nodes_offering(kubectl: Kubectl) -> dict[str, list[str]]:
    """Each Node that has batch or mid keys (in capacity or allocatable), with them."""
    nodes = orjson.loads(kubectl.run("get", "nodes", "-o", "json").stdout)["items"]
    offering = {node["metadata"]["name"]: sorted({key for field in ("capacity", "allocatable")
                                                  for key in (node.get("status") or {}).get(field) or {}
                                                  if key in OFFERED_KEYS}) for node in nodes}
    return {name: keys for name, keys in offering.items() if keys}


def colocation_leases(kubectl: Kubectl) -> list[str]:
    leases = orjson.loads(kubectl.run("get", "leases", "--all-namespaces", "-o", "json").stdout)["items"]
    return [f"{lease['metadata']['namespace']}/{lease['metadata']['name']}" for lease in leases
            if lease["metadata"]["namespace"] == "colocation-node-lease"
            or lease["metadata"]["name"] == "colocation-operator"]


def offer_batch_resources_on_a_node_of_the_tests(kubectl: Kubectl) -> str:
    """A Node of the test's own that the chart's operator offers batch and mid resources on: the
    test reports its NodeMetric as its agent would, with a token bound to a pod on it.

    No kubelet runs the Node, and it takes no pod (allocatable pods 0): the scheduler places neither
    the agent DaemonSet's pod nor the hook's there. The test's agent pod, bound to it directly, is
    deleted at once when done (no kubelet would confirm its deletion), so no namespace waits for it.
    """
    node = "cleanup-hook-node"
    kubectl.run("create", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node",
                                                            "metadata": {"name": node}}))
    resources = {"cpu": "4", "memory": "8Gi", "pods": "0"}
    kubectl.run("patch", "node", node, "--subresource=status", "--type=merge", "-p", orjson.dumps(
        {"status": {"capacity": resources, "allocatable": resources}}).decode())
    pod = yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"agent-{node}", "namespace": NS},
                          "spec": {"nodeName": node, "serviceAccountName": "colocation-agent",
                                   "containers": [{"name": "agent", "image": "colocation:test"}]}})
    uid = kubectl.run("create", "-f", "-", "-o", "jsonpath={.metadata.uid}", input=pod).stdout.strip()
    token = kubectl.run("create", "token", "colocation-agent", "-n", NS, "--bound-object-kind", "Pod",
                        "--bound-object-name", f"agent-{node}", "--bound-object-uid", uid).stdout.strip()
    agent = Kubectl(kubectl.binary, token_kubeconfig(kubectl.kubeconfig, token, kubectl.cache_dir / "agent.kubeconfig"),
                    kubectl.cache_dir)
    try:
        deadline = time.monotonic() + 120 * TIME_FACTOR
        while (offered := nodes_offering(kubectl).get(node)) != sorted(OFFERED_KEYS):
            assert time.monotonic() < deadline, f"no batch and mid resources on {node}: {offered}"
            # Again each time: a standby replica answers 503 until the leader serves it.
            agent.run("replace", "--raw", f"/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{node}/status",
                      "-f", "-", input=orjson.dumps(node_metric(node)).decode(), check=False)
            kubectl.run("wait", "--for=jsonpath={.status.allocatable.kubernetes\\.io/batch-cpu}", f"node/{node}",
                        "--timeout=5s", check=False, timeout=10)
    finally:
        kubectl.run("delete", "pod", f"agent-{node}", "-n", NS, "--grace-period=0", "--force", "--ignore-not-found")
    return node


def node_metric(node: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    usage = {"resources": {"cpu": "500m", "memory": "1Gi"}}
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
            "status": {"updateTime": now, "nodeMetric": {"nodeUsage": usage, "aggregatedNodeUsages": [
                {"duration": "5m0s", "usage": {"avg": usage, "p50": usage, "p90": usage, "p95": usage,
                                                "p99": usage}}]}}}


def assert_the_cleanup_hook_ran(kubectl: Kubectl, hook: list[dict[str, Any]]) -> None:
    """The hook's Job completed (the Job controller's event says so) and, as its hook-succeeded
    deletion policy asks, helm then deleted it with its ServiceAccount and RBAC."""
    (job,) = [o for o in hook if o["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    events = orjson.loads(kubectl.run("get", "events", "-n", RELEASE_NAMESPACE, "--field-selector",
                                      f"involvedObject.kind=Job,involvedObject.name={job['metadata']['name']}",
                                      "-o", "json").stdout)["items"]
    assert "Completed" in {event["reason"] for event in events}, [(e["reason"], e["message"]) for e in events]
    assert existing(kubectl, hook) == []
