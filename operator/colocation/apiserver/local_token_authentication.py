"""Bound ServiceAccount tokens authenticated on the spot, so that a report costs no TokenReview.

The signature and claims are checked against the issuer's published keys (`IssuerKeys`,
`service_account_jwt`); revocation is a look-up in the leader's pod and ServiceAccount caches
(`PodLookup`) on every request. The rule is to agree with TokenReview: REJECTED only for what
kube-apiserver refuses too, UNDECIDED (the caller sends a TokenReview) for any token this check
cannot judge. Keys are fetched at start, every `refresh_interval`, and at once for an unknown
`kid` (at most once per `min_refresh_interval`); the known keys stay in use while a fetch
fails, and concurrent requests share one fetch.

The cases, and why: docs/operator.md#who-may-report
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import cachetools

from colocation.apimachinery.jws import PublicKey, parse_jws, public_keys, signature_valid
from colocation.apiserver.service_account_jwt import (
    LEEWAY_SECONDS,
    BoundToken,
    Outcome,
    Verdict,
    check_claims,
    rejected,
    undecided,
)
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 600.0  # seconds between two fetches of the keys, less up to 10 % of jitter
MIN_REFRESH_INTERVAL = 30.0  # an unknown kid fetches the keys at once, but not more often than this
# A verified token is remembered this long at most (never past its expiry, nor a change of the keys).
# Its signature and claims cannot change, and revocation is checked on every request
# (`_still_bound`): the bound only caps what a leaked, unused token keeps in memory. At 60 s a
# node reporting every 10 s paid a signature check on one report in 6 (~4 % of a replica's CPU).
VERIFIED_TTL = 600.0


@dataclass(frozen=True)
class IssuerDocument:
    """What kube-apiserver published: its issuer and its signing keys (the JWKS, as JSON)."""

    issuer: str
    jwks: Any


# Fetches the issuer discovery and the key set from kube-apiserver; raises on any failure.
FetchIssuer = Callable[[], Awaitable[IssuerDocument]]


@dataclass(frozen=True)
class BoundPod:
    """What the pod cache holds of a pod: enough to tell whether a token bound to it still holds."""

    uid: str
    node_name: str
    deletion_timestamp: float | None = None  # seconds since the epoch


class PodLookup(Protocol):
    """The leader's pod and ServiceAccount caches, as the authenticator reads them."""

    @property
    def synced(self) -> bool:
        """Whether the cache has listed the pods: before that, a missing pod proves nothing."""

    def pod(self, namespace: str, name: str) -> BoundPod | None:
        """The pod, or None when the cache does not hold it."""

    def service_account_uid(self, namespace: str, name: str) -> str | None:
        """The ServiceAccount's uid, or None when the cache does not hold it (or has not listed yet)."""


class IssuerKeys:
    """The issuer and signing keys of kube-apiserver's ServiceAccount tokens, kept fresh."""

    def __init__(self, fetch: FetchIssuer, *, refresh_interval: float = REFRESH_INTERVAL,
                 min_refresh_interval: float = MIN_REFRESH_INTERVAL, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._fetch = fetch
        self._refresh_interval = refresh_interval
        self._min_refresh_interval = min_refresh_interval
        self._clock = clock
        self._rng = rng or random.Random()
        self._sleep = sleep
        self.issuer = ""
        self.keys: dict[str, PublicKey] = {}
        self.version = 0  # changes with the issuer or the key set
        self._last_attempt = -float("inf")
        self._refreshing: asyncio.Future[bool] | None = None
        self.fetches = 0
        self.failures = 0

    async def refresh(self) -> bool:
        """Fetch issuer and keys now (concurrent callers share one fetch); whether it succeeded."""
        future = self._refreshing
        if future is None:
            future = self._refreshing = asyncio.ensure_future(self._fetch_once())
            future.add_done_callback(self._settled)
        return await asyncio.shield(future)

    def _settled(self, future: asyncio.Future[bool]) -> None:
        if self._refreshing is future:
            self._refreshing = None

    async def _fetch_once(self) -> bool:
        self._last_attempt = self._clock()
        self.fetches += 1
        try:
            document = await self._fetch()
        except Exception as error:  # a failed fetch keeps the keys known so far
            self.failures += 1
            log.warning("fetching the ServiceAccount token keys failed",
                        extra={"error": str(error), "cause": repr(error.__cause__)})
            return False
        keys = public_keys(document.jwks)
        if document.issuer != self.issuer or keys.keys() != self.keys.keys():
            log.info("ServiceAccount token keys", extra={"issuer": document.issuer, "kids": sorted(keys)})
        if document.issuer != self.issuer or keys != self.keys:
            self.version += 1
        self.issuer, self.keys = document.issuer, keys
        return True

    async def key(self, kid: str) -> PublicKey | None:
        """The key named `kid`; an unknown one fetches the keys again unless that was just done."""
        key = self.keys.get(kid)
        if key is None and (self._refreshing is not None
                            or self._clock() - self._last_attempt >= self._min_refresh_interval):
            await self.refresh()
            key = self.keys.get(kid)
        return key

    async def run(self) -> None:
        """Fetch now, then every refresh interval (jittered); retry failures with backoff and jitter."""
        backoff = Backoff(initial=1.0, maximum=60.0, jitter=0.5, rng=self._rng)
        while True:
            if await self.refresh():
                backoff = Backoff(initial=1.0, maximum=60.0, jitter=0.5, rng=self._rng)
                delay = self._refresh_interval * self._rng.uniform(0.9, 1.0)
            else:
                delay = backoff.next_delay()
            await self._sleep(delay)  # the period between fetches, not synchronisation


class LocalTokenAuthenticator:
    """Checks bound ServiceAccount tokens against the issuer's keys and the pod cache."""

    def __init__(self, keys: IssuerKeys, *, audiences: Iterable[str] = (), cache_size: int = 10_000,
                 cache_ttl: float = VERIFIED_TTL, wall_clock: Callable[[], float] = time.time) -> None:
        self.keys = keys
        self._audiences = tuple(audiences)  # empty: the issuer, kube-apiserver's default --api-audiences
        self._wall_clock = wall_clock
        self._verified: cachetools.TLRUCache[bytes, BoundToken, float] = cachetools.TLRUCache(
            cache_size, lambda _key, token, now: min(now + cache_ttl, token.expires),
            timer=wall_clock)
        self._keys_version = keys.version
        self.pods: PodLookup | None = None  # set by the manager once the leader has a pod cache

    @property
    def audiences(self) -> tuple[str, ...]:
        return self._audiences or ((self.keys.issuer,) if self.keys.issuer else ())

    async def check(self, token: str, cache_key: bytes) -> Verdict:
        """ACCEPTED, REJECTED, or UNDECIDED (ask kube-apiserver); `cache_key` stands for the token."""
        pods = self.pods
        if pods is None or not pods.synced:
            return undecided("no pod cache")
        if self._keys_version != self.keys.version:
            # A key kube-apiserver no longer publishes no longer signs anything: verify again.
            self._verified.clear()
            self._keys_version = self.keys.version
        try:
            bound: BoundToken | None = self._verified[cache_key]  # a third of .get()'s cost (no __contains__)
        except KeyError:
            bound = None
        if bound is None:
            verdict = await self._verify(token)
            if verdict.outcome is not Outcome.ACCEPTED or verdict.token is None:
                return verdict
            bound = verdict.token
            self._verified[cache_key] = bound
        return self._still_bound(bound, pods)

    async def _verify(self, token: str) -> Verdict:
        jws = parse_jws(token)
        if jws is None:
            return undecided("not a JWT")
        if not self.keys.issuer:
            await self.keys.key("")  # nothing fetched yet: try now (rate-limited like an unknown kid)
        if not self.keys.issuer or jws.claims.get("iss") != self.keys.issuer:
            return undecided("issuer")
        kid = jws.header.get("kid")
        key = await self.keys.key(kid) if isinstance(kid, str) and kid else None
        if key is None:
            return undecided("unknown kid")
        # kube-apiserver tries every key it trusts, whatever the kid says; so do we before refusing.
        if not signature_valid(jws, key) and not any(signature_valid(jws, other) for name, other
                                                     in self.keys.keys.items() if name != kid):
            return rejected("signature")
        return check_claims(jws.claims, issuer=self.keys.issuer, audiences=self.audiences, now=self._wall_clock())

    def _still_bound(self, bound: BoundToken, pods: PodLookup) -> Verdict:
        """Revocation, as kube-apiserver judges it, from the pod cache (a dict look-up)."""
        pod = pods.pod(bound.namespace, bound.pod_name)
        if pod is None:
            return undecided("pod not in the cache")
        if pod.uid != bound.pod_uid:
            return rejected("pod replaced")
        if pod.node_name and pod.node_name != bound.node_name:
            return rejected("pod on another node")
        deleted = pod.deletion_timestamp
        if deleted is not None and deleted < self._wall_clock() - LEEWAY_SECONDS:
            return rejected("pod deleted")
        if pods.service_account_uid(bound.namespace, bound.account_name) != bound.account_uid:
            return undecided("service account not in the cache")
        return Verdict(Outcome.ACCEPTED, bound)
