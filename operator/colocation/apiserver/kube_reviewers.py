"""The kube-apiserver backends of delegated authentication and authorization, via kubernetes-asyncio.

TokenReview, SubjectAccessReview, the front-proxy ConfigMap and the ServiceAccount issuer's
discovery document and keys: each one attempt bounded by a timeout, a failure raised as
ReviewFailed worded for clients (its cause keeps the details for the log).
Reviews are sent and read as plain JSON (`call_json`), not as generated model objects.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client as kube

from colocation.apimachinery.served_apigroups import Caller
from colocation.apiserver.delegated_authentication import (
    RequestHeaderConfig,
    ReviewFailed,
    TokenReviewer,
    TokenReviewResult,
)
from colocation.apiserver.delegated_authorization import SubjectAccessReviewer, SubjectAccessSpec
from colocation.apiserver.local_token_authentication import FetchIssuer, IssuerDocument
from colocation.kube.client import call_json
from colocation.kube.permissions import (
    AUTHENTICATION_CONFIG_MAP,
    AUTHENTICATION_CONFIG_NAMESPACE,
    OPERATOR_API_CALLS,
    OPERATOR_NON_RESOURCE_CALLS,
    ApiCall,
    NonResourceCall,
    declared,
)

REVIEW_TIMEOUT = 3.0
JWKS_MEDIA_TYPE = "application/jwk-set+json"

# Looked up at import, so the RBAC test in tests/unit/test_manifests.py covers these calls.
_TOKEN_REVIEW = declared(OPERATOR_API_CALLS,
                         ApiCall(group="authentication.k8s.io", resource="tokenreviews", verb="create", namespace=None))
_SUBJECT_ACCESS_REVIEW = declared(
    OPERATOR_API_CALLS,
    ApiCall(group="authorization.k8s.io", resource="subjectaccessreviews", verb="create", namespace=None))
_READ_AUTHENTICATION_CONFIG = declared(OPERATOR_API_CALLS, ApiCall(
    group="", resource="configmaps", verb="get", namespace=AUTHENTICATION_CONFIG_NAMESPACE,
    name=AUTHENTICATION_CONFIG_MAP))
_ISSUER_DISCOVERY = declared(OPERATOR_NON_RESOURCE_CALLS, NonResourceCall("/.well-known/openid-configuration"))
_ISSUER_KEYS = declared(OPERATOR_NON_RESOURCE_CALLS, NonResourceCall("/openid/v1/jwks"))

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
    # Cached for every node's token at a leader's start: what the agents' users share is one string.
    caller = Caller(username=sys.intern(str(user.get("username") or "")), uid=sys.intern(str(user.get("uid") or "")),
                    groups=tuple(sys.intern(str(group)) for group in user.get("groups") or ()),
                    extra={sys.intern(str(key)): tuple(values or ()) for key,
                           values in (user.get("extra") or {}).items()})
    if not caller.username:
        return TokenReviewResult(False, None, "the token review named no user")
    return TokenReviewResult(True, caller)


async def _create_review(create: Any, body: dict[str, Any], kind: str, *, timeout: float) -> Mapping[str, Any]:
    """POST a review as plain JSON and return its status: the generated models would build and
    sanitize an object tree for every review, which is most of a review's cost on the leader."""
    try:
        code, answer = await call_json(create, body, timeout=timeout)
    except _TRANSPORT_ERRORS as error:
        raise ReviewFailed(f"{kind}: {_describe(error, timeout)}") from error
    if code != 201 and code != 200:
        reason = answer.get("reason") if isinstance(answer, dict) else None
        raise ReviewFailed(f"{kind}: kube-apiserver answered {code} {reason or ''}".rstrip())
    return (answer.get("status") if isinstance(answer, dict) else None) or {}


def kube_token_reviewer(api_client: Any, *, audiences: Iterable[str] = (),
                        timeout: float = REVIEW_TIMEOUT) -> TokenReviewer:
    """TokenReviews through kube-apiserver: one attempt per review, bounded by `timeout`."""
    create = kube.AuthenticationV1Api(api_client).create_token_review
    wanted = tuple(audiences)

    async def review(token: str) -> TokenReviewResult:
        spec: dict[str, Any] = {"token": token, **({"audiences": list(wanted)} if wanted else {})}
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        return token_review_result(await _create_review(create, body, "TokenReview", timeout=timeout), wanted)

    return review


def subject_access_review_body(spec: SubjectAccessSpec) -> dict[str, Any]:
    """The SubjectAccessReview kube-apiserver's webhook authorizer would send for `spec`."""
    if spec.path:
        attributes: dict[str, Any] = {"nonResourceAttributes": {"path": spec.path, "verb": spec.verb}}
    else:
        resource = {"verb": spec.verb, "group": spec.api_group, "resource": spec.resource,
                    "subresource": spec.subresource, "name": spec.name, "namespace": spec.namespace}
        attributes = {"resourceAttributes": {key: value for key, value in resource.items()
                                             if value or key in ("verb", "group", "resource")}}
    review: dict[str, Any] = {"user": spec.user, "groups": list(spec.groups), **attributes}
    if spec.uid:
        review["uid"] = spec.uid
    if spec.extra:
        review["extra"] = {key: list(values) for key, values in spec.extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": review}


def kube_subject_access_reviewer(api_client: Any, *, timeout: float = REVIEW_TIMEOUT) -> SubjectAccessReviewer:
    """SubjectAccessReviews through kube-apiserver: one attempt per review, bounded by `timeout`."""
    create = kube.AuthorizationV1Api(api_client).create_subject_access_review

    async def review(spec: SubjectAccessSpec) -> bool | tuple[bool, str]:
        status = await _create_review(create, subject_access_review_body(spec), "SubjectAccessReview", timeout=timeout)
        return bool(status.get("allowed")), str(status.get("reason") or "")

    return review


async def load_request_header_config(api_client: Any, *, timeout: float = REVIEW_TIMEOUT) -> RequestHeaderConfig:
    """Read kube-system/extension-apiserver-authentication (one attempt; the caller retries)."""
    call = _READ_AUTHENTICATION_CONFIG
    async with asyncio.timeout(timeout):
        configmap = await kube.CoreV1Api(api_client).read_namespaced_config_map(
            call.name, AUTHENTICATION_CONFIG_NAMESPACE, _request_timeout=timeout)
    return RequestHeaderConfig.from_configmap(configmap.data or {})


def kube_issuer_fetcher(api_client: Any, *, timeout: float = REVIEW_TIMEOUT) -> FetchIssuer:
    """The issuer (its discovery document) and signing keys of kube-apiserver's ServiceAccount
    tokens, each GET bounded by `timeout`. The keys are read from kube-apiserver's own
    /openid/v1/jwks, not from the document's jwks_uri: that names the issuer's public address,
    which the operator may not reach (and which serves the same keys)."""

    async def get(call: NonResourceCall, accept: str) -> Any:
        try:
            code, answer = await call_json(api_client.call_api, call.path, call.verb.upper(),
                                           header_params={"Accept": accept},
                                           auth_settings=["BearerToken"], timeout=timeout)
        except _TRANSPORT_ERRORS as error:
            raise ReviewFailed(f"GET {call.path}: {_describe(error, timeout)}") from error
        if code != 200 or not isinstance(answer, dict):
            raise ReviewFailed(f"GET {call.path}: kube-apiserver answered {code}")
        return answer

    async def fetch() -> IssuerDocument:
        discovery = await get(_ISSUER_DISCOVERY, "application/json")
        issuer = discovery.get("issuer")
        if not isinstance(issuer, str) or not issuer:
            raise ReviewFailed(f"GET {_ISSUER_DISCOVERY.path}: no issuer")
        # kube-apiserver answers 406 unless the key set's own media type is acceptable.
        return IssuerDocument(issuer, await get(_ISSUER_KEYS, f"{JWKS_MEDIA_TYPE}, application/json"))

    return fetch
