"""The four patch types of the Kubernetes API, as pure functions over JSON values.

- JSON merge patch (RFC 7386) and its inverse, `create_merge_patch`.
- JSON patch (RFC 6902), with kube-apiserver's error codes.
- Strategic merge patch for built-in types (`colocation_sandbox.server.strategic_merge`).
- Server-side apply with managed fields (`colocation_sandbox.server.managedfields`).

Inputs are never mutated: every function returns a new value.
"""

from __future__ import annotations

import copy
from typing import Any

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.merge_patch import json_merge_patch
from colocation_sandbox.server.managedfields import managed_fields_for_update, server_side_apply
from colocation_sandbox.server.strategic_merge import strategic_merge_patch

__all__ = [
    "create_merge_patch",
    "json_merge_patch",
    "json_patch",
    "managed_fields_for_update",
    "server_side_apply",
    "strategic_merge_patch",
]


def create_merge_patch(source: Any, target: Any) -> Any:
    """The smallest merge patch that turns `source` into `target`.

    Merge patches cannot express a null value in the target (null means "remove"),
    so documents containing nulls inside objects do not round-trip; that is RFC 7386's limit.
    """
    if not isinstance(source, dict) or not isinstance(target, dict):
        return copy.deepcopy(target)
    patch: dict[str, Any] = {}
    for key in source:
        if key not in target:
            patch[key] = None
    for key, value in target.items():
        if key not in source:
            patch[key] = copy.deepcopy(value)
        elif source[key] != value or type(source[key]) is not type(value):
            patch[key] = create_merge_patch(source[key], value)
    return patch


# --- JSON patch (RFC 6902) ----------------------------------------------------------------------------

_OPS = ("add", "remove", "replace", "move", "copy", "test")


def json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch.

    Like kube-apiserver: a body that is not a list of operations is a 400 BadRequest (it fails to
    decode); an operation that cannot be applied, a failed `test` included, is a 422 Invalid.
    """
    if not isinstance(operations, list):
        raise ApiError.bad_request(
            f"json: cannot unmarshal {_json_type(operations)} into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for number, operation in enumerate(operations):
        doc = _apply_operation(doc, operation, number)
    return doc


def _apply_operation(doc: Any, operation: Any, number: int) -> Any:
    if not isinstance(operation, dict):
        raise _unprocessable(f"operation {number} is not an object: {operation!r}")
    op = operation.get("op")
    if op not in _OPS:
        raise _unprocessable(f"Unexpected kind: {op}")
    path = _string_member(operation, "path", op)
    if op == "add":
        return _add(doc, path, copy.deepcopy(_value_member(operation, op)), op=op)
    if op == "remove":
        doc, _ = _remove(doc, path, op)
        return doc
    if op == "replace":
        doc, _ = _remove(doc, path, op)
        return _add(doc, path, copy.deepcopy(_value_member(operation, op)), op=op)
    if op == "test":
        expected = _value_member(operation, op)
        actual = _get(doc, path, op)
        if not _json_equal(actual, expected):
            # kube-apiserver 1.36 says no more than this for a failed test operation (no cause).
            raise ApiError(422, "Invalid", _REJECTED, {})
        return doc
    source = _string_member(operation, "from", op)
    if op == "move":
        if path != source and path.startswith(source + "/"):
            raise _unprocessable(f"move operation cannot move {source} into its own child {path}")
        doc, value = _remove(doc, source, op)
        return _add(doc, path, value, op=op)
    return _add(doc, path, copy.deepcopy(_get(doc, source, op)), op=op)  # copy


def _string_member(operation: dict[str, Any], member: str, op: str) -> str:
    value = operation.get(member)
    if not isinstance(value, str):
        raise _unprocessable(f"{op} operation has no {member!r} string: {operation!r}")
    if value and not value.startswith("/"):
        raise _unprocessable(f"{op} operation: JSON pointer {value!r} must be empty or start with '/'")
    return value


def _value_member(operation: dict[str, Any], op: str) -> Any:
    if "value" not in operation:
        raise _unprocessable(f"{op} operation has no 'value': {operation!r}")
    return operation["value"]


def _tokens(pointer: str) -> list[str]:
    # ~1 before ~0, so that "~01" decodes to "~1" and not "/".
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]] if pointer else []


def _index(container: list[Any], token: str, pointer: str, *, op: str, appending: bool) -> int:
    if token == "-" and appending:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _unprocessable(f"{op} operation does not apply: {token!r} is not an array index in {pointer}")
    index = int(token)
    if index > len(container) or (index == len(container) and not appending):
        raise _unprocessable(f"{op} operation does not apply: index {index} is out of bounds in {pointer}")
    return index


def _parent(doc: Any, pointer: str, op: str) -> tuple[Any, str]:
    tokens = _tokens(pointer)
    node = doc
    for depth, token in enumerate(tokens[:-1]):
        here = "/" + "/".join(tokens[: depth + 1])
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, here, op=op, appending=False)]
        else:
            raise _unprocessable(f"{op} operation does not apply: doc is missing path: {pointer!r}")
    return node, tokens[-1]


def _get(doc: Any, pointer: str, op: str) -> Any:
    if not pointer:
        return doc
    node, last = _parent(doc, pointer, op)
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list):
        return node[_index(node, last, pointer, op=op, appending=False)]
    raise _unprocessable(f"{op} operation does not apply: doc is missing path: {pointer!r}")


def _add(doc: Any, pointer: str, value: Any, *, op: str) -> Any:
    if not pointer:
        return value
    node, last = _parent(doc, pointer, op)
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list):
        node.insert(_index(node, last, pointer, op=op, appending=True), value)
    else:
        raise _unprocessable(f"{op} operation does not apply: doc is missing path: {pointer!r}")
    return doc


def _remove(doc: Any, pointer: str, op: str) -> tuple[Any, Any]:
    if not pointer:
        return None, doc
    node, last = _parent(doc, pointer, op)
    if isinstance(node, dict) and last in node:
        return doc, node.pop(last)
    if isinstance(node, list):
        return doc, node.pop(_index(node, last, pointer, op=op, appending=False))
    raise _unprocessable(f"{op} operation does not apply: doc is missing key: {pointer}")


def _json_equal(left: Any, right: Any) -> bool:
    # JSON has no distinct boolean-number equality: True must not equal 1.
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right) and isinstance(left, (int, float)) == isinstance(right, (int, float))


_REJECTED = "the server rejected our request due to an error in our request"


def _unprocessable(detail: str, field: str = "") -> ApiError:
    # kube-apiserver answers 422 with a generic message and the library's error as the cause;
    # the cause is also the message here, because it is the part that helps.
    cause: dict[str, Any] = {"reason": "UnexpectedServerResponse", "message": detail}
    if field:
        cause["field"] = field
    return ApiError(422, "Invalid", detail, {"causes": [cause]})


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "null" if value is None else type(value).__name__
