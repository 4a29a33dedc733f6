"""manifests/components/custom-metrics: valid, registers both metric groups, and grants only the HPA to read them.

Checked with test_manifests' helpers: Kubernetes' schemas and the sandbox's RBAC authorizer.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from colocation.kube import permissions
from colocation.kube.permissions import ApiCall
from colocation_sandbox.launcher.project_install import render_manifests
from colocation_sandbox.server.rbac_authorizer import RbacAuthorizer
from colocation_sandbox.server.rbac_bootstrap import bootstrap_policy
from tests.unit.manifests.test_manifests import (
    KUBECTL,
    KUBERNETES_VERSIONS,
    RBAC_PLURALS,
    REPO,
    attributes,
    find,
    grants,
    operator_args,
    service_account_user,
)

CUSTOM_METRICS_APISERVICES = [("custom.metrics.k8s.io", "v1beta1"), ("custom.metrics.k8s.io", "v1beta2"),
                              ("external.metrics.k8s.io", "v1beta1")]
HPA_SA = ("kube-system", "horizontal-pod-autoscaler")


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """manifests/ alone."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed, so manifests/ cannot be rendered with kustomize")
    return render_manifests(REPO)


@pytest.fixture(scope="module")
def with_custom_metrics() -> list[dict[str, Any]]:
    """manifests/ with components/custom-metrics, through an overlay as docs/install.md shows."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed, so manifests/ cannot be rendered with kustomize")
    return render_manifests(REPO, components=("custom-metrics",))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_custom_metrics_component_renders_valid_kubernetes(
    with_custom_metrics: list[dict[str, Any]], version: str
) -> None:
    for obj in with_custom_metrics:
        kubernetes_validate.validate(obj, version, strict=True)
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "colocation", obj["metadata"]


def test_the_custom_metrics_component_registers_both_groups_and_turns_the_flag_on(
    rendered: list[dict[str, Any]], with_custom_metrics: list[dict[str, Any]]
) -> None:
    from colocation.manager.operator_command import operator_command

    flag = "--serve-custom-metrics"
    assert flag not in operator_args(rendered)
    assert operator_args(with_custom_metrics) == [*operator_args(rendered), flag]
    assert flag in {option for param in operator_command.params for option in param.opts}
    for group, version in CUSTOM_METRICS_APISERVICES:
        spec = find(with_custom_metrics, "APIService", f"{version}.{group}")["spec"]
        assert (spec["group"], spec["version"]) == (group, version)
        assert spec["service"] == {"name": "colocation-operator", "namespace": permissions.OPERATOR_NAMESPACE,
                                   "port": 443}
    priorities = {o["spec"]["version"]: o["spec"]["versionPriority"] for o in with_custom_metrics
                  if o["kind"] == "APIService" and o["spec"]["group"] == "custom.metrics.k8s.io"}
    assert priorities["v1beta2"] > priorities["v1beta1"]  # the HPA's client prefers v1beta2
    added = [o for o in with_custom_metrics if o not in rendered and o["kind"] != "Deployment"]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in added) == sorted(
        [("APIService", f"{version}.{group}") for group, version in CUSTOM_METRICS_APISERVICES]
        + [("ClusterRole", "colocation:custom-metrics-reader"),
           ("ClusterRoleBinding", "colocation:hpa-custom-metrics")])


def test_the_hpa_controller_may_read_custom_and_external_metrics_and_the_operator_gains_nothing(
    rendered: list[dict[str, Any]], with_custom_metrics: list[dict[str, Any]]
) -> None:
    objects = [*with_custom_metrics, *bootstrap_policy()]
    rbac = RbacAuthorizer(lambda plural: [o for o in objects if RBAC_PLURALS.get(o["kind"]) == plural])
    hpa = service_account_user(*HPA_SA)
    # As custom-metrics-apiserver resolves the HPA's requests: list for "*", get for one object.
    for call in (ApiCall(group="custom.metrics.k8s.io", resource="pods", verb="list", namespace="team-a",
                         subresource="http_requests"),
                 ApiCall(group="custom.metrics.k8s.io", resource="nodes", verb="get", namespace=None,
                         subresource="cpu_usage", name="node-1"),
                 ApiCall(group="external.metrics.k8s.io", resource="queue_depth", verb="list", namespace="team-a")):
        assert rbac.authorize(attributes(hpa, call)).allowed, call
    assert not rbac.authorize(attributes(hpa, ApiCall(group="metrics.colocation.dev", resource="nodemetrics",
                                                      verb="get", namespace=None))).allowed
    ours = [grant for grant in grants(with_custom_metrics) if grant[0] != HPA_SA]
    assert sorted(map(str, ours)) == sorted(map(str, grants(rendered)))
