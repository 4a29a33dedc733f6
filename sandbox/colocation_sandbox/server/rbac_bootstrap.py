"""The default RBAC objects of a fresh cluster that matter to the sandbox.

They mirror upstream's bootstrappolicy (testdata/cluster-roles.yaml, namespace-roles.yaml) rule
for rule, so that what is allowed in the sandbox is what is allowed in a real cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from colocation.apimachinery.userinfo import AUTHENTICATED, MASTERS, SERVICE_ACCOUNTS_GROUP, UNAUTHENTICATED
from colocation_sandbox.server.rbac_authorizer import AUTHENTICATION_GROUP, AUTHORIZATION_GROUP, RBAC_GROUP

# The default objects of a fresh cluster that matter to the sandbox, mirroring upstream's
# bootstrappolicy (testdata/cluster-roles.yaml, namespace-roles.yaml) rule for rule.

_READ = ("get", "list", "watch")
_WRITE = ("create", "delete", "deletecollection", "patch", "update")
_READ_WRITE = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_BOOTSTRAP_ANNOTATIONS = {"rbac.authorization.kubernetes.io/autoupdate": "true"}


def _rule(verbs: Iterable[str], groups: Iterable[str], resources: Iterable[str],
          *, names: Iterable[str] = ()) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def _url_rule(verbs: Iterable[str], urls: Iterable[str]) -> dict[str, Any]:
    return {"nonResourceURLs": list(urls), "verbs": list(verbs)}


def _metadata(name: str, namespace: str = "", labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {**_BOOTSTRAP_LABELS, **(labels or {})},
                                "annotations": dict(_BOOTSTRAP_ANNOTATIONS)}
    if namespace:
        metadata["namespace"] = namespace
    return metadata


def _cluster_role(name: str, rules: list[dict[str, Any]], *, aggregate_to: str = "",
                  aggregate_from: str = "") -> dict[str, Any]:
    labels = {f"rbac.authorization.k8s.io/aggregate-to-{aggregate_to}": "true"} if aggregate_to else {}
    role: dict[str, Any] = {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
                            "metadata": _metadata(name, labels=labels), "rules": rules}
    if aggregate_from:
        role["aggregationRule"] = {"clusterRoleSelectors": [
            {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{aggregate_from}": "true"}}]}
    return role


def _cluster_role_binding(name: str, *groups: str) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding", "metadata": _metadata(name),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group} for group in groups]}


def _aggregate_to_view() -> list[dict[str, Any]]:
    return [
        _rule(_READ, [""], ["configmaps", "endpoints", "persistentvolumeclaims",
                            "persistentvolumeclaims/status", "pods", "replicationcontrollers",
                            "replicationcontrollers/scale", "serviceaccounts", "services",
                            "services/status"]),
        _rule(_READ, [""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log",
                            "pods/status", "replicationcontrollers/status", "resourcequotas",
                            "resourcequotas/status"]),
        _rule(_READ, [""], ["namespaces"]),
        _rule(_READ, ["discovery.k8s.io"], ["endpointslices"]),
        _rule(_READ, ["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
                                "deployments/scale", "deployments/status", "replicasets",
                                "replicasets/scale", "replicasets/status", "statefulsets",
                                "statefulsets/scale", "statefulsets/status"]),
        _rule(_READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        _rule(_READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        _rule(_READ, ["extensions"], ["daemonsets", "daemonsets/status", "deployments",
                                      "deployments/scale", "deployments/status", "ingresses",
                                      "ingresses/status", "networkpolicies", "replicasets",
                                      "replicasets/scale", "replicasets/status",
                                      "replicationcontrollers/scale"]),
        _rule(_READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        _rule(_READ, ["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"]),
    ]


def _aggregate_to_edit() -> list[dict[str, Any]]:
    return [
        _rule(_READ, [""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets",
                            "services/proxy"]),
        _rule(["impersonate"], [""], ["serviceaccounts"]),
        _rule(_WRITE, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        _rule(["create"], [""], ["pods/eviction"]),
        _rule(_WRITE, [""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
                             "replicationcontrollers/scale", "secrets", "serviceaccounts", "services",
                             "services/proxy"]),
        _rule(["create"], [""], ["serviceaccounts/token"]),
        _rule(_WRITE, ["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                                 "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"]),
        _rule(_WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
        _rule(_WRITE, ["batch"], ["cronjobs", "jobs"]),
        _rule(_WRITE, ["extensions"], ["daemonsets", "deployments", "deployments/rollback",
                                       "deployments/scale", "ingresses", "networkpolicies", "replicasets",
                                       "replicasets/scale", "replicationcontrollers/scale"]),
        _rule(_WRITE, ["policy"], ["poddisruptionbudgets"]),
        _rule(_WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
        _rule(_READ_WRITE, ["coordination.k8s.io"], ["leases"]),
    ]


def bootstrap_policy() -> list[dict[str, Any]]:
    """The RBAC objects a fresh cluster starts with (the subset the sandbox's clients rely on)."""
    return [
        _cluster_role("cluster-admin", [_rule(["*"], ["*"], ["*"]), _url_rule(["*"], ["*"])]),
        _cluster_role("admin", [], aggregate_from="admin"),
        _cluster_role("edit", [], aggregate_from="edit", aggregate_to="admin"),
        _cluster_role("view", [], aggregate_from="view", aggregate_to="edit"),
        _cluster_role("system:aggregate-to-admin", [
            _rule(["create"], [AUTHORIZATION_GROUP], ["localsubjectaccessreviews"]),
            _rule(_READ_WRITE, [RBAC_GROUP], ["rolebindings", "roles"]),
        ], aggregate_to="admin"),
        _cluster_role("system:aggregate-to-edit", _aggregate_to_edit(), aggregate_to="edit"),
        _cluster_role("system:aggregate-to-view", _aggregate_to_view(), aggregate_to="view"),
        _cluster_role("system:discovery", [_url_rule(["get"], [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
            "/version", "/version/"])]),
        _cluster_role("system:basic-user", [
            _rule(["create"], [AUTHORIZATION_GROUP], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            _rule(["create"], [AUTHENTICATION_GROUP], ["selfsubjectreviews"]),
        ]),
        _cluster_role("system:public-info-viewer", [_url_rule(["get"], [
            "/healthz", "/livez", "/readyz", "/version", "/version/"])]),
        # Who may verify ServiceAccount tokens itself: every ServiceAccount, as upstream binds it.
        _cluster_role("system:service-account-issuer-discovery", [_url_rule(["get"], [
            "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
            "/openid/v1/jwks", "/openid/v1/jwks/"])]),
        _cluster_role("system:auth-delegator", [
            _rule(["create"], [AUTHENTICATION_GROUP], ["tokenreviews"]),
            _rule(["create"], [AUTHORIZATION_GROUP], ["subjectaccessreviews"]),
        ]),
        _cluster_role_binding("cluster-admin", MASTERS),
        _cluster_role_binding("system:discovery", AUTHENTICATED),
        _cluster_role_binding("system:basic-user", AUTHENTICATED),
        _cluster_role_binding("system:public-info-viewer", AUTHENTICATED, UNAUTHENTICATED),
        _cluster_role_binding("system:service-account-issuer-discovery", SERVICE_ACCOUNTS_GROUP),
        {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "Role",
         "metadata": _metadata("extension-apiserver-authentication-reader", "kube-system"),
         "rules": [_rule(_READ, [""], ["configmaps"], names=["extension-apiserver-authentication"])]},
    ]
