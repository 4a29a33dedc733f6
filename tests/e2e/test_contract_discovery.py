"""Discovery as kubectl 1.30+ reads it: /api and /apis in the aggregated form (apidiscovery.k8s.io/v2
APIGroupDiscoveryList), every group version's resources in one document, cached with an ETag.

A contract test: the same assertions hold against the sandbox and, with `--apiserver kube`, against
the real kube-apiserver. The first part uses the shared API-only cluster; the last starts a cluster
with the project installed (`--nodes 1`), whose aggregated APIServices kube-apiserver fetches the
discovery of and lists with their freshness, one of them (external metrics) with no resources.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from multidict import CIMultiDictProxy

from tests.e2e.conftest import Kubectl, sandbox_kind_args
from tests.e2e.kube import Kube, Widgets, start_sandbox_process
from tests.timing import eventually_async

V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
CLIENT_GO = f"{V2},{V2BETA1},application/json"  # what kubectl 1.36 asks /api and /apis with
NOT_ACCEPTABLE = ("only the following media types are accepted: application/json, application/yaml, "
                  "application/vnd.kubernetes.protobuf")
# Built-in groups both servers have, in the order kube-apiserver gives their APIServices.
BUILTIN_GROUPS = ["apiregistration.k8s.io", "apps", "events.k8s.io", "authentication.k8s.io",
                  "authorization.k8s.io", "policy", "rbac.authorization.k8s.io", "apiextensions.k8s.io",
                  "scheduling.k8s.io", "coordination.k8s.io", "discovery.k8s.io"]
CUSTOM_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


async def get(kube: Kube, path: str, accept: str, **headers: str) -> tuple[int, CIMultiDictProxy[str], Any]:
    """GET with these headers: status, response headers and the decoded body (None when empty)."""
    assert kube.session is not None
    sent = {"Accept": accept, **headers}
    if kube.token:
        sent["Authorization"] = f"Bearer {kube.token}"
    async with kube.session.get(kube.server + path, ssl=kube.ssl, headers=sent) as response:
        raw = await response.read()
        return response.status, response.headers, orjson.loads(raw) if raw else None


def groups(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["metadata"].get("name", ""): item for item in document["items"]}


def resource(group: dict[str, Any], version: str, name: str) -> dict[str, Any]:
    entry = next(v for v in group["versions"] if v["version"] == version)
    return next(r for r in entry.get("resources", ()) if r["resource"] == name)


async def aggregated(kube: Kube) -> dict[str, Any]:
    status, headers, body = await get(kube, "/apis", CLIENT_GO)
    assert status == 200, body
    assert headers["Content-Type"] == V2
    return body  # type: ignore[no-any-return]


async def test_apis_lists_every_group_version_with_its_resources(kube: Kube) -> None:
    body = await aggregated(kube)
    assert (body["kind"], body["apiVersion"]) == ("APIGroupDiscoveryList", "apidiscovery.k8s.io/v2")
    listed = groups(body)
    assert [name for name in listed if name in BUILTIN_GROUPS] == BUILTIN_GROUPS
    assert "" not in listed  # the core group is /api's
    for name in BUILTIN_GROUPS:
        assert [v["freshness"] for v in listed[name]["versions"]] == ["Current"], name

    deployments = resource(listed["apps"], "v1", "deployments")
    assert {k: deployments[k] for k in ("responseKind", "scope", "singularResource", "shortNames")} == {
        "responseKind": {"group": "", "version": "", "kind": "Deployment"}, "scope": "Namespaced",
        "singularResource": "deployment", "shortNames": ["deploy"]}
    assert set(deployments["verbs"]) == {"create", "delete", "deletecollection", "get", "list", "patch", "update",
                                         "watch"}
    assert [(s["subresource"], s["responseKind"], s["verbs"]) for s in deployments["subresources"]] == [
        ("scale", {"group": "autoscaling", "version": "v1", "kind": "Scale"}, ["get", "patch", "update"]),
        ("status", {"group": "", "version": "", "kind": "Deployment"}, ["get", "patch", "update"])]
    for group, name in (("apiregistration.k8s.io", "apiservices"),
                        ("apiextensions.k8s.io", "customresourcedefinitions")):
        assert resource(listed[group], "v1", name)["categories"] == ["api-extensions"], name
    leases = resource(listed["coordination.k8s.io"], "v1", "leases")
    assert (leases["scope"], "subresources" in leases) == ("Namespaced", False)

    # The legacy form lists the same groups in the same order.
    status, _, legacy = await get(kube, "/apis", "application/json")
    assert status == 200 and legacy["kind"] == "APIGroupList"
    assert [g["name"] for g in legacy["groups"] if g["name"] in BUILTIN_GROUPS] == BUILTIN_GROUPS


async def test_api_lists_the_core_group_without_a_name(kube: Kube) -> None:
    status, headers, body = await get(kube, "/api", CLIENT_GO)
    assert status == 200 and headers["Content-Type"] == V2
    (core,) = body["items"]
    assert core["metadata"] == {}
    assert [(v["version"], v["freshness"]) for v in core["versions"]] == [("v1", "Current")]
    pods = resource(core, "v1", "pods")
    assert (pods["scope"], pods["responseKind"]["kind"], pods["categories"]) == ("Namespaced", "Pod", ["all"])
    eviction = next(s for s in pods["subresources"] if s["subresource"] == "eviction")
    assert (eviction["responseKind"], eviction["verbs"]) == (
        {"group": "policy", "version": "v1", "kind": "Eviction"}, ["create"])
    namespaces = resource(core, "v1", "namespaces")
    assert namespaces["scope"] == "Cluster" and "deletecollection" not in namespaces["verbs"]
    assert next(s for s in namespaces["subresources"] if s["subresource"] == "finalize")["verbs"] == ["update"]


@pytest.mark.parametrize("path", ["/apis", "/api"])
async def test_the_document_carries_an_etag_and_is_not_sent_again(kube: Kube, path: str) -> None:
    status, headers, _ = await get(kube, path, V2)
    etag = headers["ETag"]
    assert status == 200 and etag.startswith('"') and etag.endswith('"')
    assert (headers["Vary"], headers["Cache-Control"]) == ("Accept", "public")

    status, again, body = await get(kube, path, V2, **{"If-None-Match": etag})
    assert (status, body, again["ETag"]) == (304, None, etag)
    status, _, body = await get(kube, path, V2, **{"If-None-Match": '"0000"'})
    assert status == 200 and body["kind"] == "APIGroupDiscoveryList"

    status, legacy, _ = await get(kube, path, "application/json")
    assert status == 200 and "ETag" not in legacy


async def test_only_v2_is_served_and_only_at_api_and_apis(kube: Kube) -> None:
    status, _, body = await get(kube, "/apis", V2BETA1)
    assert (status, body["reason"], body["message"]) == (406, "NotAcceptable", NOT_ACCEPTABLE)
    status, headers, body = await get(kube, "/apis", f"{V2BETA1},application/json")
    assert (status, body["kind"]) == (200, "APIGroupList")
    assert headers["Content-Type"].startswith("application/json") and "g=" not in headers["Content-Type"]
    for path in ("/apis/apps", "/apis/apps/v1", "/api/v1"):
        status, _, body = await get(kube, path, V2)
        assert (status, body["reason"]) == (406, "NotAcceptable"), path
        status, _, body = await get(kube, path, CLIENT_GO)
        assert status == 200 and body["kind"] in ("APIGroup", "APIResourceList"), path


async def test_a_crd_is_listed_with_its_verbs_scope_and_subresources(kube: Kube, widgets: Widgets) -> None:
    async def listed() -> dict[str, Any] | None:
        return groups(await aggregated(kube)).get(widgets.group)

    group = await eventually_async(listed, timeout=30)
    assert [(v["version"], v["freshness"]) for v in group["versions"]] == [("v1", "Current")]
    kind = {"group": widgets.group, "version": "v1", "kind": "Widget"}
    assert resource(group, "v1", "widgets") == {
        "resource": "widgets", "responseKind": kind, "scope": "Namespaced", "singularResource": "widget",
        "verbs": CUSTOM_VERBS, "subresources": [
            {"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]},
            {"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
             "verbs": ["get", "patch", "update"]}]}
    names = list(groups(await aggregated(kube)))
    assert names.index(widgets.group) > names.index("discovery.k8s.io")  # CRD groups come after built-ins

    status, _, legacy = await get(kube, f"/apis/{widgets.group}/v1", "application/json")
    assert status == 200
    assert [(r["name"], r["verbs"]) for r in legacy["resources"]] == [
        ("widgets", CUSTOM_VERBS), ("widgets/status", ["get", "patch", "update"]),
        ("widgets/scale", ["get", "patch", "update"])]


async def test_an_apiservice_whose_backend_does_not_answer_is_stale(
        kube: Kube, cluster_cleanup: list[str], kubectl: Kubectl) -> None:
    group = f"e2e-{uuid.uuid4().hex[:8]}.example.com"
    path = f"/apis/apiregistration.k8s.io/v1/apiservices/v1.{group}"
    status, body = await kube.request("POST", "/apis/apiregistration.k8s.io/v1/apiservices", {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": f"v1.{group}"},
        "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 50, "versionPriority": 10,
                 "insecureSkipTLSVerify": True, "service": {"namespace": "default", "name": "nothing-here"}}})
    assert status == 201, body
    cluster_cleanup.append(path)

    async def listed() -> dict[str, Any] | None:
        return groups(await aggregated(kube)).get(group)

    entry = await eventually_async(listed, timeout=30)
    assert entry["versions"] == [{"version": "v1", "freshness": "Stale"}]
    assert list(groups(await aggregated(kube)))[-1] == group  # the lowest group priority
    status, legacy = await kube.request("GET", "/apis")
    assert group in [g["name"] for g in legacy["groups"]]
    # kubectl skips a stale group version and lists everything else.
    result = kubectl.run("api-resources")
    assert "deployments" in result.stdout


# ---- with the project installed ------------------------------------------------------------------

@pytest.fixture(scope="module")
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("discovery-project")
    with start_sandbox_process(state, [*sandbox_kind_args(request.config), "--nodes", "1"]) as kubeconfig:
        yield kubeconfig


@pytest.mark.timeout(300)
async def test_the_project_apis_are_listed_and_kubectl_reads_them(project: Path, kubectl: Kubectl) -> None:
    async with Kube.from_kubeconfig(project) as kube:
        async def current() -> dict[str, dict[str, Any]] | None:
            listed = groups(await aggregated(kube))
            versions = [v for name in ("metrics.colocation.dev", "custom.metrics.k8s.io", "external.metrics.k8s.io",
                                       "metrics.k8s.io")  # the sandbox serves resource metrics by default
                        for v in listed.get(name, {}).get("versions", [{"freshness": "missing"}])]
            return listed if all(v["freshness"] == "Current" for v in versions) else None

        listed = await eventually_async(current, timeout=180, interval=0.5)
    # An aggregated version with no resources is there, with no resources list.
    assert listed["external.metrics.k8s.io"]["versions"] == [{"version": "v1beta1", "freshness": "Current"}]
    assert [v["version"] for v in listed["custom.metrics.k8s.io"]["versions"]] == ["v1beta2", "v1beta1"]
    nodemetrics = resource(listed["metrics.colocation.dev"], "v1alpha1", "nodemetrics")
    assert (nodemetrics["scope"], nodemetrics["verbs"], nodemetrics["shortNames"]) == (
        "Cluster", ["get", "list", "watch"], ["nm"])
    assert nodemetrics["subresources"] == [{"subresource": "status", "responseKind": {
        "group": "", "version": "", "kind": "NodeMetric"}, "verbs": ["get", "update"]}]
    noderesources = resource(listed["slo.colocation.dev"], "v1alpha1", "noderesources")
    assert (noderesources["scope"], noderesources["verbs"]) == ("Cluster", CUSTOM_VERBS)
    names = list(listed)
    # CRD groups (priority 1000) before the project's APIServices (100), those by name.
    assert names.index("slo.colocation.dev") < names.index("custom.metrics.k8s.io") < names.index(
        "external.metrics.k8s.io") < names.index("metrics.colocation.dev")

    project_kubectl = Kubectl(kubectl.binary, project, kubectl.cache_dir)
    result = project_kubectl.run("api-resources")  # exit 0: no "unable to retrieve the complete list"
    assert "nodemetrics" in result.stdout and "noderesources" in result.stdout
    assert "unable to retrieve" not in result.stderr
