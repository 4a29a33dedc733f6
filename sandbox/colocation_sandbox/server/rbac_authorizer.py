"""Kubernetes RBAC evaluated from the Roles and Bindings the API holds.

The semantics are upstream's (plugin/pkg/auth/authorizer/rbac): bindings only grant, nothing denies;
ClusterRoleBindings are consulted first, then the RoleBindings of the request's namespace; the first
rule that allows wins and its binding is named in the reason, so `kubectl auth can-i` and audit-like
debugging read the same as against a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.userinfo import (
    MASTERS,
    UserInfo,
    service_account_username,
)

RBAC_GROUP = "rbac.authorization.k8s.io"
AUTHENTICATION_GROUP = "authentication.k8s.io"
AUTHORIZATION_GROUP = "authorization.k8s.io"

# Beyond this many distinct requests the decision cache is dropped rather than evicted piecemeal:
# a flood of distinct requests is rare and recompiling the answers is cheap.
_DECISION_CACHE_LIMIT = 20_000


@dataclass(frozen=True, kw_only=True)
class RequestAttributes:
    """What a request does, as the authorizer sees it (authorizer.Attributes upstream)."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


Authorize = Callable[[RequestAttributes], Decision]
ObjectSource = Callable[[str], Iterable[Mapping[str, Any]]]


def forbidden_error(attrs: RequestAttributes, reason: str = "") -> ApiError:
    """The 403 a real API server answers for a denied request, with its exact wording."""
    return ApiError.forbidden(attrs.user.username, attrs.verb, attrs.resource, group=attrs.api_group, name=attrs.name,
                              namespace=attrs.namespace, why=reason, subresource=attrs.subresource,
                              path="" if attrs.resource_request else attrs.path)


# --- Compiled policy -------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, kw_only=True)
class _Rule:
    verbs: frozenset[str]
    api_groups: frozenset[str]
    resources: frozenset[str]
    resource_names: frozenset[str]
    urls: frozenset[str]
    url_prefixes: tuple[str, ...]
    source: Mapping[str, Any]

    @classmethod
    def compile(cls, rule: Mapping[str, Any]) -> _Rule:
        urls = frozenset(rule.get("nonResourceURLs") or ())
        return cls(
            verbs=frozenset(rule.get("verbs") or ()),
            api_groups=frozenset(rule.get("apiGroups") or ()),
            resources=frozenset(rule.get("resources") or ()),
            resource_names=frozenset(rule.get("resourceNames") or ()),
            urls=urls,
            url_prefixes=tuple(url.rstrip("*") for url in urls if url.endswith("*")),
            source=rule,
        )

    def allows(self, attrs: RequestAttributes) -> bool:
        if "*" not in self.verbs and attrs.verb not in self.verbs:
            return False
        if not attrs.resource_request:
            return attrs.path in self.urls or any(attrs.path.startswith(p) for p in self.url_prefixes)
        if "*" not in self.api_groups and attrs.api_group not in self.api_groups:
            return False
        if self.resource_names and attrs.name not in self.resource_names:
            # Requests without a name (create, list, watch, deletecollection) never match such rules.
            return False
        if "*" in self.resources:
            return True
        if attrs.subresource:
            # "pods/*" is NOT a wildcard upstream: only "*", "pods/log" and "*/log" reach pods/log.
            return (f"{attrs.resource}/{attrs.subresource}" in self.resources
                    or f"*/{attrs.subresource}" in self.resources)
        return attrs.resource in self.resources


@dataclass(frozen=True, eq=False, kw_only=True)
class _Binding:
    order: int
    kind: str  # ClusterRoleBinding | RoleBinding
    name: str
    namespace: str  # "" for ClusterRoleBindings
    role_kind: str
    role_name: str
    subjects: tuple[Mapping[str, Any], ...]

    def subject_username(self, subject: Mapping[str, Any]) -> str | None:
        """The username a User or ServiceAccount subject stands for (None for groups and unknowns)."""
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User":
            return str(name)
        if kind == "ServiceAccount":
            # A ServiceAccount subject without a namespace means the binding's own namespace.
            namespace = subject.get("namespace") or self.namespace
            return service_account_username(namespace, name) if namespace else None
        return None

    def applies_to(self, subject: Mapping[str, Any], user: UserInfo) -> bool:
        if subject.get("kind") == "Group":
            return subject.get("name") in user.groups
        return self.subject_username(subject) == user.username

    def describe(self, subject: Mapping[str, Any]) -> str:
        kind, name = subject.get("kind", ""), subject.get("name", "")
        if kind == "ServiceAccount":
            name = f"{name}/{subject.get('namespace') or self.namespace}"
        binding = f"{self.name}/{self.namespace}" if self.kind == "RoleBinding" else self.name
        return f'{self.kind} "{binding}" of {self.role_kind} "{self.role_name}" to {kind} "{name}"'


@dataclass
class _BindingIndex:
    """Bindings by the usernames and groups they name, so a request looks only at its own."""

    by_username: dict[str, list[_Binding]] = field(default_factory=dict)
    by_group: dict[str, list[_Binding]] = field(default_factory=dict)

    def add(self, binding: _Binding) -> None:
        for subject in binding.subjects:
            if subject.get("kind") == "Group":
                self.by_group.setdefault(str(subject.get("name", "")), []).append(binding)
            elif (username := binding.subject_username(subject)) is not None:
                self.by_username.setdefault(username, []).append(binding)

    def matching(self, user: UserInfo) -> Iterator[tuple[_Binding, Mapping[str, Any]]]:
        found = {id(b): b for b in self.by_username.get(user.username, ())}
        for group in user.groups:
            found.update((id(b), b) for b in self.by_group.get(group, ()))
        for binding in sorted(found.values(), key=lambda b: b.order):
            # The first applicable subject is the one named in the reason, as upstream.
            subject = next(s for s in binding.subjects if binding.applies_to(s, user))
            yield binding, subject


@dataclass(kw_only=True)
class _Policy:
    cluster_roles: dict[str, tuple[_Rule, ...]]
    roles: dict[tuple[str, str], tuple[_Rule, ...]]
    cluster_bindings: _BindingIndex
    namespace_bindings: dict[str, _BindingIndex]

    def rules_of(self, binding: _Binding, errors: list[str]) -> tuple[_Rule, ...]:
        if binding.role_kind == "ClusterRole":
            rules = self.cluster_roles.get(binding.role_name)
            missing = f'clusterrole.{RBAC_GROUP} "{binding.role_name}" not found'
        elif binding.role_kind == "Role":
            rules = self.roles.get((binding.namespace, binding.role_name))
            missing = f'role.{RBAC_GROUP} "{binding.role_name}" not found'
        else:
            rules, missing = None, f'unsupported role reference kind: "{binding.role_kind}"'
        if rules is None:
            errors.append(missing)
            return ()
        return rules

    def visit(self, user: UserInfo, namespace: str) -> Iterator[tuple[_Binding, Mapping[str, Any]]]:
        yield from self.cluster_bindings.matching(user)
        if namespace and (index := self.namespace_bindings.get(namespace)) is not None:
            yield from index.matching(user)


def _labels_match(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key", ""), expression.get("operator")
        values, present = expression.get("values") or (), key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if (operator == "Exists" and not present) or (operator == "DoesNotExist" and present):
            return False
    return True


def _aggregate_cluster_roles(objects: list[Mapping[str, Any]]) -> dict[str, tuple[_Rule, ...]]:
    """Every ClusterRole's effective rules; aggregated ones get those of the roles they select.

    Upstream a controller writes the union into the aggregated role's rules (ordered by role name),
    and that role may itself be selected (view -> edit -> admin); resolving recursively here gives
    the same result without waiting for a controller.
    """
    by_name = {obj.get("metadata", {}).get("name", ""): obj for obj in objects}
    resolved: dict[str, tuple[_Rule, ...]] = {}

    def resolve(name: str, visiting: frozenset[str]) -> tuple[_Rule, ...]:
        if name in resolved:
            return resolved[name]
        role = by_name[name]
        aggregation = role.get("aggregationRule")
        if aggregation is None:
            rules = tuple(_Rule.compile(rule) for rule in role.get("rules") or ())
        else:
            selectors = aggregation.get("clusterRoleSelectors") or ()
            collected: list[_Rule] = []
            for other in sorted(by_name):
                labels = by_name[other].get("metadata", {}).get("labels") or {}
                if other == name or other in visiting:
                    continue
                if not any(_labels_match(selector, labels) for selector in selectors):
                    continue
                for rule in resolve(other, visiting | {name}):
                    # The controller skips rules already present, so a rule reached twice counts once.
                    if all(rule.source != seen.source for seen in collected):
                        collected.append(rule)
            rules = tuple(collected)
        resolved[name] = rules
        return rules

    for name in by_name:
        resolve(name, frozenset())
    return resolved


def _compile(objects: ObjectSource) -> _Policy:
    cluster_roles = _aggregate_cluster_roles(list(objects("clusterroles")))
    roles = {
        (role.get("metadata", {}).get("namespace", ""), role.get("metadata", {}).get("name", "")):
            tuple(_Rule.compile(rule) for rule in role.get("rules") or ())
        for role in objects("roles")
    }
    order = 0
    cluster_bindings = _BindingIndex()
    namespace_bindings: dict[str, _BindingIndex] = {}
    for kind, plural in (("ClusterRoleBinding", "clusterrolebindings"), ("RoleBinding", "rolebindings")):
        for obj in objects(plural):
            metadata, role_ref = obj.get("metadata", {}), obj.get("roleRef") or {}
            namespace = metadata.get("namespace", "") if kind == "RoleBinding" else ""
            binding = _Binding(order=order, kind=kind, name=metadata.get("name", ""), namespace=namespace,
                               role_kind=role_ref.get("kind", ""), role_name=role_ref.get("name", ""),
                               subjects=tuple(obj.get("subjects") or ()))
            order += 1
            if kind == "ClusterRoleBinding":
                cluster_bindings.add(binding)
            else:
                namespace_bindings.setdefault(namespace, _BindingIndex()).add(binding)
    return _Policy(cluster_roles=cluster_roles, roles=roles, cluster_bindings=cluster_bindings,
                   namespace_bindings=namespace_bindings)


_ALL_RESOURCES = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
_ALL_URLS = {"verbs": ["*"], "nonResourceURLs": ["*"]}


class RbacAuthorizer:
    """Authorizes requests against the RBAC objects `objects(plural)` returns.

    The compiled policy (and the decisions made with it) is kept until `version()` changes; without a
    version callable the objects are read again on every call, which is correct but slow.
    """

    def __init__(self, objects: ObjectSource, version: Callable[[], int] | None = None) -> None:
        self._objects = objects
        self._version = version
        self._policy: _Policy | None = None
        self._policy_version: int | None = None
        self._decisions: dict[RequestAttributes, Decision] = {}

    def _current(self) -> _Policy:
        version = self._version() if self._version is not None else None
        if self._policy is None or version is None or version != self._policy_version:
            self._policy = _compile(self._objects)
            self._policy_version = version
            self._decisions.clear()
        return self._policy

    def __call__(self, attrs: RequestAttributes) -> Decision:
        return self.authorize(attrs)

    def authorize(self, attrs: RequestAttributes) -> Decision:
        # The privileged group is allowed before RBAC is consulted, as upstream (no reason given).
        if MASTERS in attrs.user.groups:
            return Decision(True, "")
        policy = self._current()
        if (cached := self._decisions.get(attrs)) is not None:
            return cached
        decision = self._decide(policy, attrs)
        if len(self._decisions) >= _DECISION_CACHE_LIMIT:
            self._decisions.clear()
        self._decisions[attrs] = decision
        return decision

    def _decide(self, policy: _Policy, attrs: RequestAttributes) -> Decision:
        errors: list[str] = []
        for binding, subject in policy.visit(attrs.user, attrs.namespace):
            for rule in policy.rules_of(binding, errors):
                if rule.allows(attrs):
                    return Decision(True, f"RBAC: allowed by {binding.describe(subject)}")
        if not errors:
            return Decision(False, "")
        listed = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        return Decision(False, f"RBAC: {listed}")

    def rules_review(self, user: UserInfo, namespace: str) -> dict[str, Any]:
        """A SelfSubjectRulesReview status: every rule granted to `user` in `namespace`."""
        resource_rules: list[dict[str, Any]] = []
        non_resource_rules: list[dict[str, Any]] = []
        if MASTERS in user.groups:
            resource_rules.append(dict(_ALL_RESOURCES))
            non_resource_rules.append(dict(_ALL_URLS))
        errors: list[str] = []
        policy = self._current()
        for binding, _ in policy.visit(user, namespace):
            for rule in policy.rules_of(binding, errors):
                if rule.resources:
                    resource_rules.append(
                        _review_rule(rule.source, "apiGroups", "resources", "resourceNames"))
                if rule.urls:
                    non_resource_rules.append(_review_rule(rule.source, "nonResourceURLs"))
        status: dict[str, Any] = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                                  "incomplete": bool(errors)}
        if errors:
            status["evaluationError"] = ", ".join(errors)
        return status

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        status = self.rules_review(user, namespace)
        return status["resourceRules"], status["nonResourceRules"]


def _review_rule(rule: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    converted: dict[str, Any] = {"verbs": list(rule.get("verbs") or ())}
    converted.update({key: list(rule[key]) for key in keys if rule.get(key)})
    return converted
