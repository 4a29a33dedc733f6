"""What a caller may do, delegated to kube-apiserver by SubjectAccessReview as aggregated API servers do.

Decisions are cached like token reviews (`delegated_authentication.ReviewCache`) and a failed
review denies. `DelegatingAuthorizer` is the `Authorizer` every served group is given. The node
rule is ours: a NodeMetric report only from a token bound to a pod on that node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.served_apigroups import Caller
from colocation.apimachinery.userinfo import NODE_NAME_EXTRA, Extra
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import CountsReviews, ReviewCache, why_failed
from colocation.kube.permissions import METRICS_GROUP

log = logging.getLogger(__name__)

NODE_METRICS = "nodemetrics"


@dataclass(frozen=True, kw_only=True)
class SubjectAccessSpec:
    """The question a SubjectAccessReview asks; a request for a path when `path` is set."""

    user: str
    uid: str
    groups: tuple[str, ...]
    extra: Extra
    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""

    @classmethod
    def of(cls, caller: Caller, verb: str, **attributes: str) -> SubjectAccessSpec:
        extra = caller.extra if isinstance(caller.extra, Extra) else Extra(caller.extra)
        return cls(user=caller.username, uid=caller.uid, groups=caller.groups, extra=extra, verb=verb, **attributes)


# SubjectAccessSpec's fields, the extra as its items: what a decision is cached under.
_SpecKey = tuple[str, str, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], str, str, str, str, str, str, str]


@dataclass(frozen=True)
class _Decision:
    allowed: bool
    reason: str = ""


def forbidden(spec: SubjectAccessSpec, reason: str = "") -> ApiError:
    """403 worded as kube-apiserver words it (the reason after a colon)."""
    return ApiError.forbidden(spec.user, spec.verb, spec.resource, group=spec.api_group, name=spec.name,
                              namespace=spec.namespace, why=reason, subresource=spec.subresource, path=spec.path)


SubjectAccessReviewer = Callable[[SubjectAccessSpec], Awaitable[bool | tuple[bool, str]]]


class DelegatingAuthorizer(CountsReviews):
    """Authorization by cached SubjectAccessReview, with upstream's always-allowed groups and paths."""

    def __init__(self, sar: SubjectAccessReviewer, *, allowed_ttl: float = 10.0, denied_ttl: float = 10.0,
                 cache_size: int = 10_000, always_allow_groups: Iterable[str] = ("system:masters",),
                 always_allow_paths: Iterable[str] = ("/healthz", "/livez", "/readyz"),
                 clock: Callable[[], float] = time.monotonic, metrics: ServerMetrics | None = None) -> None:
        self._sar = sar
        self._metrics = metrics
        self._always_allow_groups = frozenset(always_allow_groups)
        self._always_allow_paths = tuple(always_allow_paths)
        # Keyed by the spec's fields as a plain tuple: a dataclass holding an Extra compares in
        # Python, and every report looks its decision up (three comparisons per hit).
        self._reviews: ReviewCache[_SpecKey, _Decision] = ReviewCache(
            maxsize=cache_size, clock=clock,
            ttl_of=lambda decision: allowed_ttl if decision.allowed else denied_ttl)
        self.reviews_failed = 0

    async def authorize(self, caller: Caller, verb: str, resource: str, *, subresource: str = "", name: str = "",
                        api_group: str = METRICS_GROUP, namespace: str = "") -> None:
        """Return if allowed, else raise ApiError 403."""
        await self._decide(caller, verb, api_group, resource=resource, subresource=subresource, name=name,
                           namespace=namespace, path="")

    async def authorize_path(self, caller: Caller, verb: str, path: str) -> None:
        """The same for a non-resource URL (/metrics, /openapi/v2, ...)."""
        if any(path == allowed or (allowed.endswith("*") and path.startswith(allowed[:-1]))
               for allowed in self._always_allow_paths):
            return
        await self._decide(caller, verb, "", resource="", subresource="", name="", namespace="", path=path)

    async def _decide(self, caller: Caller, verb: str, api_group: str, *, resource: str, subresource: str, name: str,
                      namespace: str, path: str) -> None:
        if self._always_allow_groups.intersection(caller.groups):
            return

        def spec() -> SubjectAccessSpec:  # built only for a review or a refusal
            return SubjectAccessSpec.of(caller, verb, api_group=api_group, resource=resource, subresource=subresource,
                                        name=name, namespace=namespace, path=path)

        key = (caller.username, caller.uid, tuple(caller.groups), tuple(caller.extra.items()), verb, api_group,
               resource, subresource, name, namespace, path)
        try:
            decision = await self._reviews.get(key, lambda: self._review(spec()))
        except Exception as error:
            raise forbidden(spec(), f"the authorization review failed: {why_failed(error)}") from None
        if not decision.allowed:
            raise forbidden(spec(), decision.reason)

    async def _review(self, spec: SubjectAccessSpec) -> _Decision:
        try:
            answer = await self._sar(spec)
        except Exception as error:
            self.reviews_failed += 1
            self._count(spec, "error")
            log.warning("subject access review failed",
                        extra={"error": str(error), "cause": repr(error.__cause__), "user": spec.user})
            raise
        decision = _Decision(*answer) if isinstance(answer, tuple) else _Decision(bool(answer))
        self._count(spec, "allowed" if decision.allowed else "denied")
        return decision

    def _count(self, spec: SubjectAccessSpec, result: str) -> None:
        if self._metrics is not None:
            self._metrics.subject_access_reviews.labels(spec.api_group, spec.verb, result).inc()


# ---- the node rule ----------------------------------------------------------------------------


def check_node_rule(caller: Caller, node: str) -> None:
    """A report for `node` only from a token bound to a pod on `node`; else ApiError 403."""
    bound_to = caller.extra.get(NODE_NAME_EXTRA, ())
    if bound_to == (node,):
        return
    prefix = f'{NODE_METRICS}.{METRICS_GROUP} "{node}" is forbidden: User "{caller.username}"'
    if not bound_to:
        message = (f"{prefix} cannot report for node \"{node}\": reports must come from a ServiceAccount "
                   f"token bound to a pod on the node")
    else:
        nodes = ", ".join(f'"{name}"' for name in bound_to)
        message = (f"{prefix} holds a token bound to a pod on node {nodes} and cannot report for "
                   f'node "{node}"')
    raise ApiError(403, "Forbidden", message, {"kind": NODE_METRICS, "name": node, "group": METRICS_GROUP})
