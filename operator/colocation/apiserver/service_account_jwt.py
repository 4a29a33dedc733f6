"""ServiceAccount tokens read and checked as kube-apiserver's own authenticator does, without it.

A bound ServiceAccount token is a JWS (compact form) signed by kube-apiserver with one of the keys
it publishes at `/openid/v1/jwks`; `apimachinery.jws` decodes it and verifies the signature (why
without a JWT library is said there). This module checks its claims; `local_token_authentication`
decides what to do with the outcome.

Claims follow kube-apiserver (pkg/serviceaccount): `exp`, `nbf` and `iat` with a leeway of 60 s
(go-jose's default, which kube-apiserver uses), `iss` the issuer, `aud` one of the accepted
audiences, and the private `kubernetes.io` claim naming the namespace, the ServiceAccount, the pod
and the node. The user is the one a TokenReview gives for the same token.
"""

from __future__ import annotations

import enum
import functools
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.served_apigroups import Caller
from colocation.apimachinery.userinfo import (
    AUTHENTICATED,
    NODE_NAME_EXTRA,
    Extra,
    service_account_groups,
    service_account_username,
)

POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
NODE_UID_EXTRA = "authentication.kubernetes.io/node-uid"
CREDENTIAL_ID_EXTRA = "authentication.kubernetes.io/credential-id"
LEEWAY_SECONDS = 60.0  # kube-apiserver's (go-jose's DefaultLeeway), for exp, nbf, iat and deleted pods



class Outcome(enum.Enum):
    """What a local check concluded: a user, a certain refusal, or no conclusion (ask kube-apiserver)."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    UNDECIDED = "undecided"


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundToken:
    """A token whose signature and claims checked out: who it stands for and what it is bound to.

    The leader keeps one per node (the verified-token cache): the caller is made when asked
    (a few µs per request), not kept: a token costs a third of what it did to keep."""

    namespace: str
    account_name: str
    account_uid: str
    pod_name: str
    pod_uid: str
    node_name: str
    node_uid: str
    expires: float
    token_id: str = ""  # the jti claim

    @property
    def caller(self) -> Caller:
        """The user kube-apiserver's TokenReview gives for this token."""
        extra = {POD_NAME_EXTRA: (self.pod_name,), POD_UID_EXTRA: (self.pod_uid,),
                 NODE_NAME_EXTRA: (self.node_name,), NODE_UID_EXTRA: (self.node_uid,)}
        if self.token_id:
            extra[CREDENTIAL_ID_EXTRA] = (f"JTI={self.token_id}",)
        return Caller(username=service_account_username(self.namespace, self.account_name), uid=self.account_uid,
                      groups=_groups(self.namespace), extra=Extra(extra))


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    token: BoundToken | None = None
    reason: str = ""  # for the log and the fallback counter, never for clients


def undecided(reason: str) -> Verdict:
    return Verdict(Outcome.UNDECIDED, reason=reason)


def rejected(reason: str) -> Verdict:
    return Verdict(Outcome.REJECTED, reason=reason)


def _ref(value: Any, *fields: str) -> dict[str, str] | None:
    """A claim object whose fields are all non-empty strings, else None."""
    if not isinstance(value, Mapping):
        return None
    picked = {field: value.get(field) for field in fields}
    return picked if all(isinstance(v, str) and v for v in picked.values()) else None  # type: ignore[return-value]


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def check_claims(claims: Mapping[str, Any], *, issuer: str, audiences: Iterable[str], now: float) -> Verdict:
    """The claims of a token whose signature checked out: ACCEPTED with its user, REJECTED where
    kube-apiserver would refuse it, UNDECIDED for tokens this check does not cover (no pod or node
    binding, or shapes it does not know), which kube-apiserver then judges."""
    if claims.get("iss") != issuer:
        return undecided("issuer")
    expires = _number(claims, "exp")
    if expires is None:
        return undecided("no expiry")
    if now > expires + LEEWAY_SECONDS:
        return rejected("expired")
    not_before = _number(claims, "nbf")
    if not_before is not None and now < not_before - LEEWAY_SECONDS:
        return rejected("not valid yet")
    issued_at = _number(claims, "iat")
    if issued_at is not None and now < issued_at - LEEWAY_SECONDS:
        return rejected("issued in the future")
    token_audiences = claims.get("aud")
    if isinstance(token_audiences, str):
        token_audiences = [token_audiences]
    if not isinstance(token_audiences, list) or not set(audiences) & {a for a in token_audiences if isinstance(a, str)}:
        return rejected("audience")
    private = claims.get("kubernetes.io")
    if not isinstance(private, Mapping) or not isinstance(private.get("namespace"), str) or not private["namespace"]:
        return undecided("not a service account token")
    namespace: str = private["namespace"]
    account = _ref(private.get("serviceaccount"), "name", "uid")
    pod = _ref(private.get("pod"), "name", "uid")
    node = _ref(private.get("node"), "name", "uid")
    if account is None:
        return undecided("not a service account token")
    if pod is None or node is None or "secret" in private:
        return undecided("not bound to a pod and a node")
    jti = claims.get("jti")
    # Kept for every node's token: what all the agents' tokens have in common is one object.
    return Verdict(Outcome.ACCEPTED, BoundToken(
        namespace=sys.intern(namespace), account_name=sys.intern(account["name"]),
        account_uid=sys.intern(account["uid"]), pod_name=pod["name"], pod_uid=pod["uid"],
        node_name=node["name"], node_uid=node["uid"], expires=expires, token_id=jti if isinstance(jti, str) else ""))


@functools.lru_cache(maxsize=64)
def _groups(namespace: str) -> tuple[str, ...]:
    return (*service_account_groups(namespace), AUTHENTICATED)
