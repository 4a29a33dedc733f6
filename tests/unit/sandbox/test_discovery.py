"""The sandbox's discovery: the legacy and the aggregated (apidiscovery.k8s.io/v2) forms, content
negotiation between them, the order of groups and versions, and aggregated backends' discovery."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery import certificates
from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server import api_discovery as discovery
from colocation_sandbox.server.api_aggregator import Aggregator
from colocation_sandbox.server.api_core import ApiCore
from colocation_sandbox.server.api_discovery import Served
from colocation_sandbox.server.api_server import ApiServer
from colocation_sandbox.server.builtin_controllers import Controllers
from colocation_sandbox.server.resource_types import Registry
from tests.unit.sandbox.conftest import register_things

V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
CLIENT_GO = f"{V2},{V2BETA1},application/json"  # what kubectl 1.36 sends for /api and /apis


def test_versions_sort_as_kubernetes_sorts_them() -> None:
    # The example of the Kubernetes CRD versioning documentation.
    shuffled = ["foo10", "v11alpha2", "v1", "v3beta1", "v12alpha1", "foo1", "v10beta3", "v2", "v11beta2", "v10"]
    assert sorted(shuffled, key=discovery.version_key) == [
        "v10", "v2", "v1", "v11beta2", "v10beta3", "v3beta1", "v12alpha1", "v11alpha2", "foo1", "foo10"]


@pytest.mark.parametrize(("accept", "aggregated"), [
    (V2, True),
    (CLIENT_GO, True),
    (f"application/json, {V2}", True),  # any range asking for v2 wins, wherever it is
    ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer", True),
    ("*/*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", True),
    (f"{V2BETA1},application/json", False),  # v2beta1 is no longer served: the legacy form
    ("", False),
    ("application/json", False),
    ("*/*", False),
    ("application/vnd.kubernetes.protobuf, application/json", False),
    ("application/yaml", False),
])
def test_the_accept_header_picks_the_form(accept: str, aggregated: bool) -> None:
    assert discovery.wants_aggregated(accept, aggregated_served=True) is aggregated


@pytest.mark.parametrize("accept", [V2BETA1, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscovery",
                                    "text/html", "application/json;as=Table;v=v1;g=meta.k8s.io"])
def test_nothing_acceptable_is_406(accept: str) -> None:
    with pytest.raises(ApiError) as raised:
        discovery.wants_aggregated(accept, aggregated_served=True)
    assert raised.value.code == 406 and raised.value.reason == "NotAcceptable"
    assert raised.value.message == ("only the following media types are accepted: application/json, "
                                    "application/yaml, application/vnd.kubernetes.protobuf")


def test_paths_without_the_aggregated_form_refuse_to_be_asked_for_it() -> None:
    with pytest.raises(ApiError):
        discovery.wants_aggregated(V2, aggregated_served=False)
    assert discovery.wants_aggregated(CLIENT_GO, aggregated_served=False) is False


def test_content_types_of_aggregated_answers() -> None:
    assert discovery.is_aggregated_content_type(V2)
    assert discovery.is_aggregated_content_type(V2BETA1)
    assert not discovery.is_aggregated_content_type("application/json")
    assert not discovery.is_aggregated_content_type("")


def test_resource_lists_convert_with_subresources_under_their_resource() -> None:
    listed = [
        {"name": "nodemetrics", "singularName": "nodemetric", "namespaced": False, "kind": "NodeMetric",
         "verbs": ["get", "list", "watch"], "shortNames": ["nm"]},
        {"name": "nodemetrics/status", "singularName": "", "namespaced": False, "kind": "NodeMetric",
         "verbs": ["get", "update"]},
        {"name": "pods/cpu_usage", "singularName": "", "namespaced": True, "kind": "MetricValueList",
         "verbs": ["get"]},
    ]
    assert discovery.resources_from_list(listed) == [
        {"resource": "nodemetrics", "responseKind": {"group": "", "version": "", "kind": "NodeMetric"},
         "scope": "Cluster", "singularResource": "nodemetric", "verbs": ["get", "list", "watch"],
         "shortNames": ["nm"], "subresources": [
             {"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "NodeMetric"},
              "verbs": ["get", "update"]}]},
        # A subresource whose resource is not listed gets one made up, with no kind and no verbs.
        {"resource": "pods", "responseKind": {"group": "", "version": "", "kind": ""}, "scope": "Namespaced",
         "singularResource": "", "verbs": None, "subresources": [
             {"subresource": "cpu_usage", "responseKind": {"group": "", "version": "", "kind": "MetricValueList"},
              "verbs": ["get"]}]},
    ]
    assert discovery.resources_from_list([]) == []


def test_a_subresource_in_another_scope_than_its_resource_is_refused() -> None:
    with pytest.raises(ValueError, match="scope do not match"):
        discovery.resources_from_list([{"name": "things", "namespaced": True, "kind": "Thing", "verbs": ["get"]},
                                       {"name": "things/status", "namespaced": False, "kind": "Thing",
                                        "verbs": ["get"]}])


def test_a_version_without_resources_has_no_resources_list() -> None:
    assert discovery.version_document("v1beta1", []) == {"version": "v1beta1", "freshness": "Current"}
    assert list(discovery.version_document("v1", [{"resource": "x"}], "Stale")) == [
        "version", "resources", "freshness"]


def _served(group: str, version: str, priorities: tuple[int, int], source: int = discovery.AGGREGATOR) -> Served:
    return Served(group=group, version=version, group_priority=priorities[0], version_priority=priorities[1],
                  source=source, document=discovery.version_document(version, []))


def test_groups_and_versions_are_ordered_by_priority_then_name() -> None:
    served = [*discovery.registry_served(Registry(), documents=True),
              _served("custom.metrics.k8s.io", "v1beta1", (100, 100)),
              _served("custom.metrics.k8s.io", "v1beta2", (100, 200)),
              _served("metrics.colocation.dev", "v1alpha1", (100, 100)),
              _served("aaa.example.com", "v1", (50, 10))]
    aggregated = discovery.aggregated_groups(served)
    names = [item["metadata"]["name"] for item in aggregated["items"]]
    assert names[:3] == ["apiregistration.k8s.io", "apps", "events.k8s.io"]
    # Equal group priorities go by group name; a lower priority comes later whatever its name.
    assert names[-3:] == ["custom.metrics.k8s.io", "metrics.colocation.dev", "aaa.example.com"]
    custom = next(item for item in aggregated["items"] if item["metadata"]["name"] == "custom.metrics.k8s.io")
    assert [v["version"] for v in custom["versions"]] == ["v1beta2", "v1beta1"]

    # The legacy form orders groups by APIService name ("{version}.{group}") within a priority.
    legacy = discovery.api_group_list(served)
    groups = {g["name"]: g for g in legacy["groups"]}
    assert [g["name"] for g in legacy["groups"]][-3:] == [
        "metrics.colocation.dev", "custom.metrics.k8s.io", "aaa.example.com"]
    assert groups["custom.metrics.k8s.io"]["preferredVersion"]["version"] == "v1beta2"
    assert [v["version"] for v in groups["custom.metrics.k8s.io"]["versions"]] == ["v1beta2", "v1beta1"]


def test_an_aggregated_backend_wins_over_local_types_and_undiscovered_versions_are_left_out() -> None:
    mine = {"version": "v1", "resources": [{"resource": "mine"}], "freshness": "Current"}
    served = [*discovery.registry_served(Registry(), documents=True),
              Served(group="apps", version="v1", group_priority=17800, version_priority=15, source=discovery.AGGREGATOR,
                     document=mine), Served(group="later.example.com", version="v1", group_priority=100,
                                            version_priority=100, source=discovery.AGGREGATOR, document=None)]
    items = {item["metadata"]["name"]: item for item in discovery.aggregated_groups(served)["items"]}
    assert items["apps"]["versions"] == [mine]
    assert "later.example.com" not in items
    assert "later.example.com" in [g["name"] for g in discovery.api_group_list(served)["groups"]]


# ---- served -------------------------------------------------------------------------------------

WIDGETS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"],
                       "categories": ["all"]},
             "versions": [
                 {"name": "v1beta1", "served": True, "storage": False},
                 {"name": "v1", "served": True, "storage": True,
                  "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                           "statusReplicasPath": ".status.replicas"}}}]}}


@pytest.fixture
async def served() -> AsyncIterator[tuple[ApiServer, TestClient[Any, Any]]]:
    api = ApiServer()
    Controllers(api.store)
    client: TestClient[Any, Any] = TestClient(TestServer(api.application()),
                                              headers={"Authorization": f"Bearer {api.tokens.admin_token}"})
    await client.start_server()
    yield api, client
    await client.close()


async def test_apis_answers_the_aggregated_form_with_an_etag(
        served: tuple[ApiServer, TestClient[Any, Any]]) -> None:
    _, client = served
    response = await client.get("/apis", headers={"Accept": CLIENT_GO})
    assert response.status == 200
    assert response.headers["Content-Type"] == V2
    assert response.headers["Vary"] == "Accept" and response.headers["Cache-Control"] == "public"
    etag = response.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"')
    body = await response.json(content_type=None)
    assert (body["kind"], body["apiVersion"], body["metadata"]) == (
        "APIGroupDiscoveryList", "apidiscovery.k8s.io/v2", {})
    apps = next(item for item in body["items"] if item["metadata"] == {"name": "apps"})
    deployments = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments")
    assert deployments["responseKind"] == {"group": "", "version": "", "kind": "Deployment"}
    assert deployments["scope"] == "Namespaced" and deployments["singularResource"] == "deployment"
    assert [(s["subresource"], s["responseKind"]["kind"]) for s in deployments["subresources"]] == [
        ("scale", "Scale"), ("status", "Deployment")]
    assert deployments["subresources"][0]["responseKind"] == {"group": "autoscaling", "version": "v1",
                                                              "kind": "Scale"}
    assert apps["versions"][0]["freshness"] == "Current"

    again = await client.get("/apis", headers={"Accept": V2, "If-None-Match": etag})
    assert again.status == 304 and await again.read() == b"" and again.headers["ETag"] == etag
    other = await client.get("/apis", headers={"Accept": V2, "If-None-Match": '"other"'})
    assert other.status == 200


async def test_api_answers_one_nameless_group(served: tuple[ApiServer, TestClient[Any, Any]]) -> None:
    _, client = served
    response = await client.get("/api", headers={"Accept": V2})
    body = await response.json(content_type=None)
    assert [item["metadata"] for item in body["items"]] == [{}]
    (version,) = body["items"][0]["versions"]
    pods = next(r for r in version["resources"] if r["resource"] == "pods")
    eviction = next(s for s in pods["subresources"] if s["subresource"] == "eviction")
    assert eviction["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    namespaces = next(r for r in version["resources"] if r["resource"] == "namespaces")
    assert namespaces["scope"] == "Cluster"

    legacy = await client.get("/api", headers={"Accept": f"{V2BETA1},application/json"})
    assert (await legacy.json())["kind"] == "APIVersions"
    assert "ETag" not in legacy.headers


@pytest.mark.parametrize(("path", "accept"), [("/apis", V2BETA1), ("/api", V2BETA1), ("/apis/apps", V2),
                                              ("/apis/apps/v1", V2), ("/api/v1", V2)])
async def test_unservable_accept_headers_are_406(served: tuple[ApiServer, TestClient[Any, Any]], path: str,
                                                 accept: str) -> None:
    _, client = served
    response = await client.get(path, headers={"Accept": accept})
    assert response.status == 406
    assert (await response.json())["reason"] == "NotAcceptable"


async def test_a_crd_is_announced_as_the_apiextensions_server_does(
        served: tuple[ApiServer, TestClient[Any, Any]]) -> None:
    api, client = served
    before = (await client.get("/apis", headers={"Accept": V2})).headers["ETag"]
    api.store.create(api.rt("apiextensions.k8s.io", "customresourcedefinitions"), WIDGETS_CRD)

    response = await client.get("/apis", headers={"Accept": V2, "If-None-Match": before})
    assert response.status == 200 and response.headers["ETag"] != before
    body = await response.json(content_type=None)
    names = [item["metadata"]["name"] for item in body["items"]]
    assert names.index("example.com") > names.index("discovery.k8s.io")  # CRD groups: priority 1000
    group = body["items"][names.index("example.com")]
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
    (widgets,) = group["versions"][0]["resources"]
    kind = {"group": "example.com", "version": "v1", "kind": "Widget"}
    assert widgets == {
        "resource": "widgets", "responseKind": kind, "scope": "Namespaced", "singularResource": "widget",
        "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
        "shortNames": ["wd"], "categories": ["all"], "subresources": [
            {"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]},
            {"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
             "verbs": ["get", "patch", "update"]}]}

    legacy = await (await client.get("/apis/example.com/v1")).json()
    assert [(r["name"], r["verbs"]) for r in legacy["resources"]] == [
        ("widgets", list(discovery.CUSTOM_VERBS)), ("widgets/status", ["get", "patch", "update"]),
        ("widgets/scale", ["get", "patch", "update"])]
    group_doc = await (await client.get("/apis/example.com")).json()
    assert group_doc["preferredVersion"]["version"] == "v1"


# ---- aggregated backends ------------------------------------------------------------------------

class Backend:
    """An extension server over HTTPS: legacy discovery only, or the aggregated form too."""

    def __init__(self, *, aggregated: bool) -> None:
        self.aggregated = aggregated
        self.requests: list[tuple[str, str | None]] = []
        ca = certificates.new_ca("backend-ca")
        self.cert = certificates.issue_certificate(ca, "backend", ip_addresses=("127.0.0.1",))
        self.server: TestServer
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, request.headers.get("If-None-Match")))
        resource = {"name": "things", "singularName": "thing", "namespaced": False, "kind": "Thing",
                    "verbs": ["get", "list"]}
        if request.path == "/apis" and self.aggregated:
            if request.headers.get("If-None-Match") == '"v1"':
                return web.Response(status=304)
            document = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": [
                {"metadata": {"name": "things.example.com"}, "versions": [
                    {"version": "v1", "resources": [{"resource": "things", "scope": "Cluster",
                                                     "singularResource": "thing", "verbs": ["get"],
                                                     "subresources": [{"subresource": "status",
                                                                       "verbs": ["get"]}]}]}]}]}
            return web.Response(body=orjson.dumps(document), headers={"Content-Type": V2, "ETag": '"v1"'})
        if request.path == "/apis":
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if request.path == "/apis/things.example.com/v1":
            return web.json_response({"kind": "APIResourceList", "groupVersion": "things.example.com/v1",
                                      "resources": [resource]})
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server(ssl=certificates.ssl_server_context(self.cert))
        assert self.server.port is not None
        self.port = self.server.port

    async def stop(self) -> None:
        await self.server.close()


def _touch_apiservice(api: ApiCore) -> None:
    rt = api.rt("apiregistration.k8s.io", "apiservices")
    obj = api.store.find(rt, "", "v1.things.example.com")
    assert obj is not None
    labels = {"changed": str(int((obj["metadata"].get("labels") or {}).get("changed", "0")) + 1)}
    api.store.update(rt, "", "v1.things.example.com", obj={**obj, "metadata": {**obj["metadata"], "labels": labels}})


def _apiservices(api: ApiCore) -> list[dict[str, Any]]:
    return list(api.store.objects(api.rt("apiregistration.k8s.io", "apiservices")))


def _things(aggregator: Aggregator) -> dict[str, Any] | None:
    (served,) = [s for s in aggregator.served() if s.group == "things.example.com"]
    return served.document


async def test_a_legacy_backend_is_converted_and_kept(aggregator: Aggregator) -> None:
    backend = Backend(aggregated=False)
    await backend.start()
    try:
        register_things(aggregator.api, backend.port)
        assert _things(aggregator) is None  # not asked yet: left out of the aggregated form
        await aggregator.refresh_discovery(_apiservices(aggregator.api))
        assert _things(aggregator) == {"version": "v1", "resources": [
            {"resource": "things", "responseKind": {"group": "", "version": "", "kind": "Thing"},
             "scope": "Cluster", "singularResource": "thing", "verbs": ["get", "list"]}], "freshness": "Current"}
        assert [path for path, _ in backend.requests] == ["/apis", "/apis/things.example.com/v1"]

        await aggregator.refresh_discovery(_apiservices(aggregator.api))
        assert len(backend.requests) == 2  # kept for a minute
    finally:
        await backend.stop()


async def test_an_aggregated_backend_is_read_and_revalidated_with_its_etag(aggregator: Aggregator) -> None:
    backend = Backend(aggregated=True)
    await backend.start()
    try:
        register_things(aggregator.api, backend.port)
        await aggregator.refresh_discovery(_apiservices(aggregator.api))
        empty = {"group": "", "version": "", "kind": ""}
        current = {"version": "v1", "resources": [
            {"resource": "things", "scope": "Cluster", "singularResource": "thing", "verbs": ["get"],
             "subresources": [{"subresource": "status", "verbs": ["get"], "responseKind": empty}],
             "responseKind": empty}], "freshness": "Current"}
        assert _things(aggregator) == current
        assert backend.requests == [("/apis", None)]

        # A change to the APIService has it asked again, with the ETag it answered.
        _touch_apiservice(aggregator.api)
        await aggregator.refresh_discovery(_apiservices(aggregator.api))
        assert backend.requests[-1] == ("/apis", '"v1"')
        assert _things(aggregator) == current
    finally:
        await backend.stop()


async def test_a_backend_that_does_not_answer_is_stale_with_no_resources(aggregator: Aggregator) -> None:
    backend = Backend(aggregated=False)
    await backend.start()
    register_things(aggregator.api, backend.port)
    await aggregator.refresh_discovery(_apiservices(aggregator.api))
    document = _things(aggregator)
    assert document is not None and document["freshness"] == "Current"
    await backend.stop()

    # Its APIService changes: asked again at once, the connection is refused.
    _touch_apiservice(aggregator.api)
    await aggregator.refresh_discovery(_apiservices(aggregator.api))
    assert _things(aggregator) == {"version": "v1", "freshness": "Stale"}

    # Its endpoint is no longer ready: asked again at once, and nowhere to ask.
    endpoints_rt = aggregator.api.rt("", "endpoints")
    endpoints = aggregator.api.store.find(endpoints_rt, "default", "things")
    assert endpoints is not None
    subsets = [{"notReadyAddresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": backend.port}]}]
    aggregator.api.store.update(endpoints_rt, "default", "things", obj={**endpoints, "subsets": subsets})
    await aggregator.refresh_discovery(_apiservices(aggregator.api))
    assert _things(aggregator) == {"version": "v1", "freshness": "Stale"}
    assert aggregator._discovered["v1.things.example.com"].failures == 2


async def test_a_missing_service_is_stale_and_retried_later(aggregator: Aggregator) -> None:
    api = aggregator.api
    api.store.create(api.rt("apiregistration.k8s.io", "apiservices"), {
        "metadata": {"name": "v1.things.example.com"},
        "spec": {"group": "things.example.com", "version": "v1", "groupPriorityMinimum": 100,
                 "versionPriority": 100, "caBundle": base64.b64encode(b"unused").decode(),
                 "service": {"namespace": "default", "name": "nothing", "port": 443}}})
    await aggregator.refresh_discovery(_apiservices(api))
    assert _things(aggregator) == {"version": "v1", "freshness": "Stale"}
    first = aggregator._discovered["v1.things.example.com"]
    await aggregator.refresh_discovery(_apiservices(api))
    assert aggregator._discovered["v1.things.example.com"] is first  # not due yet

    api.store.delete(api.rt("apiregistration.k8s.io", "apiservices"), "", "v1.things.example.com")
    await aggregator.refresh_discovery(_apiservices(api))
    assert aggregator._discovered == {}
