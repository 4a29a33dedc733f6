"""Who is calling, delegated to kube-apiserver as aggregated API servers do it.

A front-proxy client certificate makes the `X-Remote-*` headers the identity; otherwise a bearer
token is checked locally when the leader can judge it (`local_token_authentication`), else by a
TokenReview. TokenReviews are cached, identical ones in flight share one call, and a failed one
is never cached and never lets a request through. At most `review_concurrency` are in flight; a
request that waits longer than `review_wait` for its turn fails as a review that timed out. The
groups served only see `Caller` and the `Authenticate` callable of `apimachinery.served_apigroups`.

Why: docs/operator.md#who-may-report
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
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import cachetools

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.served_apigroups import Caller
from colocation.apimachinery.userinfo import AUTHENTICATED, Extra
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.local_token_authentication import LocalTokenAuthenticator
from colocation.apiserver.service_account_jwt import Outcome
from colocation.kube.permissions import AUTHENTICATION_CONFIG_MAP

log = logging.getLogger(__name__)

_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class TokenReviewResult:
    """What a TokenReview said: a caller, or why not (its status.error)."""

    authenticated: bool
    caller: Caller | None = None
    error: str = ""


class ReviewFailed(Exception):
    """A review could not be made (timeout, transport, kube-apiserver error): fail closed."""


def why_failed(error: Exception) -> str:
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


@dataclass(frozen=True, kw_only=True)
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
    return Caller(username=username, uid=uid, groups=tuple(groups), extra=Extra(extra))


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, else None (parsed as upstream does)."""
    # aiohttp's headers are case-insensitive: one look-up; a plain mapping is searched.
    authorization = headers.get("Authorization") or next(
        (value for name, value in headers.items() if name.lower() == "authorization"), "")
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def _with_authenticated_group(caller: Caller) -> Caller:
    # Every authenticated caller is in system:authenticated, whatever its source says (upstream adds it).
    if AUTHENTICATED in caller.groups:
        return caller
    return Caller(username=caller.username, uid=caller.uid, groups=(*caller.groups, AUTHENTICATED), extra=caller.extra)


# ---- review caching -----------------------------------------------------------------------------

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReviewCache(Generic[K, V]):
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


class CountsReviews:
    """Counters for Prometheus (the server wires them): answers from cache, reviews made, shared."""

    _reviews: ReviewCache[Any, Any]
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


REVIEW_CONCURRENCY = 8  # TokenReviews in flight at once, as a client's QPS limit bounds kube-apiserver's
REVIEW_WAIT = 5.0  # seconds a request may wait for its TokenReview's turn


class DelegatingAuthenticator(CountsReviews):
    """Front-proxy identity, else bearer token checked locally or by cached TokenReview, else 401.

    With `local`, a token it accepts or rejects costs no TokenReview; one it leaves undecided goes
    to TokenReview as before.
    """

    def __init__(self, token_reviewer: TokenReviewer, *, cache_ttl: float = 10.0, failure_ttl: float = 2.0,
                 cache_size: int = 10_000, clock: Callable[[], float] = time.monotonic,
                 local: LocalTokenAuthenticator | None = None, metrics: ServerMetrics | None = None,
                 review_concurrency: int = REVIEW_CONCURRENCY, review_wait: float = REVIEW_WAIT) -> None:
        self._reviewer = token_reviewer
        self._review_slots = asyncio.Semaphore(review_concurrency)
        self._review_wait = review_wait
        self.local = local
        self._metrics = metrics
        # Keyed by an HMAC under a per-process key: a token is never a dictionary key or in a dump.
        self._key = secrets.token_bytes(32)
        self._reviews: ReviewCache[bytes, TokenReviewResult] = ReviewCache(
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
        if self.local is not None:
            verdict = await self.local.check(token, key)
            if verdict.outcome is Outcome.ACCEPTED and verdict.token is not None:
                self._count("local", "accepted")
                return verdict.token.caller
            if verdict.outcome is Outcome.REJECTED:
                self._count("local", "rejected")
                log.info("bearer token refused", extra={"reason": verdict.reason})
                raise ApiError.unauthorized()
            if self._metrics is not None:
                self._metrics.token_local_undecided.labels(verdict.reason).inc()
        try:
            result = await self._reviews.get(key, lambda: self._review(token))
        except Exception as error:
            self._count("tokenreview", "error")
            raise ApiError.unauthorized(f"Unauthorized: the token review failed: {why_failed(error)}") from None
        if not result.authenticated or result.caller is None:
            self._count("tokenreview", "rejected")
            raise ApiError.unauthorized()
        self._count("tokenreview", "accepted")
        return _with_authenticated_group(result.caller)

    def _count(self, method: str, result: str) -> None:
        if self._metrics is not None:
            self._metrics.child(self._metrics.token_authentications, method, result).inc()

    async def _review(self, token: str) -> TokenReviewResult:
        try:
            try:
                async with asyncio.timeout(self._review_wait):
                    await self._review_slots.acquire()
            except TimeoutError:
                raise ReviewFailed(f"no TokenReview slot free within {self._review_wait:g} s") from None
            try:
                return await self._reviewer(token)
            finally:
                self._review_slots.release()
        except Exception as error:
            # Once per review, not per waiting request.
            self.reviews_failed += 1
            log.warning("token review failed", extra={"error": str(error), "cause": repr(error.__cause__)})
            raise
