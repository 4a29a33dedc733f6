"""Contract: CustomResourceDefinitions (discovery, conditions, validation, pruning, tables, removal)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.kube import Kube, Widgets, condition, create, get, is_gone
from tests.timing import eventually_async

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


async def test_an_established_crd_is_served_and_discoverable(kube: Kube, widgets: Widgets) -> None:
    crd = await get(kube, f"{CRDS}/{widgets.crd_name}")
    assert condition(crd, "Established") == "True"
    assert condition(crd, "NamesAccepted") == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "Widget"
    assert crd["status"]["storedVersions"] == ["v1"]

    resources = await get(kube, f"/apis/{widgets.group}/v1")
    assert resources["kind"] == "APIResourceList"
    assert resources["groupVersion"] == widgets.api_version
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["widgets"]["kind"] == "Widget"
    assert by_name["widgets"]["namespaced"] is True
    assert {"create", "get", "list", "watch", "patch", "update", "delete"} <= set(by_name["widgets"]["verbs"])
    assert {"widgets/status", "widgets/scale"} <= set(by_name)

    groups = await get(kube, "/apis")
    assert widgets.group in [g["name"] for g in groups["groups"]]


async def test_custom_objects_round_trip(kube: Kube, namespace: str, widgets: Widgets) -> None:
    created = await create(kube, widgets.path(namespace),
                           widgets.body("w", {"image": "nginx", "replicas": 2, "mode": "safe"}))
    assert (created["apiVersion"], created["kind"]) == (widgets.api_version, "Widget")
    assert created["metadata"]["generation"] == 1
    listed = await get(kube, widgets.path(namespace))
    assert listed["kind"] == "WidgetList"
    assert [item["spec"] for item in listed["items"]] == [{"image": "nginx", "replicas": 2, "mode": "safe"}]


async def test_update_of_a_custom_object_needs_a_resource_version(kube: Kube, namespace: str,
                                                                  widgets: Widgets) -> None:
    created = await create(kube, widgets.path(namespace), widgets.body("w"))
    del created["metadata"]["resourceVersion"]
    status, body = await kube.request("PUT", widgets.path(namespace, "w"), created)
    assert (status, body["reason"]) == (422, "Invalid")
    assert [cause["field"] for cause in body["details"]["causes"]] == ["metadata.resourceVersion"]


# spec.replicas is also the scale subresource's specReplicasPath: apiextensions checks that it reads
# as a non-negative int64 after the schema did, and reports at the path as the CRD spells it.
@pytest.mark.parametrize(("spec", "fields"), [
    ({"image": "nginx", "replicas": "two"}, ["spec.replicas", ".spec.replicas"]),  # type
    ({"replicas": 1}, ["spec.image"]),  # required
    ({"image": "nginx", "mode": "reckless"}, ["spec.mode"]),  # enum
    ({"image": "nginx", "replicas": -1}, ["spec.replicas", ".spec.replicas"]),  # minimum
    ({"image": "nginx", "replicas": 11}, ["spec.replicas"]),  # maximum
    ({"image": "NGINX!"}, ["spec.image"]),  # pattern
])
async def test_schema_violations_are_invalid_with_the_field_path(kube: Kube, namespace: str, widgets: Widgets,
                                                                 spec: dict[str, Any], fields: list[str]) -> None:
    status, body = await kube.request("POST", widgets.path(namespace), widgets.body("bad", spec))
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["kind"] == "Widget"
    assert body["details"]["group"] == widgets.group
    assert [cause["field"] for cause in body["details"]["causes"]] == fields
    assert await is_gone(kube, widgets.path(namespace, "bad"))


async def test_scale_replicas_paths_are_checked_after_the_schema(kube: Kube, namespace: str,
                                                                 widgets: Widgets) -> None:
    status, body = await kube.request("POST", widgets.path(namespace),
                                      widgets.body("bad", {"image": "nginx", "replicas": "two"}))
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][1] == {
        "reason": "FieldValueInvalid", "field": ".spec.replicas",
        "message": "Invalid value: 0: .spec.replicas accessor error: two is of the type string, expected int64"}
    assert body["message"].startswith(f'Widget.{widgets.group} "bad" is invalid: [spec.replicas: ')

    await create(kube, widgets.path(namespace), widgets.body("w"))
    status, body = await kube.request("PATCH", widgets.path(namespace, "w") + "/status", {"status": {"ready": -3}},
                                      content_type="application/merge-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": ".status.ready",
                                          "message": "Invalid value: -3: should be a non-negative integer"}]


async def test_status_writes_are_checked_against_the_status_schema_alone(kube: Kube, namespace: str,
                                                                          widgets: Widgets) -> None:
    await create(kube, widgets.path(namespace), widgets.body("w"))
    status, body = await kube.request("PATCH", widgets.path(namespace, "w") + "/status",
                                      {"status": {"phase": 7}}, content_type="application/merge-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")
    # The field is the object's; the message names it as the status schema sees it.
    assert body["details"]["causes"] == [{"reason": "FieldValueTypeInvalid", "field": "status.phase",
                                          "message": 'Invalid value: "integer": phase in body must be of type '
                                                     'string: "integer"'}]


async def test_schema_violation_in_an_update_is_invalid_and_changes_nothing(kube: Kube, namespace: str,
                                                                            widgets: Widgets) -> None:
    await create(kube, widgets.path(namespace), widgets.body("w", {"image": "nginx", "replicas": 1}))
    status, body = await kube.request("PATCH", widgets.path(namespace, "w"), {"spec": {"replicas": 99}},
                                      content_type="application/merge-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")
    assert [cause["field"] for cause in body["details"]["causes"]] == ["spec.replicas"]
    assert (await get(kube, widgets.path(namespace, "w")))["spec"]["replicas"] == 1


async def test_updates_ratchet_over_what_a_stricter_schema_now_refuses(kube: Kube, namespace: str,
                                                                       widgets: Widgets) -> None:
    await create(kube, widgets.path(namespace), widgets.body("old", {"image": "nginx", "replicas": 8}))
    crd_path = f"{CRDS}/{widgets.crd_name}"
    crd = await get(kube, crd_path)
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"][
        "maximum"] = 5
    status, body = await kube.request("PUT", crd_path, crd)
    assert status == 200, body

    async def stricter() -> bool:  # the new schema is served (a real server takes a moment)
        status, _ = await kube.request("POST", widgets.path(namespace), widgets.body(
            "probe", {"image": "nginx", "replicas": 8}), params={"dryRun": "All"})
        return status == 422

    await eventually_async(stricter, timeout=30)
    # What an update leaves as it was is not held against it (CRDValidationRatcheting) ...
    status, body = await kube.request("PATCH", widgets.path(namespace, "old"), {"spec": {"image": "busybox"}},
                                      content_type="application/merge-patch+json")
    assert (status, body["spec"]) == (200, {"image": "busybox", "replicas": 8}), body
    # ... what it changes is checked against the schema as it now is.
    status, body = await kube.request("PATCH", widgets.path(namespace, "old"), {"spec": {"replicas": 9}},
                                      content_type="application/merge-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")
    assert [cause["field"] for cause in body["details"]["causes"]] == ["spec.replicas"]


async def test_unknown_fields_are_pruned(kube: Kube, namespace: str, widgets: Widgets) -> None:
    created = await create(kube, widgets.path(namespace),
                           widgets.body("w", {"image": "nginx", "colour": "red"}, topLevel="dropped"))
    assert created["spec"] == {"image": "nginx"}
    assert "topLevel" not in created
    assert (await get(kube, widgets.path(namespace, "w")))["spec"] == {"image": "nginx"}


async def test_unknown_fields_with_strict_validation_are_bad_request(kube: Kube, namespace: str,
                                                                     widgets: Widgets) -> None:
    status, body = await kube.request("POST", widgets.path(namespace),
                                      widgets.body("w", {"image": "nginx", "colour": "red"}),
                                      params={"fieldValidation": "Strict"})
    assert (status, body["reason"]) == (400, "BadRequest")
    assert 'unknown field "spec.colour"' in body["message"]
    assert await is_gone(kube, widgets.path(namespace, "w"))


async def test_preserve_unknown_fields_keeps_them(kube: Kube, namespace: str, widgets: Widgets) -> None:
    extra = {"anything": {"nested": [1, "two", {"three": True}]}}
    created = await create(kube, widgets.path(namespace), widgets.body("w", {"image": "nginx", "extra": extra}))
    assert created["spec"]["extra"] == extra


async def test_printer_columns_in_table_output(kube: Kube, namespace: str, widgets: Widgets) -> None:
    await create(kube, widgets.path(namespace), widgets.body("w", {"image": "nginx", "replicas": 3}))
    status, body = await kube.request("PATCH", widgets.path(namespace, "w") + "/status",
                                      {"status": {"phase": "Ready"}},
                                      content_type="application/merge-patch+json")
    assert status == 200, body
    status, table = await kube.request("GET", widgets.path(namespace), headers={"Accept": TABLE})
    assert status == 200, table
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns[0] == "Name"
    assert {"Image", "Replicas", "Phase"} <= set(columns)
    [row] = table["rows"]
    cells = dict(zip(columns, row["cells"], strict=True))
    assert (cells["Name"], cells["Image"], cells["Replicas"], cells["Phase"]) == ("w", "nginx", 3, "Ready")
    assert row["object"]["metadata"]["name"] == "w"  # includeObject=Metadata by default
    assert "spec" not in row["object"]


async def test_deleting_the_crd_removes_the_resource_and_its_objects(kube: Kube, namespace: str,
                                                                     widgets: Widgets) -> None:
    await create(kube, widgets.path(namespace), widgets.body("w"))
    status, _ = await kube.request("DELETE", f"{CRDS}/{widgets.crd_name}")
    assert status == 200

    async def unserved() -> bool:
        crd_gone = await is_gone(kube, f"{CRDS}/{widgets.crd_name}")
        status, _ = await kube.request("GET", widgets.path(namespace, "w"))
        return crd_gone and status == 404

    await eventually_async(unserved, timeout=60)
    status, _ = await kube.request("GET", f"/apis/{widgets.group}/v1")
    assert status == 404
    groups = await get(kube, "/apis")
    assert widgets.group not in [g["name"] for g in groups["groups"]]


async def test_invalid_crd_is_rejected(kube: Kube) -> None:
    definition = Widgets("e2e-invalid.example.com").definition()
    definition["metadata"]["name"] = "wrong-name.example.com"
    status, body = await kube.request("POST", CRDS, definition)
    assert (status, body["reason"]) == (422, "Invalid")
    assert "metadata.name" in [cause["field"] for cause in body["details"]["causes"]]
