"""The structural-schema rules a CRD's openAPIV3Schema must follow to be registered.

As apiextensions-apiserver checks them: every violation as `path: message`, worded as the CRD's
NonStructuralSchema condition lists them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from colocation_sandbox.server.crd_schema import (
    EMBEDDED,
    INT_OR_STRING,
    LIST_MAP_KEYS,
    LIST_TYPE,
    PRESERVE,
    Schema,
    child_path,
    quote,
    validation_causes,
)

_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]
_JUNCTORS = ("allOf", "anyOf", "oneOf")
# Set in a logic junctor, these would change the shape of the data rather than constrain it.
_NOT_IN_JUNCTORS = {
    "type": "must be empty to be structural",
    "additionalProperties": "must be undefined to be structural",
    "default": "must be undefined to be structural",
    "title": "must be empty to be structural",
    "description": "must be empty to be structural",
    "nullable": "must be false to be structural",
    PRESERVE: "must be false to be structural",
    EMBEDDED: "must be false to be structural",
    INT_OR_STRING: "must be false to be structural",
    LIST_MAP_KEYS: "must be empty to be structural",
    LIST_TYPE: "must be undefined to be structural",
}


def check_structural(schema: Schema, path: str = "") -> list[str]:
    """The violations, `path: message` as the CRD's NonStructuralSchema condition lists them.

    `path` is where the schema sits in the CRD, e.g. "spec.versions[0].schema.openAPIV3Schema".
    """
    violations = _invariants(schema, "root", path) + _completeness(schema, schema, path, junctor_path=path)
    return sorted(violations)


def _key(path: str, key: str) -> str:
    return f"{path}[{key}]"


def _invariants(node: Schema, level: str, path: str) -> list[str]:
    out: list[str] = []
    node_type = node.get("type", "")
    properties = node.get("properties") or {}
    items = node.get("items")
    additional = node.get("additionalProperties")

    if node_type == "array" and items is None:
        out.append(f"{child_path(path, 'items')}: Required value: must be specified")
    if isinstance(items, list):
        out.append(f"{child_path(path, 'items')}: Forbidden: items must be a schema object and not an array")
    elif isinstance(items, Mapping):
        out += _invariants(items, "item", child_path(path, "items"))
    for key, sub in properties.items():
        out += _invariants(sub, "field", _key(child_path(path, "properties"), key))
    if additional is not None:
        if level == "root":
            out.append(f"{child_path(path, 'additionalProperties')}: Forbidden: must not be used at the root")
        elif properties:
            out.append(f"{child_path(path, 'additionalProperties')}: Forbidden: "
                       "additionalProperties and properties are mutual exclusive")
        if isinstance(additional, Mapping):
            out += _invariants(additional, "field", child_path(path, "additionalProperties"))
    out += _extension_violations(node, path)
    out += _value_validation(node, path, skip_any_of=node.get("anyOf") == _INT_OR_STRING_ANY_OF,
                             skip_first_all_of_any_of=_all_of_int_or_string(node))

    if node.get(EMBEDDED) and node_type != "object":
        message = ("Required value" if not node_type else f"Invalid value: {quote(node_type)}")
        out.append(f"{child_path(path, 'type')}: {message}: must be object if {EMBEDDED} is true")
    elif not node_type and not node.get(INT_OR_STRING) and not node.get(PRESERVE):
        where = {"root": "at the root", "item": "for specified array items",
                 "field": "for specified object fields"}
        out.append(f"{child_path(path, 'type')}: Required value: must not be empty {where[level]}")
    if node.get(EMBEDDED) and additional is not None:
        out.append(f"{child_path(path, 'additionalProperties')}: Forbidden: "
                   "must not be used if x-kubernetes-embedded-resource is set")
    if level == "root" and node_type and node_type != "object":
        out.append(f"{child_path(path, 'type')}: Invalid value: {quote(node_type)}: must be object at the root")
    if level == "root" or node.get(EMBEDDED):
        out += _resource_field_types(properties, child_path(path, "properties"))
    if level == "root" and isinstance(metadata := properties.get("metadata"), Mapping):
        names = set(metadata.get("properties") or {})
        rest = {k: v for k, v in metadata.items() if k not in ("type", "default", "properties")}
        if rest or not names <= {"name", "generateName"}:
            out.append(f"{_key(child_path(path, 'properties'), 'metadata')}: Forbidden: must not specify "
                       "anything other than name and generateName, but metadata is implicitly specified")
    if node.get(EMBEDDED) and not node.get(PRESERVE) and not properties:
        out.append(f"{child_path(path, 'properties')}: Required value: must not be empty if "
                   "x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields")
    if "default" in node and level != "root":
        for cause in validation_causes(node["default"], node):
            inner = "" if cause.field == "<nil>" else f".{cause.field}"
            out.append(f"{child_path(path, 'default')}{inner}: {cause.message}")
    return out


def _all_of_int_or_string(node: Schema) -> bool:
    all_of = node.get("allOf") or []
    return bool(all_of) and isinstance(all_of[0], Mapping) and all_of[0].get("anyOf") == _INT_OR_STRING_ANY_OF


def _resource_field_types(properties: Mapping[str, Schema], path: str) -> list[str]:
    out = []
    for key, expected in (("kind", "string"), ("apiVersion", "string"), ("metadata", "object")):
        if key in properties and properties[key].get("type", "") != expected:
            shown = quote(properties[key].get("type", ""))
            out.append(f"{child_path(_key(path, key), 'type')}: Invalid value: {shown}: must be {expected}")
    return out


def _extension_violations(node: Schema, path: str) -> list[str]:
    """Rules on the x-kubernetes-* extensions and fields a v1 CRD refuses outright."""
    out = []
    if node.get(INT_OR_STRING) and node.get(PRESERVE):
        out.append(f"{child_path(path, PRESERVE)}: Invalid value: true: must be false if {INT_OR_STRING} is true")
    if node.get(INT_OR_STRING) and node.get(EMBEDDED):
        out.append(f"{child_path(path, EMBEDDED)}: Invalid value: true: must be false if {INT_OR_STRING} is true")
    if node.get(PRESERVE) is False:
        out.append(f"{child_path(path, PRESERVE)}: Invalid value: false: must be true or undefined")
    if "$ref" in node:
        out.append(f"{child_path(path, '$ref')}: Forbidden: $ref is not supported")
    if node.get("uniqueItems"):
        out.append(f"{child_path(path, 'uniqueItems')}: Forbidden: uniqueItems cannot be set to true "
                   "since the runtime complexity becomes quadratic")
    list_type = node.get(LIST_TYPE)
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        out.append(f"{child_path(path, LIST_TYPE)}: Unsupported value: {quote(str(list_type))}: "
                   'supported values: "atomic", "set", "map"')
    if list_type is not None and node.get("type") != "array":
        out.append(f"{child_path(path, LIST_TYPE)}: Invalid value: {quote(str(list_type))}: "
                   "must only be used if type is array")
    if list_type == "map" and not node.get(LIST_MAP_KEYS):
        out.append(f"{child_path(path, LIST_MAP_KEYS)}: Required value: "
                   "must not be empty if x-kubernetes-list-type is map")
    if node.get(LIST_MAP_KEYS) and list_type != "map":
        out.append(f"{child_path(path, LIST_MAP_KEYS)}: Forbidden: "
                   "must not be set if x-kubernetes-list-type is not map")
    return out


def _value_validation(node: Schema, path: str, skip_any_of: bool = False,
                      *, skip_first_all_of_any_of: bool = False) -> list[str]:
    out: list[str] = []
    if not skip_any_of:
        for i, branch in enumerate(node.get("anyOf") or []):
            out += _nested(branch, _key(child_path(path, "anyOf"), str(i)))
    for i, branch in enumerate(node.get("allOf") or []):
        skip = skip_first_all_of_any_of and i == 0
        out += _nested(branch, _key(child_path(path, "allOf"), str(i)), skip_any_of=skip)
    for i, branch in enumerate(node.get("oneOf") or []):
        out += _nested(branch, _key(child_path(path, "oneOf"), str(i)))
    if isinstance(node.get("not"), Mapping):
        out += _nested(node["not"], child_path(path, "not"))
    if pattern := node.get("pattern"):
        try:
            re.compile(pattern)
        except re.error as exc:
            out.append(f"{child_path(path, 'pattern')}: Invalid value: {quote(pattern)}: "
                       f"must be a valid regular expression, but isn't: {exc}")
    return out


def _nested(branch: Any, path: str, skip_any_of: bool = False) -> list[str]:
    """A schema under a logic junctor: it may only constrain values, never shape them."""
    if not isinstance(branch, Mapping):
        return []
    out = _value_validation(branch, path, skip_any_of=skip_any_of)
    if isinstance(items := branch.get("items"), list):
        out.append(f"{child_path(path, 'items')}: Forbidden: items must be a schema object and not an array")
    elif isinstance(items, Mapping):
        out += _nested(items, child_path(path, "items"))
    for key, sub in (branch.get("properties") or {}).items():
        out += _nested(sub, _key(child_path(path, "properties"), key))
    for key, message in _NOT_IN_JUNCTORS.items():
        if branch.get(key) not in (None, False, "", []):
            out.append(f"{child_path(path, key)}: Forbidden: {message}")
    if "metadata" in (branch.get("properties") or {}):
        out.append(f"{_key(child_path(path, 'properties'), 'metadata')}: Forbidden: "
                   "must not be specified in a nested context")
    return out


def _completeness(junctors: Schema, node: Schema | None, node_path: str, *, junctor_path: str) -> list[str]:
    """Every field or item a junctor names must also be specified outside the junctors."""
    out: list[str] = []
    branches: list[tuple[str, Any]] = []
    if "not" in junctors:
        branches.append((child_path(junctor_path, "not"), junctors["not"]))
    for name in _JUNCTORS:
        for i, branch in enumerate(junctors.get(name) or []):
            branches.append((_key(child_path(junctor_path, name), str(i)), branch))
    for branch_path, branch in branches:
        out += _nested_completeness(branch, node, node_path, branch_path=branch_path)
    return out


def _nested_completeness(branch: Any, node: Schema | None, node_path: str, *, branch_path: str) -> list[str]:
    if not isinstance(branch, Mapping):
        return []
    if node is None:
        return [f"{node_path}: Required value: because it is defined in {branch_path}"]
    out = _completeness(branch, node, node_path, junctor_path=branch_path)
    if isinstance(branch.get("items"), Mapping):
        items = node.get("items")
        out += _nested_completeness(branch["items"], items if isinstance(items, Mapping) else None,
                                    child_path(node_path, "items"), branch_path=child_path(branch_path, "items"))
    node_properties = node.get("properties") or {}
    for key, sub in (branch.get("properties") or {}).items():
        node_key = _key(child_path(node_path, "properties"), key)
        branch_key = _key(child_path(branch_path, "properties"), key)
        if key not in node_properties:
            out.append(f"{node_key}: Required value: because it is defined in {branch_key}")
        else:
            out += _nested_completeness(sub, node_properties[key], node_key, branch_path=branch_key)
    return out
