"""Decoding request bodies strictly by their content type, and applying patches by their type.

A body that does not match its declared content type is rejected: a client that sends a JSON
patch labelled as a merge patch has a bug that a real cluster would expose, so the sandbox must too.
"""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server import patches
from colocation_sandbox.server.resource_types import ResourceType

MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's limit for a single object write

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
PATCH_TYPES = (MERGE_PATCH, JSON_PATCH, STRATEGIC_PATCH, APPLY_PATCH, "application/apply-patch+cbor")


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def decode_object(raw: bytes, content_type: str) -> dict[str, Any]:
    """The body of a create or update: a JSON (or YAML) object."""
    kind = media_type(content_type) or "application/json"
    if kind in ("application/json", "*/*"):
        value = _json(raw)
    elif kind in ("application/yaml", "application/x-yaml"):
        value = _yaml(raw)
    elif kind == PROTOBUF:
        # kubectl's typed clients (create namespace/configmap/secret/token, auth can-i) send protobuf.
        from colocation_sandbox.server import protobuf  # only kubectl's typed clients need it

        value = protobuf.decode_object(raw)
    else:
        raise ApiError.unsupported_media_type(content_type)
    if not isinstance(value, dict):
        raise ApiError.bad_request("the body of the request must be a JSON object")
    return value


def decode_patch(raw: bytes, content_type: str, rt: ResourceType) -> tuple[str, Any]:
    kind = media_type(content_type)
    if kind not in PATCH_TYPES:
        raise ApiError.unsupported_media_type(content_type)
    if kind == STRATEGIC_PATCH and not rt.strategic:
        raise ApiError.unsupported_media_type(
            f"{content_type} (strategic merge patch is not supported for custom resources; "
            "use a JSON merge patch or a JSON patch)")
    if kind == APPLY_PATCH:
        value = _yaml(raw)
        if not isinstance(value, dict):
            raise ApiError.bad_request("the body of an apply patch must be a YAML or JSON object")
        return kind, value
    if kind == "application/apply-patch+cbor":
        raise ApiError.unsupported_media_type(content_type)
    value = _json(raw)
    if kind == JSON_PATCH and not isinstance(value, list):
        raise ApiError.bad_request("the body of a JSON patch (application/json-patch+json) must be a JSON "
                                   "array of operations, got " + type(value).__name__)
    if kind in (MERGE_PATCH, STRATEGIC_PATCH) and not isinstance(value, dict):
        raise ApiError.bad_request(f"the body of a {kind} patch must be a JSON object, got "
                                   + type(value).__name__)
    return kind, value


def apply_patch(kind: str, current: dict[str, Any], body: Any, *, rt: ResourceType) -> dict[str, Any]:
    if kind == MERGE_PATCH:
        result = patches.json_merge_patch(current, body)
    elif kind == JSON_PATCH:
        result = patches.json_patch(current, body)
    elif kind == STRATEGIC_PATCH:
        result = patches.strategic_merge_patch(current, body, rt.group, kind=rt.kind)
    else:
        raise ApiError.internal(f"patch type {kind} is applied elsewhere")
    if not isinstance(result, dict):
        raise ApiError(422, "Invalid", "the patch turned the object into something that is not an object")
    return result


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError.bad_request(f"the body of the request is not valid JSON: {exc}") from None


def _yaml(raw: bytes) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ApiError.bad_request(f"the body of the request is not valid YAML: {exc}") from None
