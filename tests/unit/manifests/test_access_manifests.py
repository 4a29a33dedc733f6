"""manifests/access-roles.yaml and manifests/flowcontrol.yaml, offline: who reads what, and whose
requests the agents' priority level takes (tests/e2e/test_access_roles.py checks both on a real
kube-apiserver)."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.apimachinery.userinfo import UserInfo
from colocation.kube import permissions
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from colocation_sandbox.launcher.project_install import project_root, render_manifests
from colocation_sandbox.server.rbac_authorizer import RbacAuthorizer, RequestAttributes
from colocation_sandbox.server.rbac_bootstrap import bootstrap_policy

READABLE = ((permissions.SLO_GROUP, "nodeslos"), (permissions.SLO_GROUP, "noderesources"),
            (permissions.METRICS_GROUP, "nodemetrics"))
RBAC_PLURALS = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
                "Role": "roles", "RoleBinding": "rolebindings"}
USER = UserInfo(username="alice", groups=("system:authenticated",))


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    root = project_root()
    if kubectl_binary() is None or root is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    return render_manifests(root)


def authorizer_with(objects: list[dict[str, Any]], role: str | None) -> RbacAuthorizer:
    """Kubernetes' bootstrap roles, the install, and `role` bound cluster-wide to alice (None: nothing)."""
    bindings = [] if role is None else [{
        "kind": "ClusterRoleBinding", "metadata": {"name": f"alice-{role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}]
    everything = [*objects, *bootstrap_policy(), *bindings]
    return RbacAuthorizer(lambda plural: [o for o in everything if RBAC_PLURALS.get(o["kind"]) == plural])


def allowed(authorizer: RbacAuthorizer, verb: str, group: str, resource: str) -> bool:
    return authorizer.authorize(RequestAttributes(user=USER, verb=verb, api_group=group,
                                                  resource=resource)).allowed


@pytest.mark.parametrize("role", ["view", "edit", "admin"])
def test_users_of_the_builtin_roles_read_the_projects_resources_only(rendered: list[dict[str, Any]],
                                                                     role: str) -> None:
    bound = authorizer_with(rendered, role)
    assert [(g, r, v) for g, r in READABLE for v in ("get", "list", "watch") if not allowed(bound, v, g, r)] == []
    assert [(g, r, v) for g, r in READABLE for v in ("create", "update", "patch", "delete")
            if allowed(bound, v, g, r)] == []
    unbound = authorizer_with(rendered, None)
    assert [(g, r) for g, r in READABLE if allowed(unbound, "list", g, r)] == []


def by_kind(rendered: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in rendered if o["kind"] == kind]
    return found


def test_the_agents_flow_schema_takes_the_agents_requests_and_nothing_else(rendered: list[dict[str, Any]]) -> None:
    schema = by_kind(rendered, "FlowSchema")["spec"]
    level = by_kind(rendered, "PriorityLevelConfiguration")
    assert schema["priorityLevelConfiguration"]["name"] == level["metadata"]["name"]
    subjects = [subject for rule in schema["rules"] for subject in rule["subjects"]]
    assert subjects == [{"kind": "ServiceAccount", "serviceAccount": {
        "name": permissions.AGENT_SERVICE_ACCOUNT, "namespace": permissions.OPERATOR_NAMESPACE}}]
    # After the built-in kube-system-service-accounts (900), before service-accounts (9000).
    assert 900 < schema["matchingPrecedence"] < 9000
    # Every request they make: watches and Lease writes alike.
    (rule,) = schema["rules"]
    assert rule["resourceRules"] == [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                      "clusterScope": True, "namespaces": ["*"]}]
    assert rule["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def test_the_agents_priority_level_borrows_nothing(rendered: list[dict[str, Any]]) -> None:
    limited = by_kind(rendered, "PriorityLevelConfiguration")["spec"]["limited"]
    assert limited["borrowingLimitPercent"] == 0
    queuing = limited["limitResponse"]["queuing"]
    # One user, one flow: its hand must hold every queue, or the others never fill.
    assert queuing["handSize"] == queuing["queues"]
