"""CRD structural schemas: validation, pruning and defaulting as apiextensions-apiserver does them."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server.crd_schema import (
    apply_defaults,
    prune,
    ratchet,
    scale_replicas_causes,
    validate,
    validation_causes,
)
from colocation_sandbox.server.structural_schema import check_structural


def _spec(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": properties}}}


def _errors(spec: Any, schema: dict[str, Any]) -> list[str]:
    return [f"{c.field}: {c.message}" for c in validation_causes({"spec": spec}, schema)]


# --------------------------------------------------------------------------------------------
# Validation.


def test_a_fractional_integer_also_fails_the_range_check_at_the_nil_path() -> None:
    assert _errors({"replicas": 2.5}, _spec(replicas={"type": "integer"})) == [
        'spec.replicas: Invalid value: "number": spec.replicas in body must be of type integer: "number"',
        '<nil>: Invalid value: "": Checked value must be of type integer (default format) in spec.replicas']
    assert _errors({"replicas": 2**31}, _spec(replicas={"type": "integer", "format": "int32"})) == [
        '<nil>: Invalid value: "": Checked value must be of type integer with format int32 in spec.replicas']


@pytest.mark.parametrize(("obj", "errors"), [
    ({"spec": {"replicas": 3}}, []),
    ({"spec": {}}, []),
    ({"spec": None}, []),
    ({"spec": {"replicas": -1}}, [".spec.replicas: Invalid value: -1: should be a non-negative integer"]),
    ({"spec": {"replicas": 2**31}},
     [".spec.replicas: Invalid value: 2147483648: should be less than or equal to 2147483647"]),
    ({"spec": {"replicas": "two"}},
     [".spec.replicas: Invalid value: 0: .spec.replicas accessor error: two is of the type string, expected int64"]),
    ({"spec": {"replicas": 1.5}},
     [".spec.replicas: Invalid value: 0: .spec.replicas accessor error: 1.5 is of the type float64, "
      "expected int64"]),
    ({"spec": ["a", 1]},
     [".spec.replicas: Invalid value: 0: .spec.replicas accessor error: [a 1] is of the type []interface {}, "
      "expected map[string]interface{}"]),
])
def test_scale_replicas_read_as_unstructured_nested_int64(obj: dict[str, Any], errors: list[str]) -> None:
    assert [f"{c.field}: {c.message}" for c in scale_replicas_causes(obj, ".spec.replicas")] == errors


def test_status_alone_reports_fields_below_status_and_messages_as_its_schema_sees_them() -> None:
    schema = {"type": "object", "required": ["phase"], "properties": {"phase": {"type": "string"}}}
    assert [f"{c.field}: {c.message}" for c in validation_causes({"ready": 1}, schema, under="status")] == [
        "status.phase: Required value"]
    assert [f"{c.field}: {c.message}" for c in validation_causes({"phase": 1}, schema, under="status")] == [
        'status.phase: Invalid value: "integer": phase in body must be of type string: "integer"']


def test_a_type_mismatch_reads_as_on_a_real_cluster() -> None:
    schema = _spec(replicas={"type": "integer"})
    with pytest.raises(ApiError) as caught:
        validate({"spec": {"replicas": "3"}}, schema, "slo.colocation.dev", kind="NodeSLO", name="n1")
    error = caught.value
    assert error.code == 422
    assert error.message == ('NodeSLO.slo.colocation.dev "n1" is invalid: spec.replicas: Invalid value: '
                             '"string": spec.replicas in body must be of type integer: "string"')
    assert error.details["causes"] == [{
        "reason": "FieldValueTypeInvalid", "field": "spec.replicas",
        "message": 'Invalid value: "string": spec.replicas in body must be of type integer: "string"'}]


@pytest.mark.parametrize(("schema_type", "value", "valid"), [
    ("integer", 3, True),
    ("integer", 3.0, True),  # an integral float is an integer, as in JSON
    ("integer", 3.5, False),
    ("integer", True, False),  # booleans are not integers
    ("number", 3, True),
    ("number", 3.5, True),
    ("boolean", 0, False),
    ("string", "", True),
    ("array", {}, False),
    ("object", [], False),
])
def test_json_types(schema_type: str, value: Any, valid: bool) -> None:
    assert (_errors({"x": value}, _spec(x={"type": schema_type})) == []) is valid


def test_null_is_refused_unless_nullable() -> None:
    assert _errors({"x": None}, _spec(x={"type": "object"})) == [
        'spec.x: Invalid value: "null": spec.x in body must be of type object: "null"']
    assert _errors({"x": None}, _spec(x={"type": "object", "nullable": True})) == []


def test_required_fields_at_every_depth_with_array_indexes() -> None:
    schema = _spec(items={"type": "array", "items": {
        "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}})
    schema["required"] = ["spec"]
    assert [f"{c.field}: {c.message}" for c in validation_causes({}, schema)] == ["spec: Required value"]
    assert _errors({"items": [{"name": "a"}, {"name": "b"}, {}]}, schema) == [
        "spec.items[2].name: Required value"]


def test_enum_lists_the_supported_values() -> None:
    assert _errors({"mode": "c"}, _spec(mode={"type": "string", "enum": ["a", "b"]})) == [
        'spec.mode: Unsupported value: "c": supported values: "a", "b"']
    assert _errors({"n": 3}, _spec(n={"type": "integer", "enum": [1, 2]})) == [
        'spec.n: Unsupported value: 3: supported values: "1", "2"']
    assert _errors({"b": 1}, _spec(b={"enum": [True]})) != []  # 1 is not true in JSON


@pytest.mark.parametrize(("bounds", "value", "message"), [
    ({"minimum": 0}, -1, "spec.n: Invalid value: -1: spec.n in body should be greater than or equal to 0"),
    ({"maximum": 100}, 101, "spec.n: Invalid value: 101: spec.n in body should be less than or equal to 100"),
    ({"maximum": 100, "exclusiveMaximum": True}, 100,
     "spec.n: Invalid value: 100: spec.n in body should be less than 100"),
    ({"minimum": 0.5, "exclusiveMinimum": True}, 0.5,
     "spec.n: Invalid value: 0.5: spec.n in body should be greater than 0.5"),
    ({"multipleOf": 5}, 12, "spec.n: Invalid value: 12: spec.n in body should be a multiple of 5"),
])
def test_numeric_bounds(bounds: dict[str, Any], value: float, message: str) -> None:
    assert _errors({"n": value}, _spec(n={"type": "number", **bounds})) == [message]


def test_string_constraints() -> None:
    schema = _spec(name={"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"})
    assert _errors({"name": "abc"}, schema) == []
    assert _errors({"name": "ABCDE"}, schema) == [
        "spec.name: Too long: may not be more than 4 bytes",
        "spec.name: Invalid value: \"ABCDE\": spec.name in body should match '^[a-z]+$'"]
    assert _errors({"name": "a"}, schema) == [
        'spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long']


def test_date_time_format() -> None:
    schema = _spec(at={"type": "string", "format": "date-time"})
    assert _errors({"at": "2024-05-01T10:00:00Z"}, schema) == []
    assert _errors({"at": "2024-05-01T10:00:00.5+02:00"}, schema) == []
    assert _errors({"at": "2024-13-01T10:00:00Z"}, schema) == [
        'spec.at: Invalid value: "2024-13-01T10:00:00Z": spec.at in body must be of type date-time: '
        '"2024-13-01T10:00:00Z"']


def test_item_and_property_counts() -> None:
    schema = _spec(tags={"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
                   extra={"type": "object", "maxProperties": 1,
                          "additionalProperties": {"type": "string"}})
    assert _errors({"tags": []}, schema) == [
        "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"]
    assert _errors({"tags": ["a", "b", "c"]}, schema) == ["spec.tags: Too many: 3: must have at most 2 items"]
    assert _errors({"extra": {"a": "1", "b": "2"}}, schema) == [
        "spec.extra: Too many: 2: must have at most 1 item"]


def test_additional_properties_are_validated_under_dotted_keys() -> None:
    schema = _spec(limits={"type": "object", "additionalProperties": {"type": "integer"}})
    assert _errors({"limits": {"cpu": 1, "memory": "1Gi"}}, schema) == [
        'spec.limits.memory: Invalid value: "string": '
        'spec.limits.memory in body must be of type integer: "string"']


def test_int_or_string() -> None:
    schema = _spec(port={"x-kubernetes-int-or-string": True})
    assert _errors({"port": 80}, schema) == []
    assert _errors({"port": "http"}, schema) == []
    assert _errors({"port": True}, schema) == [
        'spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"']


def test_unknown_fields_do_not_fail_validation() -> None:
    # They are pruned (or preserved) before validation, never reported.
    assert _errors({"anything": 1}, _spec(x={"type": "string"})) == []


def test_list_type_set_and_map_refuse_duplicates() -> None:
    schema = _spec(
        tags={"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        ports={"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
               "items": {"type": "object",
                         "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}})
    duplicated = {"tags": ["a", "b", "a"],
                  "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}]}
    assert _errors(duplicated, schema) == [
        'spec.tags[2]: Duplicate value: "a"', 'spec.ports[1]: Duplicate value: {"name":"http"}']
    assert _errors({"tags": ["a", "b"], "ports": [{"name": "http"}, {"name": "https"}]}, schema) == []


def test_embedded_resources_need_api_version_and_kind() -> None:
    schema = _spec(template={"type": "object", "x-kubernetes-embedded-resource": True,
                             "x-kubernetes-preserve-unknown-fields": True})
    assert _errors({"template": {"kind": "Pod"}}, schema) == [
        "spec.template.apiVersion: Required value: must not be empty"]
    assert _errors({"template": {"apiVersion": "v1", "kind": "Pod"}}, schema) == []


def test_logic_junctors() -> None:
    one_of = _spec(x={"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                      "properties": {"a": {"type": "string"}, "b": {"type": "string"}}})
    assert _errors({"x": {"a": "1"}}, one_of) == []
    assert _errors({"x": {"a": "1", "b": "2"}}, one_of) == [
        '<nil>: Invalid value: "": "spec.x" must validate one and only one schema (oneOf). '
        "Found 2 valid alternatives"]
    any_of = _spec(x={"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 0}]})
    assert _errors({"x": 5}, any_of)[0] == (
        '<nil>: Invalid value: "": "spec.x" must validate at least one schema (anyOf)')
    assert _errors({"x": 11}, any_of) == []
    negated = _spec(x={"type": "string", "not": {"enum": ["forbidden"]}})
    assert _errors({"x": "forbidden"}, negated) == [
        '<nil>: Invalid value: "": "spec.x" must not validate the schema (not)']
    all_of = _spec(x={"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 3}]})
    assert _errors({"x": 4}, all_of) == [
        "spec.x: Invalid value: 4: spec.x in body should be less than or equal to 3",
        '<nil>: Invalid value: "": "spec.x" must validate all the schemas (allOf)']


# --------------------------------------------------------------------------------------------
# Pruning.


def test_pruning_drops_unknown_fields_but_keeps_the_resource_envelope() -> None:
    schema = _spec(replicas={"type": "integer"})
    obj = {"apiVersion": "g/v1", "kind": "K",
           "metadata": {"name": "a", "labels": {"x": "y"}, "madeUp": 1, "creationTimestamp": None},
           "spec": {"replicas": 1, "typo": 2}, "status": {"phase": "x"}}
    assert prune(obj, schema) == {"apiVersion": "g/v1", "kind": "K",
                                  "metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"replicas": 1}}
    assert obj["spec"] == {"replicas": 1, "typo": 2}  # the input is not touched


def test_pruning_follows_items_and_additional_properties() -> None:
    schema = _spec(
        list={"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
        map={"type": "object",
             "additionalProperties": {"type": "object", "properties": {"b": {"type": "string"}}}})
    obj = {"spec": {"list": [{"a": "1", "z": 0}], "map": {"k": {"b": "2", "z": 0}}}}
    assert prune(obj, schema) == {"spec": {"list": [{"a": "1"}], "map": {"k": {"b": "2"}}}}


def test_preserve_unknown_fields_keeps_unknown_fields_but_prunes_known_ones() -> None:
    schema = _spec(values={"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                           "properties": {"known": {"type": "object",
                                                    "properties": {"a": {"type": "string"}}}}})
    obj = {"spec": {"values": {"free": {"deep": [1, {"x": 2}]}, "known": {"a": "1", "z": 0}}}}
    assert prune(obj, schema) == {"spec": {"values": {"free": {"deep": [1, {"x": 2}]}, "known": {"a": "1"}}}}


def test_embedded_resources_keep_their_envelope_when_pruned() -> None:
    schema = _spec(template={"type": "object", "x-kubernetes-embedded-resource": True,
                             "properties": {"spec": {"type": "object"}}})
    obj = {"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1},
                                 "spec": {}, "other": 1}}}
    assert prune(obj, schema) == {"spec": {"template": {"apiVersion": "v1", "kind": "Pod",
                                                        "metadata": {"name": "p"}, "spec": {}}}}


# --------------------------------------------------------------------------------------------
# Defaulting.


def test_defaults_fill_missing_fields_of_present_objects_only() -> None:
    schema = _spec(policy={"type": "object", "properties": {
        "interval": {"type": "integer", "default": 60},
        "window": {"type": "object", "default": {},
                   "properties": {"seconds": {"type": "integer", "default": 300}}}}})
    assert apply_defaults({"spec": {"policy": {}}}, schema) == {
        "spec": {"policy": {"interval": 60, "window": {"seconds": 300}}}}
    assert apply_defaults({"spec": {}}, schema) == {"spec": {}}  # no policy, no defaults inside it
    assert apply_defaults({"spec": {"policy": {"interval": 5}}}, schema)["spec"]["policy"]["interval"] == 5


def test_defaults_apply_to_array_items_and_map_values() -> None:
    schema = _spec(
        ports={"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string",
                                                                                      "default": "TCP"}}}},
        limits={"type": "object", "additionalProperties": {"type": "object", "properties": {
            "unit": {"type": "string", "default": "m"}}}})
    result = apply_defaults({"spec": {"ports": [{}, {"protocol": "UDP"}], "limits": {"cpu": {}}}}, schema)
    assert result["spec"] == {"ports": [{"protocol": "TCP"}, {"protocol": "UDP"}],
                              "limits": {"cpu": {"unit": "m"}}}


def test_nulls_take_defaults_or_disappear_unless_nullable() -> None:
    schema = _spec(a={"type": "integer", "default": 1}, b={"type": "integer"},
                   c={"type": "integer", "nullable": True, "default": 3})
    defaulted = apply_defaults({"spec": {"a": None, "b": None, "c": None}}, schema)
    assert defaulted == {"spec": {"a": 1, "c": None}}


# --------------------------------------------------------------------------------------------
# Structural-schema rules (expectations from the apiextensions integration tests).

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def test_a_well_formed_schema_has_no_violations() -> None:
    schema = _spec(replicas={"type": "integer", "default": 1}, port={"x-kubernetes-int-or-string": True},
                   free={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                   tags={"type": "array", "items": {"type": "string"}})
    schema["properties"]["metadata"] = {"type": "object", "properties": {"name": {"type": "string",
                                                                                   "maxLength": 20}}}
    assert check_structural(schema, ROOT) == []


def test_fields_and_items_need_a_type() -> None:
    schema = {"type": "object",
              "properties": {"a": {}, "list": {"type": "array", "items": {}}, "b": {"type": "array"}}}
    assert check_structural(schema, ROOT) == [
        f"{ROOT}.properties[a].type: Required value: must not be empty for specified object fields",
        f"{ROOT}.properties[b].items: Required value: must be specified",
        f"{ROOT}.properties[list].items.type: Required value: must not be empty for specified array items",
    ]
    assert check_structural({"properties": {}}) == ["type: Required value: must not be empty at the root"]


def test_junctors_may_only_name_fields_specified_outside_them() -> None:
    schema = {"type": "object",
              "properties": {"b": {"type": "object", "properties": {"b": {"type": "array"}}},
                             "e": {"type": "string"}},
              "not": {"properties": {"a": {}, "b": {"not": {"properties": {"a": {}, "b": {"items": {}}}}}}},
              "allOf": [{"properties": {"e": {}}}],
              "oneOf": [{"properties": {"g": {}}}]}
    violations = check_structural(schema, ROOT)
    assert (f"{ROOT}.properties[a]: Required value: because it is defined in "
            f"{ROOT}.not.properties[a]") in violations
    assert (f"{ROOT}.properties[b].properties[a]: Required value: because it is defined in "
            f"{ROOT}.not.properties[b].not.properties[a]") in violations
    assert (f"{ROOT}.properties[b].properties[b].items: Required value: because it is defined in "
            f"{ROOT}.not.properties[b].not.properties[b].items") in violations
    assert (f"{ROOT}.properties[g]: Required value: because it is defined in "
            f"{ROOT}.oneOf[0].properties[g]") in violations
    assert not any("properties[e]" in v for v in violations)


def test_junctors_may_not_shape_the_data() -> None:
    schema = _spec(d={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                   g={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "string"}, {"type": "integer"}]},
                   n={"type": "string", "allOf": [{"description": "no", "nullable": True}]})
    spec = f"{ROOT}.properties[spec]"
    assert check_structural(schema, ROOT) == [
        f"{spec}.properties[g].anyOf[0].type: Forbidden: must be empty to be structural",
        f"{spec}.properties[g].anyOf[1].type: Forbidden: must be empty to be structural",
        f"{spec}.properties[n].allOf[0].description: Forbidden: must be empty to be structural",
        f"{spec}.properties[n].allOf[0].nullable: Forbidden: must be false to be structural",
    ]


def test_metadata_may_only_restrict_name_and_generate_name() -> None:
    schema = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "name": {"type": "string"}, "labels": {"type": "object"}}}}}
    assert check_structural(schema, ROOT) == [
        f"{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name and "
        "generateName, but metadata is implicitly specified"]
    nested = {"type": "object", "properties": {"metadata": {"type": "object"}},
              "allOf": [{"properties": {"metadata": {}}}]}
    assert check_structural(nested, ROOT) == [
        f"{ROOT}.allOf[0].properties[metadata]: Forbidden: must not be specified in a nested context"]


def test_additional_properties_rules() -> None:
    assert check_structural({"type": "object", "additionalProperties": False}, ROOT) == [
        f"{ROOT}.additionalProperties: Forbidden: must not be used at the root"]
    both = _spec(x={"type": "object", "properties": {"a": {"type": "string"}},
                    "additionalProperties": {"type": "string"}})
    assert check_structural(both) == ["properties[spec].properties[x].additionalProperties: Forbidden: "
                                      "additionalProperties and properties are mutual exclusive"]


def test_defaults_must_satisfy_their_schema() -> None:
    schema = _spec(n={"type": "integer", "minimum": 1, "default": 0})
    # The default is validated on its own, so the message names no path (two spaces, as upstream).
    assert check_structural(schema) == [
        "properties[spec].properties[n].default: Invalid value: 0:  in body "
        "should be greater than or equal to 1"]


def test_ratcheting_keeps_only_causes_where_the_update_changed_something() -> None:
    schema = {"type": "object", "properties": {"spec": {
        "type": "object", "required": ["image", "extra"],
        "properties": {"image": {"type": "string"}, "replicas": {"type": "integer", "maximum": 5},
                       "extra": {"type": "string"},
                       "ports": {"type": "array", "items": {"type": "integer", "maximum": 10}},
                       "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}}}}}
    old = {"spec": {"image": "a", "replicas": 8, "ports": [11], "labels": {"a.b": "long", "c": "x"}}}

    def standing(new: dict[str, Any]) -> list[str]:
        return [c.field for c in ratchet(validation_causes(new, schema), new, old)]

    assert standing({**old, "metadata": {"labels": {"x": "y"}}}) == []  # spec untouched: nothing stands
    # spec changed: its own Required stands; the unchanged replicas, ports and labels do not
    assert standing({"spec": {**old["spec"], "image": "b"}}) == ["spec.extra"]
    assert standing({"spec": {**old["spec"], "extra": "e", "replicas": 9}}) == ["spec.replicas"]
    # list items are not correlated by index: a changed list is checked whole
    assert standing({"spec": {**old["spec"], "extra": "e", "ports": [11, 1]}}) == ["spec.ports[0]"]
    # map values are correlated by key
    assert standing({"spec": {**old["spec"], "extra": "e", "labels": {"a.b": "long", "c": "xxxx"}}}) == [
        "spec.labels.c"]
