"""OpenAPI documents for the NodeMetric group, generated from the pydantic model that validates reports.

kubectl reads /openapi/v3 (and aggregators /openapi/v2) to learn the kinds an API serves; deriving
the schema from the validating model keeps the published contract and the enforced one the same.
The API server serves them, and the /openapi/v3 index of them, for the NodeMetric group.
"""

from __future__ import annotations

import functools
from typing import Any

from colocation.nodemetrics.report_schema import COLLECTION_PATH, GROUP, KIND, LIST_KIND, NODE_METRIC, VERSION

_PREFIX = "dev.colocation.metrics.v1alpha1."
_GVK = [{"group": GROUP, "version": VERSION, "kind": KIND}]


def _rewrite_refs(node: Any, target: str) -> Any:
    if isinstance(node, dict):
        return {k: (target + _PREFIX + v.rsplit("/", 1)[-1] if k == "$ref" and isinstance(v, str)
                    else _rewrite_refs(v, target)) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite_refs(v, target) for v in node]
    return node


def _schemas(target: str) -> dict[str, Any]:
    schema = NODE_METRIC.json_schema(by_alias=True, ref_template="#/$defs/{model}")
    definitions = {_PREFIX + name: _rewrite_refs(body, target) for name, body in schema.pop("$defs", {}).items()}
    root = _rewrite_refs(schema, target)
    root["x-kubernetes-group-version-kind"] = _GVK
    definitions[_PREFIX + KIND] = root
    definitions[_PREFIX + LIST_KIND] = {
        "type": "object", "required": ["items"],
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                       "metadata": {"type": "object"},
                       "items": {"type": "array", "items": {"$ref": target + _PREFIX + KIND}}},
        "x-kubernetes-group-version-kind": [{**_GVK[0], "kind": LIST_KIND}]}
    return definitions


def _operation(verb: str, kind: str, target: str, *, action: str) -> dict[str, Any]:
    ref = {"$ref": target + _PREFIX + kind}
    return {"operationId": f"{verb}MetricsColocationDevV1alpha1NodeMetric", "tags": ["metricsColocationDev_v1alpha1"],
            "x-kubernetes-action": action, "x-kubernetes-group-version-kind": _GVK[0],
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
                          if target.startswith("#/components") else {"description": "OK", "schema": ref}}}


def _paths(target: str) -> dict[str, Any]:
    return {
        COLLECTION_PATH: {"get": _operation("list", LIST_KIND, target, action="list")},
        COLLECTION_PATH + "/{name}": {"get": _operation("read", KIND, target, action="get")},
        COLLECTION_PATH + "/{name}/status": {"get": _operation("readStatus", KIND, target, action="get"),
                                             "put": _operation("replaceStatus", KIND, target, action="put")},
    }


@functools.cache
def openapi_v3_group_version() -> dict[str, Any]:
    target = "#/components/schemas/"
    return {"openapi": "3.0.0", "info": {"title": "colocation NodeMetric API", "version": VERSION},
            "paths": _paths(target), "components": {"schemas": _schemas(target)}}


@functools.cache
def openapi_v2() -> dict[str, Any]:
    target = "#/definitions/"
    return {"swagger": "2.0", "info": {"title": "colocation NodeMetric API", "version": VERSION},
            "paths": _paths(target), "definitions": _schemas(target)}
