"""Contract: the four patch types (merge, JSON, strategic merge, server-side apply)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.e2e.kube import Kube, Widgets, configmap, create, get, make_pod_ready, pod_manifest

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def cm_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


def deploy_path(namespace: str, name: str = "") -> str:
    base = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    return f"{base}/{name}" if name else base


def two_container_deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "schedulerName": "e2e-nobody-schedules-this",
                         "containers": [
                             {"name": "app", "image": "registry.k8s.io/pause:3.9",
                              "env": [{"name": "MODE", "value": "fast"}, {"name": "LEVEL", "value": "1"}]},
                             {"name": "sidecar", "image": "registry.k8s.io/pause:3.9"}]}}}}


async def patch(kube: Kube, path: str, body: Any, content_type: str, **params: str) -> tuple[int, Any]:
    return await kube.request("PATCH", path, body, content_type=content_type, params=params or None)


# ---- JSON merge patch ------------------------------------------------------------------------------

async def test_merge_patch_merges_maps_and_null_deletes(kube: Kube, namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("merged", {"keep": "1", "drop": "2"}, labels={"a": "b"}))
    status, body = await patch(kube, cm_path(namespace, "merged"),
                               {"data": {"drop": None, "add": "3"}, "metadata": {"labels": {"c": "d"}}}, MERGE)
    assert status == 200, body
    assert body["data"] == {"keep": "1", "add": "3"}
    assert body["metadata"]["labels"] == {"a": "b", "c": "d"}


async def test_merge_patch_replaces_lists_whole(kube: Kube, namespace: str) -> None:
    await create(kube, deploy_path(namespace), two_container_deployment("listy"))
    status, body = await patch(kube, deploy_path(namespace, "listy"), {"spec": {"template": {"spec": {
        "containers": [{"name": "only", "image": "registry.k8s.io/pause:3.9"}]}}}}, MERGE)
    assert status == 200, body
    assert [c["name"] for c in body["spec"]["template"]["spec"]["containers"]] == ["only"]


async def test_merge_patch_with_a_json_array_is_bad_request_and_changes_nothing(kube: Kube,
                                                                                  namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("strict", {"k": "v"}))
    status, body = await patch(kube, cm_path(namespace, "strict"),
                               [{"op": "replace", "path": "/data/k", "value": "x"}], MERGE)
    assert (status, body["reason"]) == (400, "BadRequest")
    current = await get(kube, cm_path(namespace, "strict"))
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


# ---- JSON patch ------------------------------------------------------------------------------------

async def test_json_patch_applies_operations_in_order(kube: Kube, namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("ops", {"a": "1", "b": "2"}))
    status, body = await patch(kube, cm_path(namespace, "ops"), [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "10"},
        {"op": "remove", "path": "/data/b"},
        {"op": "add", "path": "/data/c", "value": "3"},
        {"op": "copy", "from": "/data/c", "path": "/data/d"},
        {"op": "move", "from": "/data/d", "path": "/data/e"},
    ], JSON_PATCH)
    assert status == 200, body
    assert body["data"] == {"a": "10", "c": "3", "e": "3"}


async def test_json_patch_failed_test_is_invalid_and_changes_nothing(kube: Kube, namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("guarded", {"owner": "me"}))
    status, body = await patch(kube, cm_path(namespace, "guarded"), [
        {"op": "replace", "path": "/data/owner", "value": "you"},
        {"op": "test", "path": "/data/owner", "value": "me"},
    ], JSON_PATCH)
    assert (status, body["kind"], body["reason"]) == (422, "Status", "Invalid")
    assert body["message"] == "the server rejected our request due to an error in our request"
    current = await get(kube, cm_path(namespace, "guarded"))
    assert current["data"] == {"owner": "me"}
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_json_patch_on_a_missing_path_is_invalid(kube: Kube, namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("sparse"))
    status, body = await patch(kube, cm_path(namespace, "sparse"),
                               [{"op": "remove", "path": "/data/absent"}], JSON_PATCH)
    assert (status, body["reason"]) == (422, "Invalid")


async def test_json_patch_with_an_object_body_is_bad_request_and_changes_nothing(kube: Kube,
                                                                                 namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("typed", {"k": "v"}))
    status, body = await patch(kube, cm_path(namespace, "typed"), {"data": {"k": "x"}}, JSON_PATCH)
    assert (status, body["reason"]) == (400, "BadRequest")
    current = await get(kube, cm_path(namespace, "typed"))
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


# ---- strategic merge patch -----------------------------------------------------------------------

async def test_strategic_patch_merges_containers_and_env_by_name(kube: Kube, namespace: str) -> None:
    await create(kube, deploy_path(namespace), two_container_deployment("smp"))
    status, body = await patch(kube, deploy_path(namespace, "smp"), {"spec": {"template": {"spec": {
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                        "env": [{"name": "LEVEL", "value": "2"}, {"name": "NEW", "value": "yes"}]}]}}}},
        STRATEGIC)
    assert status == 200, body
    containers = body["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["app", "sidecar"]
    assert containers[0]["image"] == "registry.k8s.io/pause:3.10"
    env = {e["name"]: e["value"] for e in containers[0]["env"]}
    assert env == {"MODE": "fast", "LEVEL": "2", "NEW": "yes"}


async def test_strategic_patch_delete_directive_removes_one_item(kube: Kube, namespace: str) -> None:
    await create(kube, deploy_path(namespace), two_container_deployment("smp-delete"))
    status, body = await patch(kube, deploy_path(namespace, "smp-delete"), {"spec": {"template": {"spec": {
        "containers": [{"name": "sidecar", "$patch": "delete"}]}}}}, STRATEGIC)
    assert status == 200, body
    assert [c["name"] for c in body["spec"]["template"]["spec"]["containers"]] == ["app"]


async def test_strategic_patch_set_element_order(kube: Kube, namespace: str) -> None:
    await create(kube, deploy_path(namespace), two_container_deployment("smp-order"))
    status, body = await patch(kube, deploy_path(namespace, "smp-order"), {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}}, STRATEGIC)
    assert status == 200, body
    containers = body["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["sidecar", "app"]
    assert containers[1]["image"] == "registry.k8s.io/pause:3.10"
    assert len(containers[1]["env"]) == 2  # merged, not replaced


async def test_strategic_patch_retain_keys_drops_the_rest(kube: Kube, namespace: str) -> None:
    await create(kube, deploy_path(namespace), two_container_deployment("smp-retain"))
    # Without $retainKeys, rollingUpdate would survive and the Recreate strategy would be invalid.
    status, body = await patch(kube, deploy_path(namespace, "smp-retain"), {"spec": {"strategy": {
        "$retainKeys": ["type"], "type": "Recreate"}}}, STRATEGIC)
    assert status == 200, body
    assert body["spec"]["strategy"] == {"type": "Recreate"}


async def test_strategic_patch_finalizers_merge_and_delete_from_primitive_list(kube: Kube,
                                                                               namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("held", finalizers=["example.com/a", "example.com/b"]))
    status, body = await patch(kube, cm_path(namespace, "held"),
                               {"metadata": {"finalizers": ["example.com/c"]}}, STRATEGIC)
    assert status == 200, body
    # A set-like list is a union; items only the patch names come first (upstream's mergeSortedSlice).
    assert body["metadata"]["finalizers"] == ["example.com/c", "example.com/a", "example.com/b"]
    status, body = await patch(kube, cm_path(namespace, "held"), {"metadata": {
        "$deleteFromPrimitiveList/finalizers": ["example.com/a", "example.com/c"]}}, STRATEGIC)
    assert status == 200, body
    assert body["metadata"]["finalizers"] == ["example.com/b"]
    status, body = await patch(kube, cm_path(namespace, "held"), {"metadata": {"finalizers": None}}, MERGE)
    assert status == 200, body


async def test_strategic_patch_on_a_custom_resource_is_unsupported(kube: Kube, namespace: str,
                                                                   widgets: Widgets) -> None:
    created = await create(kube, widgets.path(namespace), widgets.body("w"))
    status, body = await patch(kube, widgets.path(namespace, "w"), {"spec": {"mode": "fast"}}, STRATEGIC)
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    current = await get(kube, widgets.path(namespace, "w"))
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


# ---- server-side apply ---------------------------------------------------------------------------

def applied_configmap(namespace: str, value: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "applied", "namespace": namespace}, "data": {"key": value}})


def managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["manager"]: entry for entry in obj["metadata"].get("managedFields") or ()}


async def test_apply_creates_then_conflicts_then_force_takes_over(kube: Kube, namespace: str) -> None:
    path = cm_path(namespace, "applied")
    status, created = await patch(kube, path, applied_configmap(namespace, "a"), APPLY, fieldManager="alice")
    assert status == 201, created
    assert created["data"] == {"key": "a"}
    entry = managers(created)["alice"]
    assert entry["operation"] == "Apply"
    assert "f:key" in entry["fieldsV1"]["f:data"]

    status, body = await patch(kube, path, applied_configmap(namespace, "b"), APPLY, fieldManager="bob")
    assert (status, body["reason"]) == (409, "Conflict")
    assert '"alice"' in body["message"]
    assert [cause["field"] for cause in body["details"]["causes"]] == [".data.key"]
    assert (await get(kube, path))["data"] == {"key": "a"}

    status, forced = await patch(kube, path, applied_configmap(namespace, "b"), APPLY, fieldManager="bob",
                                 force="true")
    assert status == 200, forced
    assert forced["data"] == {"key": "b"}
    owners = managers(forced)
    assert "f:key" in owners["bob"]["fieldsV1"]["f:data"]
    assert "alice" not in owners  # alice owned nothing else, so her entry is gone


async def test_apply_by_the_same_manager_removes_fields_it_no_longer_applies(kube: Kube, namespace: str) -> None:
    path = cm_path(namespace, "shrinking")
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shrinking"},
              "data": {"one": "1", "two": "2"}}
    status, body = await patch(kube, path, yaml.safe_dump(config), APPLY, fieldManager="tool")
    assert status == 201, body
    config["data"] = {"one": "1"}
    status, body = await patch(kube, path, yaml.safe_dump(config), APPLY, fieldManager="tool")
    assert status == 200, body
    assert body["data"] == {"one": "1"}


async def test_apply_without_a_field_manager_is_invalid_patch_options(kube: Kube, namespace: str) -> None:
    status, body = await patch(kube, cm_path(namespace, "anonymous"), applied_configmap(namespace, "x"), APPLY)
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                               "is required for apply patch")
    assert body["details"] == {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
        {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
         "field": "fieldManager"}]}
    assert (await kube.request("GET", cm_path(namespace, "anonymous")))[0] == 404


async def test_write_options_are_checked_before_the_write(kube: Kube, namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("target", {"v": "1"}))
    status, body = await patch(kube, cm_path(namespace, "target"), {"data": {"v": "2"}}, MERGE, force="false")
    assert (status, body["details"]["kind"]) == (422, "PatchOptions")
    assert body["details"]["causes"] == [{"reason": "FieldValueForbidden", "field": "force",
                                          "message": "Forbidden: may not be specified for non-apply patch"}]

    status, body = await kube.request("POST", cm_path(namespace), configmap("dry"), params={"dryRun": "Some"})
    assert (status, body["details"]["kind"]) == (422, "CreateOptions")
    assert body["details"]["causes"] == [{"reason": "FieldValueNotSupported", "field": "dryRun",
                                          "message": 'Unsupported value: ["Some"]: supported values: "All"'}]
    assert (await kube.request("GET", cm_path(namespace, "dry")))[0] == 404  # not created for real either

    status, body = await kube.request("PUT", cm_path(namespace, "target"), configmap("target", {"v": "3"}),
                                      params={"fieldValidation": "Loose", "fieldManager": "x" * 129})
    assert (status, body["details"]["kind"]) == (422, "UpdateOptions")
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [
        ("fieldManager", "FieldValueTooLong"), ("fieldValidation", "FieldValueNotSupported")]

    status, body = await kube.request("DELETE", cm_path(namespace, "target"), params={"propagationPolicy": "Later"})
    assert (status, body["details"]["kind"]) == (422, "DeleteOptions")
    assert (await get(kube, cm_path(namespace, "target")))["data"] == {"v": "1"}


async def test_patch_naming_a_stale_resource_version_conflicts(kube: Kube, namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("versioned", {"v": "1"}))
    status, _ = await patch(kube, cm_path(namespace, "versioned"), {"data": {"v": "2"}}, MERGE)
    assert status == 200
    status, body = await patch(kube, cm_path(namespace, "versioned"), {
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "data": {"v": "3"}}, MERGE)
    assert (status, body["reason"]) == (409, "Conflict")
    assert (await get(kube, cm_path(namespace, "versioned")))["data"] == {"v": "2"}


async def test_strategic_patch_of_pod_status_merges_conditions_by_type(kube: Kube, namespace: str) -> None:
    await create(kube, f"/api/v1/namespaces/{namespace}/pods", pod_manifest("conditioned"))
    await make_pod_ready(kube, namespace, "conditioned")
    status, body = await patch(kube, f"/api/v1/namespaces/{namespace}/pods/conditioned/status", {"status": {
        "conditions": [{"type": "Ready", "status": "False", "reason": "Probe"}]}}, STRATEGIC)
    assert status == 200, body
    conditions = {c["type"]: c for c in body["status"]["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "Probe")
    assert conditions["PodScheduled"]["status"] == "True"  # untouched, not replaced
