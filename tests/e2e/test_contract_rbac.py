"""Contract: authentication (tokens, TokenRequest, TokenReview), RBAC decisions and impersonation."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.e2e.kube import Kube, create, pod_manifest
from tests.timing import eventually_async

RBAC = "/apis/rbac.authorization.k8s.io/v1"
REVIEWS = "/apis/authorization.k8s.io/v1"

AsUser = Callable[[str | None], Awaitable[Kube]]


async def service_account_token(kube: Kube, namespace: str, name: str, **spec: Any) -> str:
    """Create a ServiceAccount and mint a token for it with the TokenRequest subresource."""
    status, _ = await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                                   {"metadata": {"name": name}})
    assert status in (201, 409)
    status, body = await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                       "spec": {"expirationSeconds": 3600, **spec}})
    assert status == 201, body
    assert body["kind"] == "TokenRequest" and body["status"]["expirationTimestamp"]
    return str(body["status"]["token"])


def reader_rules() -> list[dict[str, Any]]:
    return [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]


def binding(name: str, role_kind: str, role: str, namespace: str, account: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                                                    "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}


async def allowed(client: Kube, path: str) -> bool:
    status, _ = await client.request("GET", path)
    return status == 200


async def test_a_bad_token_is_unauthorized(as_user: AsUser, namespace: str) -> None:
    status, body = await (await as_user("not-a-real-token")).request(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert (status, body["kind"], body["reason"]) == (401, "Status", "Unauthorized")


async def test_anonymous_requests_for_resources_are_refused(as_user: AsUser, namespace: str,
                                                            real_cluster: bool) -> None:
    status, body = await (await as_user(None)).request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    # The sandbox admits anonymous requests to the health endpoints only, so a resource request is
    # unauthenticated: 401. A cluster that admits anonymous requests everywhere answers 403 instead.
    expected = {401: "Unauthorized", 403: "Forbidden"} if real_cluster else {401: "Unauthorized"}
    assert status in expected, (status, body)
    assert body["reason"] == expected[status]
    if status == 403:
        assert 'User "system:anonymous"' in body["message"]


async def test_service_account_without_permissions_is_forbidden(kube: Kube, as_user: AsUser, namespace: str) -> None:
    token = await service_account_token(kube, namespace, "nobody")
    status, body = await (await as_user(token)).request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert (status, body["kind"], body["reason"]) == (403, "Status", "Forbidden")
    assert body["message"] == (f'configmaps is forbidden: User "system:serviceaccount:{namespace}:nobody" '
                               f'cannot list resource "configmaps" in API group "" in the namespace "{namespace}"')
    assert body["details"]["kind"] == "configmaps"


async def test_role_binding_grants_in_its_namespace_only(kube: Kube, as_user: AsUser, namespace: str) -> None:
    other = f"e2e-other-{uuid.uuid4().hex[:6]}"
    await create(kube, "/api/v1/namespaces", {"metadata": {"name": other}})
    try:
        token = await service_account_token(kube, namespace, "reader")
        client = await as_user(token)
        here, there = (f"/api/v1/namespaces/{ns}/configmaps" for ns in (namespace, other))
        assert not await allowed(client, here)

        await create(kube, f"{RBAC}/namespaces/{namespace}/roles",
                     {"metadata": {"name": "cm-reader"}, "rules": reader_rules()})
        await create(kube, f"{RBAC}/namespaces/{namespace}/rolebindings",
                     binding("cm-reader", "Role", "cm-reader", namespace, "reader"))
        await eventually_async(lambda: allowed(client, here), timeout=30)
        assert not await allowed(client, there)
        status, body = await client.request("POST", here, {"metadata": {"name": "x"}})
        assert (status, body["reason"]) == (403, "Forbidden")  # the role grants reading, not writing
    finally:
        await kube.request("DELETE", f"/api/v1/namespaces/{other}")


async def test_a_namespace_itself_is_in_its_own_namespace_for_rbac(kube: Kube, as_user: AsUser,
                                                                  namespace: str) -> None:
    # RequestInfo puts /api/v1/namespaces/NAME in namespace NAME: a RoleBinding there reaches it.
    client = await as_user(await service_account_token(kube, namespace, "looker"))
    requester = f"system:serviceaccount:{namespace}:looker"
    await create(kube, f"{RBAC}/namespaces/{namespace}/roles", {"metadata": {"name": "ns-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]})
    await create(kube, f"{RBAC}/namespaces/{namespace}/rolebindings",
                 binding("ns-reader", "Role", "ns-reader", namespace, "looker"))
    await eventually_async(lambda: allowed(client, f"/api/v1/namespaces/{namespace}"), timeout=30)
    status, body = await client.request("GET", "/api/v1/namespaces/default")
    assert status == 403
    assert body["message"] == (f'namespaces "default" is forbidden: User "{requester}" cannot get resource '
                               '"namespaces" in API group "" in the namespace "default"')


async def test_cluster_role_bound_by_a_role_binding_grants_in_that_namespace_only(
        kube: Kube, as_user: AsUser, namespace: str, cluster_cleanup: list[str]) -> None:
    role = f"e2e-cm-reader-{uuid.uuid4().hex[:6]}"
    await create(kube, f"{RBAC}/clusterroles", {"metadata": {"name": role}, "rules": reader_rules()})
    cluster_cleanup.append(f"{RBAC}/clusterroles/{role}")
    token = await service_account_token(kube, namespace, "reader")
    client = await as_user(token)
    await create(kube, f"{RBAC}/namespaces/{namespace}/rolebindings",
                 binding("reads", "ClusterRole", role, namespace, "reader"))
    await eventually_async(lambda: allowed(client, f"/api/v1/namespaces/{namespace}/configmaps"), timeout=30)
    assert not await allowed(client, "/api/v1/namespaces/default/configmaps")
    assert not await allowed(client, "/api/v1/configmaps")  # across all namespaces is cluster scope


async def test_self_subject_access_review_answers_for_the_caller(kube: Kube, as_user: AsUser, namespace: str) -> None:
    client = await as_user(await service_account_token(kube, namespace, "curious"))
    question = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "configmaps"}}}

    async def answer() -> dict[str, Any]:
        status, body = await client.request("POST", f"{REVIEWS}/selfsubjectaccessreviews", question)
        assert status == 201, body
        return body["status"]  # type: ignore[no-any-return]

    assert (await answer())["allowed"] is False
    await create(kube, f"{RBAC}/namespaces/{namespace}/roles",
                 {"metadata": {"name": "cm-reader"}, "rules": reader_rules()})
    await create(kube, f"{RBAC}/namespaces/{namespace}/rolebindings",
                 binding("cm-reader", "Role", "cm-reader", namespace, "curious"))

    async def granted() -> bool:
        return (await answer())["allowed"] is True

    await eventually_async(granted, timeout=30)


async def test_token_review_of_a_pod_bound_token_names_the_pod_and_node(kube: Kube, namespace: str) -> None:
    await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "agent"}})
    pod = await create(kube, f"/api/v1/namespaces/{namespace}/pods", pod_manifest("agent-0", service_account="agent"))
    node = f"e2e-node-{uuid.uuid4().hex[:6]}"  # need not exist: the token names it all the same
    status, body = await kube.request("POST", f"/api/v1/namespaces/{namespace}/pods/agent-0/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "agent-0"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    assert status == 201, body
    token = await service_account_token(kube, namespace, "agent", boundObjectRef={
        "apiVersion": "v1", "kind": "Pod", "name": "agent-0", "uid": pod["metadata"]["uid"]})

    status, review = await kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
    assert status == 201, review
    result = review["status"]
    assert result["authenticated"] is True
    user = result["user"]
    assert user["username"] == f"system:serviceaccount:{namespace}:agent"
    assert {"system:serviceaccounts", f"system:serviceaccounts:{namespace}"} <= set(user["groups"])
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["agent-0"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [node]


@pytest.mark.parametrize("deleted", ["pod", "serviceaccount"])
async def test_a_token_dies_with_its_pod_or_its_service_account(kube: Kube, namespace: str, deleted: str) -> None:
    await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "agent"}})
    pod = await create(kube, f"/api/v1/namespaces/{namespace}/pods", pod_manifest("agent-0", service_account="agent"))
    token = await service_account_token(kube, namespace, "agent", boundObjectRef={
        "apiVersion": "v1", "kind": "Pod", "name": "agent-0", "uid": pod["metadata"]["uid"]})

    async def authenticated() -> bool:
        status, review = await kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        assert status == 201, review
        return bool(review["status"].get("authenticated", False))

    assert await authenticated()
    path = (f"/api/v1/namespaces/{namespace}/pods/agent-0" if deleted == "pod"
            else f"/api/v1/namespaces/{namespace}/serviceaccounts/agent")
    status, body = await kube.request("DELETE", path, {"gracePeriodSeconds": 0})
    assert status == 200, body

    async def refused() -> bool:
        return not await authenticated()
    await eventually_async(refused, timeout=30)


async def test_token_review_of_garbage_is_unauthenticated(kube: Kube) -> None:
    status, review = await kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "garbage"}})
    assert status == 201, review
    assert review["status"].get("authenticated", False) is False


# kube-apiserver 1.36 tries constrained impersonation (KEP 5284) before the legacy `impersonate` verb:
# for a plain user name the user-info mode applies, which first needs `impersonate-on:user-info:<verb>`
# on the request itself. With no mode allowing, the answer is the first denial, in the order that
# starts with the mode that last worked for the same requester.

async def test_impersonation_needs_the_impersonate_verb(kube: Kube, as_user: AsUser, namespace: str,
                                                        cluster_cleanup: list[str]) -> None:
    client = await as_user(await service_account_token(kube, namespace, "pretender"))
    requester = f"system:serviceaccount:{namespace}:pretender"
    target = f"e2e-someone-{uuid.uuid4().hex[:6]}"
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    status, body = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review,
                                        headers={"Impersonate-User": target})
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (f'selfsubjectreviews.authentication.k8s.io is forbidden: User "{requester}" cannot '
                               'impersonate-on:user-info:create resource "selfsubjectreviews" in API group '
                               '"authentication.k8s.io" at the cluster scope')

    role = f"e2e-impersonator-{uuid.uuid4().hex[:6]}"
    await create(kube, f"{RBAC}/clusterroles", {"metadata": {"name": role}, "rules": [
        {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": [target]}]})
    cluster_cleanup.append(f"{RBAC}/clusterroles/{role}")
    await create(kube, f"{RBAC}/clusterrolebindings", {**binding(role, "ClusterRole", role, namespace, "pretender")})
    cluster_cleanup.append(f"{RBAC}/clusterrolebindings/{role}")

    async def impersonated() -> dict[str, Any] | None:
        status, body = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review,
                                            headers={"Impersonate-User": target})
        return body if status == 201 else None

    body = await eventually_async(impersonated, timeout=30)
    assert body["status"]["userInfo"]["username"] == target
    assert "system:authenticated" in body["status"]["userInfo"]["groups"]
    status, body = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review,
                                        headers={"Impersonate-User": "someone-else"})
    assert status == 403  # resourceNames limit whom it may impersonate
    # Legacy worked last for this requester, so it is tried first and its denial is the answer.
    assert body["message"] == (f'users "someone-else" is forbidden: User "{requester}" cannot impersonate '
                               'resource "users" in API group "" at the cluster scope')


async def test_constrained_impersonation_allows_only_the_granted_requests(kube: Kube, as_user: AsUser,
                                                                         namespace: str,
                                                                         cluster_cleanup: list[str]) -> None:
    client = await as_user(await service_account_token(kube, namespace, "reviewer"))
    requester = f"system:serviceaccount:{namespace}:reviewer"
    target = f"e2e-someone-{uuid.uuid4().hex[:6]}"
    role = f"e2e-constrained-{uuid.uuid4().hex[:6]}"
    await create(kube, f"{RBAC}/clusterroles", {"metadata": {"name": role}, "rules": [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["users"], "verbs": ["impersonate:user-info"],
         "resourceNames": [target]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["groups"], "verbs": ["impersonate:user-info"],
         "resourceNames": ["e2e-team"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
         "verbs": ["impersonate-on:user-info:create"]}]})
    cluster_cleanup.append(f"{RBAC}/clusterroles/{role}")
    await create(kube, f"{RBAC}/clusterrolebindings", {**binding(role, "ClusterRole", role, namespace, "reviewer")})
    cluster_cleanup.append(f"{RBAC}/clusterrolebindings/{role}")
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}

    async def impersonated() -> dict[str, Any] | None:
        status, body = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review,
                                            headers={"Impersonate-User": target, "Impersonate-Group": "e2e-team"})
        return body if status == 201 else None

    body = await eventually_async(impersonated, timeout=30)
    assert body["status"]["userInfo"]["username"] == target
    assert body["status"]["userInfo"]["groups"] == ["e2e-team", "system:authenticated"]  # user-info may: groups
    status, body = await client.request("GET", f"/api/v1/namespaces/{namespace}/configmaps",
                                        headers={"Impersonate-User": target})
    assert status == 403  # only creating SelfSubjectReviews was granted
    assert body["message"] == (f'configmaps is forbidden: User "{requester}" cannot impersonate-on:user-info:list '
                               f'resource "configmaps" in API group "" in the namespace "{namespace}"')
