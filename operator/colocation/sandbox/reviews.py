"""Acting as another user and asking what a user may do, answered by RBAC.

Impersonation checks the `impersonate` verb for everything a request claims, as upstream's
filter does; the authorization.k8s.io reviews (SubjectAccessReview and its local and self
forms, SelfSubjectRulesReview) turn a spec into request attributes and report the decision.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.userinfo import (
    ANONYMOUS,
    AUTHENTICATED,
    UNAUTHENTICATED,
    UserInfo,
    service_account_groups,
    split_service_account,
)
from colocation.sandbox.rbac import (
    AUTHENTICATION_GROUP,
    AUTHORIZATION_GROUP,
    Authorize,
    Decision,
    RbacAuthorizer,
    RequestAttributes,
    forbidden_error,
)

# --- Impersonation ---------------------------------------------------------------------------------

IMPERSONATE_USER = "impersonate-user"
IMPERSONATE_GROUP = "impersonate-group"
IMPERSONATE_UID = "impersonate-uid"
IMPERSONATE_EXTRA_PREFIX = "impersonate-extra-"


def impersonate(requester: UserInfo, headers: Mapping[str, str], authorize: Authorize) -> UserInfo:
    """The user a request acts as, after checking the `impersonate` verb for each thing it claims.

    `headers` may be a plain mapping or a multidict (repeated Impersonate-Group and
    Impersonate-Extra-* headers carry several values); names are matched case-insensitively.
    Returns `requester` unchanged when the request impersonates nobody.
    """
    pairs = [(name.lower(), value) for name, value in headers.items()]
    users = [value for name, value in pairs if name == IMPERSONATE_USER and value]
    groups = [value for name, value in pairs if name == IMPERSONATE_GROUP]
    uids = [value for name, value in pairs if name == IMPERSONATE_UID]
    extras = [(urllib.parse.unquote(name[len(IMPERSONATE_EXTRA_PREFIX):]), value)
              for name, value in pairs if name.startswith(IMPERSONATE_EXTRA_PREFIX)]
    if not (users or groups or uids or extras):
        return requester
    if not users:
        raise ApiError.internal("requested impersonation of groups, uid or user-extra "
                                "without impersonating a user")

    def check(resource: str, name: str, *, api_group: str = "", subresource: str = "",
              namespace: str = "") -> None:
        attrs = RequestAttributes(user=requester, verb="impersonate", api_group=api_group, resource=resource,
                                  subresource=subresource, name=name, namespace=namespace)
        decision = authorize(attrs)
        if not decision.allowed:
            raise forbidden_error(attrs, decision.reason)

    username = users[0]
    impersonated_groups: list[str] = []
    if (account := split_service_account(username)) is not None:
        check("serviceaccounts", account[1], namespace=account[0])
        if not groups:
            # A ServiceAccount's groups are a fixed function of its namespace.
            impersonated_groups.extend(service_account_groups(account[0]))
    else:
        check("users", username)
    for group in groups:
        check("groups", group)
        impersonated_groups.append(group)
    extra: dict[str, list[str]] = {}
    for key, value in extras:
        check("userextras", value, api_group=AUTHENTICATION_GROUP, subresource=key)
        extra.setdefault(key, []).append(value)
    uid = ""
    if uids:
        uid = uids[0]
        check("uids", uid, api_group=AUTHENTICATION_GROUP)

    if username == ANONYMOUS:
        if UNAUTHENTICATED not in impersonated_groups:
            impersonated_groups.append(UNAUTHENTICATED)
    elif not {AUTHENTICATED, UNAUTHENTICATED} & set(impersonated_groups):
        impersonated_groups.append(AUTHENTICATED)
    return UserInfo(username=username, uid=uid, groups=tuple(impersonated_groups),
                    extra={key: tuple(values) for key, values in extra.items()})


# --- Access reviews ---------------------------------------------------------------------------------

def _review_attributes(kind: str, spec: Mapping[str, Any], user: UserInfo) -> RequestAttributes:
    resource: Mapping[str, Any] | None = spec.get("resourceAttributes")
    non_resource: Mapping[str, Any] | None = spec.get("nonResourceAttributes")
    if resource is not None and non_resource is not None:
        raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", [Cause(
            "spec.nonResourceAttributes", "cannot be specified in combination with resourceAttributes")])
    if non_resource is not None:
        return RequestAttributes(user=user, verb=non_resource.get("verb", ""), resource_request=False,
                                 path=non_resource.get("path", ""))
    if resource is None:
        raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", [Cause(
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified")])
    return RequestAttributes(
        user=user, verb=resource.get("verb", ""), api_group=resource.get("group", ""),
        resource=resource.get("resource", ""), subresource=resource.get("subresource", ""),
        name=resource.get("name", ""), namespace=resource.get("namespace", ""),
    )


def _review_status(decision: Decision) -> dict[str, Any]:
    # RBAC never denies outright (it has "no opinion"), so `denied` is never set here.
    return {"allowed": decision.allowed, "reason": decision.reason}


def subject_access_review(spec: Mapping[str, Any], authorizer: Authorize, *,
                          namespace: str | None = None) -> dict[str, Any]:
    """The status of a SubjectAccessReview; with `namespace`, of a LocalSubjectAccessReview there."""
    kind = "SubjectAccessReview" if namespace is None else "LocalSubjectAccessReview"
    if not spec.get("user") and not spec.get("groups"):
        raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", [
            Cause("spec.user", 'Invalid value: "": at least one of user or group must be specified')])
    if namespace is not None:
        if spec.get("nonResourceAttributes") is not None:
            raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", [
                Cause("spec.nonResourceAttributes", "disallowed on this kind of request")])
        if (spec.get("resourceAttributes") or {}).get("namespace", "") != namespace:
            raise ApiError.bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
    user = UserInfo(username=spec.get("user", ""), uid=spec.get("uid", ""),
                    groups=tuple(spec.get("groups") or ()), extra=spec.get("extra") or {})
    return _review_status(authorizer(_review_attributes(kind, spec, user)))


def self_subject_access_review(spec: Mapping[str, Any], user: UserInfo,
                               authorizer: Authorize) -> dict[str, Any]:
    """The status of a SelfSubjectAccessReview: may the caller itself do this?"""
    return _review_status(authorizer(_review_attributes("SelfSubjectAccessReview", spec, user)))


def self_subject_rules_review(spec: Mapping[str, Any], user: UserInfo,
                              authorizer: RbacAuthorizer) -> dict[str, Any]:
    """The status of a SelfSubjectRulesReview: what the caller may do in spec.namespace."""
    namespace = spec.get("namespace", "")
    if not namespace:
        raise ApiError.bad_request("no namespace on request")
    return authorizer.rules_review(user, namespace)
