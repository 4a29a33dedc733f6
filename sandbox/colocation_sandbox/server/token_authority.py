"""Who is calling: the admin token, static tokens, and the ServiceAccount tokens the sandbox issues.

ServiceAccount tokens are shaped like upstream's (a JWT with the same claims) and signed as
kube-apiserver signs them, with a private key (ES256, a P-256 key made per process) whose public
half is published at /openid/v1/jwks, and the issuer at /.well-known/openid-configuration: clients
that verify tokens themselves (the operator does) work against the sandbox too. A token is only
valid while the authority remembers it: a real bound token dies with its pod or ServiceAccount, and
`revoke_bound_to` / `revoke_service_account` give the sandbox the same behaviour.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from colocation.apimachinery.clock import WallClock, now
from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.jws import jwk, key_id, parse_jws, sign_es256, signature_valid
from colocation.apimachinery.userinfo import (
    ANONYMOUS,
    AUTHENTICATED,
    MASTERS,
    NODE_NAME_EXTRA,
    UserInfo,
    service_account_groups,
    service_account_username,
)

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)  # what kube-apiserver accepts by default (--api-audiences = the issuer)
ADMIN_USERNAME = "sandbox-admin"
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 2**32

POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
NODE_UID_EXTRA = "authentication.kubernetes.io/node-uid"
CREDENTIAL_ID_EXTRA = "authentication.kubernetes.io/credential-id"
JWKS_PATH = "/openid/v1/jwks"
JWKS_MEDIA_TYPE = "application/jwk-set+json"
DISCOVERY_PATH = "/.well-known/openid-configuration"


@dataclass(frozen=True)
class _Grant:
    """What the authority remembers of a live ServiceAccount token, to revoke it later."""

    sa_uid: str
    pod_uid: str
    expires: float


@dataclass(frozen=True)
class Authentication:
    """The outcome of checking a token for some audiences: a user, or why not."""

    user: UserInfo | None
    audiences: tuple[str, ...] = ()
    error: str = ""


def _rejected(why: str) -> Authentication:
    # Worded like kube-apiserver's union of authenticators, as seen in TokenReview errors.
    return Authentication(None, error=f"[invalid bearer token, {why}]")


def _with_authenticated(user: UserInfo) -> UserInfo:
    # Every authenticated user is in system:authenticated, whatever its source says (upstream adds it).
    if user.username == ANONYMOUS or AUTHENTICATED in user.groups:
        return user
    return UserInfo(username=user.username, uid=user.uid, groups=(*user.groups, AUTHENTICATED), extra=user.extra)


class TokenAuthority:
    """Issues and checks the bearer tokens the sandbox's API server accepts."""

    def __init__(self, clock: WallClock = now) -> None:
        self._clock = clock
        self._signing_key = ec.generate_private_key(ec.SECP256R1())
        self._public_key = self._signing_key.public_key()
        self._key_id = key_id(self._public_key)
        self._static: dict[str, UserInfo] = {}
        self._grants: dict[str, _Grant] = {}  # by the token's jti
        self._by_pod: dict[str, set[str]] = {}
        self._by_service_account: dict[str, set[str]] = {}
        self._next_sweep = 1024
        self.admin_token = secrets.token_urlsafe(32)
        self.admin_user = UserInfo(username=ADMIN_USERNAME, groups=(MASTERS, AUTHENTICATED))
        self._static[self.admin_token] = self.admin_user

    def add_static_token(self, token: str, user: UserInfo) -> None:
        """Accept `token` as `user` from now on, like a line of kube-apiserver's --token-auth-file."""
        self._static[token] = _with_authenticated(user)

    # ---- ServiceAccount tokens (TokenRequest) ---------------------------------------------------

    def issue_service_account_token(
        self, namespace: str, name: str, sa_uid: str, *, audiences: Iterable[str] = (),
        expiration_seconds: int = 3600, bound_object: Mapping[str, Any] | None = None,
        bound_node: Mapping[str, Any] | None = None,
    ) -> tuple[str, float]:
        """A token for the ServiceAccount, optionally bound to a pod (its JSON); a scheduled pod's
        token names its node, with the uid of `bound_node` (the Node's JSON) when it exists.
        Returns the token and its expiry."""
        if expiration_seconds < MIN_EXPIRATION_SECONDS or expiration_seconds > MAX_EXPIRATION_SECONDS:
            too = "less than 10 minutes" if expiration_seconds < MIN_EXPIRATION_SECONDS \
                else "larger than 2^32 seconds"
            raise ApiError.invalid("authentication.k8s.io", "TokenRequest", name, causes=[Cause(
                "spec.expirationSeconds",
                f"Invalid value: {expiration_seconds}: may not specify a duration {too}")])
        issued_at = int(self._clock())
        expires = issued_at + expiration_seconds
        jti = str(uuid.uuid4())
        private: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": sa_uid}}
        pod_uid = ""
        if bound_object is not None:
            metadata = bound_object.get("metadata") or {}
            pod_uid = metadata.get("uid", "")
            private["pod"] = {"name": metadata.get("name", ""), "uid": pod_uid}
            if bound_node is not None:
                node_meta = bound_node.get("metadata") or {}
                private["node"] = {"name": node_meta.get("name", ""), "uid": node_meta.get("uid", "")}
            elif node_name := (bound_object.get("spec") or {}).get("nodeName"):
                private["node"] = {"name": node_name}  # as upstream when the Node does not exist: no uid
        claims = {
            "aud": list(audiences) or list(API_AUDIENCES), "exp": expires, "iat": issued_at, "iss": ISSUER,
            "jti": jti, "kubernetes.io": private, "nbf": issued_at,
            "sub": service_account_username(namespace, name),
        }
        self._remember(jti, _Grant(sa_uid, pod_uid, expires))
        return self._sign(claims), float(expires)

    def revoke_bound_to(self, pod_uid: str) -> None:
        """Invalidate every token bound to the pod (it was deleted)."""
        for jti in self._by_pod.pop(pod_uid, set()):
            self._forget(jti)

    def revoke_service_account(self, sa_uid: str) -> None:
        """Invalidate every token of the ServiceAccount (it was deleted)."""
        for jti in self._by_service_account.pop(sa_uid, set()):
            self._forget(jti)

    def _remember(self, jti: str, grant: _Grant) -> None:
        if len(self._grants) >= self._next_sweep:
            # Expired tokens can never authenticate again; drop them so the table stays small.
            moment = self._clock()
            for old in [j for j, g in self._grants.items() if g.expires <= moment]:
                self._forget(old)
            self._next_sweep = max(1024, 2 * len(self._grants))
        self._grants[jti] = grant
        self._by_service_account.setdefault(grant.sa_uid, set()).add(jti)
        if grant.pod_uid:
            self._by_pod.setdefault(grant.pod_uid, set()).add(jti)

    def _forget(self, jti: str) -> None:
        grant = self._grants.pop(jti, None)
        if grant is None:
            return
        self._by_service_account.get(grant.sa_uid, set()).discard(jti)
        self._by_pod.get(grant.pod_uid, set()).discard(jti)

    def _sign(self, claims: Mapping[str, Any]) -> str:
        return sign_es256(claims, self._signing_key, kid=self._key_id)

    def _verified_claims(self, token: str) -> Mapping[str, Any] | None:
        jws = parse_jws(token)
        if jws is None or jws.header.get("kid") != self._key_id or not signature_valid(jws, self._public_key):
            return None
        return jws.claims

    # ---- issuer discovery (what kube-apiserver serves for ServiceAccount tokens) -------------------

    def openid_configuration(self) -> dict[str, Any]:
        """/.well-known/openid-configuration, as kube-apiserver serves it."""
        return {"issuer": ISSUER, "jwks_uri": f"{ISSUER}{JWKS_PATH}", "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["ES256"]}

    def jwks(self) -> dict[str, Any]:
        """/openid/v1/jwks: the public key that signs ServiceAccount tokens."""
        return {"keys": [jwk(self._public_key)]}

    # ---- authentication ---------------------------------------------------------------------------

    def authenticate(self, token: str, audiences: Iterable[str] = ()) -> UserInfo | None:
        """The user a bearer token stands for, or None (unknown, expired, revoked, wrong audience)."""
        return self.check(token, audiences).user

    def check(self, token: str, audiences: Iterable[str] = ()) -> Authentication:
        """Like `authenticate`, with the audiences that matched or the reason it failed.

        Without `audiences` the token must be meant for this API server (its default audiences).
        """
        targets = tuple(audiences) or API_AUDIENCES
        static = self._static.get(token)
        if static is not None:
            # Static tokens carry no audience: they are only good for the API server itself.
            return self._audience_match(static, API_AUDIENCES, targets)
        claims = self._verified_claims(token)
        if claims is None:
            return Authentication(None, error="invalid bearer token")
        moment = self._clock()
        try:
            if moment >= float(claims["exp"]):
                return _rejected("service account token has expired")
            if moment < float(claims["nbf"]):
                return _rejected("service account token is not valid yet")
            if claims["jti"] not in self._grants:
                return _rejected("service account token has been invalidated")
            user = self._service_account_user(claims)
            token_audiences = tuple(str(a) for a in claims["aud"])
        except (KeyError, TypeError, ValueError):
            return Authentication(None, error="invalid bearer token")
        return self._audience_match(user, token_audiences, targets)

    @staticmethod
    def _audience_match(user: UserInfo, token_audiences: tuple[str, ...],
                        targets: tuple[str, ...]) -> Authentication:
        matched = tuple(audience for audience in targets if audience in token_audiences)
        if not matched:
            return _rejected(f"token audiences {list(token_audiences)} is invalid for the target audiences "
                             f"{list(targets)}")
        return Authentication(user, matched)

    @staticmethod
    def _service_account_user(claims: Mapping[str, Any]) -> UserInfo:
        private = claims["kubernetes.io"]
        namespace, account = private["namespace"], private["serviceaccount"]
        extra: dict[str, tuple[str, ...]] = {}
        if pod := private.get("pod"):
            extra[POD_NAME_EXTRA] = (pod["name"],)
            extra[POD_UID_EXTRA] = (pod["uid"],)
        if node := private.get("node"):
            extra[NODE_NAME_EXTRA] = (node["name"],)
            if node.get("uid"):
                extra[NODE_UID_EXTRA] = (node["uid"],)
        extra[CREDENTIAL_ID_EXTRA] = (f"JTI={claims['jti']}",)
        return UserInfo(username=service_account_username(namespace, account["name"]), uid=account["uid"],
                        groups=(*service_account_groups(namespace), AUTHENTICATED), extra=extra)

    def token_review(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The status of a TokenReview of spec.token for spec.audiences (default: this API server)."""
        outcome = self.check(str(spec.get("token") or ""), spec.get("audiences") or ())
        if outcome.user is None:
            return {"authenticated": False, "user": {}, "error": outcome.error}
        return {"authenticated": True, "user": outcome.user.to_json(), "audiences": list(outcome.audiences)}
