"""Bound ServiceAccount tokens checked by the operator itself, TokenReview only when it cannot tell.

Tokens are signed here as kube-apiserver signs them (ES256 or RS256, kid = hash of the public key);
the issuer's discovery document and keys come from a fake fetch, the pod cache is a dict, and
TokenReview is the fake of test_apiserver_auth, which records every review it is asked for.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.jws import b64url_encode, jwk, key_id, sign_es256, signature_valid
from colocation.apimachinery.served_apigroups import Caller
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator
from colocation.apiserver.local_token_authentication import (
    BoundPod,
    IssuerDocument,
    IssuerKeys,
    LocalTokenAuthenticator,
)
from colocation.apiserver.service_account_jwt import check_claims
from tests.clock import FakeClock
from tests.unit.apiserver.test_apiserver_auth import FakeTokenReviewer

ISSUER = "https://kubernetes.default.svc.cluster.local"
NS = "colocation-system"
T0 = 1_800_000_000.0
POD_UID = "pod-uid-1"
AGENT_USER = f"system:serviceaccount:{NS}:colocation-agent"


class Issuer:
    """kube-apiserver's token signing: its keys (rotatable) and what it publishes."""

    def __init__(self) -> None:
        self.keys: list[ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey] = [ec.generate_private_key(ec.SECP256R1())]
        self.fetches = 0
        self.failure: Exception | None = None

    async def fetch(self) -> IssuerDocument:
        self.fetches += 1
        if self.failure is not None:
            raise self.failure
        return IssuerDocument(ISSUER, {"keys": [jwk(key.public_key()) for key in self.keys]})

    def token(self, *, key: Any = None, now: float = T0, seconds: int = 3600, pod_uid: str = POD_UID,
              node: str = "node-3", audiences: tuple[str, ...] = (ISSUER,), issuer: str = ISSUER,
              **overrides: Any) -> str:
        key = key if key is not None else self.keys[0]
        claims: dict[str, Any] = {
            "aud": list(audiences), "exp": int(now) + seconds, "iat": int(now), "nbf": int(now), "iss": issuer,
            "jti": "jti-1", "sub": AGENT_USER,
            "kubernetes.io": {"namespace": NS, "serviceaccount": {"name": "colocation-agent", "uid": "sa-uid"},
                              "pod": {"name": "agent-x7k2p", "uid": pod_uid},
                              "node": {"name": node, "uid": "node-uid-3"}}}
        claims.update(overrides)
        if isinstance(key, rsa.RSAPrivateKey):
            header = {"alg": "RS256", "kid": key_id(key.public_key())}
            signing_input = ".".join(b64url_encode(json.dumps(part).encode()) for part in (header, claims))
            signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
            return f"{signing_input}.{b64url_encode(signature)}"
        return sign_es256(claims, key)


class Pods:
    """The leader's pod and ServiceAccount caches."""

    def __init__(self, pods: Mapping[tuple[str, str], BoundPod]) -> None:
        self.pods = dict(pods)
        self.accounts = {(NS, "colocation-agent"): "sa-uid"}
        self.synced = True

    def pod(self, namespace: str, name: str) -> BoundPod | None:
        return self.pods.get((namespace, name))

    def service_account_uid(self, namespace: str, name: str) -> str | None:
        return self.accounts.get((namespace, name))


class Setup:
    def __init__(self, issuer: Issuer, pods: Pods, reviewer: FakeTokenReviewer, authenticator: DelegatingAuthenticator,
                 clock: FakeClock, wall: FakeClock, metrics: ServerMetrics) -> None:
        self.issuer, self.pods, self.reviewer, self.authenticator = issuer, pods, reviewer, authenticator
        self.clock, self.wall, self.metrics = clock, wall, metrics

    async def authenticate(self, token: str) -> Caller:
        return await self.authenticator.authenticate({"Authorization": f"Bearer {token}"}, None, None)

    async def refused(self, token: str) -> None:
        with pytest.raises(ApiError) as refused:
            await self.authenticate(token)
        assert refused.value.code == 401

    def counted(self, method: str, result: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "colocation_token_authentications_total", {"method": method, "result": result})
        return value or 0.0


@pytest.fixture
def setup() -> Setup:
    issuer = Issuer()
    pods = Pods({(NS, "agent-x7k2p"): BoundPod(POD_UID, "node-3")})
    reviewer = FakeTokenReviewer({})
    clock, wall = FakeClock(1000.0), FakeClock(1000.0)  # two clocks: the test moves each on its own
    wall.now = T0
    keys = IssuerKeys(issuer.fetch, clock=clock)
    local = LocalTokenAuthenticator(keys, wall_clock=wall)
    local.pods = pods
    metrics = ServerMetrics()
    authenticator = DelegatingAuthenticator(reviewer, cache_ttl=120, clock=clock, local=local, metrics=metrics)
    return Setup(issuer, pods, reviewer, authenticator, clock, wall, metrics)


async def test_a_bound_token_is_accepted_as_the_user_token_review_would_name(setup: Setup) -> None:
    caller = await setup.authenticate(setup.issuer.token())
    assert caller == Caller(username=AGENT_USER, uid="sa-uid",
                            groups=("system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"),
                            extra={"authentication.kubernetes.io/pod-name": ("agent-x7k2p",),
                                   "authentication.kubernetes.io/pod-uid": (POD_UID,),
                                   "authentication.kubernetes.io/node-name": ("node-3",),
                                   "authentication.kubernetes.io/node-uid": ("node-uid-3",),
                                   "authentication.kubernetes.io/credential-id": ("JTI=jti-1",)})
    assert caller.node_name == "node-3"
    assert setup.reviewer.calls == []
    assert setup.counted("local", "accepted") == 1


async def test_rs256_tokens_are_accepted_too(setup: Setup) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    setup.issuer.keys.append(rsa_key)
    assert (await setup.authenticate(setup.issuer.token(key=rsa_key))).username == AGENT_USER
    assert setup.reviewer.calls == []


async def test_every_report_after_the_first_costs_no_fetch_and_no_review(setup: Setup) -> None:
    token = setup.issuer.token()
    for _ in range(5):
        await setup.authenticate(token)
    assert setup.issuer.fetches == 1
    assert setup.reviewer.calls == []
    assert setup.counted("local", "accepted") == 5


@pytest.mark.parametrize("case", ["bad signature", "expired", "not yet valid", "wrong audience"])
async def test_tokens_kube_apiserver_refuses_are_refused_without_a_review(setup: Setup, case: str) -> None:
    issuer = setup.issuer
    if case == "bad signature":
        # Another key, under the kid of the issuer's: as a forger would.
        forged = issuer.token(key=ec.generate_private_key(ec.SECP256R1()))
        _, payload, signature = forged.split(".")
        genuine_header = issuer.token().split(".")[0]
        token = f"{genuine_header}.{payload}.{signature}"
    elif case == "expired":
        token = issuer.token(now=T0 - 4000, seconds=3600)  # expired 400 s ago, past the 60 s leeway
    elif case == "not yet valid":
        token = issuer.token(nbf=int(T0) + 300)
    else:
        token = issuer.token(audiences=("https://vault.example",))
    await setup.refused(token)
    assert setup.reviewer.calls == []
    assert setup.counted("local", "rejected") == 1


async def test_expiry_has_kube_apiservers_leeway(setup: Setup) -> None:
    token = setup.issuer.token(now=T0 - 3630, seconds=3600)  # expired 30 s ago
    assert (await setup.authenticate(token)).username == AGENT_USER


async def test_another_issuer_goes_to_token_review(setup: Setup) -> None:
    token = setup.issuer.token(issuer="https://oidc.example")
    setup.reviewer.tokens[token] = Caller(username="oidc-user")
    assert (await setup.authenticate(token)).username == "oidc-user"
    assert setup.reviewer.calls == [token]
    assert setup.counted("tokenreview", "accepted") == 1


@pytest.mark.parametrize("token", ["opaque-static-token", "a.b.c"])
async def test_what_is_no_jwt_goes_to_token_review(setup: Setup, token: str) -> None:
    await setup.refused(token)
    assert setup.reviewer.calls == [token]


@pytest.mark.parametrize("binding", [{}, {"pod": {"name": "agent-x7k2p", "uid": POD_UID}, "node": {"name": "node-3"}}],
                         ids=["no pod", "a node that did not exist (no uid)"])
async def test_a_token_without_a_pod_and_node_binding_goes_to_token_review(setup: Setup,
                                                                          binding: dict[str, Any]) -> None:
    claims: dict[str, Any] = {"kubernetes.io": {"namespace": NS, "serviceaccount": {
        "name": "colocation-agent", "uid": "sa-uid"}, **binding}}
    token = setup.issuer.token(**claims)
    await setup.refused(token)
    assert setup.reviewer.calls == [token]


async def test_an_unknown_kid_fetches_the_keys_once_then_goes_to_token_review(setup: Setup) -> None:
    await setup.authenticate(setup.issuer.token())  # the keys are fetched on first use
    setup.clock.now += 31
    unknown = ec.generate_private_key(ec.SECP256R1())
    first, second = setup.issuer.token(key=unknown), setup.issuer.token(key=unknown, jti="jti-2")
    await setup.refused(first)
    assert setup.issuer.fetches == 2
    assert setup.reviewer.calls == [first]
    await setup.refused(second)  # within 30 s of the last fetch: no other
    assert setup.issuer.fetches == 2
    assert setup.reviewer.calls == [first, second]
    setup.clock.now += 31
    await setup.refused(setup.issuer.token(key=unknown, jti="jti-3"))
    assert setup.issuer.fetches == 3


async def test_rotated_keys_are_fetched_when_a_token_names_the_new_one(setup: Setup) -> None:
    old_token = setup.issuer.token()
    await setup.authenticate(old_token)
    setup.clock.now += 31
    setup.issuer.keys = [ec.generate_private_key(ec.SECP256R1())]  # rotated: the old key is gone
    new_token = setup.issuer.token(jti="jti-2")
    assert (await setup.authenticate(new_token)).username == AGENT_USER
    assert setup.issuer.fetches == 2
    assert setup.reviewer.calls == []
    await setup.refused(old_token)  # its key is no longer published: kube-apiserver decides, cached or not
    assert setup.reviewer.calls == [old_token]


async def test_a_failed_fetch_leaves_tokens_to_token_review(setup: Setup) -> None:
    setup.issuer.failure = TimeoutError("no answer")
    token = setup.issuer.token()
    setup.reviewer.tokens[token] = Caller(username=AGENT_USER)
    assert (await setup.authenticate(token)).username == AGENT_USER
    assert setup.reviewer.calls == [token]


@pytest.mark.parametrize("pod", [BoundPod("another-uid", "node-3"), BoundPod(POD_UID, "node-9"),
                                 BoundPod(POD_UID, "node-3", deletion_timestamp=T0 - 61)],
                         ids=["replaced", "another node", "terminating over a minute"])
async def test_a_token_whose_pod_is_gone_is_refused_without_a_review(setup: Setup, pod: BoundPod) -> None:
    token = setup.issuer.token()
    await setup.authenticate(token)
    setup.pods.pods[(NS, "agent-x7k2p")] = pod  # the pod cache saw it: the next request is refused
    await setup.refused(token)
    assert setup.reviewer.calls == []


async def test_a_pod_just_deleted_still_authenticates_within_the_leeway(setup: Setup) -> None:
    setup.pods.pods[(NS, "agent-x7k2p")] = BoundPod(POD_UID, "node-3", deletion_timestamp=T0 - 30)
    assert (await setup.authenticate(setup.issuer.token())).username == AGENT_USER


async def test_a_pod_missing_from_the_cache_goes_to_token_review(setup: Setup) -> None:
    """The cache lists bound, unfinished pods: a finished pod's token is still good to kube-apiserver."""
    token = setup.issuer.token()
    await setup.authenticate(token)
    del setup.pods.pods[(NS, "agent-x7k2p")]
    await setup.refused(token)  # the fake TokenReview knows no such token, as for a deleted pod
    assert setup.reviewer.calls == [token]


@pytest.mark.parametrize("state", ["none", "not synced"])
async def test_without_a_synced_pod_cache_tokens_go_to_token_review(setup: Setup, state: str) -> None:
    local = setup.authenticator.local
    assert local is not None
    if state == "none":
        local.pods = None
    else:
        setup.pods.synced = False
    token = setup.issuer.token()
    setup.reviewer.tokens[token] = Caller(username=AGENT_USER)
    assert (await setup.authenticate(token)).username == AGENT_USER
    assert setup.reviewer.calls == [token]
    assert setup.issuer.fetches == 0  # not even the keys are needed


async def test_configured_audiences_replace_the_issuer(setup: Setup) -> None:
    local = LocalTokenAuthenticator(IssuerKeys(setup.issuer.fetch, clock=setup.clock),
                                    audiences=("colocation",), wall_clock=setup.wall)
    local.pods = setup.pods
    authenticator = DelegatingAuthenticator(setup.reviewer, clock=setup.clock, local=local)
    headers = {"Authorization": f"Bearer {setup.issuer.token(audiences=('colocation',))}"}
    assert (await authenticator.authenticate(headers, None, None)).username == AGENT_USER
    with pytest.raises(ApiError):
        await authenticator.authenticate({"Authorization": f"Bearer {setup.issuer.token()}"}, None, None)
    assert setup.reviewer.calls == []


async def test_a_verified_token_is_remembered_for_minutes_without_checking_its_signature_again(
        setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []

    def counting(jws: Any, key: Any) -> bool:
        checked.append(jws.header.get("kid", ""))
        return signature_valid(jws, key)

    monkeypatch.setattr("colocation.apiserver.local_token_authentication.signature_valid", counting)
    assert setup.authenticator.local is not None
    await setup.authenticator.local.keys.refresh()  # fetched at start (a first fetch empties the cache)
    token = setup.issuer.token()
    await setup.authenticate(token)
    setup.wall.now += 9 * 60  # the agent reports on; the pod stays bound (checked every time)
    await setup.authenticate(token)
    assert len(checked) == 1
    setup.wall.now += 2 * 60  # past VERIFIED_TTL: verified again
    await setup.authenticate(token)
    assert len(checked) == 2
    assert setup.reviewer.calls == []


async def test_a_verified_token_is_not_remembered_past_its_expiry(setup: Setup) -> None:
    token = setup.issuer.token(seconds=30 - 60)  # exp 30 s ago: within the leeway
    await setup.authenticate(token)
    setup.wall.now += 40  # expired 70 s ago now: past the leeway, and out of the cache
    await setup.refused(token)
    assert setup.reviewer.calls == []



async def test_keys_are_refetched_periodically_and_failures_retried_with_growing_jittered_delays() -> None:
    issuer = Issuer()
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        issuer.failure = TimeoutError("no answer") if len(delays) < 3 else None
        if len(delays) == 5:
            raise asyncio.CancelledError

    keys = IssuerKeys(issuer.fetch, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await keys.run()
    # fetched, waited ~10 min; failed twice (1 s, then 2 s nominal, at least half of it); fetched, ~10 min
    assert issuer.fetches == 5
    assert 540 <= delays[0] <= 600 and 540 <= delays[3] <= 600 and 540 <= delays[4] <= 600
    assert 0.5 <= delays[1] <= 1.0 and 1.0 <= delays[2] <= 2.0
    assert keys.issuer == ISSUER and keys.failures == 2


@pytest.mark.parametrize("uid", [None, "sa-uid-of-a-recreated-account"])
async def test_a_token_whose_service_account_the_cache_does_not_hold_goes_to_token_review(
        setup: Setup, uid: str | None) -> None:
    """A deleted account's tokens are refused by kube-apiserver; the cache may lag a re-created
    one, so it never refuses on its own: kube-apiserver decides."""
    token = setup.issuer.token()
    await setup.authenticate(token)
    assert setup.reviewer.calls == []
    if uid is None:
        del setup.pods.accounts[(NS, "colocation-agent")]
    else:
        setup.pods.accounts[(NS, "colocation-agent")] = uid
    await setup.refused(token)  # the fake reviewer knows no token: kube-apiserver's answer for a deleted account
    assert len(setup.reviewer.calls) == 1
    assert setup.counted("local", "accepted") == 1


def test_a_verified_token_is_kept_in_a_few_hundred_bytes() -> None:
    """The leader keeps every node's verified token (10,000 at 10,000 nodes). What all the agents'
    tokens share is one object each, and the caller is made when asked: a token kept with
    the caller it stands for took some 1.5 KiB."""
    payloads = [orjson.dumps({
        "aud": [ISSUER], "exp": int(T0) + 3600, "iat": int(T0), "iss": ISSUER, "jti": f"{index:08d}-jti-0000-0000",
        "kubernetes.io": {"namespace": NS, "serviceaccount": {"name": "colocation-agent", "uid": "sa-uid"},
                          "pod": {"name": f"colocation-agent-{index:05d}", "uid": f"{index:08d}-pod-uid-0000-0000"},
                          "node": {"name": f"node-{index:05d}", "uid": f"{index:08d}-node-uid-0000-0000"}}})
        for index in range(2000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        # Each token's claims parsed, as a request's are: what the token keeps of them is counted.
        kept = [check_claims(orjson.loads(payload), issuer=ISSUER, audiences=(ISSUER,), now=T0).token
                for payload in payloads]
        gc.collect()
        per_token = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_token < 600, per_token  # 489 measured
    token = kept[7]
    assert token is not None and token.caller.extra["authentication.kubernetes.io/node-name"] == ("node-00007",)
