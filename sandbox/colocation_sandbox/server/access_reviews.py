"""Acting as another user and asking what a user may do, answered by RBAC.

Impersonation checks what a request claims as kube-apiserver 1.36's filter does (constrained
impersonation first, then the legacy `impersonate` verb); the authorization.k8s.io reviews
(SubjectAccessReview and its local and self forms, SelfSubjectRulesReview) turn a spec into
request attributes and report the decision.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.userinfo import (
    ANONYMOUS,
    AUTHENTICATED,
    MASTERS,
    NODE_NAME_EXTRA,
    UNAUTHENTICATED,
    UserInfo,
    service_account_groups,
    split_service_account,
)
from colocation_sandbox.server.rbac_authorizer import (
    AUTHENTICATION_GROUP,
    AUTHORIZATION_GROUP,
    Authorize,
    Decision,
    RbacAuthorizer,
    RequestAttributes,
    forbidden_error,
)

# --- Impersonation ---------------------------------------------------------------------------------
#
# kube-apiserver 1.36 runs constrained impersonation (KEP 5284, beta, on by default) in front of the
# legacy rule. Modes are tried in order: associated-node, arbitrary-node, serviceaccount, user-info,
# then legacy, starting with the one that last worked for the same requester. A constrained mode that
# applies to the wanted user first needs `impersonate-on:<mode>:<verb>` on the request itself, then
# `impersonate:<mode>` on the user (users, nodes or serviceaccounts, groups, uids, userextras in
# authentication.k8s.io); legacy needs `impersonate` (users, groups and serviceaccounts in the core
# group). The first mode that allows wins; when none does, the first denial is the answer.

IMPERSONATE_USER = "impersonate-user"
IMPERSONATE_GROUP = "impersonate-group"
IMPERSONATE_UID = "impersonate-uid"
IMPERSONATE_EXTRA_PREFIX = "impersonate-extra-"
NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
_MODES = ("associated-node", "arbitrary-node", "serviceaccount", "user-info", "legacy")
_MANY_CHECKS = 4  # from this many groups or extra values on, one wildcard check is tried first
_REMEMBERED_REQUESTERS = 10_000
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, kw_only=True)
class WantedUser:
    """What the Impersonate-* headers ask for, as they were sent."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def only_username(self) -> bool:
        return not (self.uid or self.groups or self.extra)


def wanted_user(headers: Mapping[str, str]) -> WantedUser | None:
    """The impersonated user the headers ask for; None when they ask for nobody."""
    pairs = [(name.lower(), value) for name, value in headers.items()]
    name = next((value for key, value in pairs if key == IMPERSONATE_USER), "")
    uid = next((value for key, value in pairs if key == IMPERSONATE_UID), "")
    groups = tuple(value for key, value in pairs if key == IMPERSONATE_GROUP)
    extra: dict[str, list[str]] = {}
    for key, value in pairs:
        if key.startswith(IMPERSONATE_EXTRA_PREFIX):
            extra.setdefault(urllib.parse.unquote(key[len(IMPERSONATE_EXTRA_PREFIX):]), []).append(value)
    wanted = WantedUser(name=name, uid=uid, groups=groups, extra=tuple((k, tuple(v)) for k, v in extra.items()))
    if not name and (uid or groups or extra):
        raise ApiError.bad_request(f"requested {_go_default_info(wanted)} without impersonating a user name")
    return wanted if name else None


def _go_default_info(wanted: WantedUser) -> str:
    """fmt's %#v of the *user.DefaultInfo upstream reports."""
    def strings(values: Iterable[str]) -> str:
        return "[]string{" + ", ".join(json.dumps(v) for v in values) + "}"
    groups = strings(wanted.groups) if wanted.groups else "[]string(nil)"
    extra = ("map[string][]string{" + ", ".join(f"{json.dumps(k)}:{strings(v)}" for k, v in sorted(wanted.extra))
             + "}") if wanted.extra else "map[string][]string(nil)"
    return (f'&user.DefaultInfo{{Name:{json.dumps(wanted.name)}, UID:{json.dumps(wanted.uid)}, '
            f"Groups:{groups}, Extra:{extra}}}")


def _node_name(username: str) -> str | None:
    if not username.startswith(NODE_PREFIX):
        return None
    name = username[len(NODE_PREFIX):]
    return name if len(name) <= 253 and _DNS_SUBDOMAIN.match(name) else None


class Impersonation:
    """The impersonation filter: who a request acts as, after the checks its headers call for."""

    def __init__(self, authorize: Authorize) -> None:
        self.authorize = authorize
        self._last_mode: OrderedDict[str, int] = OrderedDict()  # requester -> index of the mode that worked

    def __call__(self, requester: UserInfo, headers: Mapping[str, str], request: RequestAttributes) -> UserInfo:
        """`requester` acting as the user the headers name (unchanged when they name nobody).

        `headers` may be a plain mapping or a multidict (repeated Impersonate-Group and
        Impersonate-Extra-* headers carry several values); names are matched case-insensitively.
        `request` is what the request does, as `requester`.
        """
        wanted = wanted_user(headers)
        if wanted is None:
            return requester
        remembered = self._last_mode.get(requester.username)
        order = list(range(len(_MODES)))
        if remembered is not None:
            order.remove(remembered)
            order.insert(0, remembered)
        first_denial: ApiError | None = None
        for index in order:
            try:
                acting = self._mode(_MODES[index], wanted, requester, request=request)
            except ApiError as denial:
                first_denial = first_denial or denial
                continue
            if acting is not None:
                self._remember(requester.username, index)
                return acting
        assert first_denial is not None  # legacy always applies: it allows or denies
        raise first_denial

    def _remember(self, requester: str, index: int) -> None:
        self._last_mode[requester] = index
        self._last_mode.move_to_end(requester)
        while len(self._last_mode) > _REMEMBERED_REQUESTERS:
            self._last_mode.popitem(last=False)

    def _mode(self, mode: str, wanted: WantedUser, requester: UserInfo,
              *, request: RequestAttributes) -> UserInfo | None:
        node = _node_name(wanted.name)
        account = split_service_account(wanted.name)
        applies = {
            "associated-node": wanted.only_username and node is not None and split_service_account(
                requester.username) is not None and tuple(requester.extra.get(NODE_NAME_EXTRA, ())) == (node,),
            "arbitrary-node": wanted.only_username and node is not None,
            "serviceaccount": wanted.only_username and account is not None,
            "user-info": node is None and account is None,
            "legacy": True,
        }[mode]
        if not applies:
            return None
        constrained = mode != "legacy"
        if constrained:
            self._check(dataclasses.replace(request, user=requester,
                                            verb=f"impersonate-on:{mode}:{request.verb}"))
        verb = f"impersonate:{mode}" if constrained else "impersonate"
        users_group = AUTHENTICATION_GROUP if constrained else ""

        def check(resource: str, name: str, *, api_group: str = users_group, subresource: str = "",
                  namespace: str = "", why: str = "") -> None:
            attrs = RequestAttributes(user=requester, verb=verb, api_group=api_group, resource=resource,
                                      subresource=subresource, name=name, namespace=namespace)
            if why:
                raise forbidden_error(attrs, why)
            self._check(attrs)

        groups: list[str] = list(wanted.groups)
        if constrained and node is not None:
            check("nodes", "*" if mode == "associated-node" else node)
            groups = [NODES_GROUP]
        elif account is not None:
            check("serviceaccounts", account[1], namespace=account[0])
            if not wanted.groups:
                groups = list(service_account_groups(account[0]))
        else:
            check("users", wanted.name)
        if wanted.uid:
            check("uids", wanted.uid, api_group=AUTHENTICATION_GROUP)
        self._check_groups(check, wanted.groups, constrained)
        extra = self._check_extra(check, wanted.extra, constrained)
        if wanted.name == ANONYMOUS:
            if UNAUTHENTICATED not in groups:
                groups.append(UNAUTHENTICATED)
        elif UNAUTHENTICATED not in groups and AUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
        return UserInfo(username=wanted.name, uid=wanted.uid, groups=tuple(groups), extra=extra)

    @staticmethod
    def _check_groups(check: Callable[..., None], groups: tuple[str, ...], constrained: bool) -> None:
        if not groups:
            return
        if constrained:
            if "" in groups:
                check("groups", "", why="impersonating the empty string group is not allowed")
            if MASTERS in groups:
                check("groups", MASTERS, why="impersonating the system:masters group is not allowed")
            if len(groups) >= _MANY_CHECKS:
                try:
                    check("groups", "*")
                    return
                except ApiError:
                    pass
        for group in groups:
            check("groups", group)

    @staticmethod
    def _check_extra(check: Callable[..., None], extra: tuple[tuple[str, tuple[str, ...]], ...],
                     constrained: bool) -> dict[str, tuple[str, ...]]:
        if not extra:
            return {}
        if constrained:
            if (problem := _extra_problem(extra)) is not None:
                check("userextras", "", api_group=AUTHENTICATION_GROUP, why=problem)
            if len(extra) >= _MANY_CHECKS or sum(len(values) for _, values in extra) >= _MANY_CHECKS:
                try:
                    check("userextras", "*", api_group=AUTHENTICATION_GROUP, subresource="*")
                    return dict(extra)
                except ApiError:
                    pass
        for key, values in extra:
            for value in values:
                check("userextras", value, api_group=AUTHENTICATION_GROUP, subresource=key)
        return dict(extra)

    def _check(self, attrs: RequestAttributes) -> None:
        decision = self.authorize(attrs)
        if not decision.allowed:
            raise forbidden_error(attrs, decision.reason)


def _extra_problem(extra: tuple[tuple[str, tuple[str, ...]], ...]) -> str | None:
    """What constrained impersonation refuses in extra keys and values (validateExtra upstream)."""
    for key, values in extra:
        if not key:
            return "impersonating the empty string key in extra is not allowed"
        if "/" not in key or not _DNS_SUBDOMAIN.match(key.split("/", 1)[0]) or not key.split("/", 1)[1]:
            return ("impersonating an invalid key in extra is not allowed: extra.key: Invalid value: "
                    f'{json.dumps(key)}: must be a domain-prefixed path (such as "acme.io/foo")')
        if key != key.lower():
            return f"impersonating a non-lowercase key in extra is not allowed: {json.dumps(key)}"
        if not values:
            return "impersonating empty values in extra is not allowed"
        if "" in values:
            return "impersonating the empty string value in extra is not allowed"
    return None


def impersonate(requester: UserInfo, headers: Mapping[str, str], authorize: Authorize,
                *, request: RequestAttributes) -> UserInfo:
    """One impersonation check with no memory of earlier ones (see Impersonation)."""
    return Impersonation(authorize)(requester, headers, request)


# --- Access reviews ---------------------------------------------------------------------------------

def _review_attributes(kind: str, spec: Mapping[str, Any], user: UserInfo) -> RequestAttributes:
    resource: Mapping[str, Any] | None = spec.get("resourceAttributes")
    non_resource: Mapping[str, Any] | None = spec.get("nonResourceAttributes")
    if resource is not None and non_resource is not None:
        raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", causes=[Cause(
            "spec.nonResourceAttributes", "cannot be specified in combination with resourceAttributes")])
    if non_resource is not None:
        return RequestAttributes(user=user, verb=non_resource.get("verb", ""), resource_request=False,
                                 path=non_resource.get("path", ""))
    if resource is None:
        raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", causes=[Cause(
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
        raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", causes=[
            Cause("spec.user", 'Invalid value: "": at least one of user or group must be specified')])
    if namespace is not None:
        if spec.get("nonResourceAttributes") is not None:
            raise ApiError.invalid(AUTHORIZATION_GROUP, kind, "", causes=[
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
