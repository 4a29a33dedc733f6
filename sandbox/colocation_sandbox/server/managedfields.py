"""Server-side apply and `metadata.managedFields`: who owns which field of an object.

A field set is a set of paths; a path is a tuple of elements as FieldsV1 spells them:
("f", "spec") for a field, ("k", '{"name":"nginx"}') for an item of a list keyed by its merge key,
("v", '"example.com/x"') for a value of a list used as a set. Which lists are keyed, sets or atomic
comes from the strategic merge table; lists it does not name (custom resources) are atomic.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server.strategic_merge import field_strategies

Element = tuple[str, str]
FieldPath = tuple[Element, ...]
FieldSet = set[FieldPath]

_MISSING: Any = object()
# Fields the API server owns or that name the object: never in anybody's field set.
_UNOWNED_META = ("name", "namespace", "creationTimestamp", "selfLink", "uid", "generation",
                 "managedFields", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds")
# SSA keys ports by number and protocol, where the strategic merge patch uses the number alone.
_EXTRA_LIST_KEYS = {"containerPort": "protocol", "port": "protocol"}
# Label selectors (metav1.LabelSelector) are atomic structs: one owner for the whole selector.
_ATOMIC_MAPS = {("apps", "Deployment"): {"spec.selector"}, ("apps", "DaemonSet"): {"spec.selector"},
                ("policy", "PodDisruptionBudget"): {"spec.selector"}}
# Key fields are defaulted before items are matched: a port without a protocol is a TCP port.
_KEY_DEFAULTS = {"protocol": "TCP"}


class _Schema:
    def __init__(self, group: str, kind: str) -> None:
        self.strategies = field_strategies(group, kind)
        self.atomic_maps = _ATOMIC_MAPS.get((group, kind), set())

    def list_keys(self, schema_path: str) -> tuple[str, ...] | None:
        """Key fields of a keyed list, () for a set, None for an atomic list."""
        strategy, merge_key = self.strategies.get(schema_path, ("", ""))
        if "merge" not in strategy.split(","):
            return None
        if merge_key in _EXTRA_LIST_KEYS:
            return (merge_key, _EXTRA_LIST_KEYS[merge_key])
        return (merge_key,) if merge_key else ()

    def element(self, item: Any, keys: tuple[str, ...], schema_path: str) -> Element:
        if not keys:
            return ("v", _canonical(item))
        if not isinstance(item, dict) or keys[0] not in item:
            raise ApiError(422, "Invalid", f".{schema_path}: associative list with keys has an element "
                           f"that omits key field {keys[0]!r}")
        values = {k: item.get(k, _KEY_DEFAULTS.get(k)) for k in keys}
        return ("k", _canonical({k: v for k, v in values.items() if v is not None}))


def server_side_apply(live: dict[str, Any] | None, applied: dict[str, Any], manager: str, *, force: bool,
                      group: str, kind: str, now: str, ignored_fields: Iterable[str] = ()) -> dict[str, Any]:
    """Merge an applied configuration into the live object and record `manager` as its owner.

    `ignored_fields` names top-level fields the endpoint resets (e.g. "status" on the main resource).
    Raises 409 Conflict when the configuration changes a field another manager owns, unless `force`.
    """
    if not isinstance(applied, dict):
        raise ApiError.bad_request("the body of an apply patch must be an object")
    if (applied.get("metadata") or {}).get("managedFields"):
        raise ApiError.bad_request("metadata.managedFields must be nil")
    schema = _Schema(group, kind)
    config = {k: v for k, v in applied.items() if k not in set(ignored_fields)}
    api_version = str(applied.get("apiVersion", ""))
    new_set = _strip(_collect(config, schema))
    entries = _parse_entries((live or {}).get("metadata", {}).get("managedFields"))
    mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Apply"
                 and not e.get("subresource")), None)
    others = [e for e in entries if e is not mine]
    last_set: FieldSet = mine["set"] if mine else set()

    merged = _merge(copy.deepcopy(live) if live is not None else {}, config, "", schema=schema)
    owned = new_set.union(*(e["set"] for e in others))
    merged = _prune(merged, last_set - owned, owned)

    changed = _changed(live or {}, merged, new_set)
    conflicts = [(e, sorted(e["set"] & changed, key=_path_string)) for e in others]
    conflicts = [(e, paths) for e, paths in conflicts if paths]
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for entry in others:
        remaining = {p for p in entry["set"] - changed if _lookup(merged, p) is not _MISSING}
        entry["set"] = remaining

    own_entry = mine or {"manager": manager, "operation": "Apply"}
    own_entry.update(set=new_set, apiVersion=api_version, time=now)
    if mine is None:
        entries.append(own_entry)
    merged.setdefault("metadata", {})["managedFields"] = _render_entries(entries)
    return merged


def managed_fields_for_update(old: dict[str, Any] | None, new: dict[str, Any], manager: str,
                              *, operation: str, api_version: str, now: str,
                              group: str = "", kind: str = "") -> list[dict[str, Any]]:
    """The managedFields of `new` after a create, update or non-apply patch by `manager`.

    The fields it changed become its own and are taken from every other manager (updates never
    conflict). A request that brings its own, different managedFields replaces the recorded ones.
    """
    schema = _Schema(group, kind)
    recorded = (old or {}).get("metadata", {}).get("managedFields")
    sent = new.get("metadata", {}).get("managedFields")
    # An empty list keeps the recorded entries; `[{}]` is how a client clears them.
    entries = _parse_entries(sent if sent and sent != recorded else recorded)
    added: FieldSet = set()
    if old is None:
        added = _collect(new, schema)
    else:
        _diff(old, new, (), schema_path="", schema=schema, added=added)
    added = _strip(added)
    identity = (manager, operation, api_version)
    mine = next((e for e in entries if (e["manager"], e["operation"], e.get("apiVersion")) == identity
                 and not e.get("subresource")), None)
    for entry in entries:
        # Whatever no longer exists is nobody's, nested fields of a removed map included.
        entry["set"] = {p for p in entry["set"] if _lookup(new, p) is not _MISSING}
        if entry is not mine:
            entry["set"] -= added
    if added:
        if mine is None:
            mine = {"manager": manager, "operation": operation}
            entries.append(mine)
        mine.update(set=mine.get("set", set()) | added, apiVersion=api_version, time=now)
    return _render_entries(entries)


# --- field sets ---------------------------------------------------------------------------------------

def _collect(value: Any, schema: _Schema, path: FieldPath = (), *, schema_path: str = "") -> FieldSet:
    """The fields an applied configuration sets: its leaves, its list items and its empty maps."""
    out: FieldSet = set()
    if isinstance(value, dict) and schema_path in schema.atomic_maps:
        out.add(path)
    elif isinstance(value, dict):
        for key, child in value.items():
            child_path = (*path, ("f", key))
            if child is None or child == {}:
                out.add(child_path)
            out |= _collect(child, schema, child_path, schema_path=_join(schema_path, key))
    elif isinstance(value, list):
        keys = schema.list_keys(schema_path)
        if keys is None:
            out.add(path)
        else:
            for item in value:
                item_path = (*path, schema.element(item, keys, schema_path))
                out.add(item_path)
                if keys:
                    out |= _collect(item, schema, item_path, schema_path=schema_path)
    elif path:
        out.add(path)
    return out


def _everything(value: Any, schema: _Schema, path: FieldPath, *, schema_path: str) -> FieldSet:
    """A value that appears: itself, and every field and item inside it."""
    leaves = _collect(value, schema, path, schema_path=schema_path)
    return {path} | leaves | {p[:n] for p in leaves for n in range(len(path) + 1, len(p))}


def _diff(old: Any, new: Any, path: FieldPath, *, schema_path: str, schema: _Schema, added: FieldSet) -> None:
    """Add to `added` the paths that appear or change from `old` to `new`."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key, value in new.items():
            child_path, child_schema = (*path, ("f", key)), _join(schema_path, key)
            if key in old:
                _diff(old[key], value, child_path, schema_path=child_schema, schema=schema, added=added)
            else:
                added.update(_everything(value, schema, child_path, schema_path=child_schema))
        return
    keys = schema.list_keys(schema_path) if isinstance(old, list) and isinstance(new, list) else None
    if keys is not None:
        before = {schema.element(item, keys, schema_path): item for item in old}
        after = {schema.element(item, keys, schema_path): item for item in new}
        for element, item in after.items():
            if element not in before:
                added.update(_everything(item, schema, (*path, element), schema_path=schema_path))
            elif keys:
                _diff(before[element], item, (*path, element), schema_path=schema_path, schema=schema, added=added)
    elif not _equal(old, new):
        added.add(path)


def _strip(paths: FieldSet) -> FieldSet:
    def owned(path: FieldPath) -> bool:
        if not path or path[0] in (("f", "apiVersion"), ("f", "kind")):
            return False
        if path[0] == ("f", "metadata"):
            return len(path) > 1 and path[1][1] not in _UNOWNED_META
        return True
    return {p for p in paths if owned(p)}


def _changed(live: dict[str, Any], merged: dict[str, Any], applied: FieldSet) -> FieldSet:
    """Applied paths the apply adds, or whose leaf value it changes."""
    parents = {p[:n] for p in applied for n in range(1, len(p))}
    changed: FieldSet = set()
    for path in applied:
        before, after = _lookup(live, path), _lookup(merged, path)
        if after is _MISSING:
            continue
        if before is _MISSING or (path not in parents and not _equal(before, after)):
            changed.add(path)
    return changed


# --- reading and changing objects by path --------------------------------------------------------------

def _lookup(obj: Any, path: FieldPath) -> Any:
    node = obj
    for kind, token in path:
        if kind == "f":
            node = node.get(token, _MISSING) if isinstance(node, dict) else _MISSING
        elif isinstance(node, list):
            node = next((item for item in node if _matches(item, kind, token)), _MISSING)
        else:
            node = _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def _matches(item: Any, kind: str, token: str) -> bool:
    wanted = json.loads(token)
    if kind == "v":
        return _equal(item, wanted)
    if kind == "k" and isinstance(item, dict):
        return all(_equal(item.get(k, _KEY_DEFAULTS.get(k, _MISSING)), v) for k, v in wanted.items())
    return False


def _remove(obj: Any, path: FieldPath) -> bool:
    parent = _lookup(obj, path[:-1])
    kind, token = path[-1]
    if kind == "f" and isinstance(parent, dict) and token in parent:
        del parent[token]
        return True
    if isinstance(parent, list):
        kept = [item for item in parent if not _matches(item, kind, token)]
        if len(kept) != len(parent):
            parent[:] = kept
            return True
    return False


def _prune(obj: dict[str, Any], doomed: FieldSet, owned: FieldSet) -> dict[str, Any]:
    """Remove fields nobody manages any more; keep an item someone still owns a field of."""
    owned_parents = {p[:n] for p in owned for n in range(1, len(p))}
    for path in sorted(doomed, key=len, reverse=True):
        if path in owned_parents or not _remove(obj, path):
            continue
        parent = path[:-1]
        # Mirror `omitempty`: a map or list emptied by the removal goes too, unless someone owns it.
        while parent and parent not in owned and parent not in owned_parents \
                and _lookup(obj, parent) in ({}, []) and _remove(obj, parent):
            parent = parent[:-1]
    return obj


def _merge(live: Any, config: Any, schema_path: str, *, schema: _Schema) -> Any:
    if isinstance(live, dict) and isinstance(config, dict) and schema_path not in schema.atomic_maps:
        out = dict(live)
        for key, value in config.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(out.get(key, _MISSING), value, _join(schema_path, key), schema=schema)
        return out
    keys = schema.list_keys(schema_path) if isinstance(live, list) and isinstance(config, list) else None
    if keys is None:
        return _without_nulls(config)
    # Like structured-merge-diff: live-only items keep their place, configured items come in the
    # configuration's order, new ones where the configuration puts them.
    live_items = {schema.element(item, keys, schema_path): item for item in live}
    configured = [(schema.element(item, keys, schema_path), item) for item in config]
    wanted = {element for element, _ in configured}
    merged: list[Any] = []
    done: set[Element] = set()
    pending = iter(configured)
    for element in [*live_items, None]:
        if element is not None and element not in wanted:
            merged.append(live_items[element])
            continue
        if element in done:
            continue
        for next_element, item in pending:  # configured items up to and including this shared one
            if next_element in done:
                continue
            done.add(next_element)
            before = live_items.get(next_element, _MISSING)
            merged.append(_without_nulls(item) if before is _MISSING or not keys
                          else _merge(before, item, schema_path, schema=schema))
            if next_element == element:
                break
    return merged


def _without_nulls(value: Any) -> Any:
    """A copy of a configured value; a null in it means "not set"."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


# --- managedFields entries --------------------------------------------------------------------------

def _parse_entries(raw: Any) -> list[dict[str, Any]]:
    entries = []
    for entry in raw if isinstance(raw, list) else []:
        if isinstance(entry, dict) and entry.get("manager") is not None:
            parsed = {k: v for k, v in entry.items() if k not in ("fieldsV1", "fieldsType")}
            parsed["set"] = _from_fields_v1(entry.get("fieldsV1") or {}, ())
            entries.append(parsed)
    return entries


def _render_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rendered = []
    for entry in entries:
        if not entry["set"]:
            continue
        out = {k: v for k, v in entry.items() if k in ("manager", "operation", "apiVersion", "time")}
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = _to_fields_v1(entry["set"])
        if entry.get("subresource"):
            out["subresource"] = entry["subresource"]
        rendered.append(out)
    return rendered


def _from_fields_v1(tree: dict[str, Any], prefix: FieldPath) -> FieldSet:
    out: FieldSet = set()
    for key, subtree in tree.items():
        if key == "." or not isinstance(subtree, dict):
            continue
        kind, _, token = key.partition(":")
        path = (*prefix, (kind, token))
        if not subtree or "." in subtree:
            out.add(path)
        out |= _from_fields_v1(subtree, path)
    return out


def _to_fields_v1(paths: FieldSet) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in paths:
        node = root
        for kind, token in path:
            node = node.setdefault(f"{kind}:{token}", {})
    for path in paths:
        node = root
        for kind, token in path:
            node = node[f"{kind}:{token}"]
        if node:
            node["."] = {}
    return _sorted_tree(root)


def _sorted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {key: _sorted_tree(tree[key]) for key in sorted(tree)}


# --- conflicts ---------------------------------------------------------------------------------------

def _conflict_error(conflicts: list[tuple[dict[str, Any], list[FieldPath]]]) -> ApiError:
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {_manager_name(entry)}",
               "field": _path_string(path)} for entry, paths in conflicts for path in paths]
    if len(causes) == 1:
        entry, paths = conflicts[0]
        message = (f"Apply failed with 1 conflict: conflict with {_manager_name(entry)}: "
                   f"{_path_string(paths[0])}")
    else:
        lines = []
        for entry, paths in sorted(conflicts, key=lambda c: str(c[0]["manager"])):
            lines.append(f"conflicts with {_manager_name(entry)}:")
            lines.extend(f"- {_path_string(p)}" for p in paths)
        message = f"Apply failed with {len(causes)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})


def _manager_name(entry: dict[str, Any]) -> str:
    name = json.dumps(entry["manager"])
    if entry.get("operation") == "Update":
        name += f" using {entry.get('apiVersion', '')}"
        if entry.get("time"):
            name += f" at {entry['time']}"
    return name


def _path_string(path: FieldPath) -> str:
    parts = []
    for kind, token in path:
        if kind == "f":
            parts.append(f".{token}")
        elif kind == "k":
            keys = json.loads(token)
            parts.append("[" + ",".join(f"{k}={json.dumps(keys[k])}" for k in sorted(keys)) + "]")
        elif kind == "v":
            parts.append(f"[={token}]")
        else:
            parts.append(f"[{token}]")
    return "".join(parts)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _equal(left: Any, right: Any) -> bool:
    return _canonical(left) == _canonical(right) if left is not _MISSING and right is not _MISSING \
        else left is right


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
