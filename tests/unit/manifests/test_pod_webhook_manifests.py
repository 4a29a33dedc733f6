"""The pod webhook's install: it never blocks pod creation, never sees the system's or our own
pods, calls the path the operator serves, and its CRD is structural, documented and validating."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.apimachinery.selectors import LabelSelector
from colocation.apiserver.pod_mutation_webhook import WEBHOOK_PATH
from colocation.kube import permissions
from colocation_sandbox.launcher.project_install import render_manifests
from tests.unit.manifests.test_manifests import (
    KUBECTL,
    REPO,
    accepts,
    crds,
    rendered,
    resolves,
    schema_of,
    structural_problems,
)

__all__ = ["crds", "rendered"]  # the fixtures, shared with test_manifests
CRD = "clustercolocationprofiles.slo.colocation.dev"


@pytest.fixture(scope="module")
def webhook(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    (configuration,) = [o for o in rendered if o["kind"] == "MutatingWebhookConfiguration"]
    assert configuration["metadata"]["name"] == permissions.POD_WEBHOOK_CONFIGURATION
    (only,) = configuration["webhooks"]
    return dict(only)


def test_the_webhook_never_blocks_pod_creation_and_answers_quickly(webhook: dict[str, Any]) -> None:
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] <= 5
    assert (webhook["sideEffects"], webhook["admissionReviewVersions"]) == ("None", ["v1"])
    assert "caBundle" not in webhook["clientConfig"]  # the operator patches its own CA in
    assert webhook["clientConfig"]["service"] == {"namespace": permissions.OPERATOR_NAMESPACE,
                                                  "name": "colocation-operator", "path": WEBHOOK_PATH, "port": 443}
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"], "scope": "Namespaced"}]


@pytest.mark.parametrize(("namespace", "called"), [
    ("kube-system", False), (permissions.OPERATOR_NAMESPACE, False), (permissions.NODE_LEASE_NAMESPACE, False),
    ("default", True), ("team-a", True)])
def test_the_webhook_skips_system_and_colocation_namespaces(webhook: dict[str, Any], namespace: str,
                                                           called: bool) -> None:
    selector = LabelSelector.from_api(webhook["namespaceSelector"])
    assert selector.matches({"kubernetes.io/metadata.name": namespace}) is called


def test_the_webhook_skips_the_colocation_components_own_pods(webhook: dict[str, Any]) -> None:
    selector = LabelSelector.from_api(webhook["objectSelector"])
    assert not selector.matches({"app.kubernetes.io/part-of": "colocation"})
    assert selector.matches({"app": "etl"})


def test_the_profile_crd_is_structural_documented_and_cluster_scoped(crds: dict[str, dict[str, Any]]) -> None:
    crd = crds[CRD]
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["scope"], version["name"], version["served"], version["storage"]) == (
        "Cluster", "v1alpha1", True, True)
    assert list(structural_problems(schema_of(crd), "")) == []
    for column in version["additionalPrinterColumns"]:
        assert column["jsonPath"].startswith(".metadata.") or resolves(schema_of(crd), column["jsonPath"]), column


@pytest.mark.parametrize(("spec", "valid"), [
    ({"qosClass": "BE", "priorityClassName": "koord-batch", "schedulerName": "koord-scheduler",
      "namespaceSelector": {"matchLabels": {"colocation": "on"}},
      "selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["batch"]}]},
      "labels": {"a": "b"}, "annotations": {"c": "d"}, "koordinatorPriority": 1000}, True),
    ({"probability": 50}, True), ({"probability": "50%"}, True), ({"probability": "100%"}, True),
    ({"probability": 101}, False), ({"probability": "150%"}, False), ({"probability": "half"}, False),
    ({"qosClass": "GOLD"}, False),
    ({"selector": {"matchExpressions": [{"key": "tier", "operator": "Near"}]}}, False),
    ({"labels": {"a": 1}}, False),
])
def test_the_profile_schema_refuses_what_the_webhook_cannot_apply(crds: dict[str, dict[str, Any]],
                                                                  spec: dict[str, Any], valid: bool) -> None:
    assert accepts(crds[CRD], {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": "ClusterColocationProfile",
                               "metadata": {"name": "p"}, "spec": spec}) is valid


def test_with_cert_manager_the_webhook_gets_the_serving_certificates_ca_from_cainjector() -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed, so manifests/ cannot be rendered with kustomize")
    objects = render_manifests(REPO, components=("cert-manager",))
    (configuration,) = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    source = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    namespace, _, name = source.partition("/")
    assert [o for o in objects if o["kind"] == "Certificate" and o["metadata"]["name"] == name
            and o["metadata"]["namespace"] == namespace]
