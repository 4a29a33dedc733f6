"""Strategic merge patch for built-in types, and the merge keys it needs.

kube-apiserver reads each field's `patchStrategy` / `patchMergeKey` struct tags from the Go types;
the sandbox has no Go types, so `FIELD_STRATEGIES` transcribes the tags of the kinds it serves
(k8s.io/api types.go). A list absent from the table is replaced by the patch, as upstream does for
untagged lists: notably `spec.tolerations` of a pod and `spec.taints` of a node.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from colocation.apimachinery.errors import ApiError

Strategy = tuple[str, str]  # (patchStrategy, patchMergeKey); merge key "" for lists of scalars

DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
SET_ELEMENT_ORDER = "$setElementOrder/"
DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"

_OBJECT_META: dict[str, Strategy] = {
    "ownerReferences": ("merge", "uid"),
    "finalizers": ("merge", ""),
}
_CONTAINER: dict[str, Strategy] = {
    "ports": ("merge", "containerPort"),
    "env": ("merge", "name"),
    "volumeMounts": ("merge", "mountPath"),
    "volumeDevices": ("merge", "devicePath"),
}
_POD_SPEC: dict[str, Strategy] = {
    "volumes": ("merge,retainKeys", "name"),
    "initContainers": ("merge", "name"),
    "containers": ("merge", "name"),
    "ephemeralContainers": ("merge", "name"),
    "imagePullSecrets": ("merge", "name"),
    "hostAliases": ("merge", "ip"),
    "topologySpreadConstraints": ("merge", "topologyKey"),
    "schedulingGates": ("merge", "name"),
    "resourceClaims": ("merge,retainKeys", "name"),
}
_POD_STATUS: dict[str, Strategy] = {
    "conditions": ("merge", "type"),
    "podIPs": ("merge", "ip"),
    "hostIPs": ("merge", "ip"),
    "resourceClaimStatuses": ("merge,retainKeys", "name"),
}
_CONDITIONS: dict[str, Strategy] = {"conditions": ("merge", "type")}


def _under(prefix: str, fields: dict[str, Strategy]) -> dict[str, Strategy]:
    return {f"{prefix}.{name}": strategy for name, strategy in fields.items()}


def _pod_spec(prefix: str) -> dict[str, Strategy]:
    table = _under(prefix, _POD_SPEC)
    for containers in ("containers", "initContainers", "ephemeralContainers"):
        table.update(_under(f"{prefix}.{containers}", _CONTAINER))
    return table


def _kind(*tables: dict[str, Strategy]) -> dict[str, Strategy]:
    merged = _under("metadata", _OBJECT_META)
    for table in tables:
        merged.update(table)
    return merged


_POD_TEMPLATE = {**_under("spec.template.metadata", _OBJECT_META), **_pod_spec("spec.template.spec")}

# (group, kind) -> dotted field path (list items are transparent) -> (patchStrategy, patchMergeKey).
FIELD_STRATEGIES: dict[tuple[str, str], dict[str, Strategy]] = {
    ("", "Pod"): _kind(_pod_spec("spec"), _under("status", _POD_STATUS)),
    ("", "Node"): _kind({"spec.podCIDRs": ("merge", "")}, _under("status", _CONDITIONS),
                        {"status.addresses": ("merge", "type")}),
    ("", "Namespace"): _kind(_under("status", _CONDITIONS)),
    ("", "Service"): _kind({"spec.ports": ("merge", "port")}, _under("status", _CONDITIONS)),
    ("", "ServiceAccount"): _kind({"secrets": ("merge", "name")}),
    ("apps", "Deployment"): _kind({"spec.strategy": ("retainKeys", "")}, _POD_TEMPLATE,
                                  _under("status", _CONDITIONS)),
    ("apps", "DaemonSet"): _kind(_POD_TEMPLATE, _under("status", _CONDITIONS)),
    ("policy", "PodDisruptionBudget"): _kind(_under("status", _CONDITIONS)),
    ("apiregistration.k8s.io", "APIService"): _kind(_under("status", _CONDITIONS)),
}
# Kinds whose only tagged fields are those of ObjectMeta (ConfigMap, Endpoints, Event, Lease, RBAC,
# EndpointSlice, CRD, ...), and custom resources, get this table.
COMMON_STRATEGIES: dict[str, Strategy] = _kind()


def field_strategies(group: str, kind: str) -> dict[str, Strategy]:
    return FIELD_STRATEGIES.get((group, kind), COMMON_STRATEGIES)


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any], group: str,
                          *, kind: str) -> dict[str, Any]:
    """Apply a strategic merge patch as kube-apiserver does for a built-in type."""
    if not isinstance(patch, dict):
        raise ApiError.bad_request("a strategic merge patch must be a JSON object")
    merger = _Merger(field_strategies(group, kind))
    result = merger.merge_map(copy.deepcopy(target) if isinstance(target, dict) else {},
                              copy.deepcopy(patch), "")
    return result


class _Merger:
    def __init__(self, strategies: dict[str, Strategy]) -> None:
        self.strategies = strategies

    def strategy(self, path: str) -> Strategy:
        return self.strategies.get(path, ("", ""))

    def merge_map(self, original: dict[str, Any], patch: dict[str, Any], path: str) -> dict[str, Any]:
        directive = patch.pop(DIRECTIVE, None)
        if directive == "replace":
            return self.fresh_map(patch, path)
        if directive == "delete":
            return {}
        if directive not in (None, "merge"):
            raise _invalid(f"unknown patch type: {directive} in map: {patch}")
        original = _retain_keys(original, patch)
        self.set_element_orders(original, patch, path)
        for key, value in patch.items():
            if key.startswith(DELETE_FROM_PRIMITIVE_LIST):
                _delete_from_primitive_list(original, key, value)
            elif key.startswith("$"):
                continue  # an unknown directive: a typed decode would drop it
            elif value is None:
                original.pop(key, None)
            elif key not in original:
                original[key] = self.fresh(value, _join(path, key))
            elif isinstance(original[key], dict) and isinstance(value, dict):
                original[key] = self.merge_map(original[key], value, _join(path, key))
            elif isinstance(original[key], list) and isinstance(value, list):
                original[key] = self.merge_list(original[key], value, _join(path, key))
            else:
                original[key] = self.fresh(value, _join(path, key))
        return original

    def fresh(self, value: Any, path: str) -> Any:
        """A patch value with nothing to merge into: directives applied, unmatched nulls dropped."""
        if isinstance(value, dict):
            return self.fresh_map(value, path)
        if isinstance(value, list):
            return self.merge_list([], value, path)
        return value

    def fresh_map(self, value: dict[str, Any], path: str) -> dict[str, Any]:
        return self.merge_map({}, value, path)

    def merge_list(self, original: list[Any], patch: list[Any], path: str) -> list[Any]:
        strategy, merge_key = self.strategy(path)
        if "merge" not in strategy.split(","):
            return [self.fresh(item, path) if isinstance(item, dict) else item for item in patch]
        if not original and not patch:
            return original
        if not any(isinstance(item, dict) for item in [*original, *patch]):
            merged = _deduplicate([*original, *patch])
            patch_items, server_only = _partition(merged, patch, "")
            return merge_ordered(patch_items, server_only, patch, server_order=original, merge_key="")
        if not merge_key:
            raise _invalid(f"cannot merge lists without merge key for {path}")
        original, patch = self.special_elements(original, patch, merge_key, path=path)
        merged = list(original)
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                raise _invalid(f"map: {item} does not contain declared merge key: {merge_key}")
            index = _find(merged, merge_key, item[merge_key])
            if index is None:
                merged.append(self.fresh_map(item, path))
            else:
                merged[index] = self.merge_map(merged[index], item, path)
        patch_items, server_only = _partition(merged, patch, merge_key)
        return merge_ordered(patch_items, server_only, patch, server_order=original, merge_key=merge_key)

    def special_elements(self, original: list[Any], patch: list[Any], merge_key: str,
                         *, path: str) -> tuple[list[Any], list[Any]]:
        """Apply `$patch: delete` and `$patch: replace` list elements; return what is left to merge."""
        plain: list[Any] = []
        replace = False
        for item in patch:
            directive = item.get(DIRECTIVE) if isinstance(item, dict) else None
            if directive is None:
                plain.append(item)
            elif directive == "delete":
                if merge_key not in item:
                    raise _invalid(f"map: {item} does not contain declared merge key: {merge_key}")
                original = [o for o in original if not _key_matches(o, merge_key, item[merge_key])]
            elif directive == "replace":
                replace = True
            elif directive == "merge":
                plain.append({k: v for k, v in item.items() if k != DIRECTIVE})
            else:
                raise _invalid(f"unknown patch type: {directive} in map: {item}")
        if replace:
            return [self.fresh_map(item, path) for item in plain], []
        return original, plain

    def set_element_orders(self, original: dict[str, Any], patch: dict[str, Any], path: str) -> None:
        """Merge each list named by a `$setElementOrder/<field>` directive, then order it as told.

        Precedence: the directive's order, then the patch's, then the live object's.
        """
        for directive in [k for k in patch if k.startswith(SET_ELEMENT_ORDER)]:
            order = patch.pop(directive)
            field = directive[len(SET_ELEMENT_ORDER):]
            if not field or not isinstance(order, list):
                raise ApiError.bad_request("invalid patch: $setElementOrder list is malformed")
            current = original.get(field)
            if field not in patch:
                if not isinstance(current, list):
                    continue
                merged = current
            else:
                value = patch.pop(field)
                if not isinstance(value, list):
                    raise ApiError.bad_request(f"invalid patch: {field} must be a list with {directive}")
                current = current if isinstance(current, list) else []
                merged = self.merge_list(current, value, _join(path, field))
            merge_key = self.strategy(_join(path, field))[1]
            if merged and not isinstance(merged[0], dict):
                merge_key = ""
            patch_items, server_only = _partition(merged, order, merge_key)
            original[field] = merge_ordered(patch_items, server_only, order, server_order=current, merge_key=merge_key)


def merge_ordered(patch_items: list[Any], server_only: list[Any], patch_order: list[Any],
                  *, server_order: list[Any], merge_key: str) -> list[Any]:
    """Interleave patch items (in patch order) with server-only items (in live order).

    A server-only item goes before a patch item only when both were in the live list in that order,
    so items the patch adds come first, as kube-apiserver orders them.
    """
    right = _sort_by(patch_items, patch_order, merge_key)
    left = _sort_by(server_only, server_order, merge_key)
    result: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            result.append(left[i])
            i += 1
        elif i >= len(left):
            result.append(right[j])
            j += 1
        else:
            li = _position(server_order, left[i], merge_key)
            ri = _position(server_order, right[j], merge_key)
            if li is not None and ri is not None and li < ri:
                result.append(left[i])
                i += 1
            else:
                result.append(right[j])
                j += 1
    return result


def _sort_by(items: list[Any], order: list[Any], merge_key: str) -> list[Any]:
    positioned = [(_position(order, item, merge_key), n, item) for n, item in enumerate(items)]
    found = sorted((p, n, item) for p, n, item in positioned if p is not None)
    return [item for _, _, item in found] + [item for p, _, item in positioned if p is None]


def _position(order: Iterable[Any], item: Any, merge_key: str) -> int | None:
    if merge_key:
        if not isinstance(item, dict):
            return None
        return _find(order, merge_key, item.get(merge_key))
    return next((n for n, candidate in enumerate(order) if _same(candidate, item)), None)


def _partition(items: list[Any], by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    inside = [item for item in items if _position(by, item, merge_key) is not None]
    outside = [item for item in items if _position(by, item, merge_key) is None]
    return inside, outside


def _find(items: Iterable[Any], merge_key: str, value: Any) -> int | None:
    return next((n for n, item in enumerate(items) if _key_matches(item, merge_key, value)), None)


def _key_matches(item: Any, merge_key: str, value: Any) -> bool:
    return isinstance(item, dict) and merge_key in item and _same(item[merge_key], value)


def _same(left: Any, right: Any) -> bool:
    # JSON true is not the number 1, though Python says so.
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    return bool(left == right)


def _deduplicate(items: list[Any]) -> list[Any]:
    result: list[Any] = []
    for item in items:
        if not any(_same(item, seen) for seen in result):
            result.append(item)
    return result


def _retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    if RETAIN_KEYS not in patch:
        return original
    retained = patch.pop(RETAIN_KEYS)
    if not isinstance(retained, list):
        raise ApiError.bad_request("invalid patch: $retainKeys must be a list of field names")
    for key, value in patch.items():
        if value is None or key.startswith("$"):
            continue
        if key not in retained:
            raise ApiError.bad_request(
                f"invalid patch: field {key!r} is in the patch but not in its $retainKeys list {retained}")
    return {k: v for k, v in original.items() if k in retained}


def _delete_from_primitive_list(original: dict[str, Any], directive: str, values: Any) -> None:
    field = directive[len(DELETE_FROM_PRIMITIVE_LIST):]
    if not field or not isinstance(values, list):
        raise ApiError.bad_request("invalid patch: $deleteFromPrimitiveList must be a list of values")
    current = original.get(field)
    if isinstance(current, list):
        original[field] = [item for item in current if not any(_same(item, gone) for gone in values)]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _invalid(message: str) -> ApiError:
    cause = {"reason": "FieldValueInvalid", "message": message}
    return ApiError(422, "Invalid", message, {"causes": [cause]})


__all__ = ["FIELD_STRATEGIES", "field_strategies", "merge_ordered", "strategic_merge_patch"]
