"""CRD structural schemas applied to objects: validation, pruning and defaulting.

The semantics are apiextensions-apiserver's: values are checked by JSON kind the way kube-openapi's
validators are, errors carry its field paths and wording (`spec.items[2].name: Required value`),
pruning and defaulting follow the structural algorithms. A request goes prune -> apply_defaults ->
validate, as in the real decoder and strategy. The rules a schema itself must follow are
`structural_schema`'s.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import functools
import ipaddress
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from colocation.apimachinery.errors import ApiError, Cause

Schema = Mapping[str, Any]

PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
INT_OR_STRING = "x-kubernetes-int-or-string"
LIST_TYPE = "x-kubernetes-list-type"
LIST_MAP_KEYS = "x-kubernetes-list-map-keys"

OBJECT_META_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str, "generateName": str, "namespace": str, "selfLink": str, "uid": str,
    "resourceVersion": str, "generation": int, "creationTimestamp": str, "deletionTimestamp": str,
    "deletionGracePeriodSeconds": int, "labels": dict, "annotations": dict, "ownerReferences": list,
    "finalizers": list, "managedFields": list,
}


# --------------------------------------------------------------------------------------------
# How Go renders values in field errors.

def _go_number(value: float) -> str:
    """fmt's %v of a float64: no ".0" on integral values, exponents from 1e21 on."""
    if value != value or value in (float("inf"), float("-inf")):
        return {True: "+Inf", False: "-Inf"}[value > 0] if value == value else "NaN"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def _json(value: Any) -> str:
    def normalise(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
            return int(v)
        if isinstance(v, Mapping):
            return {k: normalise(x) for k, x in v.items()}
        if isinstance(v, list):
            return [normalise(x) for x in v]
        return v
    return json.dumps(normalise(value), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return _json(value)


def quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _field(path: str) -> str:
    return path or "<nil>"  # a nil *field.Path prints so


def _required(path: str, detail: str = "") -> Cause:
    return Cause(_field(path), "Required value" + (f": {detail}" if detail else ""), "FieldValueRequired")


def _invalid(path: str, value: Any, detail: str, *, reason: str = "FieldValueInvalid") -> Cause:
    return Cause(_field(path), f"Invalid value: {_render(value)}: {detail}", reason)


def _too_many(path: str, actual: int, limit: int) -> Cause:
    noun = "item" if limit == 1 else "items"
    return Cause(_field(path), f"Too many: {actual}: must have at most {limit} {noun}", "FieldValueTooMany")


def _duplicate(path: str, value: Any) -> Cause:
    return Cause(_field(path), f"Duplicate value: {_render(value)}", "FieldValueDuplicate")


# --------------------------------------------------------------------------------------------
# Validation.

def validate(obj: Mapping[str, Any], schema: Schema, group: str, *, kind: str, name: str) -> None:
    """Raise 422 Invalid, with one cause per violation, unless `obj` satisfies `schema`."""
    causes = validation_causes(obj, schema)
    if causes:
        raise ApiError.invalid(group, kind, name, causes=causes)


def validation_causes(obj: Any, schema: Schema, under: str = "") -> list[Cause]:
    """What `schema` finds wrong with `obj`. With `under` ("status"), `obj` is that part of an object
    validated on its own: fields are reported below `under`, messages keep the paths they had."""
    causes = _validate(obj, schema, "")
    for value, node, path in _walk(obj, schema, ""):
        causes.extend(_list_type_causes(value, node, path))
    for value, node, path in _walk(obj, schema, ""):
        if node.get(EMBEDDED) and isinstance(value, Mapping):
            causes.extend(_embedded_causes(value, path))
    if under:
        causes = [Cause(_below(under, cause.field), cause.message, cause.reason) for cause in causes]
    return causes


def _below(parent: str, field: str) -> str:
    if field == _field(""):
        return parent
    return f"{parent}{field}" if field.startswith("[") else f"{parent}.{field}"


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, Mapping) else "null"


def _types(schema: Schema) -> list[str]:
    if schema.get(INT_OR_STRING):
        return ["integer", "string"]
    return [schema["type"]] if schema.get("type") else []


def child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _validate(value: Any, schema: Schema, path: str) -> list[Cause]:
    """kube-openapi's validators in its order; each applies by the JSON kind of the value."""
    causes: list[Cause] = []
    types = _types(schema)
    actual = _json_type(value)
    type_ok = (not types or actual in types or (actual == "integer" and "number" in types)
               or (actual == "number" and "integer" in types and float(value).is_integer()))
    if value is None:
        if types and not schema.get("nullable"):
            causes.append(_type_cause(path, types, actual))
        return causes + _enum_causes(value, schema, path)
    if not type_ok:
        causes.append(_type_cause(path, types, actual))
    causes += _junctor_causes(value, schema, path)
    if isinstance(value, str):
        causes += _string_causes(value, schema, path)
    elif actual in ("integer", "number"):
        causes += _number_causes(value, schema, path)
    elif isinstance(value, list):
        causes += _array_causes(value, schema, path)
    causes += _enum_causes(value, schema, path)
    if isinstance(value, Mapping):
        causes += _object_causes(value, schema, path)
    return causes


def _type_cause(path: str, types: list[str], actual: str) -> Cause:
    detail = f"{path} in body must be of type {','.join(types)}: {quote(actual)}"
    return _invalid(path, actual, detail, reason="FieldValueTypeInvalid")


def _junctor_causes(value: Any, schema: Schema, path: str) -> list[Cause]:
    causes: list[Cause] = []

    def failed(message: str) -> Cause:  # not a field error upstream: reported at the nil path
        return _invalid("", "", message)

    if any_of := schema.get("anyOf"):
        results = [_validate(value, branch, path) for branch in any_of]
        if all(results):
            causes.append(failed(f"{quote(path)} must validate at least one schema (anyOf)"))
            causes += _fewest(results)
    if one_of := schema.get("oneOf"):
        results = [_validate(value, branch, path) for branch in one_of]
        valid = sum(not r for r in results)
        if valid != 1:
            found = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
            causes.append(failed(f"{quote(path)} must validate one and only one schema (oneOf). {found}"))
            if valid == 0:
                causes += _fewest(results)
    if all_of := schema.get("allOf"):
        results = [_validate(value, branch, path) for branch in all_of]
        for result in results:
            causes += result
        if any(results):
            none = ". None validated" if all(results) else ""
            causes.append(failed(f"{quote(path)} must validate all the schemas (allOf){none}"))
    if "not" in schema and not _validate(value, schema["not"], path):
        causes.append(failed(f"{quote(path)} must not validate the schema (not)"))
    return causes


def _fewest(results: list[list[Cause]]) -> list[Cause]:
    # kube-openapi reports the failing branch that passed most checks; fewest errors is close.
    return min(results, key=len)


def _string_causes(value: str, schema: Schema, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if (limit := schema.get("maxLength")) is not None and len(value) > limit:
        too_long = f"Too long: may not be more than {limit} bytes"
        causes.append(Cause(_field(path), too_long, "FieldValueTooLong"))
    if (least := schema.get("minLength")) is not None and len(value) < least:
        causes.append(_invalid(path, value, f"{path} in body should be at least {least} chars long"))
    if (pattern := schema.get("pattern")) and not _compiled(pattern).search(value):
        causes.append(_invalid(path, value, f"{path} in body should match '{pattern}'"))
    fmt = schema.get("format", "")
    if fmt in _FORMATS and not _FORMATS[fmt](value):
        detail = f"{path} in body must be of type {fmt}: {quote(value)}"
        causes.append(_invalid(path, value, detail, reason="FieldValueTypeInvalid"))
    return causes


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


_INTEGER_FORMATS = {"int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
                    "int64": (-2**63, 2**63 - 1)}


def _range_causes(value: float, schema: Schema, path: str) -> list[Cause]:
    """kube-openapi's IsValueValidAgainstRange("Checked"): an integer's value must convert to its
    format without loss. Not a field error upstream, so reported at the nil path."""
    if schema.get("type") != "integer":
        return []
    fmt = schema.get("format", "")
    low, high = _INTEGER_FORMATS.get(fmt, _INTEGER_FORMATS["int64"])
    if (isinstance(value, float) and not value.is_integer()) or not low <= value <= high:
        kind = f"integer with format {fmt}" if fmt else "integer (default format)"
        return [_invalid("", "", f"Checked value must be of type {kind} in {path}")]
    return []


def _number_causes(value: float, schema: Schema, path: str) -> list[Cause]:
    causes: list[Cause] = _range_causes(value, schema, path)

    def bound(key: str) -> float | None:
        limit = schema.get(key)
        if limit is None:
            return None
        # An integer is compared with the bound converted to an integer, as upstream does.
        return int(limit) if isinstance(value, int) else float(limit)

    if (factor := bound("multipleOf")) and not _is_multiple(value, factor):
        causes.append(_invalid(path, value, f"{path} in body should be a multiple of {_render(factor)}"))
    if (limit := bound("maximum")) is not None:
        exclusive = bool(schema.get("exclusiveMaximum"))
        if value > limit or (exclusive and value == limit):
            relation = "less than" if exclusive else "less than or equal to"
            causes.append(_invalid(path, value, f"{path} in body should be {relation} {_render(limit)}"))
    if (limit := bound("minimum")) is not None:
        exclusive = bool(schema.get("exclusiveMinimum"))
        if value < limit or (exclusive and value == limit):
            relation = "greater than" if exclusive else "greater than or equal to"
            causes.append(_invalid(path, value, f"{path} in body should be {relation} {_render(limit)}"))
    return causes


def _is_multiple(value: float, factor: float) -> bool:
    if isinstance(value, int) and isinstance(factor, int):
        return value % factor == 0
    quotient = value / factor
    return abs(quotient - round(quotient)) <= 1e-9 * max(1.0, abs(quotient))


def _array_causes(value: list[Any], schema: Schema, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if isinstance(items := schema.get("items"), Mapping):
        for i, item in enumerate(value):
            causes += _validate(item, items, f"{path}[{i}]")
    if (least := schema.get("minItems")) is not None and len(value) < least:
        causes.append(_invalid(path, len(value), f"{path} in body should have at least {least} items"))
    if (limit := schema.get("maxItems")) is not None and len(value) > limit:
        causes.append(_too_many(path, len(value), limit))
    if schema.get("uniqueItems") and len({_json(v) for v in value}) != len(value):
        causes.append(_invalid(path, "", f"{path} in body shouldn't contain duplicates"))
    return causes


def _enum_causes(value: Any, schema: Schema, path: str) -> list[Cause]:
    allowed = schema.get("enum")
    if not allowed or any(_same_json(value, a) for a in allowed):
        return []
    shown = ", ".join(quote(a if isinstance(a, str) else _json(a)) for a in allowed)
    return [Cause(_field(path), f"Unsupported value: {_render(value)}: supported values: {shown}",
                  "FieldValueNotSupported")]


def _same_json(a: Any, b: Any) -> bool:
    # Python says True == 1; JSON does not.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return _json(a) == _json(b)


def _object_causes(value: Mapping[str, Any], schema: Schema, path: str) -> list[Cause]:
    size = len(value)
    if (least := schema.get("minProperties")) is not None and size < least:
        return [_invalid(path, size, f"{path} in body should have at least {least} properties")]
    if (limit := schema.get("maxProperties")) is not None and size > limit:
        return [_too_many(path, size, limit)]
    causes: list[Cause] = []
    properties: Mapping[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        if key in properties:
            continue
        if additional is False:
            causes.append(_invalid(path, key, f"{path}.{key} in body is a forbidden property"))
        elif isinstance(additional, Mapping):
            causes += _validate(item, additional, f"{path}.{key}")
    for key, sub in properties.items():
        if key in value:
            causes += _validate(value[key], sub, child_path(path, key))
    causes += [_required(child_path(path, key)) for key in schema.get("required") or () if key not in value]
    return causes


def _walk(value: Any, schema: Schema, path: str) -> Iterator[tuple[Any, Schema, str]]:
    """Every value with its structural schema node, paths in field.Path form (`a.b[key][0]`)."""
    yield value, schema, path
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                yield from _walk(item, properties[key], child_path(path, key))
            elif isinstance(additional, Mapping):
                yield from _walk(item, additional, f"{path}[{key}]")
    elif isinstance(value, list) and isinstance(items := schema.get("items"), Mapping):
        for i, item in enumerate(value):
            yield from _walk(item, items, f"{path}[{i}]")


def _list_type_causes(value: Any, schema: Schema, path: str) -> list[Cause]:
    list_type = schema.get(LIST_TYPE)
    if not isinstance(value, list) or list_type not in ("set", "map"):
        return []
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        if list_type == "set":
            identity, shown = _json(item), item
        else:
            if not isinstance(item, Mapping):
                continue
            item_schema = schema.get("items") or {}
            defaults = {k: (item_schema.get("properties") or {}).get(k, {}).get("default")
                        for k in schema.get(LIST_MAP_KEYS) or ()}
            shown = {k: item.get(k, default) for k, default in defaults.items()}
            identity = _json(shown)
        if identity in seen:
            causes.append(_duplicate(f"{path}[{i}]", shown))
        seen.add(identity)
    return causes


def _embedded_causes(value: Mapping[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    for key in ("apiVersion", "kind"):
        where = child_path(path, key)
        if key not in value:
            causes.append(_required(where, "must not be empty"))
        elif not isinstance(value[key], str):
            causes.append(_invalid(where, value[key], "must be a string"))
        elif not value[key]:
            causes.append(_invalid(where, "", "must not be empty"))
    return causes


_DATE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                        r"([Zz]|[+-]\d{2}:\d{2})$")


def _is_date_time(text: str) -> bool:
    match = _DATE_TIME.match(text)
    if not match:
        return False
    try:
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return True


def _is_date(text: str) -> bool:
    try:
        return bool(re.match(r"^\d{4}-\d{2}-\d{2}$", text)) and bool(datetime.date.fromisoformat(text))
    except ValueError:
        return False


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _parses(parse: Any) -> Any:
    def check(text: str) -> bool:
        try:
            parse(text)
        except ValueError:
            return False
        return True
    return check


# The formats kube-openapi checks that CRD schemas may use; others are ignored, as upstream
# strips them. int-or-string is accepted as is: its type check already did the work.
_FORMATS: dict[str, Any] = {
    "date-time": _is_date_time,
    "datetime": _is_date_time,
    "date": _is_date,
    "byte": _is_base64,
    "uuid": _parses(uuid.UUID),
    "ipv4": _parses(ipaddress.IPv4Address),
    "ipv6": _parses(ipaddress.IPv6Address),
    "cidr": _parses(lambda t: ipaddress.ip_network(t, strict=False)),
    "hostname": lambda t: bool(re.match(r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,62})"
                                        r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,62}))*$", t)),
    "email": lambda t: bool(re.match(r"^[^@\s]+@[^@\s]+$", t)),
}


# --------------------------------------------------------------------------------------------
# Ratcheting (CRDValidationRatcheting, on since 1.30): an update is not refused for what it left
# as it was. Upstream skips the validation of every schema node whose value is unchanged, nodes
# being correlated through object properties and map keys (not list indices); so a cause stands
# only when the nearest correlatable node it belongs to changed (a Required value belongs to the
# object that lacks the field).

def ratchet(causes: list[Cause], new: Any, old: Any) -> list[Cause]:
    return [cause for cause in causes if not _unchanged_at(cause, new, old)]


_MISSING = object()


def _unchanged_at(cause: Cause, new: Any, old: Any) -> bool:
    if cause.field == _field(""):
        return False
    steps = _field_steps(cause.field)
    if cause.message.startswith("Required value"):
        steps = steps[:-1]
    correlatable: list[str] = []
    for step in steps:
        if isinstance(step, int):
            break
        correlatable.append(step)
    return _at(old, correlatable) is not _MISSING and _at(new, correlatable) == _at(old, correlatable)


def _field_steps(field: str) -> list[str | int]:
    """`spec.items[2].labels[a.b]` as ["spec", "items", 2, "labels", "a.b"]."""
    steps: list[str | int] = []
    for name, bracket in re.findall(r"([^.\[\]]+)|\[([^\]]*)\]", field):
        steps.append(name if name else int(bracket) if bracket.isdigit() else bracket)
    return steps


def _at(value: Any, steps: list[str]) -> Any:
    """The value at `steps`; a map key with dots (`labels.a.b`, as paths spell map keys) is several."""
    index = 0
    while index < len(steps):
        if not isinstance(value, Mapping):
            return _MISSING
        for end in range(index + 1, len(steps) + 1):
            key = ".".join(steps[index:end])
            if key in value:
                value, index = value[key], end
                break
        else:
            return _MISSING
    return value


# --------------------------------------------------------------------------------------------
# The scale subresource's replicas paths (customResourceValidator.ValidateScaleSpec and Status).

_MAX_INT32 = 2**31 - 1


def go_value(value: Any) -> str:
    """fmt's %v of a value decoded from JSON into interface{}."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_number(value)
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{go_value(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    return str(value)


def go_type(value: Any) -> str:
    """fmt's %T of a value decoded from JSON into interface{}."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "map[string]interface {}" if isinstance(value, Mapping) else "[]interface {}"


def scale_replicas_causes(obj: Mapping[str, Any], replicas_path: str) -> list[Cause]:
    """The replicas at `replicas_path` (".spec.replicas"), when present, must be an int32 >= 0.

    Upstream reads the path with unstructured.NestedInt64 and reports at the path as written in
    the CRD, leading dot included, after (not instead of) whatever the schema found.
    """
    fields = replicas_path.lstrip(".").split(".")
    value: Any = obj
    for depth, name in enumerate(fields):
        if value is None:
            return []
        if not isinstance(value, Mapping):
            where = "." + ".".join(fields[:depth + 1])
            return [_invalid(replicas_path, 0, f"{where} accessor error: {go_value(value)} is of the type "
                                               f"{go_type(value)}, expected map[string]interface{{}}")]
        if name not in value:
            return []
        value = value[name]
    if not isinstance(value, int) or isinstance(value, bool):
        where = "." + ".".join(fields)
        return [_invalid(replicas_path, 0, f"{where} accessor error: {go_value(value)} is of the type "
                                           f"{go_type(value)}, expected int64")]
    if value < 0:
        return [_invalid(replicas_path, value, "should be a non-negative integer")]
    if value > _MAX_INT32:
        return [_invalid(replicas_path, value, f"should be less than or equal to {_MAX_INT32}")]
    return []


# --------------------------------------------------------------------------------------------
# Pruning and defaulting.

def prune(obj: Mapping[str, Any], schema: Schema) -> dict[str, Any]:
    """A copy of `obj` without the fields `schema` does not specify (the root is a resource)."""
    root = {**schema, EMBEDDED: True}  # apiVersion, kind and metadata always survive
    pruned = _prune(obj, root)
    return pruned if isinstance(pruned, dict) else {}


def _prune(value: Any, schema: Schema | None) -> Any:
    if schema is not None and schema.get(PRESERVE):
        return _prune_preserving(value, schema)
    if isinstance(value, Mapping):
        if schema is None:
            return {}
        pairs = ((k, _prune_field(k, v, schema)) for k, v in value.items())
        return {k: v for k, v in pairs if v is not _DROP}
    if isinstance(value, list):
        items = schema.get("items") if schema is not None else None
        return [_prune(v, items if isinstance(items, Mapping) else None) for v in value]
    return value


_DROP = object()


def _prune_field(key: str, value: Any, schema: Schema, *, preserving: bool = False) -> Any:
    if schema.get(EMBEDDED):
        if key in ("apiVersion", "kind"):
            return copy.deepcopy(value)
        if key == "metadata":
            return object_meta(value) if isinstance(value, Mapping) else _DROP
    properties = schema.get("properties") or {}
    if key in properties:
        return _prune(value, properties[key])
    if "additionalProperties" in schema:
        additional = schema["additionalProperties"]
        return _prune(value, additional if isinstance(additional, Mapping) else None)
    return copy.deepcopy(value) if preserving else _DROP


def _prune_preserving(value: Any, schema: Schema | None) -> Any:
    # Unknown fields stay, but the fields the schema does specify are pruned by it.
    if schema is None:
        return copy.deepcopy(value)
    if isinstance(value, Mapping):
        pairs = ((k, _prune_field(k, v, schema, preserving=True)) for k, v in value.items())
        return {k: v for k, v in pairs if v is not _DROP}
    if isinstance(value, list):
        items = schema.get("items")
        return [_prune_preserving(v, items if isinstance(items, Mapping) else None) for v in value]
    return value


def object_meta(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as an ObjectMeta round trip leaves it: known fields of the right type only."""
    kept: dict[str, Any] = {}
    for key, value in metadata.items():
        expected = OBJECT_META_FIELDS.get(key)
        if expected is None or value is None or not isinstance(value, expected) or isinstance(value, bool):
            continue
        entries: Any = value.values() if isinstance(value, dict) else value
        if key in ("labels", "annotations", "finalizers") and not all(isinstance(v, str) for v in entries):
            continue
        kept[key] = copy.deepcopy(value)
    return kept


def apply_defaults(obj: Mapping[str, Any], schema: Schema) -> dict[str, Any]:
    """A copy of `obj` with the schema's defaults set for missing fields of present objects.

    Null values are dropped first where the schema neither allows nor defaults them; a
    non-nullable null that has a default takes the default.
    """
    result = copy.deepcopy(dict(obj))
    _drop_nulls(result, schema)
    _default(result, schema)
    return result


def _drop_nulls(value: Any, schema: Schema | None) -> None:
    if schema is None:
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key in list(value):
            sub = properties.get(key, additional if isinstance(additional, Mapping) else None)
            if sub is None:
                continue
            if value[key] is None and "default" not in sub and not sub.get("nullable"):
                del value[key]
            else:
                _drop_nulls(value[key], sub)
    elif isinstance(value, list) and isinstance(items := schema.get("items"), Mapping):
        for item in value:
            _drop_nulls(item, items)


def _default(value: Any, schema: Schema | None) -> None:
    if schema is None:
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if "default" in sub and (key not in value or (value[key] is None and not sub.get("nullable"))):
                value[key] = copy.deepcopy(sub["default"])
        additional = schema.get("additionalProperties")
        for key in list(value):
            if key in properties:
                _default(value[key], properties[key])
            elif isinstance(additional, Mapping):
                if value[key] is None and "default" in additional and not additional.get("nullable"):
                    value[key] = copy.deepcopy(additional["default"])
                _default(value[key], additional)
    elif isinstance(value, list) and isinstance(items := schema.get("items"), Mapping):
        for i, item in enumerate(value):
            if item is None and "default" in items and not items.get("nullable"):
                value[i] = copy.deepcopy(items["default"])
            _default(value[i], items)
