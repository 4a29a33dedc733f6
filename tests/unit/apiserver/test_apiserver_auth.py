"""Delegated authentication and authorization of the operator's API server, with fake reviewers."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.served_apigroups import Caller
from colocation.apimachinery.userinfo import Extra
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import (
    DelegatingAuthenticator,
    RequestHeaderConfig,
    ReviewFailed,
    TokenReviewResult,
    bearer_token,
)
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec, check_node_rule
from colocation.apiserver.kube_reviewers import subject_access_review_body, token_review_result
from tests.clock import FakeClock

AGENT = Caller(username="system:serviceaccount:colocation-system:colocation-agent", uid="sa-uid",
               groups=("system:serviceaccounts", "system:serviceaccounts:colocation-system", "system:authenticated"),
               extra={"authentication.kubernetes.io/node-name": ("node-3",),
                      "authentication.kubernetes.io/pod-name": ("agent-x7k2p",)})
AGENT_TOKEN = "eyJhbGciOiJSUzI1NiJ9.agent-on-node-3.signature"
READER = Caller(username="alice", groups=("devs", "system:authenticated"))
FRONT_PROXY = RequestHeaderConfig(request_header_ca_pem="-----BEGIN CERTIFICATE-----\n...",
                                  allowed_names=("front-proxy-client",))
PROXY_CERT = ("front-proxy-client", ())


class FakeTokenReviewer:
    """Knows some tokens; counts reviews; can hold reviews until released, or fail them."""

    def __init__(self, tokens: Mapping[str, Caller]) -> None:
        self.tokens = dict(tokens)
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.failure: Exception | None = None

    async def __call__(self, token: str) -> TokenReviewResult:
        self.calls.append(token)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        caller = self.tokens.get(token)
        if caller is None:
            return TokenReviewResult(False, None, "[invalid bearer token, service account token has expired]")
        return TokenReviewResult(True, caller)


class FakeSubjectAccessReviewer:
    def __init__(self, allowed: set[tuple[str, str, str]], reason: str = "") -> None:
        self.allowed = allowed  # (user, verb, resource or path)
        self.reason = reason
        self.calls: list[SubjectAccessSpec] = []
        self.failure: Exception | None = None

    async def __call__(self, spec: SubjectAccessSpec) -> tuple[bool, str]:
        self.calls.append(spec)
        if self.failure is not None:
            raise self.failure
        return (spec.user, spec.verb, spec.path or spec.resource) in self.allowed, self.reason


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def reviewer() -> FakeTokenReviewer:
    return FakeTokenReviewer({AGENT_TOKEN: AGENT})


@pytest.fixture
def authenticator(reviewer: FakeTokenReviewer, clock: FakeClock) -> DelegatingAuthenticator:
    return DelegatingAuthenticator(reviewer, cache_ttl=10.0, failure_ttl=2.0, clock=clock)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


async def let_reviews_start(reviewer: FakeTokenReviewer) -> None:
    await asyncio.wait_for(reviewer.entered.wait(), timeout=5)


# ---- bearer tokens and the TokenReview cache ----------------------------------------------------


async def test_token_review_answer_is_reused_until_the_cache_ttl(
        authenticator: DelegatingAuthenticator, reviewer: FakeTokenReviewer, clock: FakeClock) -> None:
    assert await authenticator.authenticate(bearer(AGENT_TOKEN), None, None) == AGENT
    clock.now += 9.9
    assert await authenticator.authenticate(bearer(AGENT_TOKEN), None, None) == AGENT
    assert len(reviewer.calls) == 1
    clock.now += 0.1
    assert await authenticator.authenticate(bearer(AGENT_TOKEN), None, None) == AGENT
    assert len(reviewer.calls) == 2
    assert (authenticator.cache_hits, authenticator.cache_misses) == (1, 2)


async def test_rejected_token_is_remembered_for_the_shorter_failure_ttl(
        authenticator: DelegatingAuthenticator, reviewer: FakeTokenReviewer, clock: FakeClock) -> None:
    for _ in range(2):
        with pytest.raises(ApiError) as caught:
            await authenticator.authenticate(bearer("expired-token"), None, None)
        assert (caught.value.code, caught.value.reason, caught.value.message) == (401, "Unauthorized", "Unauthorized")
    assert len(reviewer.calls) == 1
    clock.now += 2.0
    with pytest.raises(ApiError):
        await authenticator.authenticate(bearer("expired-token"), None, None)
    assert len(reviewer.calls) == 2


async def test_each_token_is_reviewed_for_itself(authenticator: DelegatingAuthenticator,
                                                  reviewer: FakeTokenReviewer) -> None:
    reviewer.tokens["reader-token"] = READER
    assert await authenticator.authenticate(bearer(AGENT_TOKEN), None, None) == AGENT
    assert await authenticator.authenticate(bearer("reader-token"), None, None) == READER
    assert reviewer.calls == [AGENT_TOKEN, "reader-token"]


async def test_failed_review_is_401_and_not_cached(authenticator: DelegatingAuthenticator,
                                                   reviewer: FakeTokenReviewer) -> None:
    reviewer.failure = ReviewFailed("TokenReview: no answer from kube-apiserver within 3 s")
    with pytest.raises(ApiError) as caught:
        await authenticator.authenticate(bearer(AGENT_TOKEN), None, None)
    assert caught.value.code == 401
    assert caught.value.message == \
        "Unauthorized: the token review failed: TokenReview: no answer from kube-apiserver within 3 s"
    reviewer.failure = None
    assert await authenticator.authenticate(bearer(AGENT_TOKEN), None, None) == AGENT
    assert len(reviewer.calls) == 2
    assert authenticator.reviews_failed == 1


async def test_unexpected_reviewer_error_fails_closed_without_leaking_it(
        authenticator: DelegatingAuthenticator, reviewer: FakeTokenReviewer) -> None:
    reviewer.failure = RuntimeError("secret internals")
    with pytest.raises(ApiError) as caught:
        await authenticator.authenticate(bearer(AGENT_TOKEN), None, None)
    assert caught.value.code == 401
    assert "secret internals" not in caught.value.message


async def test_concurrent_requests_with_one_token_share_one_review(
        authenticator: DelegatingAuthenticator, reviewer: FakeTokenReviewer) -> None:
    reviewer.gate = asyncio.Event()
    requests = [asyncio.create_task(authenticator.authenticate(bearer(AGENT_TOKEN), None, None)) for _ in range(5)]
    await let_reviews_start(reviewer)
    reviewer.gate.set()
    assert await asyncio.gather(*requests) == [AGENT] * 5
    assert len(reviewer.calls) == 1
    assert authenticator.reviews_coalesced == 4


async def test_a_shared_failed_review_counts_once_and_fails_every_waiter(
        authenticator: DelegatingAuthenticator, reviewer: FakeTokenReviewer) -> None:
    reviewer.gate = asyncio.Event()
    reviewer.failure = ReviewFailed("TokenReview: kube-apiserver answered 503 Service Unavailable")
    requests = [asyncio.create_task(authenticator.authenticate(bearer(AGENT_TOKEN), None, None)) for _ in range(3)]
    await let_reviews_start(reviewer)
    reviewer.gate.set()
    outcomes = await asyncio.gather(*requests, return_exceptions=True)
    assert [getattr(outcome, "code", None) for outcome in outcomes] == [401, 401, 401]
    assert (len(reviewer.calls), authenticator.reviews_failed) == (1, 1)


async def test_a_review_outlives_the_request_that_started_it(
        authenticator: DelegatingAuthenticator, reviewer: FakeTokenReviewer) -> None:
    reviewer.gate = asyncio.Event()
    first = asyncio.create_task(authenticator.authenticate(bearer(AGENT_TOKEN), None, None))
    await let_reviews_start(reviewer)
    second = asyncio.create_task(authenticator.authenticate(bearer(AGENT_TOKEN), None, None))
    first.cancel()
    reviewer.gate.set()
    assert await second == AGENT
    assert first.cancelled()
    assert len(reviewer.calls) == 1


async def test_at_most_a_few_token_reviews_are_in_flight_and_the_rest_wait_their_turn(
        reviewer: FakeTokenReviewer, clock: FakeClock) -> None:
    # A new leader with no pod cache yet reviews every agent's token: 50 agents here, 3 at a time.
    authenticator = DelegatingAuthenticator(reviewer, clock=clock, review_concurrency=3, review_wait=60.0)
    agents = {f"token-{index}": Caller(username=f"agent-{index}", uid=f"uid-{index}", groups=()) for index in range(50)}
    reviewer.tokens.update(agents)
    reviewer.gate = asyncio.Event()
    requests = [asyncio.create_task(authenticator.authenticate(bearer(token), None, None)) for token in agents]
    await let_reviews_start(reviewer)
    for _ in range(10):
        await asyncio.sleep(0)  # every request has had its turns to start a review
    assert len(reviewer.calls) == 3
    reviewer.gate.set()
    callers = await asyncio.gather(*requests)
    assert [caller.username for caller in callers] == [f"agent-{index}" for index in range(50)]
    assert len(reviewer.calls) == 50


async def test_a_request_that_waits_too_long_for_a_review_fails_like_a_review_that_timed_out(
        reviewer: FakeTokenReviewer, clock: FakeClock) -> None:
    authenticator = DelegatingAuthenticator(reviewer, clock=clock, review_concurrency=1, review_wait=0.05)
    reviewer.tokens["other-token"] = READER
    reviewer.gate = asyncio.Event()
    first = asyncio.create_task(authenticator.authenticate(bearer(AGENT_TOKEN), None, None))
    await let_reviews_start(reviewer)
    with pytest.raises(ApiError) as caught:
        await authenticator.authenticate(bearer("other-token"), None, None)
    assert caught.value.code == 401
    assert caught.value.message == ("Unauthorized: the token review failed: no TokenReview slot free within "
                                    "0.05 s")
    reviewer.gate.set()
    assert await first == AGENT
    assert await authenticator.authenticate(bearer("other-token"), None, None) == READER  # not cached: asked again


async def test_the_cache_is_never_keyed_by_the_token_itself(
        authenticator: DelegatingAuthenticator, reviewer: FakeTokenReviewer) -> None:
    reviewer.gate = asyncio.Event()
    pending = asyncio.create_task(authenticator.authenticate(bearer(AGENT_TOKEN), None, None))
    await let_reviews_start(reviewer)
    in_flight = authenticator._reviews.keys()
    reviewer.gate.set()
    await pending
    for key in (*in_flight, *authenticator._reviews.keys()):
        assert AGENT_TOKEN not in repr(key) and AGENT_TOKEN.encode() not in bytes(key)
    assert len(in_flight) == 1


async def test_no_credentials_is_401(authenticator: DelegatingAuthenticator) -> None:
    for sent in ({}, {"Authorization": "Basic YWRtaW46YWRtaW4="}, {"Authorization": "Bearer "}):
        with pytest.raises(ApiError) as caught:
            await authenticator.authenticate(sent, None, None)
        assert caught.value.code == 401


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc.def", "abc.def"),
    ("bearer abc", "abc"),  # the scheme is case-insensitive
    ("  Bearer abc  ", "abc"),
    ("Bearer abc trailing", "abc"),
    ("Bearer  abc", None),  # upstream splits on single spaces: the token is empty
    ("Bearer", None),
    ("Token abc", None),
])
def test_bearer_token_is_parsed_as_kube_apiserver_parses_it(header: str, token: str | None) -> None:
    assert bearer_token({"authorization": header}) == token


# ---- front proxy ------------------------------------------------------------------------------


def proxied(*extra_pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return headers(("X-Remote-User", "alice"), ("X-Remote-Uid", "u-123"), ("X-Remote-Group", "devs"),
                   ("X-Remote-Group", "system:authenticated"), *extra_pairs)


async def test_identity_headers_are_ignored_without_a_front_proxy_certificate(
        authenticator: DelegatingAuthenticator) -> None:
    with pytest.raises(ApiError) as caught:
        await authenticator.authenticate(proxied(), None, FRONT_PROXY)
    assert caught.value.code == 401
    # With a token too, the token decides who it is.
    spoofed = headers(("X-Remote-User", "system:admin"), ("X-Remote-Group", "system:masters"),
                      ("Authorization", f"Bearer {AGENT_TOKEN}"))
    assert await authenticator.authenticate(spoofed, None, FRONT_PROXY) == AGENT


async def test_front_proxy_identity_comes_from_the_headers(authenticator: DelegatingAuthenticator,
                                                           reviewer: FakeTokenReviewer) -> None:
    caller = await authenticator.authenticate(proxied(), PROXY_CERT, FRONT_PROXY)
    assert caller == Caller(username="alice", uid="u-123", groups=("devs", "system:authenticated"), extra={})
    assert reviewer.calls == []


async def test_front_proxy_caller_is_always_in_system_authenticated(authenticator: DelegatingAuthenticator) -> None:
    caller = await authenticator.authenticate(headers(("X-Remote-User", "bob")), PROXY_CERT, FRONT_PROXY)
    assert caller.groups == ("system:authenticated",)


async def test_front_proxy_certificate_must_have_an_allowed_name(authenticator: DelegatingAuthenticator) -> None:
    with pytest.raises(ApiError):
        await authenticator.authenticate(proxied(), ("kubelet-client", ("system:masters",)), FRONT_PROXY)
    assert authenticator.front_proxy_rejected == 1
    any_name = RequestHeaderConfig(request_header_ca_pem=FRONT_PROXY.request_header_ca_pem, allowed_names=())
    caller = await authenticator.authenticate(proxied(), ("kubelet-client", ()), any_name)
    assert caller.username == "alice"


async def test_front_proxy_is_off_without_its_ca(authenticator: DelegatingAuthenticator) -> None:
    with pytest.raises(ApiError):
        await authenticator.authenticate(proxied(), PROXY_CERT, RequestHeaderConfig(allowed_names=()))


async def test_front_proxy_without_a_user_falls_back_to_the_token(authenticator: DelegatingAuthenticator) -> None:
    sent = headers(("X-Remote-Group", "system:masters"), ("Authorization", f"Bearer {AGENT_TOKEN}"))
    assert await authenticator.authenticate(sent, PROXY_CERT, FRONT_PROXY) == AGENT


async def test_front_proxy_extras_are_unescaped_lowercased_and_multi_valued(
        authenticator: DelegatingAuthenticator) -> None:
    caller = await authenticator.authenticate(proxied(
        ("X-Remote-Extra-Authentication.kubernetes.io%2fnode-name", "node-3"),
        ("X-Remote-Extra-Scopes", "read"), ("x-remote-extra-scopes", "write"),
        ("X-Remote-Extra-Bad%zzKey", "kept"),  # a malformed escape: the key is kept as sent
    ), PROXY_CERT, FRONT_PROXY)
    assert dict(caller.extra) == {"authentication.kubernetes.io/node-name": ("node-3",),
                                  "scopes": ("read", "write"), "bad%zzkey": ("kept",)}
    assert caller.node_name == "node-3"


def test_request_header_config_reads_the_extension_apiserver_authentication_configmap() -> None:
    data = {
        "client-ca-file": "CLIENT CA",
        "requestheader-client-ca-file": "FRONT PROXY CA",
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        "requestheader-uid-headers": '["X-Remote-Uid"]',
    }
    assert RequestHeaderConfig.from_configmap(data) == RequestHeaderConfig(
        request_header_ca_pem="FRONT PROXY CA", allowed_names=("front-proxy-client",),
        username_headers=("X-Remote-User",), uid_headers=("X-Remote-Uid",), group_headers=("X-Remote-Group",),
        extra_header_prefixes=("X-Remote-Extra-",), client_ca_pem="CLIENT CA")
    # Clusters older than the uid headers (1.32) leave the key out: no uid header.
    del data["requestheader-uid-headers"]
    assert RequestHeaderConfig.from_configmap(data).uid_headers == ()
    with pytest.raises(ValueError, match="requestheader-allowed-names"):
        RequestHeaderConfig.from_configmap({**data, "requestheader-allowed-names": "front-proxy-client"})


# ---- TokenReview answers ------------------------------------------------------------------------


def test_token_review_status_becomes_a_caller() -> None:
    status = {"authenticated": True, "audiences": ["https://kubernetes.default.svc.cluster.local"],
              "user": {"username": AGENT.username, "uid": "sa-uid", "groups": list(AGENT.groups),
                       "extra": {key: list(values) for key, values in AGENT.extra.items()}}}
    assert token_review_result(status) == TokenReviewResult(True, AGENT)
    assert token_review_result(status, ["https://kubernetes.default.svc.cluster.local"]).caller == AGENT
    wrong = token_review_result(status, ["colocation"])
    assert (wrong.authenticated, wrong.caller) == (False, None)
    # No audiences in the answer means the API server's own: the ones asked for.
    assert token_review_result({**status, "audiences": []}, ["colocation"]).caller == AGENT


def test_unauthenticated_token_review_keeps_its_error() -> None:
    status = {"authenticated": False, "user": {}, "error": "[invalid bearer token, token has been invalidated]"}
    assert token_review_result(status) == \
        TokenReviewResult(False, None, "[invalid bearer token, token has been invalidated]")


def test_callers_are_hashable_whatever_their_extra_was_given_as() -> None:
    given_lists = Caller(username=AGENT.username, uid="sa-uid", groups=list(AGENT.groups),  # type: ignore[arg-type]
                         extra={key: list(values) for key, values in AGENT.extra.items()})  # type: ignore[misc]
    assert given_lists == AGENT and hash(given_lists) == hash(AGENT)
    assert len({AGENT, given_lists, READER}) == 2


# ---- the node rule ----------------------------------------------------------------------------


def test_node_rule_accepts_a_token_bound_to_a_pod_on_that_node() -> None:
    check_node_rule(AGENT, "node-3")


def test_node_rule_rejects_a_report_for_another_node_naming_both() -> None:
    with pytest.raises(ApiError) as caught:
        check_node_rule(AGENT, "node-4")
    assert caught.value.code == 403 and caught.value.reason == "Forbidden"
    assert caught.value.message == (
        'nodemetrics.metrics.colocation.dev "node-4" is forbidden: User '
        '"system:serviceaccount:colocation-system:colocation-agent" holds a token bound to a pod on node '
        '"node-3" and cannot report for node "node-4"')
    assert caught.value.details == {"kind": "nodemetrics", "name": "node-4", "group": "metrics.colocation.dev"}


def test_node_rule_rejects_a_token_not_bound_to_a_pod() -> None:
    with pytest.raises(ApiError) as caught:
        check_node_rule(READER, "node-3")
    assert caught.value.code == 403
    assert caught.value.message == (
        'nodemetrics.metrics.colocation.dev "node-3" is forbidden: User "alice" cannot report for node "node-3": '
        "reports must come from a ServiceAccount token bound to a pod on the node")


def test_node_rule_rejects_an_ambiguous_node_name() -> None:
    twice = Caller(username="mallory", extra={"authentication.kubernetes.io/node-name": ("node-3", "node-4")})
    assert twice.node_name is None
    with pytest.raises(ApiError):
        check_node_rule(twice, "node-3")


# ---- authorization ------------------------------------------------------------------------------


@pytest.fixture
def sar() -> FakeSubjectAccessReviewer:
    return FakeSubjectAccessReviewer({("alice", "get", "nodemetrics"), ("alice", "get", "/metrics")})


@pytest.fixture
def authorizer(sar: FakeSubjectAccessReviewer, clock: FakeClock) -> DelegatingAuthorizer:
    return DelegatingAuthorizer(sar, allowed_ttl=10.0, denied_ttl=5.0, clock=clock)


async def test_allowed_decision_is_cached_for_the_allowed_ttl(
        authorizer: DelegatingAuthorizer, sar: FakeSubjectAccessReviewer, clock: FakeClock) -> None:
    await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-3")
    clock.now += 9.9
    await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-3")
    assert len(sar.calls) == 1
    clock.now += 0.1
    await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-3")
    assert len(sar.calls) == 2
    assert sar.calls[0] == SubjectAccessSpec(
        user="alice", uid="", groups=("devs", "system:authenticated"), extra=READER.extra,  # type: ignore[arg-type]
        verb="get", api_group="metrics.colocation.dev", resource="nodemetrics", subresource="", name="node-3",
        namespace="")


async def test_denied_decision_is_cached_for_the_denied_ttl(
        authorizer: DelegatingAuthorizer, sar: FakeSubjectAccessReviewer, clock: FakeClock) -> None:
    for _ in range(2):
        with pytest.raises(ApiError):
            await authorizer.authorize(READER, "list", "nodemetrics", subresource="", name="")
    assert len(sar.calls) == 1
    clock.now += 5.0
    with pytest.raises(ApiError):
        await authorizer.authorize(READER, "list", "nodemetrics", subresource="", name="")
    assert len(sar.calls) == 2


async def test_decisions_are_per_question(authorizer: DelegatingAuthorizer, sar: FakeSubjectAccessReviewer) -> None:
    await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-3")
    await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-4")
    with pytest.raises(ApiError):
        await authorizer.authorize(READER, "watch", "nodemetrics", subresource="", name="")
    assert [(spec.verb, spec.name) for spec in sar.calls] == [("get", "node-3"), ("get", "node-4"), ("watch", "")]


async def test_forbidden_is_worded_as_kube_apiserver_words_it(authorizer: DelegatingAuthorizer) -> None:
    bob = Caller(username="u")
    cases = [
        (authorizer.authorize(bob, "get", "nodemetrics", subresource="", name="x"),
         'nodemetrics.metrics.colocation.dev "x" is forbidden: User "u" cannot get resource "nodemetrics" '
         'in API group "metrics.colocation.dev" at the cluster scope'),
        (authorizer.authorize(bob, "list", "nodemetrics", subresource="", name=""),
         'nodemetrics.metrics.colocation.dev is forbidden: User "u" cannot list resource "nodemetrics" '
         'in API group "metrics.colocation.dev" at the cluster scope'),
        (authorizer.authorize(bob, "update", "nodemetrics", subresource="status", name="node-1"),
         'nodemetrics.metrics.colocation.dev "node-1" is forbidden: User "u" cannot update resource '
         '"nodemetrics/status" in API group "metrics.colocation.dev" at the cluster scope'),
        (authorizer.authorize(bob, "list", "pods", subresource="", name="", api_group="metrics.k8s.io",
                              namespace="default"),
         'pods.metrics.k8s.io is forbidden: User "u" cannot list resource "pods" in API group "metrics.k8s.io" '
         'in the namespace "default"'),
        (authorizer.authorize_path(bob, "get", "/metrics"),
         'forbidden: User "u" cannot get path "/metrics"'),
    ]
    for attempt, message in cases:
        with pytest.raises(ApiError) as caught:
            await attempt
        assert (caught.value.code, caught.value.reason, caught.value.message) == (403, "Forbidden", message)


async def test_forbidden_carries_the_review_reason(clock: FakeClock) -> None:
    authorizer = DelegatingAuthorizer(FakeSubjectAccessReviewer(set(), reason="no RBAC policy matched"), clock=clock)
    with pytest.raises(ApiError) as caught:
        await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="x")
    assert caught.value.message.endswith("at the cluster scope: no RBAC policy matched")
    assert caught.value.details == {"kind": "nodemetrics", "name": "x", "group": "metrics.colocation.dev"}


async def test_masters_and_health_paths_need_no_review(authorizer: DelegatingAuthorizer,
                                                       sar: FakeSubjectAccessReviewer) -> None:
    await authorizer.authorize(Caller(username="admin", groups=("system:masters",)), "delete", "nodemetrics",
                               subresource="", name="x")
    for path in ("/healthz", "/livez", "/readyz"):
        await authorizer.authorize_path(Caller(username="system:anonymous"), "get", path)
    await authorizer.authorize_path(READER, "get", "/metrics")
    assert [spec.path for spec in sar.calls] == ["/metrics"]


async def test_failed_authorization_review_is_403_and_not_cached(
        authorizer: DelegatingAuthorizer, sar: FakeSubjectAccessReviewer) -> None:
    sar.failure = ReviewFailed("SubjectAccessReview: no answer from kube-apiserver within 3 s")
    with pytest.raises(ApiError) as caught:
        await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-3")
    assert caught.value.code == 403
    assert caught.value.message.endswith(
        "at the cluster scope: the authorization review failed: "
        "SubjectAccessReview: no answer from kube-apiserver within 3 s")
    sar.failure = None
    await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-3")
    assert (len(sar.calls), authorizer.reviews_failed) == (2, 1)


async def test_reviews_sent_are_counted_by_group_verb_and_result(
        sar: FakeSubjectAccessReviewer, clock: FakeClock) -> None:
    metrics = ServerMetrics()
    authorizer = DelegatingAuthorizer(sar, clock=clock, metrics=metrics)
    for _ in range(3):  # one review, then the cache answers
        await authorizer.authorize(READER, "get", "nodemetrics", subresource="", name="node-3")
    with pytest.raises(ApiError):
        await authorizer.authorize(READER, "update", "nodemetrics", subresource="status", name="node-3")
    await authorizer.authorize_path(READER, "get", "/metrics")
    sar.failure = ReviewFailed("SubjectAccessReview: no answer from kube-apiserver within 3 s")
    with pytest.raises(ApiError):
        await authorizer.authorize(READER, "list", "pods", api_group="metrics.k8s.io", namespace="default")

    def sent(group: str, verb: str, result: str) -> float | None:
        return metrics.registry.get_sample_value("colocation_subject_access_reviews_total",
                                                 {"group": group, "verb": verb, "result": result})
    assert sent("metrics.colocation.dev", "get", "allowed") == 1
    assert sent("metrics.colocation.dev", "update", "denied") == 1
    assert sent("", "get", "allowed") == 1
    assert sent("metrics.k8s.io", "list", "error") == 1


def test_subject_access_reviews_carry_what_the_webhook_authorizer_sends() -> None:
    node_a = Extra({"authentication.kubernetes.io/node-name": ("node-a",)})
    agent = SubjectAccessSpec(user="system:serviceaccount:colocation-system:colocation-agent", uid="u-1",
                              groups=("system:serviceaccounts",), extra=node_a, verb="update",
                              api_group="metrics.colocation.dev", resource="nodemetrics",
                              subresource="status", name="node-a")
    assert subject_access_review_body(agent) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": agent.user, "groups": ["system:serviceaccounts"], "uid": "u-1",
                 "extra": {"authentication.kubernetes.io/node-name": ["node-a"]},
                 "resourceAttributes": {"verb": "update", "group": "metrics.colocation.dev",
                                        "resource": "nodemetrics", "subresource": "status", "name": "node-a"}}}
    discovery = SubjectAccessSpec(user="someone", uid="", groups=(), extra=Extra(), verb="get", path="/apis")
    assert subject_access_review_body(discovery)["spec"] == {
        "user": "someone", "groups": [], "nonResourceAttributes": {"path": "/apis", "verb": "get"}}
