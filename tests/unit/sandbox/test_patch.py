"""Patch semantics of the sandbox API server: each case is what kube-apiserver answers."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server.patches import (
    create_merge_patch,
    json_merge_patch,
    json_patch,
    managed_fields_for_update,
    server_side_apply,
    strategic_merge_patch,
)

NOW = "2024-05-01T10:00:00Z"
LATER = "2024-05-01T11:00:00Z"


# --- JSON merge patch: RFC 7386, appendix A ------------------------------------------------------------

@pytest.mark.parametrize(("target", "patch", "expected"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_json_merge_patch_rfc7386_examples(target: Any, patch: Any, expected: Any) -> None:
    assert json_merge_patch(target, patch) == expected


def test_json_merge_patch_rfc7386_document_example() -> None:
    target = {"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"},
              "tags": ["example", "sample"], "content": "This will be unchanged"}
    patch = {"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": None},
             "tags": ["example"]}
    assert json_merge_patch(target, patch) == {
        "title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
        "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"}


def test_json_merge_patch_leaves_its_inputs_alone() -> None:
    target = {"metadata": {"labels": {"a": "1"}}}
    patch = {"metadata": {"labels": {"a": None, "b": {"c": 1}}}}
    before = copy.deepcopy((target, patch))
    result = json_merge_patch(target, patch)
    result["metadata"]["labels"]["b"]["c"] = 2
    assert (target, patch) == before


# --- JSON patch: RFC 6902, appendix A ------------------------------------------------------------------

@pytest.mark.parametrize(("target", "operations", "expected"), [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
     {"foo": ["bar", "qux", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
     {"baz": "boo", "foo": "bar"}),
    ({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
     [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
     {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
    ({"foo": ["all", "grass", "cows", "eat"]}, [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
     {"foo": ["all", "cows", "eat", "grass"]}),
    ({"baz": "qux", "foo": ["a", 2, "c"]},
     [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
     {"baz": "qux", "foo": ["a", 2, "c"]}),
    ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
     {"foo": "bar", "child": {"grandchild": {}}}),
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
     {"foo": "bar", "baz": "qux"}),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
     {"foo": ["bar", ["abc", "def"]]}),
    ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}}),
    ({"a/b": 1, "m~n": 2},
     [{"op": "remove", "path": "/a~1b"}, {"op": "replace", "path": "/m~0n", "value": 3}],
     {"m~n": 3}),
    ({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}], {"b": 2}),
])
def test_json_patch_rfc6902_examples(target: Any, operations: Any, expected: Any) -> None:
    assert json_patch(target, operations) == expected


def test_a_failed_test_operation_is_422_with_kube_apiservers_bare_message() -> None:
    deployment = {"spec": {"replicas": 3}}
    with pytest.raises(ApiError) as caught:
        json_patch(deployment, [{"op": "test", "path": "/spec/replicas", "value": 2},
                                {"op": "replace", "path": "/spec/replicas", "value": 5}])
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
    # What kube-apiserver 1.36 answers: no path, no cause.
    assert caught.value.message == "the server rejected our request due to an error in our request"
    assert not caught.value.details
    assert deployment == {"spec": {"replicas": 3}}


@pytest.mark.parametrize(("target", "operations"), [
    ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),  # A.9
    ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),  # A.12
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}]),  # A.15: "10" is not 10
    ({"a": True}, [{"op": "test", "path": "/a", "value": 1}]),
    ({"a": 1}, [{"op": "remove", "path": "/b"}]),
    ({"a": 1}, [{"op": "replace", "path": "/b", "value": 2}]),
    ({"a": [1]}, [{"op": "add", "path": "/a/5", "value": 2}]),
    ({"a": [1]}, [{"op": "remove", "path": "/a/01"}]),
    ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/c"}]),
    ({"a": 1}, [{"op": "frobnicate", "path": "/a"}]),
    ({"a": 1}, [{"op": "add", "value": 1}]),
    ({"a": 1}, [{"op": "add", "path": "/b"}]),
    ({"a": 1}, ["not an operation"]),
])
def test_operations_that_cannot_apply_are_422(target: Any, operations: Any) -> None:
    with pytest.raises(ApiError) as caught:
        json_patch(target, operations)
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")


def test_a_json_patch_that_is_not_a_list_does_not_decode_400() -> None:
    with pytest.raises(ApiError) as caught:
        json_patch({"a": 1}, {"op": "add", "path": "/b", "value": 2})
    assert caught.value.code == 400
    assert "cannot unmarshal object" in caught.value.message


# --- strategic merge patch -----------------------------------------------------------------------------

def deployment(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "patch-demo", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nginx"}},
                     "template": {"metadata": {"labels": {"app": "nginx"}},
                                  "spec": {"containers": containers, **spec}}}}


def pod_template_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def smp(target: dict[str, Any], patch: dict[str, Any], group: str = "apps",
        kind: str = "Deployment") -> dict[str, Any]:
    return strategic_merge_patch(target, patch, group, kind=kind)


def test_containers_merge_by_name_and_added_ones_come_first() -> None:
    # The "kubectl patch" task page: a strategic patch adding patch-demo-ctr-2.
    live = deployment([{"name": "patch-demo-ctr", "image": "nginx"}])
    patched = smp(live, {"spec": {"template": {"spec": {"containers": [
        {"name": "patch-demo-ctr-2", "image": "redis"}]}}}})
    assert pod_template_spec(patched)["containers"] == [
        {"name": "patch-demo-ctr-2", "image": "redis"}, {"name": "patch-demo-ctr", "image": "nginx"}]
    assert patched["spec"]["replicas"] == 2


def test_tolerations_have_no_patch_strategy_and_are_replaced() -> None:
    live = deployment([{"name": "c", "image": "nginx"}],
                      tolerations=[{"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}])
    patched = smp(live, {"spec": {"template": {"spec": {"tolerations": [
        {"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}}})
    assert pod_template_spec(patched)["tolerations"] == [
        {"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]


def test_env_merges_by_name_inside_a_merged_container() -> None:
    live = deployment([{"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"},
                                                                  {"name": "B", "value": "2"}]}])
    patched = smp(live, {"spec": {"template": {"spec": {"containers": [
        {"name": "app", "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]}]}}}})
    assert pod_template_spec(patched)["containers"] == [{"name": "app", "image": "app:1", "env": [
        {"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}]}]


def test_container_ports_merge_by_container_port_and_service_ports_by_port() -> None:
    pod = {"spec": {"containers": [{"name": "web", "ports": [{"containerPort": 80, "name": "http"}]}]}}
    patched = smp(pod, {"spec": {"containers": [{"name": "web", "ports": [
        {"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]}]}}, "", "Pod")
    assert patched["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}]
    service = {"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}
    patched = smp(service, {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}, "", "Service")
    assert patched["spec"]["ports"] == [{"port": 80, "targetPort": 9090}]


def test_patch_delete_directive_removes_one_container() -> None:
    live = deployment([{"name": "a", "image": "a"}, {"name": "b", "image": "b"}])
    patched = smp(live, {"spec": {"template": {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}}})
    assert pod_template_spec(patched)["containers"] == [{"name": "b", "image": "b"}]


def test_patch_replace_directive_in_a_list_replaces_the_list() -> None:
    live = deployment([{"name": "a", "image": "a"}, {"name": "b", "image": "b"}])
    patched = smp(live, {"spec": {"template": {"spec": {"containers": [
        {"$patch": "replace"}, {"name": "c", "image": "c"}]}}}})
    assert pod_template_spec(patched)["containers"] == [{"name": "c", "image": "c"}]


def test_patch_replace_and_delete_directives_on_maps() -> None:
    live = {"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}}
    patched = smp(live, {"metadata": {"labels": {"$patch": "replace", "c": "3"},
                                      "annotations": {"$patch": "delete"}}}, "", "ConfigMap")
    assert patched["metadata"] == {"labels": {"c": "3"}, "annotations": {}}


def test_null_deletes_a_key_and_unmatched_nulls_are_dropped() -> None:
    live = {"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"k": "v"}}
    patched = smp(live, {"metadata": {"labels": {"a": None, "ghost": None}}, "data": {"new": {"x": None}}},
                  "", "ConfigMap")
    assert patched == {"metadata": {"labels": {"b": "2"}}, "data": {"k": "v", "new": {}}}


def test_set_element_order_reorders_and_keeps_server_only_items() -> None:
    # kubectl apply after swapping containers a and b and bumping a's image; c was added by the
    # server (an injected sidecar), so it is in neither the last applied nor the new configuration.
    live = deployment([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"},
                       {"name": "c", "image": "sidecar"}])
    sent_by_kubectl = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
        "containers": [{"name": "a", "image": "a:2"}]}}}}
    patched = smp(live, sent_by_kubectl)
    assert pod_template_spec(patched)["containers"] == [
        {"name": "b", "image": "b:1"}, {"name": "a", "image": "a:2"}, {"name": "c", "image": "sidecar"}]


def test_what_kubectl_apply_sends_for_a_deployment_change() -> None:
    # Last applied: replicas 2, env A, containers [app]. New manifest: replicas 3, env A dropped,
    # env B added, a second container; kubectl's three-way patch then looks like this.
    live = deployment([{"name": "app", "image": "app:1", "env": [{"name": "A", "value": "a"}]}])
    live["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "1"}
    patch = {
        "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
        "spec": {"replicas": 3, "template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "log"}],
            "containers": [
                {"name": "app", "$setElementOrder/env": [{"name": "B"}],
                 "env": [{"name": "B", "value": "b"}, {"$patch": "delete", "name": "A"}]},
                {"name": "log", "image": "busybox"}]}}}}
    patched = smp(live, patch)
    assert patched["spec"]["replicas"] == 3
    assert patched["metadata"]["annotations"] == {
        "deployment.kubernetes.io/revision": "1", "kubectl.kubernetes.io/last-applied-configuration": "{...}"}
    assert pod_template_spec(patched)["containers"] == [
        {"name": "app", "image": "app:1", "env": [{"name": "B", "value": "b"}]},
        {"name": "log", "image": "busybox"}]


def test_retain_keys_clears_the_fields_of_a_deployment_strategy_it_does_not_name() -> None:
    live = deployment([{"name": "app", "image": "app"}])
    live["spec"]["strategy"] = {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}
    without = smp(live, {"spec": {"strategy": {"type": "Recreate"}}})
    assert without["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 1}
    retained = smp(live, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}})
    assert retained["spec"]["strategy"] == {"type": "Recreate"}


def test_retain_keys_must_name_every_field_of_the_patch() -> None:
    live = {"spec": {"strategy": {"type": "RollingUpdate"}}}
    with pytest.raises(ApiError) as caught:
        smp(live, {"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}})
    assert caught.value.code == 400


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    live = {"metadata": {"name": "x", "finalizers": ["a.example.com/f", "b.example.com/f"]}}
    added = smp(live, {"metadata": {"finalizers": ["c.example.com/f", "a.example.com/f"]}}, "", "ConfigMap")
    assert added["metadata"]["finalizers"] == ["c.example.com/f", "a.example.com/f", "b.example.com/f"]
    removed = smp(live, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f"]}},
                  "", "ConfigMap")
    assert removed["metadata"]["finalizers"] == ["b.example.com/f"]
    # kubectl apply removing b, adding c, keeping a:
    both = smp(live, {"metadata": {"$setElementOrder/finalizers": ["a.example.com/f", "c.example.com/f"],
                                   "$deleteFromPrimitiveList/finalizers": ["b.example.com/f"],
                                   "finalizers": ["c.example.com/f"]}}, "", "ConfigMap")
    assert both["metadata"]["finalizers"] == ["a.example.com/f", "c.example.com/f"]


def test_owner_references_merge_by_uid() -> None:
    live = {"metadata": {"ownerReferences": [{"uid": "1", "kind": "Node", "name": "n1"}]}}
    patched = smp(live, {"metadata": {"ownerReferences": [{"uid": "2", "kind": "Node", "name": "n2"}]}},
                  "coordination.k8s.io", "Lease")
    assert [ref["uid"] for ref in patched["metadata"]["ownerReferences"]] == ["2", "1"]


def test_node_status_conditions_and_addresses_merge_by_type() -> None:
    node = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"},
                                      {"type": "MemoryPressure", "status": "False"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}
    patched = smp(node, {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Down"}],
                                    "addresses": [{"type": "Hostname", "address": "n1"}]}}, "", "Node")
    assert patched["status"]["conditions"] == [{"type": "Ready", "status": "False", "reason": "Down"},
                                               {"type": "MemoryPressure", "status": "False"}]
    assert patched["status"]["addresses"] == [{"type": "Hostname", "address": "n1"},
                                              {"type": "InternalIP", "address": "10.0.0.1"}]


def test_node_taints_have_no_patch_strategy_and_are_replaced() -> None:
    # NodeSpec.Taints carries no patchStrategy tag upstream (the key tag is on Taint.Key, unused).
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    patched = smp(node, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}, "", "Node")
    assert patched["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]


def test_pod_status_conditions_merge_by_type() -> None:
    pod = {"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    patched = smp(pod, {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
                  "", "Pod")
    assert patched["status"] == {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}


def test_lists_of_unknown_kinds_are_atomic() -> None:
    obj = {"spec": {"items": [{"name": "a"}], "tags": ["x"]}}
    patched = smp(obj, {"spec": {"items": [{"name": "b"}], "tags": ["y"]}}, "example.com", "Widget")
    assert patched == {"spec": {"items": [{"name": "b"}], "tags": ["y"]}}


def test_a_merge_list_item_without_its_merge_key_is_invalid() -> None:
    with pytest.raises(ApiError) as caught:
        smp(deployment([{"name": "a"}]), {"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}})
    assert caught.value.code == 422


def test_strategic_merge_patch_leaves_its_inputs_alone() -> None:
    live = deployment([{"name": "a", "image": "a", "env": [{"name": "X", "value": "1"}]}])
    patch = {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "a"}],
                                            "containers": [{"name": "a", "env": [{"name": "Y"}]}]}}}}
    before = copy.deepcopy((live, patch))
    smp(live, patch)
    assert (live, patch) == before


# --- server-side apply ---------------------------------------------------------------------------------

def applied_deployment(replicas: int = 2, image: str = "nginx:1.25", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", **labels}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "nginx", "image": image}]}}}}


def ssa(live: dict[str, Any] | None, applied: dict[str, Any], manager: str = "kubectl",
        force: bool = False, now: str = NOW) -> dict[str, Any]:
    return server_side_apply(live, applied, manager, force=force, group="apps", kind="Deployment", now=now)


def managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["manager"]: entry for entry in obj["metadata"]["managedFields"]}


def test_apply_creates_the_object_and_records_what_the_manager_set() -> None:
    created = ssa(None, applied_deployment())
    fields = created["metadata"].pop("managedFields")
    assert created == applied_deployment()
    assert fields == [{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1", "time": NOW,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {
                        'k:{"name":"nginx"}': {".": {}, "f:image": {}, "f:name": {}}}},
                },
            },
        },
    }]


def test_reapplying_changes_values_and_removes_what_the_manager_no_longer_applies() -> None:
    live = ssa(None, applied_deployment(tier="frontend"))
    live["status"] = {"replicas": 2}
    updated = ssa(live, applied_deployment(image="nginx:1.26"), now=LATER)
    assert updated["metadata"]["labels"] == {"app": "web"}
    assert pod_template_spec(updated)["containers"] == [{"name": "nginx", "image": "nginx:1.26"}]
    assert updated["status"] == {"replicas": 2}
    entry = managers(updated)["kubectl"]
    assert entry["time"] == LATER
    assert entry["fieldsV1"]["f:metadata"] == {"f:labels": {"f:app": {}}}


def test_applying_a_field_another_applier_owns_with_a_new_value_conflicts() -> None:
    live = ssa(None, applied_deployment(replicas=3), manager="scaler")
    with pytest.raises(ApiError) as caught:
        ssa(live, applied_deployment(replicas=5))
    error = caught.value
    assert (error.code, error.reason) == (409, "Conflict")
    assert error.message == 'Apply failed with 1 conflict: conflict with "scaler": .spec.replicas'
    assert error.details["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "scaler"', "field": ".spec.replicas"}]


def test_applying_the_same_value_shares_ownership_without_conflict() -> None:
    live = ssa(None, applied_deployment(replicas=3), manager="scaler")
    shared = ssa(live, applied_deployment(replicas=3))
    assert "f:replicas" in managers(shared)["scaler"]["fieldsV1"]["f:spec"]
    assert "f:replicas" in managers(shared)["kubectl"]["fieldsV1"]["f:spec"]
    # The field stays while the other owner still applies it.
    dropped = copy.deepcopy(applied_deployment())
    del dropped["spec"]["replicas"]
    kept = ssa(shared, dropped)
    assert kept["spec"]["replicas"] == 3


def test_force_takes_the_conflicting_fields_from_their_owner() -> None:
    live = ssa(None, applied_deployment(replicas=3), manager="scaler")
    forced = ssa(live, applied_deployment(replicas=5), force=True)
    assert forced["spec"]["replicas"] == 5
    assert "f:replicas" not in managers(forced)["scaler"]["fieldsV1"]["f:spec"]
    assert "f:replicas" in managers(forced)["kubectl"]["fieldsV1"]["f:spec"]


def test_several_conflicts_are_listed_by_manager() -> None:
    live = ssa(None, applied_deployment(replicas=3, image="a"), manager="other")
    with pytest.raises(ApiError) as caught:
        ssa(live, applied_deployment(replicas=4, image="b"))
    assert caught.value.message == (
        'Apply failed with 2 conflicts: conflicts with "other":\n- .spec.replicas\n'
        '- .spec.template.spec.containers[name="nginx"].image')


def test_apply_conflicts_with_a_field_an_update_changed() -> None:
    live = ssa(None, applied_deployment(replicas=3))
    scaled = copy.deepcopy(live)
    scaled["spec"]["replicas"] = 7
    scaled["metadata"]["managedFields"] = managed_fields_for_update(
        live, scaled, "kube-controller-manager", operation="Update", api_version="apps/v1", now=LATER, group="apps",
        kind="Deployment")
    assert "f:replicas" not in managers(scaled)["kubectl"]["fieldsV1"]["f:spec"]
    assert managers(scaled)["kube-controller-manager"]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    with pytest.raises(ApiError) as caught:
        ssa(scaled, applied_deployment(replicas=3))
    assert caught.value.message == ('Apply failed with 1 conflict: conflict with "kube-controller-manager" '
                                    f'using apps/v1 at {LATER}: .spec.replicas')


def test_apply_keys_container_ports_by_port_and_protocol() -> None:
    applied = applied_deployment()
    pod_template_spec(applied)["containers"][0]["ports"] = [{"containerPort": 80}]
    created = ssa(None, applied)
    container = managers(created)["kubectl"]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert container['k:{"name":"nginx"}']["f:ports"] == {
        'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}


def test_apply_merges_keyed_lists_with_items_of_other_managers() -> None:
    live = ssa(None, applied_deployment())
    sidecar = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy"}]}}}}
    both = ssa(live, sidecar, manager="injector")
    assert [c["name"] for c in pod_template_spec(both)["containers"]] == ["nginx", "proxy"]
    # kubectl re-applies its manifest: the injector's container stays.
    again = ssa(both, applied_deployment(image="nginx:2"))
    assert pod_template_spec(again)["containers"] == [{"name": "nginx", "image": "nginx:2"},
                                                      {"name": "proxy", "image": "envoy"}]


def test_apply_orders_configured_items_as_configured_and_keeps_others_in_place() -> None:
    live = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "a"}, {"name": "b", "image": "b"}, {"name": "injected", "image": "i"},
        {"name": "d", "image": "d"}]}}
    config = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "b", "image": "b"}, {"name": "a", "image": "a2"}, {"name": "x", "image": "x"},
        {"name": "d", "image": "d"}]}}
    result = server_side_apply(live, config, "kubectl", force=False, group="", kind="Pod", now=NOW)
    assert [(c["name"], c["image"]) for c in result["spec"]["containers"]] == [
        ("b", "b"), ("a", "a2"), ("injected", "i"), ("x", "x"), ("d", "d")]


def test_custom_resource_lists_are_atomic_under_apply() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
              "spec": {"sizes": [1, 2], "parts": [{"name": "a"}]}}
    live = server_side_apply(None, widget, "me", force=False, group="example.com", kind="Widget", now=NOW)
    changed = copy.deepcopy(widget)
    changed["spec"] = {"sizes": [3]}
    updated = server_side_apply(live, changed, "me", force=False, group="example.com", kind="Widget", now=LATER)
    assert updated["spec"] == {"sizes": [3]}
    assert managers(updated)["me"]["fieldsV1"] == {"f:spec": {"f:sizes": {}}}


def test_apply_refuses_managed_fields_in_the_configuration() -> None:
    applied = applied_deployment()
    applied["metadata"]["managedFields"] = [{"manager": "x"}]
    with pytest.raises(ApiError) as caught:
        ssa(None, applied)
    assert caught.value.code == 400


def test_apply_leaves_its_inputs_alone() -> None:
    live = ssa(None, applied_deployment(replicas=3), manager="other")
    applied = applied_deployment(replicas=3, image="x")
    before = copy.deepcopy((live, applied))
    ssa(live, applied, force=True)
    assert (live, applied) == before


def test_an_update_takes_the_fields_it_changes_and_forgets_removed_ones() -> None:
    created: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}}
    created["metadata"]["managedFields"] = managed_fields_for_update(
        None, created, "kubectl-create", operation="Update", api_version="v1", now=NOW, group="", kind="ConfigMap")
    assert managers(created)["kubectl-create"]["fieldsV1"] == {
        "f:data": {"f:x": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}
    edited = copy.deepcopy(created)
    edited["data"] = {"y": "2"}
    edited["metadata"]["annotations"] = {"note": "hi"}
    fields = managed_fields_for_update(created, edited, "kubectl-edit", operation="Update", api_version="v1", now=LATER,
                                       group="", kind="ConfigMap")
    by_manager = {entry["manager"]: entry["fieldsV1"] for entry in fields}
    assert by_manager == {
        "kubectl-create": {"f:metadata": {"f:labels": {"f:a": {}}}},
        "kubectl-edit": {"f:data": {"f:y": {}}, "f:metadata": {"f:annotations": {".": {}, "f:note": {}}}},
    }


# --- properties --------------------------------------------------------------------------------------

_keys = st.text(alphabet="ab/~$x", min_size=1, max_size=3)
_documents = st.recursive(
    st.booleans() | st.integers(-5, 5) | st.text(alphabet="xyz", max_size=2),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=8,
)
_objects = st.dictionaries(_keys, _documents, max_size=4)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_objects, _objects)
def test_a_created_merge_patch_turns_the_source_into_the_target(source: Any, target: Any) -> None:
    patch = create_merge_patch(source, target)
    assert json_merge_patch(source, patch) == target


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_objects, _keys, _documents)
def test_json_patch_add_test_remove_round_trips(document: Any, key: str, value: Any) -> None:
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    document = {k: v for k, v in document.items() if k != key}
    operations = [{"op": "add", "path": pointer, "value": value},
                  {"op": "test", "path": pointer, "value": value},
                  {"op": "remove", "path": pointer}]
    assert json_patch(document, operations) == document
    assert json_patch(document, operations[:1])[key] == value


def _maps_only(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _maps_only(v) for k, v in value.items() if not k.startswith("$")}
    return "list" if isinstance(value, list) else value


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_objects.map(_maps_only), _objects.map(_maps_only))
def test_without_lists_a_strategic_patch_is_a_merge_patch(target: Any, patch: Any) -> None:
    assert strategic_merge_patch(target, patch, "", kind="ConfigMap") == json_merge_patch(target, patch)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_objects)
def test_fields_v1_is_json_and_reapplying_the_same_configuration_changes_nothing(spec: Any) -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}
    once = server_side_apply(None, widget, "me", force=False, group="example.com", kind="Widget", now=NOW)
    twice = server_side_apply(once, widget, "me", force=False, group="example.com", kind="Widget", now=NOW)
    assert twice == once
    json.dumps(twice)
