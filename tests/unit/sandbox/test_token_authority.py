"""Bearer tokens as kube-apiserver treats them: admin, static, and ServiceAccount tokens (TokenRequest)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.jws import parse_jws, public_keys, signature_valid
from colocation.apimachinery.userinfo import UserInfo
from colocation_sandbox.server.token_authority import TokenAuthority
from tests.clock import FakeClock

T0 = 1_800_000_000.0
POD = {"kind": "Pod",
       "metadata": {"name": "agent-x7k2p", "namespace": "colocation-system", "uid": "pod-uid-1"},
       "spec": {"nodeName": "node-3", "serviceAccountName": "agent"}}
NODE = {"kind": "Node", "metadata": {"name": "node-3", "uid": "node-uid-3"}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def authority(clock: FakeClock) -> TokenAuthority:
    return TokenAuthority(clock.wall)


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def test_admin_token_is_a_cluster_admin(authority: TokenAuthority) -> None:
    admin = authority.authenticate(authority.admin_token)
    assert admin is not None
    assert admin.username == "sandbox-admin"
    assert set(admin.groups) == {"system:masters", "system:authenticated"}


def test_unknown_and_forged_tokens_are_rejected(authority: TokenAuthority) -> None:
    token, _ = authority.issue_service_account_token("default", "builder", "sa-uid")
    header, _, signature = token.split(".")
    forged = json.dumps({**claims_of(token), "sub": "system:serviceaccount:kube-system:admin"}).encode()
    forged_payload = base64.urlsafe_b64encode(forged).rstrip(b"=").decode()
    assert authority.authenticate("not-a-token") is None
    assert authority.authenticate("a.b.c") is None
    assert authority.authenticate(f"{header}.{forged_payload}.{signature}") is None
    assert TokenAuthority().authenticate(token) is None  # another server's key


def test_service_account_token_looks_like_upstream_jwt(authority: TokenAuthority) -> None:
    token, expires = authority.issue_service_account_token("colocation-system", "agent", "sa-uid-9",
                                                           expiration_seconds=3600, bound_object=POD,
                                                           bound_node=NODE)
    assert len(token.split(".")) == 3
    claims = claims_of(token)
    assert claims["sub"] == "system:serviceaccount:colocation-system:agent"
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"
    assert claims["aud"] == ["https://kubernetes.default.svc.cluster.local"]
    assert claims["iat"] == claims["nbf"] == int(T0)
    assert claims["exp"] == int(T0) + 3600 == expires
    assert claims["kubernetes.io"] == {
        "namespace": "colocation-system",
        "serviceaccount": {"name": "agent", "uid": "sa-uid-9"},
        "pod": {"name": "agent-x7k2p", "uid": "pod-uid-1"},
        "node": {"name": "node-3", "uid": "node-uid-3"},
    }


def test_token_review_of_a_pod_bound_token_names_pod_and_node(authority: TokenAuthority) -> None:
    token, _ = authority.issue_service_account_token("colocation-system", "agent", "sa-uid-9",
                                                     bound_object=POD, bound_node=NODE)
    status = authority.token_review({"token": token})
    assert status == {
        "authenticated": True,
        "user": {
            "username": "system:serviceaccount:colocation-system:agent",
            "uid": "sa-uid-9",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:colocation-system",
                       "system:authenticated"],
            "extra": {
                "authentication.kubernetes.io/credential-id": [f"JTI={claims_of(token)['jti']}"],
                "authentication.kubernetes.io/node-name": ["node-3"],
                "authentication.kubernetes.io/node-uid": ["node-uid-3"],
                "authentication.kubernetes.io/pod-name": ["agent-x7k2p"],
                "authentication.kubernetes.io/pod-uid": ["pod-uid-1"],
            },
        },
        "audiences": ["https://kubernetes.default.svc.cluster.local"],
    }


def test_tokens_are_es256_and_verify_with_the_published_keys_of_the_published_issuer(
        authority: TokenAuthority) -> None:
    token, _ = authority.issue_service_account_token("colocation-system", "agent", "sa-uid-9", bound_object=POD,
                                                     bound_node=NODE)
    jws = parse_jws(token)
    assert jws is not None
    assert jws.header["alg"] == "ES256"
    discovery = authority.openid_configuration()
    assert discovery["issuer"] == jws.claims["iss"] == "https://kubernetes.default.svc.cluster.local"
    assert discovery["jwks_uri"] == "https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
    keys = public_keys(authority.jwks())
    assert list(keys) == [jws.header["kid"]]
    assert signature_valid(jws, keys[jws.header["kid"]])
    assert not signature_valid(jws, next(iter(public_keys(TokenAuthority().jwks()).values())))


def test_a_pod_on_a_node_that_does_not_exist_names_the_node_without_uid(authority: TokenAuthority) -> None:
    token, _ = authority.issue_service_account_token("colocation-system", "agent", "sa-uid-9", bound_object=POD)
    assert claims_of(token)["kubernetes.io"]["node"] == {"name": "node-3"}
    user = authority.authenticate(token)
    assert user is not None
    assert user.extra["authentication.kubernetes.io/node-name"] == ("node-3",)
    assert "authentication.kubernetes.io/node-uid" not in user.extra


def test_unbound_and_unscheduled_tokens_carry_no_node(authority: TokenAuthority) -> None:
    unscheduled = {**POD, "spec": {"serviceAccountName": "agent"}}
    for bound in (None, unscheduled):
        token, _ = authority.issue_service_account_token("ns", "agent", "u", bound_object=bound)
        user = authority.authenticate(token)
        assert user is not None
        assert "authentication.kubernetes.io/node-name" not in user.extra


def test_tokens_expire(authority: TokenAuthority, clock: FakeClock) -> None:
    token, expires = authority.issue_service_account_token("ns", "agent", "u", expiration_seconds=600)
    clock.wall_now = expires - 1
    assert authority.authenticate(token) is not None
    clock.wall_now = expires
    assert authority.authenticate(token) is None
    status = authority.token_review({"token": token})
    assert status["authenticated"] is False
    assert "expired" in status["error"]


def test_bound_tokens_die_with_their_pod_and_all_tokens_with_their_service_account(
        authority: TokenAuthority) -> None:
    bound, _ = authority.issue_service_account_token("ns", "agent", "sa-1", bound_object=POD)
    unbound, _ = authority.issue_service_account_token("ns", "agent", "sa-1")
    other, _ = authority.issue_service_account_token("ns", "operator", "sa-2")
    authority.revoke_bound_to("pod-uid-1")
    assert authority.authenticate(bound) is None
    assert authority.authenticate(unbound) is not None
    authority.revoke_service_account("sa-1")
    assert authority.authenticate(unbound) is None
    assert authority.authenticate(other) is not None


def test_audiences_must_meet(authority: TokenAuthority) -> None:
    vault, _ = authority.issue_service_account_token("ns", "agent", "u", audiences=["vault"])
    assert authority.authenticate(vault) is None  # not meant for the API server
    assert authority.token_review({"token": vault, "audiences": ["vault", "other"]})["audiences"] == ["vault"]
    default, _ = authority.issue_service_account_token("ns", "agent", "u")
    assert authority.token_review({"token": default, "audiences": ["vault"]})["authenticated"] is False
    assert authority.token_review({"token": authority.admin_token, "audiences": ["vault"]})["authenticated"] \
        is False


def test_token_request_duration_limits(authority: TokenAuthority) -> None:
    with pytest.raises(ApiError) as caught:
        authority.issue_service_account_token("ns", "agent", "u", expiration_seconds=599)
    assert caught.value.code == 422
    assert "may not specify a duration less than 10 minutes" in caught.value.message


def test_static_tokens_add_users_in_system_authenticated(authority: TokenAuthority) -> None:
    authority.add_static_token("s3cret", UserInfo(username="jane", uid="42", groups=("devs",)))
    assert authority.authenticate("s3cret") == \
        UserInfo(username="jane", uid="42", groups=("devs", "system:authenticated"))
    assert authority.token_review({"token": "s3cret"})["user"] == {
        "username": "jane", "uid": "42", "groups": ["devs", "system:authenticated"]}


def test_token_review_of_garbage_reports_an_error(authority: TokenAuthority) -> None:
    assert authority.token_review({"token": "garbage"}) == {
        "authenticated": False, "user": {}, "error": "invalid bearer token"}


async def test_issuer_discovery_is_served_to_service_accounts_as_kube_apiserver_does() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from colocation_sandbox.server.api_server import ApiServer
    from colocation_sandbox.server.rbac_bootstrap import bootstrap_policy

    api = ApiServer()
    api.store.create(api.rt("", "namespaces"), {"metadata": {"name": "kube-system"}})
    for obj in bootstrap_policy():
        rt = api.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rt is not None
        api.store.create(rt, obj)
    account_token, _ = api.tokens.issue_service_account_token("colocation-system", "operator", "sa-uid")
    api.tokens.add_static_token("jane-token", UserInfo(username="jane", groups=("devs",)))
    client: TestClient[Any, Any] = TestClient(TestServer(api.application()))
    await client.start_server()
    try:
        async def get(path: str, token: str, accept: str = "application/json, application/jwk-set+json") \
                -> tuple[int, Any]:
            response = await client.get(path, headers={"Authorization": f"Bearer {token}", "Accept": accept})
            if path.endswith("/jwks") and response.status == 200:
                assert response.content_type == "application/jwk-set+json"
            return response.status, await response.json(content_type=None)

        status, discovery = await get("/.well-known/openid-configuration", account_token)
        assert status == 200
        assert discovery["issuer"] == claims_of(account_token)["iss"]
        status, jwks = await get("/openid/v1/jwks", account_token)
        assert status == 200
        jws = parse_jws(account_token)
        assert jws is not None and signature_valid(jws, public_keys(jwks)[jws.header["kid"]])
        assert (await get("/openid/v1/jwks", api.tokens.admin_token))[0] == 200
        assert (await get("/openid/v1/jwks", "jane-token"))[0] == 403  # not a ServiceAccount
        assert (await get("/openid/v1/jwks", account_token, accept="application/json"))[0] == 406  # as upstream
    finally:
        await client.close()
