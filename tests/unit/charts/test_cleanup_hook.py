"""The chart's post-delete hook: a Job that runs `colocation cleanup` with exactly the RBAC it needs.

Rendered only: the real control plane's sandbox kubelet restarts every container that exits
(it knows no restartPolicy Never), so a Job never completes there and `helm uninstall` would wait
for it until its timeout. tests/e2e/test_cleanup.py runs the command itself on both API servers.
"""

from __future__ import annotations

from typing import Any

import pytest

from colocation.apimachinery.userinfo import UserInfo
from colocation.cli import main
from colocation.kube import permissions
from colocation.kube.permissions import CLEANUP_API_CALLS, CLEANUP_CUSTOM_RESOURCE_CALLS, ApiCall
from colocation_sandbox.server.rbac_authorizer import RbacAuthorizer, RequestAttributes
from colocation_sandbox.server.rbac_bootstrap import bootstrap_policy
from tests.unit.charts.helm_chart import render

NAME = "colocation-cleanup"
RBAC_PLURALS = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
                "Role": "roles", "RoleBinding": "rolebindings"}
HOOK_USER = UserInfo(username=f"system:serviceaccount:default:{NAME}",
                     groups=("system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"))
# What the hook must never be able to do: change a Node beyond its status, write any Lease, read a Secret.
NEVER = (ApiCall(group="", resource="nodes", verb="patch", namespace=None),
         ApiCall(group="", resource="nodes", verb="update", namespace=None, subresource="status"),
         ApiCall(group="", resource="nodes", verb="get", namespace=None),
         ApiCall(group="coordination.k8s.io", resource="leases", verb="create", namespace="kube-node-lease"),
         ApiCall(group="coordination.k8s.io", resource="leases", verb="update",
                 namespace=permissions.NODE_LEASE_NAMESPACE),
         ApiCall(group="", resource="secrets", verb="get", namespace=permissions.OPERATOR_NAMESPACE),
         ApiCall(group="apps", resource="deployments", verb="delete", namespace=permissions.OPERATOR_NAMESPACE))


def hook_objects(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects if o["metadata"]["name"] == NAME}


def allowed(objects: list[dict[str, Any]], call: ApiCall) -> bool:
    everything = [*objects, *bootstrap_policy()]
    authorizer = RbacAuthorizer(lambda plural: [o for o in everything if RBAC_PLURALS.get(o["kind"]) == plural])
    return authorizer.authorize(RequestAttributes(
        user=HOOK_USER, verb=call.verb, api_group=call.group, resource=call.resource, subresource=call.subresource,
        name=call.name, namespace=call.namespace or "")).allowed


def test_uninstall_runs_cleanup_after_the_release_is_deleted(helm_path: str) -> None:
    hooks = hook_objects(render(helm_path))
    assert set(hooks) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    for obj in hooks.values():
        annotations = obj["metadata"]["annotations"]
        # post-delete: the operator's pods are being deleted by then, so none writes the resources back.
        assert annotations["helm.sh/hook"] == "post-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    weights = {kind: int(obj["metadata"]["annotations"]["helm.sh/hook-weight"]) for kind, obj in hooks.items()}
    assert max(weights[kind] for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")) < weights["Job"]

    job = hooks["Job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == NAME and pod["restartPolicy"] == "Never"
    assert container["image"] == "colocation:dev" and container["command"] == ["colocation"]
    assert container["args"] == ["cleanup", "--wait-for-leader", "120", "--timeout", "240", "--settle", "15",
                                 "--log-format", "json"]
    # The Job outlives the command's own deadline, so the command's one-line error is what the log shows.
    assert job["spec"]["activeDeadlineSeconds"] > 240
    # The args are ones the command accepts.
    main.make_context("colocation", list(container["args"]))


def test_values_turn_it_off_or_make_it_delete_the_custom_resources(helm_path: str) -> None:
    assert hook_objects(render(helm_path, {"cleanup.enabled": False})) == {}
    hooks = hook_objects(render(helm_path, {"cleanup.deleteCustomResources": True, "cleanup.timeoutSeconds": 100,
                                            "cleanup.waitForLeaderSeconds": 30,
                                            "operator.leaderElection.renewDeadline": 20.5,
                                            "operator.leaderElection.leaseDuration": 30}))
    args = hooks["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    # --settle outlasts the operator's renew deadline, after which a stopping leader writes nothing.
    assert args[1:7] == ["--wait-for-leader", "30", "--timeout", "100", "--settle", "26"]
    assert args[-1] == "--delete-custom-resources"
    assert hooks["Job"]["spec"]["activeDeadlineSeconds"] > 100


@pytest.mark.parametrize("delete_custom_resources", [False, True])
def test_the_hooks_rbac_allows_what_cleanup_calls_and_little_else(helm_path: str,
                                                                  delete_custom_resources: bool) -> None:
    objects = render(helm_path, {"cleanup.deleteCustomResources": delete_custom_resources})
    own = [o for o in objects if o["metadata"]["name"] == NAME]
    assert [str(call) for call in CLEANUP_API_CALLS if not allowed(own, call)] == []
    custom = [allowed(own, call) for call in CLEANUP_CUSTOM_RESOURCE_CALLS]
    assert custom == [delete_custom_resources] * len(CLEANUP_CUSTOM_RESOURCE_CALLS)
    assert [str(call) for call in NEVER if allowed(own, call)] == []
