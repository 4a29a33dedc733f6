"""The pod webhook over HTTP: AdmissionReview v1 in and out, from the profiles its informers follow."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.pod_mutation_webhook import WEBHOOK_PATH, PodMutationWebhook, ProfileCache
from colocation.koordinator.colocation_profile import parse_profile
from colocation.kube.informer import Response

PROFILE_SPEC = {"namespaceSelector": {"matchLabels": {"colocation": "on"}}, "qosClass": "BE",
                "priorityClassName": "koord-batch", "schedulerName": "koord-scheduler"}
PROFILE = {"metadata": {"name": "batch"}, "spec": PROFILE_SPEC}
LISTS: dict[str, list[dict[str, Any]]] = {
    "/apis/slo.colocation.dev/v1alpha1/clustercolocationprofiles": [PROFILE],
    "/api/v1/namespaces": [{"metadata": {"name": "team-a", "labels": {"colocation": "on"}}},
                           {"metadata": {"name": "team-b"}}],
    "/apis/scheduling.k8s.io/v1/priorityclasses": [{"metadata": {"name": "koord-batch"}, "value": 5500}],
}


class _Listed:
    def __init__(self, path: str) -> None:
        self.status = 200
        self.path = path

    async def read(self) -> bytes:
        return orjson.dumps({"metadata": {"resourceVersion": "1"}, "items": LISTS[self.path]})

    async def lines(self) -> AsyncIterator[bytes]:
        return
        yield b""


@contextlib.asynccontextmanager
async def list_once(path: str, params: dict[str, str], stream: bool) -> AsyncIterator[Response]:
    yield _Listed(path)


async def synced_cache() -> ProfileCache:
    cache = ProfileCache()
    for informer in cache.informers(list_once):
        await informer._list()  # the informer's first list, without its watch loop
    assert cache.synced
    return cache


async def nobody(token: str) -> TokenReviewResult:
    return TokenReviewResult(False, None)


async def refuse(spec: SubjectAccessSpec) -> bool:
    return False


class Leader:
    is_leader = True
    leader_identity = "operator-0"
    leader_endpoint = ""


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    webhook = PodMutationWebhook(await synced_cache(), CollectorRegistry())
    server = AggregatedApiServer(DelegatingAuthenticator(nobody), DelegatingAuthorizer(refuse), lambda: None,
                                 leadership=Leader(), metrics=ServerMetrics(), groups=[webhook])
    async with TestClient(TestServer(server.application())) as test_client:
        yield test_client


def review(namespace: str = "team-a", operation: str = "CREATE", **request: Any) -> dict[str, Any]:
    pod = {"metadata": {"generateName": "etl-", "namespace": namespace},
           "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "operation": operation, "namespace": namespace, "object": pod,
        "resource": {"group": "", "version": "v1", "resource": "pods"}, **request}}


async def post(client: TestClient[Any, Any], body: Any) -> tuple[int, dict[str, Any]]:
    response = await client.post(WEBHOOK_PATH, data=orjson.dumps(body) if not isinstance(body, bytes) else body)
    return response.status, await response.json()


async def test_a_pod_in_a_picked_namespace_gets_the_profiles_patch(client: TestClient[Any, Any]) -> None:
    status, body = await post(client, review())
    assert status == 200
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response = body["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == ("u-1", True, "JSONPatch")
    patch = {op["path"]: op.get("value") for op in orjson.loads(base64.b64decode(response["patch"]))}
    assert patch["/metadata/labels"] == {"koordinator.sh/qosClass": "BE"}
    assert (patch["/spec/priorityClassName"], patch["/spec/priority"], patch["/spec/schedulerName"]) == (
        "koord-batch", 5500, "koord-scheduler")
    assert patch["/spec/containers"][0]["resources"]["requests"] == {
        "kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "1Gi"}


@pytest.mark.parametrize("request_change", [
    {"namespace": "team-b"},  # the profile's namespaceSelector does not pick it
    {"operation": "UPDATE"},  # profiles apply at creation only
    {"subResource": "status"},
    {"resource": {"group": "apps", "version": "v1", "resource": "deployments"}},
])
async def test_what_no_profile_applies_to_is_allowed_unchanged(client: TestClient[Any, Any],
                                                               request_change: dict[str, Any]) -> None:
    body = review()
    body["request"] |= request_change
    status, answer = await post(client, body)
    assert status == 200
    assert answer["response"] == {"uid": "u-1", "allowed": True}


async def test_a_pod_naming_an_unknown_namespace_is_allowed_with_a_warning(client: TestClient[Any, Any]) -> None:
    status, answer = await post(client, review(namespace="created-a-moment-ago"))
    assert status == 200
    assert answer["response"]["allowed"] is True
    assert answer["response"]["warnings"] == [
        "namespace 'created-a-moment-ago' is not known to this replica yet: its labels taken as none"]


async def test_a_review_without_a_pod_is_allowed_with_a_warning(client: TestClient[Any, Any]) -> None:
    body = review()
    body["request"]["object"] = "not a pod"
    status, answer = await post(client, body)
    assert (status, answer["response"]["allowed"]) == (200, True)
    assert answer["response"]["warnings"] == ["ClusterColocationProfiles not applied: the request holds no pod object"]


async def test_a_profile_naming_a_missing_priority_class_denies_the_pod_saying_why() -> None:
    cache = await synced_cache()
    cache.priority_classes.clear()
    webhook = PodMutationWebhook(cache, CollectorRegistry())
    response = webhook.answer(review())["response"]
    assert (response["allowed"], response["status"]["code"]) == (False, 403)
    assert "no PriorityClass of that name exists" in response["status"]["message"]


async def test_a_profile_part_left_out_is_named_in_a_warning_and_counted() -> None:
    cache = await synced_cache()
    spec = {**PROFILE_SPEC, "labelSuffixes": {"app": "-"}, "patch": {"spec": {"hostNetwork": True}}}
    cache.profiles["batch"] = parse_profile({"metadata": {"name": "batch"}, "spec": spec})
    webhook = PodMutationWebhook(cache, registry := CollectorRegistry())
    body = review()
    body["request"]["object"]["metadata"]["labels"] = {"app": "etl"}
    response = webhook.answer(body)["response"]
    assert response["allowed"] is True
    assert [warning.split(":")[0] for warning in response["warnings"]] == [
        "ClusterColocationProfile 'batch'", "metadata.labels 'app' left as sent"]
    assert "patch.spec.hostNetwork: not supported" in response["warnings"][0]
    patch = {op["path"]: op.get("value") for op in orjson.loads(base64.b64decode(response["patch"]))}
    assert patch["/metadata/labels"] == {"app": "etl", "koordinator.sh/qosClass": "BE"}
    assert registry.get_sample_value("colocation_pod_webhook_left_out_total") == 2


async def test_before_its_informers_listed_a_replica_allows_pods_unchanged_with_a_warning() -> None:
    webhook = PodMutationWebhook(ProfileCache(), CollectorRegistry())
    response = webhook.answer(review())["response"]
    assert response == {"uid": "u-1", "allowed": True, "warnings": [
        "ClusterColocationProfiles not applied: this replica has not listed the ClusterColocationProfiles yet"]}


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "the body is not JSON"),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}},
     "expected an AdmissionReview of admission.k8s.io/v1 with a request"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
     "the AdmissionReview's request has no uid"),
])
async def test_a_body_that_is_no_admission_review_gets_a_400_status(client: TestClient[Any, Any], body: Any,
                                                                   message: str) -> None:
    status, answer = await post(client, body)
    assert status == 400
    assert answer["kind"] == "Status" and message in answer["message"]


async def test_an_invalid_profile_is_left_out_and_the_others_apply() -> None:
    cache = ProfileCache()
    profiles = cache.informers(list_once)[0]
    await profiles._list()
    await profiles.on_event("ADDED", {"metadata": {"name": "a-bad"}, "spec": {"qosClass": "GOLD"}})
    assert set(cache.profiles) == {"batch"}
    await profiles.on_event("DELETED", PROFILE)
    assert cache.profiles == {}


class _Missing:
    status = 404

    async def read(self) -> bytes:
        return b'{"kind":"Status","code":404}'

    async def lines(self) -> AsyncIterator[bytes]:
        return
        yield b""


@contextlib.asynccontextmanager
async def crd_not_installed(path: str, params: dict[str, str], stream: bool) -> AsyncIterator[Response]:
    yield _Missing() if "clustercolocationprofiles" in path else _Listed(path)


async def test_metrics_count_informer_failures_and_the_profiles_applied() -> None:
    registry = CollectorRegistry()
    webhook = PodMutationWebhook(ProfileCache(), registry)
    informer = webhook.informers(crd_not_installed)[0]
    counted, failed = informer.on_error, asyncio.Event()
    assert counted is not None

    def on_error(reason: str) -> None:
        counted(reason)
        failed.set()

    informer.on_error = on_error
    failing = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(failed.wait(), 5)
    finally:
        failing.cancel()
    assert registry.get_sample_value("colocation_pod_webhook_informer_failures_total",
                                     {"informer": "clustercolocationprofiles", "reason": "http-404"}) == 1
    assert not webhook.cache.synced
    listed = PodMutationWebhook(await synced_cache(), registry := CollectorRegistry())
    assert listed.cache.synced and registry.get_sample_value("colocation_pod_webhook_profiles") == 1
