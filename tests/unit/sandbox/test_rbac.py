"""RBAC as a real cluster evaluates it; scenarios follow the Kubernetes RBAC documentation."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import CIMultiDict

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.userinfo import UserInfo
from colocation_sandbox.server.access_reviews import (
    Impersonation,
    impersonate,
    self_subject_access_review,
    self_subject_rules_review,
    subject_access_review,
)
from colocation_sandbox.server.rbac_authorizer import Decision, RbacAuthorizer, RequestAttributes, forbidden_error
from colocation_sandbox.server.rbac_bootstrap import bootstrap_policy

Obj = dict[str, Any]
PLURALS = {"Role": "roles", "RoleBinding": "rolebindings", "ClusterRole": "clusterroles",
           "ClusterRoleBinding": "clusterrolebindings"}


def rule(verbs: list[str], resources: list[str], groups: list[str] | None = None,
         names: list[str] | None = None) -> Obj:
    body: Obj = {"apiGroups": [""] if groups is None else groups, "resources": resources, "verbs": verbs}
    if names:
        body["resourceNames"] = names
    return body


def role(name: str, namespace: str, *rules: Obj) -> Obj:
    return {"kind": "Role", "metadata": {"name": name, "namespace": namespace}, "rules": list(rules)}


def cluster_role(name: str, *rules: Obj, labels: dict[str, str] | None = None,
                 aggregate: dict[str, str] | None = None) -> Obj:
    body: Obj = {"kind": "ClusterRole", "metadata": {"name": name, "labels": labels or {}},
                 "rules": list(rules)}
    if aggregate is not None:
        body["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": aggregate}]}
    return body


def binding(name: str, namespace: str, role_kind: str, role_name: str, *subjects: Obj) -> Obj:
    return {"kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": list(subjects)}


def cluster_binding(name: str, role_name: str, *subjects: Obj) -> Obj:
    return {"kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": list(subjects)}


def user_subject(name: str) -> Obj:
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def group_subject(name: str) -> Obj:
    return {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def authorizer(*objects: Obj) -> RbacAuthorizer:
    return RbacAuthorizer(lambda plural: [o for o in objects if PLURALS[o["kind"]] == plural])


def user(name: str, *groups: str) -> UserInfo:
    return UserInfo(username=name, groups=(*groups, "system:authenticated"))


def can(rbac: RbacAuthorizer, who: UserInfo, verb: str, resource: str, namespace: str = "", *,
        group: str = "", subresource: str = "", name: str = "") -> bool:
    return rbac.authorize(RequestAttributes(user=who, verb=verb, resource_request=True, api_group=group,
                                            resource=resource, subresource=subresource, name=name,
                                            namespace=namespace)).allowed


def can_path(rbac: RbacAuthorizer, who: UserInfo, verb: str, path: str) -> bool:
    return rbac.authorize(RequestAttributes(user=who, verb=verb, resource_request=False, path=path)).allowed


JANE, DAVE = user("jane"), user("dave")
POD_READER = role("pod-reader", "default", rule(["get", "watch", "list"], ["pods"]))
SECRET_READER = cluster_role("secret-reader", rule(["get", "watch", "list"], ["secrets"]))


# ---- bindings ------------------------------------------------------------------------------------

def test_role_binding_grants_its_role_in_its_namespace_only() -> None:
    rbac = authorizer(POD_READER, binding("read-pods", "default", "Role", "pod-reader", user_subject("jane")))
    decision = rbac.authorize(RequestAttributes(user=JANE, verb="list", resource="pods", namespace="default"))
    assert decision == Decision(True, 'RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" '
                                      'to User "jane"')
    assert not can(rbac, JANE, "list", "pods", "kube-system")
    assert not can(rbac, JANE, "list", "pods")  # across all namespaces
    assert not can(rbac, JANE, "delete", "pods", "default", name="web")
    assert not can(rbac, DAVE, "list", "pods", "default")


def test_role_binding_to_a_cluster_role_grants_it_in_the_binding_namespace_only() -> None:
    rbac = authorizer(SECRET_READER, binding("read-secrets", "development", "ClusterRole", "secret-reader",
                                             user_subject("dave")))
    assert can(rbac, DAVE, "get", "secrets", "development", name="db")
    assert not can(rbac, DAVE, "get", "secrets", "default", name="db")
    assert not can(rbac, DAVE, "list", "secrets")


def test_cluster_role_binding_grants_everywhere_to_group_members() -> None:
    rbac = authorizer(SECRET_READER, cluster_binding("read-secrets-global", "secret-reader",
                                                     group_subject("manager")))
    manager = user("erin", "manager")
    decision = rbac.authorize(RequestAttributes(user=manager, verb="list", resource="secrets"))
    assert decision.reason == ('RBAC: allowed by ClusterRoleBinding "read-secrets-global" of ClusterRole '
                               '"secret-reader" to Group "manager"')
    assert can(rbac, manager, "get", "secrets", "kube-system", name="x")
    assert not can(rbac, JANE, "get", "secrets", "kube-system", name="x")


def test_role_binding_cannot_reach_a_role_of_another_namespace() -> None:
    rbac = authorizer(POD_READER, binding("read-pods", "dev", "Role", "pod-reader", user_subject("jane")))
    decision = rbac.authorize(RequestAttributes(user=JANE, verb="list", resource="pods", namespace="dev"))
    # Upstream reports the dangling reference in the reason of the (non-)decision.
    assert decision == Decision(False, 'RBAC: role.rbac.authorization.k8s.io "pod-reader" not found')


def test_nothing_is_allowed_by_default() -> None:
    assert authorizer().authorize(RequestAttributes(user=JANE, verb="get", resource="pods", namespace="default")) == \
        Decision(False, "")


def test_system_masters_are_allowed_without_any_binding() -> None:
    admin = user("root", "system:masters")
    assert can(authorizer(), admin, "delete", "nodes", name="n1")
    assert can_path(authorizer(), admin, "get", "/metrics")


# ---- rules ---------------------------------------------------------------------------------------

def test_subresources_need_their_own_rule() -> None:
    rbac = authorizer(
        role("logs", "default", rule(["get", "list"], ["pods", "pods/log"])),
        role("scaler", "default", rule(["update"], ["*/scale"], groups=["apps"])),
        role("misread", "default", rule(["get"], ["pods/*"])),
        *(binding(f"b-{name}", "default", "Role", name, user_subject("jane"))
          for name in ("logs", "scaler", "misread")),
    )
    assert can(rbac, JANE, "get", "pods", "default", subresource="log", name="web")
    assert not can(rbac, JANE, "create", "pods", "default", subresource="exec", name="web")
    assert can(rbac, JANE, "update", "deployments", "default", group="apps", subresource="scale", name="w")
    assert not can(rbac, JANE, "update", "deployments", "default", group="apps", name="w")
    # "pods/*" is not a wildcard in Kubernetes: it grants no subresource at all.
    assert not can(rbac, JANE, "get", "pods", "default", subresource="status", name="web")


def test_resource_wildcard_covers_subresources_and_verb_wildcard_covers_all_verbs() -> None:
    rbac = authorizer(cluster_role("all-apps", rule(["*"], ["*"], groups=["apps"])),
                      cluster_binding("b", "all-apps", user_subject("jane")))
    assert can(rbac, JANE, "patch", "deployments", "default", group="apps", subresource="status", name="w")
    assert can(rbac, JANE, "deletecollection", "replicasets", "default", group="apps")
    assert not can(rbac, JANE, "get", "pods", "default")  # the core group is not "apps"


def test_resource_names_restrict_to_named_objects_and_never_match_unnamed_requests() -> None:
    rbac = authorizer(role("configmap-updater", "default",
                           rule(["get", "update", "list", "create"], ["configmaps"], names=["my-configmap"])),
                      binding("b", "default", "Role", "configmap-updater", user_subject("jane")))
    assert can(rbac, JANE, "get", "configmaps", "default", name="my-configmap")
    assert can(rbac, JANE, "update", "configmaps", "default", name="my-configmap")
    assert not can(rbac, JANE, "get", "configmaps", "default", name="other")
    # list and create carry no name, so a rule with resourceNames cannot allow them.
    assert not can(rbac, JANE, "list", "configmaps", "default")
    assert not can(rbac, JANE, "create", "configmaps", "default")


def test_non_resource_urls_match_exactly_or_by_trailing_star_and_only_via_cluster_bindings() -> None:
    health = cluster_role("health", {"nonResourceURLs": ["/healthz", "/healthz/*"], "verbs": ["get"]})
    via_cluster = authorizer(health, cluster_binding("b", "health", user_subject("jane")))
    assert can_path(via_cluster, JANE, "get", "/healthz")
    assert can_path(via_cluster, JANE, "get", "/healthz/etcd")
    assert not can_path(via_cluster, JANE, "get", "/healthzfoo")
    assert not can_path(via_cluster, JANE, "post", "/healthz")
    via_namespace = authorizer(health, binding("b", "default", "ClusterRole", "health", user_subject("jane")))
    assert not can_path(via_namespace, JANE, "get", "/healthz")


def test_service_account_subjects_default_to_the_binding_namespace() -> None:
    rbac = authorizer(POD_READER, binding("sa-reads", "default", "Role", "pod-reader",
                                          {"kind": "ServiceAccount", "name": "builder"}))
    builder = UserInfo(username="system:serviceaccount:default:builder", groups=(
        "system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"))
    decision = rbac.authorize(RequestAttributes(user=builder, verb="get", resource="pods", namespace="default",
                                                name="p"))
    assert decision.reason == ('RBAC: allowed by RoleBinding "sa-reads/default" of Role "pod-reader" to '
                               'ServiceAccount "builder/default"')
    namesake = UserInfo(username="system:serviceaccount:other:builder", groups=("system:serviceaccounts:other",))
    assert not can(rbac, namesake, "get", "pods", "default", name="p")


def test_service_account_group_subject_covers_every_account_of_the_namespace() -> None:
    rbac = authorizer(SECRET_READER, cluster_binding("b", "secret-reader",
                                                     group_subject("system:serviceaccounts:ci")))
    runner = UserInfo(username="system:serviceaccount:ci:runner", groups=("system:serviceaccounts",
                                                                  "system:serviceaccounts:ci"))
    assert can(rbac, runner, "list", "secrets")


def test_cluster_role_binding_ignores_service_account_subject_without_namespace() -> None:
    rbac = authorizer(SECRET_READER, cluster_binding("b", "secret-reader", {"kind": "ServiceAccount",
                                                                            "name": "default"}))
    assert not can(rbac, UserInfo(username="system:serviceaccount::default"), "list", "secrets")
    assert not can(rbac, UserInfo(username="system:serviceaccount:default:default"), "list", "secrets")


# ---- aggregation and caching ---------------------------------------------------------------------

def test_aggregated_cluster_role_follows_the_labels_of_other_roles() -> None:
    objects: list[Obj] = [
        cluster_role("monitoring", aggregate={"rbac.example.com/aggregate-to-monitoring": "true"}),
        cluster_role("monitoring-endpoints",
                     rule(["get", "list", "watch"], ["services", "endpoints", "pods"]),
                     labels={"rbac.example.com/aggregate-to-monitoring": "true"}),
        cluster_binding("monitor", "monitoring", user_subject("jane")),
    ]
    version = [1]
    reads: list[str] = []

    def source(plural: str) -> list[Obj]:
        reads.append(plural)
        return [o for o in objects if PLURALS[o["kind"]] == plural]

    rbac = RbacAuthorizer(source, version=lambda: version[0])
    assert can(rbac, JANE, "list", "endpoints", "default")
    assert not can(rbac, JANE, "list", "secrets", "default")
    for _ in range(50):
        can(rbac, JANE, "get", "pods", "default", name="p")
    assert len(reads) == 4  # compiled once while the version stands still

    objects.append(cluster_role("monitoring-secrets", rule(["list"], ["secrets"]),
                                labels={"rbac.example.com/aggregate-to-monitoring": "true"}))
    assert not can(rbac, JANE, "list", "secrets", "default")  # not noticed until the version moves
    version[0] += 1
    assert can(rbac, JANE, "list", "secrets", "default")


def test_bootstrap_admin_edit_view_aggregate_through_each_other() -> None:
    rbac = authorizer(*bootstrap_policy(),
                      binding("viewer", "team", "ClusterRole", "view", user_subject("vic")),
                      binding("editor", "team", "ClusterRole", "edit", user_subject("eve")),
                      binding("owner", "team", "ClusterRole", "admin", user_subject("ada")))
    vic, eve, ada = user("vic"), user("eve"), user("ada")
    assert can(rbac, vic, "list", "pods", "team")
    assert not can(rbac, vic, "get", "secrets", "team", name="s")  # view deliberately excludes secrets
    assert not can(rbac, vic, "create", "pods", "team")
    assert can(rbac, eve, "get", "secrets", "team", name="s")
    assert can(rbac, eve, "create", "pods", "team")
    assert can(rbac, eve, "list", "deployments", "team", group="apps")  # view's rules reach edit
    assert not can(rbac, eve, "create", "rolebindings", "team", group="rbac.authorization.k8s.io")
    assert can(rbac, ada, "create", "rolebindings", "team", group="rbac.authorization.k8s.io")
    assert can(rbac, ada, "watch", "leases", "team", group="coordination.k8s.io")
    assert not can(rbac, ada, "list", "pods", "other")


def test_bootstrap_policy_lets_everyone_discover_and_review_itself() -> None:
    rbac = authorizer(*bootstrap_policy())
    anonymous = UserInfo(username="system:anonymous", groups=("system:unauthenticated",))
    assert can_path(rbac, JANE, "get", "/apis/apps/v1")
    assert can_path(rbac, JANE, "get", "/openapi/v3")
    assert can_path(rbac, anonymous, "get", "/healthz")
    assert can_path(rbac, anonymous, "get", "/version")
    assert not can_path(rbac, anonymous, "get", "/api")
    assert can(rbac, JANE, "create", "selfsubjectaccessreviews", group="authorization.k8s.io")
    assert not can(rbac, JANE, "create", "subjectaccessreviews", group="authorization.k8s.io")
    assert can(rbac, user("root", "system:masters"), "create", "subjectaccessreviews",
               group="authorization.k8s.io")


def test_bootstrap_roles_for_extension_api_servers() -> None:
    rbac = authorizer(*bootstrap_policy(),
                      cluster_binding("delegate", "system:auth-delegator", user_subject("ext")),
                      binding("reader", "kube-system", "Role", "extension-apiserver-authentication-reader",
                              user_subject("ext")))
    ext = user("ext")
    assert can(rbac, ext, "create", "tokenreviews", group="authentication.k8s.io")
    assert can(rbac, ext, "create", "subjectaccessreviews", group="authorization.k8s.io")
    assert can(rbac, ext, "watch", "configmaps", "kube-system", name="extension-apiserver-authentication")
    assert not can(rbac, ext, "get", "configmaps", "kube-system", name="kube-proxy")


def test_rules_for_lists_what_a_user_may_do_in_a_namespace() -> None:
    rbac = authorizer(POD_READER, binding("read-pods", "default", "Role", "pod-reader", user_subject("jane")),
                      cluster_role("health", {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}),
                      cluster_binding("h", "health", group_subject("system:authenticated")))
    resource_rules, non_resource_rules = rbac.rules_for(JANE, "default")
    assert resource_rules == [{"verbs": ["get", "watch", "list"], "apiGroups": [""], "resources": ["pods"]}]
    assert non_resource_rules == [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]
    assert rbac.rules_for(JANE, "kube-system")[0] == []


# ---- impersonation -------------------------------------------------------------------------------
# Constrained impersonation (KEP 5284, on by default in 1.36) is tried before the legacy verb.

IMPERSONATOR = cluster_role("impersonator", rule(["impersonate"], ["users", "groups"]))
ALICE = user("alice")


def list_pods(requester: UserInfo, namespace: str = "default") -> RequestAttributes:
    return RequestAttributes(user=requester, verb="list", resource_request=True, api_group="", resource="pods",
                             namespace=namespace)


def test_impersonating_a_user_and_groups_when_allowed() -> None:
    rbac = authorizer(IMPERSONATOR, cluster_binding("b", "impersonator", user_subject("alice")))
    headers = CIMultiDict([("Impersonate-User", "bob"), ("Impersonate-Group", "devs"),
                           ("Impersonate-Group", "ops")])
    assert impersonate(ALICE, headers, rbac.authorize, request=list_pods(ALICE)) == \
        UserInfo(username="bob", groups=("devs", "ops", "system:authenticated"))


def test_without_any_grant_the_answer_is_the_first_constrained_denial() -> None:
    rbac = authorizer(cluster_role("users-only", rule(["impersonate"], ["users"])),
                      cluster_binding("b", "users-only", user_subject("alice")))
    with pytest.raises(ApiError) as caught:
        impersonate(ALICE, {"Impersonate-User": "bob", "Impersonate-Group": "system:masters"}, rbac.authorize,
                    request=list_pods(ALICE))
    assert caught.value.code == 403
    assert caught.value.message == ('pods is forbidden: User "alice" cannot impersonate-on:user-info:list resource '
                                    '"pods" in API group "" in the namespace "default"')


def test_the_mode_that_last_worked_is_tried_first_and_answers_a_denial() -> None:
    rbac = authorizer(cluster_role("users-only", rule(["impersonate"], ["users"])),
                      cluster_binding("b", "users-only", user_subject("alice")))
    impersonation = Impersonation(rbac.authorize)
    assert impersonation(ALICE, {"Impersonate-User": "bob"}, list_pods(ALICE)).username == "bob"  # legacy
    with pytest.raises(ApiError) as caught:
        impersonation(ALICE, {"Impersonate-User": "bob", "Impersonate-Group": "system:masters"}, list_pods(ALICE))
    assert caught.value.message == ('groups "system:masters" is forbidden: User "alice" cannot impersonate '
                                    'resource "groups" in API group "" at the cluster scope')


def test_constrained_user_info_mode_needs_the_request_verb_and_the_user() -> None:
    rbac = authorizer(cluster_role("constrained",
                                   rule(["impersonate:user-info"], ["users", "groups"],
                                        groups=["authentication.k8s.io"]),
                                   rule(["impersonate-on:user-info:list"], ["pods"])),
                      cluster_binding("b", "constrained", user_subject("alice")))
    acting = impersonate(ALICE, {"Impersonate-User": "bob", "Impersonate-Group": "devs"}, rbac.authorize,
                         request=list_pods(ALICE))
    assert acting == UserInfo(username="bob", groups=("devs", "system:authenticated"))
    with pytest.raises(ApiError) as caught:
        impersonate(ALICE, {"Impersonate-User": "bob", "Impersonate-Group": "system:masters"}, rbac.authorize,
                    request=list_pods(ALICE))
    assert caught.value.message == ('groups.authentication.k8s.io "system:masters" is forbidden: User "alice" '
                                    'cannot impersonate:user-info resource "groups" in API group '
                                    '"authentication.k8s.io" at the cluster scope: impersonating the '
                                    'system:masters group is not allowed')


def test_constrained_node_and_service_account_modes_fix_the_groups() -> None:
    rbac = authorizer(cluster_role("constrained",
                                   rule(["impersonate:arbitrary-node", "impersonate:serviceaccount"],
                                        ["nodes", "serviceaccounts"], groups=["authentication.k8s.io"]),
                                   rule(["impersonate-on:arbitrary-node:list", "impersonate-on:serviceaccount:list"],
                                        ["pods"])),
                      cluster_binding("b", "constrained", user_subject("alice")))
    node = impersonate(ALICE, {"Impersonate-User": "system:node:n1"}, rbac.authorize, request=list_pods(ALICE))
    assert node == UserInfo(username="system:node:n1", groups=("system:nodes", "system:authenticated"))
    account = impersonate(ALICE, {"Impersonate-User": "system:serviceaccount:dev:builder"}, rbac.authorize,
                          request=list_pods(ALICE))
    assert account.groups == ("system:serviceaccounts", "system:serviceaccounts:dev", "system:authenticated")


def test_impersonating_a_service_account_needs_the_verb_on_serviceaccounts_in_its_namespace() -> None:
    rbac = authorizer(*bootstrap_policy(),
                      binding("dev-edit", "dev", "ClusterRole", "edit", user_subject("alice")))
    impersonation = Impersonation(rbac.authorize)
    acting = impersonation(ALICE, {"impersonate-user": "system:serviceaccount:dev:builder"}, list_pods(ALICE, "dev"))
    assert acting == UserInfo(username="system:serviceaccount:dev:builder",
                              groups=("system:serviceaccounts", "system:serviceaccounts:dev",
                                      "system:authenticated"))
    with pytest.raises(ApiError) as caught:
        impersonation(ALICE, {"Impersonate-User": "system:serviceaccount:prod:builder"}, list_pods(ALICE, "dev"))
    assert caught.value.message == ('serviceaccounts "builder" is forbidden: User "alice" cannot impersonate '
                                    'resource "serviceaccounts" in API group "" in the namespace "prod"')


def test_impersonating_extras_and_uid_needs_the_authentication_group_resources() -> None:
    rbac = authorizer(IMPERSONATOR,
                      cluster_role("extras", rule(["impersonate"], ["userextras/example.com/scopes", "uids"],
                                                  groups=["authentication.k8s.io"])),
                      cluster_binding("b1", "impersonator", user_subject("alice")),
                      cluster_binding("b2", "extras", user_subject("alice")))
    headers = CIMultiDict([("Impersonate-User", "bob"), ("Impersonate-Uid", "1234"),
                           ("Impersonate-Extra-Example.com%2fScopes", "view"),
                           ("Impersonate-Extra-Example.com%2fScopes", "edit")])
    acting = impersonate(ALICE, headers, rbac.authorize, request=list_pods(ALICE))
    assert acting.uid == "1234"
    assert dict(acting.extra) == {"example.com/scopes": ("view", "edit")}
    with pytest.raises(ApiError) as caught:
        impersonate(ALICE, {"Impersonate-User": "bob", "Impersonate-Extra-Other": "x"}, rbac.authorize,
                    request=list_pods(ALICE))
    assert caught.value.code == 403


def test_impersonation_headers_without_a_user_are_a_bad_request() -> None:
    root = user("root", "system:masters")
    with pytest.raises(ApiError) as caught:
        impersonate(root, CIMultiDict([("Impersonate-Group", "devs"), ("Impersonate-Uid", "7")]),
                    authorizer().authorize, request=list_pods(root))
    assert (caught.value.code, caught.value.message) == (400, (
        'requested &user.DefaultInfo{Name:"", UID:"7", Groups:[]string{"devs"}, Extra:map[string][]string(nil)} '
        "without impersonating a user name"))


def test_no_impersonation_headers_leaves_the_caller_unchanged() -> None:
    assert impersonate(ALICE, {"Accept": "application/json"}, authorizer().authorize, request=list_pods(ALICE)) is ALICE


# ---- reviews -------------------------------------------------------------------------------------

def test_subject_access_review_answers_for_the_user_in_the_spec() -> None:
    rbac = authorizer(POD_READER, binding("read-pods", "default", "Role", "pod-reader", user_subject("jane")))
    spec = {"user": "jane", "groups": ["system:authenticated"],
            "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods",
                                   "version": "v1"}}
    assert subject_access_review(spec, rbac) == {
        "allowed": True,
        "reason": 'RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane"'}
    spec["user"] = "dave"
    assert subject_access_review(spec, rbac) == {"allowed": False, "reason": ""}


def test_subject_access_review_validation() -> None:
    with pytest.raises(ApiError) as caught:
        subject_access_review({"resourceAttributes": {"verb": "get", "resource": "pods"}}, authorizer())
    assert caught.value.code == 422
    with pytest.raises(ApiError) as caught:
        subject_access_review({"user": "jane"}, authorizer())
    assert caught.value.code == 422
    assert "exactly one of nonResourceAttributes or resourceAttributes" in caught.value.message


def test_self_subject_access_review_of_a_path() -> None:
    rbac = authorizer(*bootstrap_policy())
    spec = {"nonResourceAttributes": {"path": "/apis", "verb": "get"}}
    assert self_subject_access_review(spec, JANE, rbac)["allowed"] is True
    spec = {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert self_subject_access_review(spec, JANE, rbac)["allowed"] is False


def test_self_subject_rules_review_for_an_administrator_lists_everything() -> None:
    status = self_subject_rules_review({"namespace": "default"}, user("root", "system:masters"), authorizer())
    assert {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]} in status["resourceRules"]
    assert {"verbs": ["*"], "nonResourceURLs": ["*"]} in status["nonResourceRules"]
    assert status["incomplete"] is False


def test_forbidden_error_wording_matches_kube_apiserver() -> None:
    attrs = RequestAttributes(user=JANE, verb="update", api_group="coordination.k8s.io", resource="leases",
                              name="leader", namespace="colocation-system")
    error = forbidden_error(attrs)
    assert (error.code, error.reason) == (403, "Forbidden")
    assert error.message == ('leases.coordination.k8s.io "leader" is forbidden: User "jane" cannot update '
                             'resource "leases" in API group "coordination.k8s.io" in the namespace '
                             '"colocation-system"')
    path_error = forbidden_error(RequestAttributes(user=JANE, verb="get", resource_request=False, path="/metrics"))
    assert path_error.message == 'forbidden: User "jane" cannot get path "/metrics"'


def test_user_info_is_usable_as_a_cache_key() -> None:
    first = UserInfo(username="u", groups=["a"], extra={"k": ["v"]})  # type: ignore[arg-type,dict-item]
    second = UserInfo(username="u", groups=("a",), extra={"k": ("v",)})
    assert first == second
    assert len({first, second}) == 1
