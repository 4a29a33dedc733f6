"""OpenAPI documents that let kubectl hand validation to the server (`?fieldValidation=Strict`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from colocation_sandbox.server.openapi_documents import (
    definition_name,
    group_version_path,
    openapi_v2,
    openapi_v3_group_version,
    openapi_v3_root,
)
from colocation_sandbox.server.resource_types import Registry, ResourceType

NODESLO_SCHEMA = {
    "type": "object",
    "properties": {"spec": {"type": "object", "properties": {"enable": {"type": "boolean"}}}},
}
NODESLO = ResourceType(
    group="slo.colocation.dev",
    version="v1alpha1",
    resource="nodeslos",
    kind="NodeSLO",
    namespaced=False,
    schema=NODESLO_SCHEMA,
    subresources=frozenset({"status"}),
    strategic=False,
)


def kubectl_finds_field_validation(doc: dict[str, Any], group: str, version: str, kind: str) -> bool:
    """kubectl's check (cli-runtime queryParamVerifierV3): the first PATCH operation tagged with the
    kind decides, by whether its parameters name fieldValidation."""
    for item in doc["paths"].values():
        operation = item.get("patch")
        if operation is None:
            continue
        if operation.get("x-kubernetes-group-version-kind") != {
            "group": group,
            "version": version,
            "kind": kind,
        }:
            continue
        return any(p.get("name") == "fieldValidation" for p in operation["parameters"])
    return False


@pytest.fixture
def registry() -> Registry:
    registry = Registry()
    registry.add(NODESLO)
    return registry


def test_root_indexes_every_group_version_with_a_content_hash(registry: Registry) -> None:
    root = openapi_v3_root(registry)
    expected = {group_version_path(rt.group, rt.version) for rt in registry}
    assert set(root["paths"]) == expected
    assert "api/v1" in expected and "apis/slo.colocation.dev/v1alpha1" in expected
    for key, entry in root["paths"].items():
        url = urlsplit(entry["serverRelativeURL"])
        assert url.path == f"/openapi/v3/{key}"
        assert len(parse_qs(url.query)["hash"][0]) == 128


def test_hash_changes_when_a_group_version_changes(registry: Registry) -> None:
    before = openapi_v3_root(registry)["paths"]
    registry.add(
        ResourceType(
            group="slo.colocation.dev",
            version="v1alpha1",
            resource="noderesources",
            kind="NodeResource",
            namespaced=False,
            schema={"type": "object"},
            strategic=False,
        )
    )
    after = openapi_v3_root(registry)["paths"]
    key = "apis/slo.colocation.dev/v1alpha1"
    assert before[key] != after[key]
    assert before["api/v1"] == after["api/v1"]  # other documents stay cached


def test_every_patchable_resource_offers_field_validation(registry: Registry) -> None:
    for rt in registry:
        doc = openapi_v3_group_version(registry, rt.group, rt.version)
        assert doc is not None and doc["openapi"].startswith("3.")
        if "patch" in rt.verbs:
            assert kubectl_finds_field_validation(doc, rt.group, rt.version, rt.kind), rt.group_resource
        # Every write names its kind, subresources included, and accepts fieldValidation.
        for path, item in doc["paths"].items():
            for method in ("post", "put", "patch"):
                if method in item:
                    names = [p["name"] for p in item[method]["parameters"]]
                    assert "fieldValidation" in names, (path, method)


def test_patch_bodies_never_offer_strategic_merge(registry: Registry) -> None:
    # Offering it would make kubectl compute apply patches from these permissive schemas.
    for group, version in {(rt.group, rt.version) for rt in registry}:
        doc = openapi_v3_group_version(registry, group, version)
        assert doc is not None
        for item in doc["paths"].values():
            if "patch" in item:
                content = item["patch"]["requestBody"]["content"]
                assert "application/strategic-merge-patch+json" not in content
                assert "application/merge-patch+json" in content


def test_paths_follow_the_api_layout(registry: Registry) -> None:
    apps = openapi_v3_group_version(registry, "apps", "v1")
    assert apps is not None
    item = apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]
    assert set(item) >= {"get", "put", "patch", "delete", "parameters"}
    assert item["patch"]["operationId"] == "patchAppsV1NamespacedDeployment"
    scale = apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"]
    assert scale["x-kubernetes-group-version-kind"] == {
        "group": "autoscaling",
        "version": "v1",
        "kind": "Scale",
    }
    assert "/apis/apps/v1/deployments" in apps["paths"]  # list across namespaces
    core = openapi_v3_group_version(registry, "", "v1")
    assert core is not None
    assert "patch" in core["paths"]["/api/v1/nodes/{name}"]
    eviction = core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]
    assert set(eviction) == {"post", "parameters"}
    assert eviction["post"]["x-kubernetes-group-version-kind"]["kind"] == "Eviction"


def test_schemas_carry_their_kind(registry: Registry) -> None:
    doc = openapi_v3_group_version(registry, "slo.colocation.dev", "v1alpha1")
    assert doc is not None
    schemas = doc["components"]["schemas"]
    nodeslo = schemas["dev.colocation.slo.v1alpha1.NodeSLO"]
    assert nodeslo["properties"] == NODESLO_SCHEMA["properties"]  # the CRD's own schema
    assert nodeslo["x-kubernetes-group-version-kind"] == [
        {"group": "slo.colocation.dev", "version": "v1alpha1", "kind": "NodeSLO"}
    ]
    assert "x-kubernetes-group-version-kind" not in NODESLO_SCHEMA  # the registry's copy is untouched
    core = openapi_v3_group_version(registry, "", "v1")
    assert core is not None
    pod = core["components"]["schemas"]["io.k8s.api.core.v1.Pod"]
    assert pod["type"] == "object" and pod["x-kubernetes-preserve-unknown-fields"] is True
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "version": "v1", "kind": "Pod"}]


@pytest.mark.parametrize(
    ("gvk", "name"),
    [
        (("", "v1", "Pod"), "io.k8s.api.core.v1.Pod"),
        (("apps", "v1", "Deployment"), "io.k8s.api.apps.v1.Deployment"),
        (("rbac.authorization.k8s.io", "v1", "Role"), "io.k8s.api.rbac.v1.Role"),
        (
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
        ),
        (
            ("apiregistration.k8s.io", "v1", "APIService"),
            "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService",
        ),
        (("slo.colocation.dev", "v1alpha1", "NodeSLO"), "dev.colocation.slo.v1alpha1.NodeSLO"),
    ],
)
def test_definition_names_match_upstream(gvk: tuple[str, str, str], name: str) -> None:
    assert definition_name(*gvk) == name


def test_unknown_group_version_has_no_document(registry: Registry) -> None:
    assert openapi_v3_group_version(registry, "example.com", "v1") is None


def test_swagger_v2_covers_every_resource(registry: Registry) -> None:
    doc = openapi_v2(registry)
    assert doc["swagger"] == "2.0"
    for rt in registry:
        definition = doc["definitions"][definition_name(rt.group, rt.version, rt.kind)]
        assert {"group": rt.group, "version": rt.version, "kind": rt.kind} in definition[
            "x-kubernetes-group-version-kind"
        ]
        if "patch" in rt.verbs:
            assert kubectl_finds_field_validation(doc, rt.group, rt.version, rt.kind), rt.group_resource
    patch = doc["paths"]["/apis/slo.colocation.dev/v1alpha1/nodeslos/{name}"]["patch"]
    assert patch["consumes"] == [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ]
    assert patch["parameters"][0]["in"] == "body"
    assert all("schema" not in p for p in patch["parameters"][1:])
