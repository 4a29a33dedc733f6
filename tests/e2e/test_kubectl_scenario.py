"""The install-and-operate story a user follows with the real kubectl, asserted on kubectl's own output."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import REPO, Kubectl

pytestmark = pytest.mark.kubectl

OPERATOR_SA = "system:serviceaccount:colocation-system:colocation-operator"
AGENT_SA = "system:serviceaccount:colocation-system:colocation-agent"


def applied(output: str) -> dict[str, str]:
    """`kubectl apply` output as {"kind.group/name": "created|configured|unchanged"}.

    kubectl prints no namespace, so two Roles named colocation-agent share one key: the
    objects behind a key must all have had the same answer.
    """
    results: dict[str, set[str]] = {}
    for line in output.strip().splitlines():
        name, _, verb = line.rpartition(" ")
        results.setdefault(name, set()).add(verb)
    assert all(len(verbs) == 1 for verbs in results.values()), output
    return {name: verbs.pop() for name, verbs in results.items()}


def table(output: str) -> tuple[list[str], list[list[str]]]:
    """A `kubectl get` table as (header, rows), split on runs of two or more spaces."""
    lines = output.strip().splitlines()
    split = [re.split(r"\s{2,}", line.strip()) for line in lines]
    return (split[0], split[1:]) if split else ([], [])  # nothing listed: kubectl says so on stderr


def token_kubeconfig(kubeconfig: Path, token: str, path: Path) -> Path:
    """The same cluster, authenticating with nothing but `token` (no admin client certificate)."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": cluster["cluster"]}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    return path


def install(kubectl: Kubectl, tmp_path: Path) -> None:
    """CRDs, then the kustomize base; a changed overlay re-applied touches only what changed."""
    out = kubectl.run("apply", "-f", str(REPO / "crds")).stdout
    assert set(applied(out).values()) <= {"created", "unchanged", "configured"}, out
    assert "customresourcedefinition.apiextensions.k8s.io/nodeslos.slo.colocation.dev" in applied(out)
    out = kubectl.run("wait", "--for=condition=Established", "crd/nodeslos.slo.colocation.dev",
                      "crd/noderesources.slo.colocation.dev", "--timeout=30s").stdout
    assert out.splitlines() == [
        "customresourcedefinition.apiextensions.k8s.io/nodeslos.slo.colocation.dev condition met",
        "customresourcedefinition.apiextensions.k8s.io/noderesources.slo.colocation.dev condition met",
    ]

    # Another test of the session may have installed already: created or unchanged, never an error.
    first = applied(kubectl.run("apply", "-k", str(REPO / "manifests")).stdout)
    assert "deployment.apps/colocation-operator" in first
    assert "configmap/colocation-config" in first

    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        # kustomize refuses an absolute base.
        "resources": [os.path.relpath(REPO / "manifests", overlay)],
        "replicas": [{"name": "colocation-operator", "count": 3}],
        "patches": [{"patch": yaml.safe_dump({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "colocation-config", "namespace": "colocation-system"},
            "data": {"system-config": '{"clusterStrategy": {"minFreeKbytesFactor": 200}}'}})}],
    }))
    try:
        changed = applied(kubectl.run("apply", "-k", str(overlay)).stdout)
        assert changed.keys() == first.keys()
        # The PodDisruptionBudget's selector has patchStrategy "replace", so kubectl's three-way
        # diff always sends it and reports "configured" even when nothing changed (upstream too).
        always = {"poddisruptionbudget.policy/colocation-operator"}
        expected = {"deployment.apps/colocation-operator", "configmap/colocation-config"}
        assert {name for name, verb in changed.items() if verb == "configured"} - always == expected, changed
        assert {verb for name, verb in changed.items() if name not in expected | always} == {"unchanged"}
        replicas = kubectl.run("get", "deploy", "colocation-operator", "-n", "colocation-system",
                               "-o", "jsonpath={.spec.replicas}").stdout
        assert replicas == "3"
    finally:
        again = applied(kubectl.run("apply", "-k", str(REPO / "manifests")).stdout)
    assert again["deployment.apps/colocation-operator"] == "configured"
    assert again["configmap/colocation-config"] == "configured"
    assert again["serviceaccount/colocation-agent"] == "unchanged"


def printer_columns(kubectl: Kubectl, suffix: str) -> None:
    name = f"e2e-node-{suffix}"
    resource = f"noderesource.slo.colocation.dev/{name}"
    manifest = {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": "NodeResource",
                "metadata": {"name": name}, "spec": {}}
    assert kubectl.run("create", "-f", "-", input=yaml.safe_dump(manifest)).stdout.strip() == f"{resource} created"
    try:
        out = kubectl.run("patch", "noderesource", name, "--subresource=status", "--type=merge", "-p",
                          '{"status": {"batchCPU": 1500, "batchMemory": 2147483648, "midCPU": 750,'
                          ' "midMemory": 536870912, "healthy": true, "display": {"batchCPU": "1.50",'
                          ' "batchMemory": "2.00Gi", "midCPU": "0.75", "midMemory": "512Mi"},'
                          ' "message": "metrics fresh"}}'
                          ).stdout
        assert out.strip() == f"{resource} patched"
        header, rows = table(kubectl.run("get", "noderesources", name).stdout)
        assert header == ["NAME", "BATCH-CPU", "BATCH-MEMORY", "MID-CPU", "MID-MEMORY", "HEALTHY", "AGE"]
        # status.display, as the operator writes it
        assert rows[0][:6] == [name, "1.50", "2.00Gi", "0.75", "512Mi", "true"]
        assert re.fullmatch(r"\d+s", rows[0][6]), rows
        # MESSAGE has priority 1: shown only with -o wide.
        header, rows = table(kubectl.run("get", "nres", name, "-o", "wide").stdout)
        assert header == ["NAME", "BATCH-CPU", "BATCH-MEMORY", "MID-CPU", "MID-MEMORY", "HEALTHY", "MESSAGE", "AGE"]
        assert rows[0][6] == "metrics fresh"
    finally:
        kubectl.run("delete", "noderesource", name, "--wait=false")


def deployment_wide(kubectl: Kubectl) -> None:
    header, rows = table(kubectl.run("get", "deploy", "-n", "colocation-system", "-o", "wide").stdout)
    assert header == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    row = next(r for r in rows if r[0] == "colocation-operator")
    assert re.fullmatch(r"\d+/2", row[1]), row
    assert row[5:] == ["operator", "colocation:dev",
                       "app.kubernetes.io/component=operator,app.kubernetes.io/name=colocation"]


def pod_manifest(name: str, labels: dict[str, str]) -> dict[str, object]:
    # The scheduling gate keeps the pod unscheduled on a real cluster, so no kubelet writes its status.
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulingGates": [{"name": "e2e.colocation.dev/hold"}],
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}


def pods_and_selectors(kubectl: Kubectl, ns: str) -> None:
    pods = {"web-front": {"app": "web", "tier": "front"}, "web-back": {"app": "web", "tier": "back"},
            "db": {"app": "db", "tier": "back"}, "cache": {"app": "cache", "tier": "mem"}}
    docs = "---\n".join(yaml.safe_dump(pod_manifest(n, labels)) for n, labels in pods.items())
    out = kubectl.run("apply", "-n", ns, "-f", "-", input=docs).stdout
    assert applied(out) == {f"pod/{n}": "created" for n in pods}

    def names(*selector: str) -> list[str]:
        return sorted(kubectl.run("get", "pods", "-n", ns, *selector, "-o", "name").stdout.split())

    assert names("-l", "app=web") == ["pod/web-back", "pod/web-front"]
    assert names("-l", "tier in (back,mem)") == ["pod/cache", "pod/db", "pod/web-back"]
    assert names("-l", "tier in (back,mem),app!=db") == ["pod/cache", "pod/web-back"]
    assert names("-l", "!color") == sorted(f"pod/{n}" for n in pods)
    header, rows = table(kubectl.run("get", "pods", "-n", ns, "-l", "app=db").stdout)
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows[0][:4] == ["db", "0/1", "SchedulingGated", "0"]

    assert kubectl.run("label", "pod", "db", "-n", ns, "color=blue").stdout.strip() == "pod/db labeled"
    refused = kubectl.run("label", "pod", "db", "-n", ns, "color=red", check=False)
    assert refused.returncode == 1
    assert "'color' already has a value (blue), and --overwrite is false" in refused.stderr
    assert kubectl.run("label", "pod", "db", "-n", ns, "color=red", "--overwrite").stdout.strip() == "pod/db labeled"
    assert names("-l", "color=red") == ["pod/db"]
    assert names("-l", "color") == ["pod/db"]
    assert kubectl.run("annotate", "pod", "db", "-n", ns, "owner=team-a").stdout.strip() == "pod/db annotated"
    assert kubectl.run("get", "pod", "db", "-n", ns, "-o",
                       "jsonpath={.metadata.annotations.owner}").stdout == "team-a"
    assert kubectl.run("label", "pod", "db", "-n", ns, "color-").stdout.strip() == "pod/db unlabeled"
    assert names("-l", "color") == []

    # Readiness comes from the status subresource; kubectl wait reads the condition from it.
    timeout = kubectl.run("wait", "--for=condition=Ready", "pod/db", "-n", ns, "--timeout=1s", check=False)
    assert timeout.returncode == 1
    assert "timed out waiting for the condition on pods/db" in timeout.stderr
    out = kubectl.run("patch", "pod", "db", "-n", ns, "--subresource=status", "--type=merge", "-p",
                      '{"status": {"conditions": [{"type": "Ready", "status": "True"}]}}').stdout
    assert out.strip() == "pod/db patched"
    out = kubectl.run("wait", "--for=condition=Ready", "pod/db", "-n", ns, "--timeout=10s").stdout
    assert out.strip() == "pod/db condition met"


def patches(kubectl: Kubectl, ns: str, suffix: str) -> None:
    """The three patch types kubectl sends, on a Deployment (whose pod template is mutable)."""
    name = f"app-{suffix}"
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                     {"name": "main", "image": "registry.k8s.io/pause:3.10",
                      "env": [{"name": "A", "value": "1"}]},
                     {"name": "side", "image": "registry.k8s.io/pause:3.10"}]}}}}
    kubectl.run("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(deployment))

    def jsonpath(expression: str) -> str:
        return kubectl.run("get", "deploy", name, "-n", ns, "-o", f"jsonpath={expression}").stdout

    # Strategic merge (the default): containers merge by name, env by name; "side" stays.
    out = kubectl.run("patch", "deploy", name, "-n", ns, "-p",
                      '{"spec": {"template": {"spec": {"containers": [{"name": "main", "env": '
                      '[{"name": "B", "value": "2"}]}]}}}}').stdout
    assert out.strip() == f"deployment.apps/{name} patched"
    assert jsonpath("{.spec.template.spec.containers[*].name}") == "main side"
    assert jsonpath("{.spec.template.spec.containers[0].env[*].name}") == "B A"

    # JSON merge patch: a list is replaced as a whole.
    kubectl.run("patch", "deploy", name, "-n", ns, "--type=merge", "-p",
                '{"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "busybox"}]}}}}')
    assert jsonpath("{.spec.template.spec.containers[*].name}") == "only"

    # JSON patch, including a failing test operation, which changes nothing.
    kubectl.run("patch", "deploy", name, "-n", ns, "--type=json", "-p",
                '[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "busybox:1.36"},'
                ' {"op": "add", "path": "/metadata/labels", "value": {"patched": "json"}}]')
    assert jsonpath("{.spec.template.spec.containers[0].image} {.metadata.labels.patched}") == "busybox:1.36 json"
    failed = kubectl.run("patch", "deploy", name, "-n", ns, "--type=json", "-p",
                         '[{"op": "test", "path": "/spec/replicas", "value": 5},'
                         ' {"op": "replace", "path": "/spec/replicas", "value": 7}]', check=False)
    assert failed.returncode == 1
    # kube-apiserver says no more than this for a failed test operation; kubectl prefixes it.
    assert "the server rejected our request due to an error in our request" in failed.stderr, failed.stderr
    assert jsonpath("{.spec.replicas}") == "0"
    no_change = kubectl.run("patch", "deploy", name, "-n", ns, "--type=merge", "-p", '{"spec": {"replicas": 0}}')
    assert no_change.stdout.strip() == f"deployment.apps/{name} patched (no change)"


def finalizers(kubectl: Kubectl, ns: str) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "held", "finalizers": ["e2e.colocation.dev/hold"]}, "data": {"k": "v"}}
    kubectl.run("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(config_map))
    out = kubectl.run("delete", "configmap", "held", "-n", ns, "--wait=false").stdout
    # kubectl 1.36 (the one hack/kube/build.sh builds) names the namespace; older ones did not.
    assert out.strip() in (f'configmap "held" deleted from {ns} namespace', 'configmap "held" deleted')
    still = kubectl.run("get", "configmap", "held", "-n", ns, "-o",
                        "jsonpath={.metadata.deletionTimestamp} {.metadata.finalizers}").stdout
    stamp, _, held_by = still.partition(" ")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp), still
    assert held_by == '["e2e.colocation.dev/hold"]'
    # Only finalizers may change now; removing the last one completes the deletion.
    out = kubectl.run("patch", "configmap", "held", "-n", ns, "--type=json", "-p",
                      '[{"op": "remove", "path": "/metadata/finalizers"}]').stdout
    assert out.strip() == "configmap/held patched"
    kubectl.run("wait", "--for=delete", "configmap/held", "-n", ns, "--timeout=10s")
    gone = kubectl.run("get", "configmap", "held", "-n", ns, check=False)
    assert gone.returncode == 1
    assert 'Error from server (NotFound): configmaps "held" not found' in gone.stderr


def can_i(kubectl: Kubectl, *question: str) -> str:
    result = kubectl.run("auth", "can-i", *question, f"--as={OPERATOR_SA}", check=False)
    # Exit code 0 means yes, 1 means no; kubectl prints the answer either way.
    assert result.returncode in (0, 1), result.stderr
    answer = result.stdout.strip()
    assert (answer == "yes") == (result.returncode == 0), (answer, result.returncode)
    return answer


def service_accounts(kubectl: Kubectl, tmp_path: Path) -> None:
    # The leader Lease is granted by name (resourceNames): any other lease, or no name, is denied.
    assert can_i(kubectl, "update", "leases/colocation-operator", "-n", "colocation-system") == "yes"
    assert can_i(kubectl, "update", "leases", "-n", "colocation-system") == "no"
    assert can_i(kubectl, "create", "leases", "-n", "colocation-system") == "yes"
    assert can_i(kubectl, "patch", "nodes", "--subresource=status") == "yes"
    assert can_i(kubectl, "create", "pods", "--subresource=eviction", "-n", "default") == "yes"
    assert can_i(kubectl, "patch", "nodes") == "no"
    # TYPE/NAME: this asks about the Node named "status", not the subresource.
    assert can_i(kubectl, "patch", "nodes/status") == "no"
    assert can_i(kubectl, "delete", "nodes") == "no"
    assert can_i(kubectl, "get", "secrets", "-n", "kube-system") == "no"

    token = kubectl.run("create", "token", "colocation-agent", "-n", "colocation-system").stdout.strip()
    assert re.fullmatch(r"[A-Za-z0-9_.\-]+", token) and len(token) > 20, token
    as_agent = Kubectl(kubectl.binary, token_kubeconfig(kubectl.kubeconfig, token, tmp_path / "agent.kubeconfig"),
                       kubectl.cache_dir)
    listed = as_agent.run("get", "nodes", "-o", "name")
    assert listed.returncode == 0
    denied = as_agent.run("delete", "node", "e2e-not-a-node", check=False)
    assert denied.returncode == 1
    assert (f'Error from server (Forbidden): nodes "e2e-not-a-node" is forbidden: User "{AGENT_SA}" cannot '
            'delete resource "nodes" in API group "" at the cluster scope') in denied.stderr
    who = as_agent.run("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert who.stdout == AGENT_SA


def discovery(kubectl: Kubectl) -> None:
    assert kubectl.run("get", "--raw", "/readyz").stdout == "ok"
    listed = kubectl.run("api-resources", "--api-group=slo.colocation.dev", check=False)
    # Discovery covers every group, including the aggregated NodeMetric API, which answers only
    # while an operator replica is ready; kubectl then still prints what it found, and exits 1.
    if listed.returncode != 0:
        assert "unable to retrieve the complete list of server APIs: metrics.colocation.dev/v1alpha1" \
            in listed.stderr, listed.stderr
    header, rows = table(listed.stdout)
    assert header == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    assert sorted(rows) == [["clustercolocationprofiles", "ccp", "slo.colocation.dev/v1alpha1", "false",
                             "ClusterColocationProfile"],
                            ["noderesources", "nres", "slo.colocation.dev/v1alpha1", "false", "NodeResource"],
                            ["nodeslos", "nslo", "slo.colocation.dev/v1alpha1", "false", "NodeSLO"]]
    explained = kubectl.run("explain", "noderesources.spec").stdout
    assert "KIND:       NodeResource" in explained
    assert "disableColocation" in explained


def test_install_and_operate_with_kubectl(kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    install(kubectl, tmp_path)
    printer_columns(kubectl, suffix)
    deployment_wide(kubectl)
    patches(kubectl, namespace, suffix)
    pods_and_selectors(kubectl, namespace)
    finalizers(kubectl, namespace)
    service_accounts(kubectl, tmp_path)
    discovery(kubectl)
