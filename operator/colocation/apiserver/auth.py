"""Who is calling and what they may do, delegated to kube-apiserver as aggregated API servers do.

Authentication: a front-proxy client certificate (kube-apiserver forwarding a request it already
authenticated) makes the `X-Remote-*` headers the identity; otherwise a bearer token is checked
with a TokenReview. Authorization: a SubjectAccessReview. Both reviews are cached and concurrent
identical reviews share one call, because every report and every read would otherwise cost a
round trip to kube-apiserver. A review that fails (timeout, kube-apiserver down) is never
cached and never lets the request through.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp
import cachetools
from kubernetes_asyncio import client as kube

from colocation.apimachinery.errors import ApiError
from colocation.kube.permissions import (
    AUTHENTICATION_CONFIG_MAP,
    AUTHENTICATION_CONFIG_NAMESPACE,
    METRICS_GROUP,
    OPERATOR_API_CALLS,
    ApiCall,
    declared,
)

log = logging.getLogger(__name__)

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
AUTHENTICATED_GROUP = "system:authenticated"
NODE_METRICS = "nodemetrics"
REVIEW_TIMEOUT = 3.0

# Looked up at import, so the RBAC test in tests/unit/test_manifests.py covers these calls.
_TOKEN_REVIEW = declared(OPERATOR_API_CALLS, ApiCall("authentication.k8s.io", "tokenreviews", "create", None))
_SUBJECT_ACCESS_REVIEW = declared(
    OPERATOR_API_CALLS, ApiCall("authorization.k8s.io", "subjectaccessreviews", "create", None))
_READ_AUTHENTICATION_CONFIG = declared(OPERATOR_API_CALLS, ApiCall(
    "", "configmaps", "get", AUTHENTICATION_CONFIG_NAMESPACE, name=AUTHENTICATION_CONFIG_MAP))

_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class Extra(Mapping[str, tuple[str, ...]]):
    """A caller's extra attributes: immutable and hashable, so callers and reviews key caches."""

    __slots__ = ("_hash", "_items")

    def __init__(self, source: Mapping[str, Iterable[str]] | None = None) -> None:
        self._items = {key: (values,) if isinstance(values, str) else tuple(values)
                       for key, values in sorted((source or {}).items())}
        self._hash = hash(tuple(self._items.items()))

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Extra({self._items!r})"


@dataclass(frozen=True)
class Caller:
    """An authenticated caller (user.Info upstream)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=Extra)

    def __post_init__(self) -> None:
        # Accept lists and dicts, keep immutable forms so a Caller hashes.
        object.__setattr__(self, "groups", tuple(self.groups))
        if not isinstance(self.extra, Extra):
            object.__setattr__(self, "extra", Extra(self.extra))

    @property
    def node_name(self) -> str | None:
        """The node of the pod the caller's token is bound to, when it is bound to exactly one."""
        values = self.extra.get(NODE_NAME_EXTRA, ())
        return values[0] if len(values) == 1 and values[0] else None


@dataclass(frozen=True)
class TokenReviewResult:
    """What a TokenReview said: a caller, or why not (its status.error)."""

    authenticated: bool
    caller: Caller | None = None
    error: str = ""


class ReviewFailed(Exception):
    """A review could not be made (timeout, transport, kube-apiserver error): fail closed."""


def _why(error: Exception) -> str:
    # Our own failures are worded for clients; anything else may carry internals.
    return str(error) if isinstance(error, ReviewFailed) else "internal error"


# ---- front-proxy authentication ---------------------------------------------------------------


def _json_list(data: Mapping[str, str], key: str) -> tuple[str, ...]:
    raw = data.get(key, "").strip()
    if not raw:
        return ()
    try:
        parsed = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"{AUTHENTICATION_CONFIG_MAP}: {key} is not a JSON list: {error}") from None
    if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
        raise ValueError(f"{AUTHENTICATION_CONFIG_MAP}: {key} is not a JSON list of strings")
    return tuple(item.strip() for item in parsed if item.strip())


@dataclass(frozen=True)
class RequestHeaderConfig:
    """How to trust a front proxy (kube-system/extension-apiserver-authentication).

    `request_header_ca_pem` is the CA that signs front-proxy client certificates; the TLS layer
    must verify client certificates against it alone, since `authenticate` only learns the
    verified certificate's subject. `client_ca_pem` (client-ca-file) is for plain client
    certificates and plays no part in front-proxy trust.
    """

    request_header_ca_pem: str = ""
    allowed_names: tuple[str, ...] = ()  # empty: any certificate the CA signed
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    uid_headers: tuple[str, ...] = ("X-Remote-Uid",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_header_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    client_ca_pem: str = ""

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> RequestHeaderConfig:
        """Parse the ConfigMap's data; a missing list means none (kube-apiserver writes them all)."""
        return cls(
            request_header_ca_pem=data.get("requestheader-client-ca-file", ""),
            allowed_names=_json_list(data, "requestheader-allowed-names"),
            username_headers=_json_list(data, "requestheader-username-headers"),
            uid_headers=_json_list(data, "requestheader-uid-headers"),
            group_headers=_json_list(data, "requestheader-group-headers"),
            extra_header_prefixes=_json_list(data, "requestheader-extra-headers-prefix"),
            client_ca_pem=data.get("client-ca-file", ""),
        )

    @property
    def front_proxy_enabled(self) -> bool:
        return bool(self.request_header_ca_pem.strip())


def _unescape_extra_key(key: str) -> str:
    # Keys are %-escaped to fit in header names; a malformed escape keeps the key as sent.
    return key if _ESCAPE.search(key) else urllib.parse.unquote(key)


def front_proxy_caller(headers: Mapping[str, str], config: RequestHeaderConfig) -> Caller | None:
    """The identity a front proxy asserts in headers, or None when it names no user.

    Only for requests whose client certificate was verified against the front-proxy CA with an
    allowed CN: anyone else can send these headers.
    """
    pairs = [(name.lower(), value) for name, value in headers.items()]  # all values of repeated headers

    def values(names: Iterable[str]) -> list[str]:
        wanted = [name.lower() for name in names]
        return [value for target in wanted for name, value in pairs if name == target and value]

    username = next(iter(values(config.username_headers)), "")
    if not username:
        return None
    uid = next(iter(values(config.uid_headers)), "")
    groups = values(config.group_headers)
    extra: dict[str, list[str]] = {}
    for prefix in (p.lower() for p in config.extra_header_prefixes):
        for name, value in pairs:
            if name.startswith(prefix) and len(name) > len(prefix):
                extra.setdefault(_unescape_extra_key(name[len(prefix):]), []).append(value)
    return Caller(username, uid, tuple(groups), Extra(extra))


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, else None (parsed as upstream does)."""
    authorization = next((value for name, value in headers.items() if name.lower() == "authorization"), "")
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def _with_authenticated_group(caller: Caller) -> Caller:
    # Every authenticated caller is in system:authenticated, whatever its source says (upstream adds it).
    if AUTHENTICATED_GROUP in caller.groups:
        return caller
    return Caller(caller.username, caller.uid, (*caller.groups, AUTHENTICATED_GROUP), caller.extra)


# ---- review caching -----------------------------------------------------------------------------

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _ReviewCache(Generic[K, V]):
    """Answers cached with a lifetime that depends on the answer; identical misses share one call.

    Errors are not cached (upstream caches only answers), so the next request asks again. A call
    in flight runs to completion even if the request that started it goes away: others wait on it.
    """

    def __init__(self, *, maxsize: int, ttl_of: Callable[[V], float], clock: Callable[[], float]) -> None:
        self._ttl_of = ttl_of
        self._cache: cachetools.TLRUCache[K, V, float] = cachetools.TLRUCache(
            maxsize, lambda _key, value, now: now + ttl_of(value), timer=clock)
        self._in_flight: dict[K, asyncio.Future[V]] = {}
        self.hits = 0
        self.misses = 0
        self.coalesced = 0

    async def get(self, key: K, review: Callable[[], Awaitable[V]]) -> V:
        try:
            value = self._cache[key]
        except KeyError:
            pass
        else:
            self.hits += 1
            return value
        future = self._in_flight.get(key)
        if future is None:
            self.misses += 1
            future = asyncio.ensure_future(review())
            self._in_flight[key] = future
            future.add_done_callback(lambda done: self._settle(key, done))
        else:
            self.coalesced += 1
        return await asyncio.shield(future)

    def _settle(self, key: K, future: asyncio.Future[V]) -> None:
        if self._in_flight.get(key) is future:
            del self._in_flight[key]
        if future.cancelled() or future.exception() is not None:
            return
        value = future.result()
        if self._ttl_of(value) > 0:
            self._cache[key] = value

    def keys(self) -> tuple[K, ...]:
        """What the cache is keyed by (cached and in flight), for inspection."""
        return (*self._cache.keys(), *self._in_flight.keys())


class _CountsReviews:
    """Counters for Prometheus (the server wires them): answers from cache, reviews made, shared."""

    _reviews: _ReviewCache[Any, Any]
    reviews_failed: int

    @property
    def cache_hits(self) -> int:
        return self._reviews.hits

    @property
    def cache_misses(self) -> int:
        return self._reviews.misses

    @property
    def reviews_coalesced(self) -> int:
        return self._reviews.coalesced


# ---- authentication ---------------------------------------------------------------------------

TokenReviewer = Callable[[str], Awaitable[TokenReviewResult]]


class DelegatingAuthenticator(_CountsReviews):
    """Front-proxy identity, else bearer token by cached TokenReview, else 401."""

    def __init__(self, token_reviewer: TokenReviewer, *, cache_ttl: float = 10.0, failure_ttl: float = 2.0,
                 cache_size: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._reviewer = token_reviewer
        # Keyed by an HMAC under a per-process key: a token is never a dictionary key or in a dump.
        self._key = secrets.token_bytes(32)
        self._reviews: _ReviewCache[bytes, TokenReviewResult] = _ReviewCache(
            maxsize=cache_size, clock=clock,
            ttl_of=lambda result: cache_ttl if result.authenticated else failure_ttl)
        self.reviews_failed = 0
        self.front_proxy_rejected = 0

    async def authenticate(self, headers: Mapping[str, str], peer_cert: tuple[str, tuple[str, ...]] | None,
                           request_header: RequestHeaderConfig | None) -> Caller:
        """The caller, or ApiError 401.

        `peer_cert` is (CN, O entries) of a client certificate the TLS layer verified against
        `request_header.request_header_ca_pem`, or None.
        """
        if peer_cert is not None and request_header is not None and request_header.front_proxy_enabled:
            common_name = peer_cert[0]
            if request_header.allowed_names and common_name not in request_header.allowed_names:
                # Upstream fails this authenticator and tries the next one (the token).
                self.front_proxy_rejected += 1
                log.warning("client certificate not an allowed front proxy; identity headers ignored",
                            extra={"common_name": common_name, "allowed_names": request_header.allowed_names})
            else:
                caller = front_proxy_caller(headers, request_header)
                if caller is not None:
                    return _with_authenticated_group(caller)
        token = bearer_token(headers)
        if token is None:
            raise ApiError.unauthorized()
        key = hmac.new(self._key, token.encode("utf-8"), hashlib.sha256).digest()
        try:
            result = await self._reviews.get(key, lambda: self._review(token))
        except Exception as error:
            raise ApiError.unauthorized(f"Unauthorized: the token review failed: {_why(error)}") from None
        if not result.authenticated or result.caller is None:
            raise ApiError.unauthorized()
        return _with_authenticated_group(result.caller)

    async def _review(self, token: str) -> TokenReviewResult:
        try:
            return await self._reviewer(token)
        except Exception as error:
            # Once per review, not per waiting request.
            self.reviews_failed += 1
            log.warning("token review failed", extra={"error": str(error), "cause": repr(error.__cause__)})
            raise


# ---- authorization ----------------------------------------------------------------------------


@dataclass(frozen=True)
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
        return cls(caller.username, caller.uid, caller.groups, extra, verb, **attributes)


@dataclass(frozen=True)
class _Decision:
    allowed: bool
    reason: str = ""


def forbidden(spec: SubjectAccessSpec, reason: str = "") -> ApiError:
    """403 worded as kube-apiserver words it (the reason after a colon)."""
    if spec.path:
        message = f'forbidden: User "{spec.user}" cannot {spec.verb} path "{spec.path}"'
        details: dict[str, Any] = {}
    else:
        resource = f"{spec.resource}/{spec.subresource}" if spec.subresource else spec.resource
        scope = f' in the namespace "{spec.namespace}"' if spec.namespace else " at the cluster scope"
        why = f'User "{spec.user}" cannot {spec.verb} resource "{resource}" in API group "{spec.api_group}"{scope}'
        qualified = f"{spec.resource}.{spec.api_group}" if spec.api_group else spec.resource
        message = f'{qualified} "{spec.name}" is forbidden: {why}' if spec.name else f"{qualified} is forbidden: {why}"
        details = {"kind": spec.resource, **({"name": spec.name} if spec.name else {}),
                   **({"group": spec.api_group} if spec.api_group else {})}
    if reason:
        message += f": {reason}"
    return ApiError(403, "Forbidden", message, details)


SubjectAccessReviewer = Callable[[SubjectAccessSpec], Awaitable[bool | tuple[bool, str]]]


class DelegatingAuthorizer(_CountsReviews):
    """Authorization by cached SubjectAccessReview, with upstream's always-allowed groups and paths."""

    def __init__(self, sar: SubjectAccessReviewer, *, allowed_ttl: float = 10.0, denied_ttl: float = 10.0,
                 cache_size: int = 10_000, always_allow_groups: Iterable[str] = ("system:masters",),
                 always_allow_paths: Iterable[str] = ("/healthz", "/livez", "/readyz"),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sar = sar
        self._always_allow_groups = frozenset(always_allow_groups)
        self._always_allow_paths = tuple(always_allow_paths)
        self._reviews: _ReviewCache[SubjectAccessSpec, _Decision] = _ReviewCache(
            maxsize=cache_size, clock=clock,
            ttl_of=lambda decision: allowed_ttl if decision.allowed else denied_ttl)
        self.reviews_failed = 0

    async def authorize(self, caller: Caller, verb: str, resource: str, subresource: str = "", name: str = "",
                        api_group: str = METRICS_GROUP, namespace: str = "") -> None:
        """Return if allowed, else raise ApiError 403."""
        spec = SubjectAccessSpec.of(caller, verb, api_group=api_group, resource=resource,
                                    subresource=subresource, name=name, namespace=namespace)
        await self._decide(spec)

    async def authorize_path(self, caller: Caller, verb: str, path: str) -> None:
        """The same for a non-resource URL (/metrics, /openapi/v2, ...)."""
        if any(path == allowed or (allowed.endswith("*") and path.startswith(allowed[:-1]))
               for allowed in self._always_allow_paths):
            return
        await self._decide(SubjectAccessSpec.of(caller, verb, path=path))

    async def _decide(self, spec: SubjectAccessSpec) -> None:
        if self._always_allow_groups.intersection(spec.groups):
            return
        try:
            decision = await self._reviews.get(spec, lambda: self._review(spec))
        except Exception as error:
            raise forbidden(spec, f"the authorization review failed: {_why(error)}") from None
        if not decision.allowed:
            raise forbidden(spec, decision.reason)

    async def _review(self, spec: SubjectAccessSpec) -> _Decision:
        try:
            answer = await self._sar(spec)
        except Exception as error:
            self.reviews_failed += 1
            log.warning("subject access review failed",
                        extra={"error": str(error), "cause": repr(error.__cause__), "user": spec.user})
            raise
        return _Decision(*answer) if isinstance(answer, tuple) else _Decision(bool(answer))


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


# ---- kube-apiserver backends ------------------------------------------------------------------

_TRANSPORT_ERRORS = (TimeoutError, aiohttp.ClientError, OSError, kube.exceptions.ApiException)


def _describe(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):
        return f"no answer from kube-apiserver within {timeout:g} s"
    if isinstance(error, kube.exceptions.ApiException):
        return f"kube-apiserver answered {error.status} {error.reason}"
    return f"kube-apiserver unreachable ({type(error).__name__})"  # details go to the log, not to clients


def token_review_result(status: Mapping[str, Any], audiences: Iterable[str] = ()) -> TokenReviewResult:
    """Read a TokenReview status (JSON) for the audiences asked for."""
    if not status.get("authenticated"):
        return TokenReviewResult(False, None, str(status.get("error") or ""))
    wanted = tuple(audiences)
    granted = tuple(status.get("audiences") or ())
    # An answer that names no audiences means the API server's own, i.e. the ones asked for.
    if wanted and granted and not set(wanted) & set(granted):
        return TokenReviewResult(False, None, f"token audiences {list(granted)} do not include {list(wanted)}")
    user = status.get("user") or {}
    caller = Caller(str(user.get("username") or ""), str(user.get("uid") or ""), tuple(user.get("groups") or ()),
                    {key: tuple(values or ()) for key, values in (user.get("extra") or {}).items()})
    if not caller.username:
        return TokenReviewResult(False, None, "the token review named no user")
    return TokenReviewResult(True, caller)


def kube_token_reviewer(api_client: Any, *, audiences: Iterable[str] = (),
                        timeout: float = REVIEW_TIMEOUT) -> TokenReviewer:
    """TokenReviews through kube-apiserver: one attempt per review, bounded by `timeout`."""
    api = kube.AuthenticationV1Api(api_client)
    wanted = tuple(audiences)

    async def review(token: str) -> TokenReviewResult:
        body = kube.V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                                  spec=kube.V1TokenReviewSpec(token=token, audiences=list(wanted) or None))
        try:
            async with asyncio.timeout(timeout):
                answer = await api.create_token_review(body, _request_timeout=timeout)
        except _TRANSPORT_ERRORS as error:
            raise ReviewFailed(f"TokenReview: {_describe(error, timeout)}") from error
        return token_review_result(api_client.sanitize_for_serialization(answer).get("status") or {}, wanted)

    return review


def _subject_access_review_spec(spec: SubjectAccessSpec) -> Any:
    if spec.path:
        resource, non_resource = None, kube.V1NonResourceAttributes(path=spec.path, verb=spec.verb)
    else:
        non_resource = None
        resource = kube.V1ResourceAttributes(
            verb=spec.verb, group=spec.api_group, resource=spec.resource, subresource=spec.subresource or None,
            name=spec.name or None, namespace=spec.namespace or None)
    return kube.V1SubjectAccessReviewSpec(
        user=spec.user, uid=spec.uid or None, groups=list(spec.groups),
        extra={key: list(values) for key, values in spec.extra.items()} or None,
        resource_attributes=resource, non_resource_attributes=non_resource)


def kube_subject_access_reviewer(api_client: Any, *, timeout: float = REVIEW_TIMEOUT) -> SubjectAccessReviewer:
    """SubjectAccessReviews through kube-apiserver: one attempt per review, bounded by `timeout`."""
    api = kube.AuthorizationV1Api(api_client)

    async def review(spec: SubjectAccessSpec) -> bool | tuple[bool, str]:
        body = kube.V1SubjectAccessReview(api_version="authorization.k8s.io/v1", kind="SubjectAccessReview",
                                          spec=_subject_access_review_spec(spec))
        try:
            async with asyncio.timeout(timeout):
                answer = await api.create_subject_access_review(body, _request_timeout=timeout)
        except _TRANSPORT_ERRORS as error:
            raise ReviewFailed(f"SubjectAccessReview: {_describe(error, timeout)}") from error
        status = api_client.sanitize_for_serialization(answer).get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or "")

    return review


async def load_request_header_config(api_client: Any, *, timeout: float = REVIEW_TIMEOUT) -> RequestHeaderConfig:
    """Read kube-system/extension-apiserver-authentication (one attempt; the caller retries)."""
    call = _READ_AUTHENTICATION_CONFIG
    async with asyncio.timeout(timeout):
        configmap = await kube.CoreV1Api(api_client).read_namespaced_config_map(
            call.name, AUTHENTICATION_CONFIG_NAMESPACE, _request_timeout=timeout)
    return RequestHeaderConfig.from_configmap(configmap.data or {})
