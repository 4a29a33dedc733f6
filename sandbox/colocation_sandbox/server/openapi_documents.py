"""Minimal OpenAPI documents: enough for kubectl to trust the server with field validation.

Each kind's PATCH operation (tagged `x-kubernetes-group-version-kind`) takes `fieldValidation`,
so kubectl leaves validation to the server. It does not list
`application/strategic-merge-patch+json`, so kubectl builds patches from its compiled-in types.

Why: docs/development.md#inside-the-builtin-api-server
"""

from __future__ import annotations

import hashlib
import json

from colocation.apimachinery.objects import Obj
from colocation_sandbox.server.resource_types import Registry, ResourceType

# Group -> the Go package upstream names its definitions after; other groups are custom resources,
# named by their reversed domain (slo.colocation.dev -> dev.colocation.slo).
_BUILTIN_PACKAGES = {
    "": "io.k8s.api.core",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
    "apiregistration.k8s.io": "io.k8s.kube-aggregator.pkg.apis.apiregistration",
}
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"

# Subresources whose body is another kind than the resource's own.
_SUBRESOURCE_KINDS = {
    "scale": ("autoscaling", "v1", "Scale"),
    "eviction": ("policy", "v1", "Eviction"),
    "binding": ("", "v1", "Binding"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
}

_QUERY = "query"


def definition_name(group: str, version: str, kind: str) -> str:
    """The schema name upstream gives a kind, e.g. io.k8s.api.apps.v1.Deployment."""
    if group in _BUILTIN_PACKAGES:
        package = _BUILTIN_PACKAGES[group]
    elif group.endswith(".k8s.io") or "." not in group:
        package = f"io.k8s.api.{group.split('.')[0]}"
    else:
        package = ".".join(reversed(group.split(".")))
    return f"{package}.{version}.{kind}"


def _gvk(group: str, version: str, kind: str) -> Obj:
    return {"group": group, "version": version, "kind": kind}


def _param(name: str, description: str, kind: str = "string", *, where: str = _QUERY) -> Obj:
    param: Obj = {"name": name, "in": where, "description": description, "schema": {"type": kind}}
    if where == "path":
        param["required"] = True
    return param


_DRY_RUN = _param("dryRun", "When present, modifications are not persisted. Valid value: All.")
_FIELD_MANAGER = _param("fieldManager", "Name of the actor making the change, for managed fields.")
_FIELD_VALIDATION = _param(
    "fieldValidation", "How the server treats unknown and duplicate fields in the body: "
    "Ignore, Warn (the default) or Strict (reject the request).")
_FORCE = _param("force", "Apply requests only: take over fields other managers own.", "boolean")
_WRITE_PARAMS = (_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION)
_LIST_PARAMS = tuple(
    _param(name, description, kind) for name, description, kind in (
        ("allowWatchBookmarks", "Ask for BOOKMARK watch events.", "boolean"),
        ("continue", "Continue token of a paginated list.", "string"),
        ("fieldSelector", "Restrict results by their fields.", "string"),
        ("labelSelector", "Restrict results by their labels.", "string"),
        ("limit", "Maximum number of results of one page.", "integer"),
        ("resourceVersion", "The resourceVersion to list or watch from.", "string"),
        ("resourceVersionMatch", "How resourceVersion applies to a list.", "string"),
        ("sendInitialEvents", "Start a watch with the current state as ADDED events.", "boolean"),
        ("timeoutSeconds", "Time limit of the list or watch call.", "integer"),
        ("watch", "Watch for changes instead of listing.", "boolean"),
    ))
_DELETE_PARAMS = (
    _DRY_RUN,
    _param("gracePeriodSeconds", "Seconds before the object is deleted.", "integer"),
    _param("propagationPolicy", "Orphan, Background or Foreground garbage collection.", "string"),
)


def _ref(name: str) -> Obj:
    return {"$ref": f"#/components/schemas/{name}"}


_RESPONSE_TYPES = ("application/json", "application/yaml")


def _content(schema_name: str, media_types: tuple[str, ...] = _RESPONSE_TYPES) -> Obj:
    return {media_type: {"schema": _ref(schema_name)} for media_type in media_types}


def _operation(action: str, verb_id: str, gvk: Obj, *, body: str = "", params: tuple[Obj, ...] = (),
               response: str = "", patch: bool = False) -> Obj:
    operation: Obj = {
        "description": f"{action} {gvk['kind']}",
        "operationId": verb_id,
        "parameters": list(params),
        "responses": {"200": {"description": "OK", "content": _content(response)} if response else
                      {"description": "OK"}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    }
    if patch:
        media_types = ("application/json-patch+json", "application/merge-patch+json",
                       "application/apply-patch+yaml")
        operation["requestBody"] = {"content": _content(f"{_META}.Patch", media_types), "required": True}
    elif body:
        operation["requestBody"] = {"content": _content(body, ("*/*",)), "required": True}
    return operation


def _operation_prefix(rt: ResourceType) -> str:
    group = rt.group.removesuffix(".k8s.io") if rt.group else "core"
    words = group.replace("-", ".").split(".")
    return "".join(w[:1].upper() + w[1:] for w in [*words, rt.version])


def _paths_for(rt: ResourceType) -> tuple[dict[str, Obj], set[tuple[str, str, str]]]:
    """The paths of one resource type, and the kinds they mention."""
    prefix = f"/api/{rt.version}" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    scope = "Namespaced" if rt.namespaced else ""
    namespace_part = "/namespaces/{namespace}" if rt.namespaced else ""
    collection = f"{prefix}{namespace_part}/{rt.resource}"
    item = f"{collection}/{{name}}"
    camel = _operation_prefix(rt)
    gvk = _gvk(rt.group, rt.version, rt.kind)
    own = definition_name(rt.group, rt.version, rt.kind)
    own_list = definition_name(rt.group, rt.version, rt.list_kind)
    kinds = {(rt.group, rt.version, rt.kind)}
    verbs = set(rt.verbs)
    name_param = _param("name", f"name of the {rt.kind}", where="path")
    namespace_param = _param("namespace", "object name and auth scope, such as for teams and projects",
                             where="path")
    scope_params = [namespace_param] if rt.namespaced else []
    paths: dict[str, Obj] = {}

    def add(path: str, method: str, operation: Obj, *, path_params: list[Obj]) -> None:
        entry = paths.setdefault(path, {"parameters": path_params})
        entry[method] = operation

    if "list" in verbs:
        kinds.add((rt.group, rt.version, rt.list_kind))
        add(collection, "get", _operation("list", f"list{camel}{scope}{rt.kind}", gvk, params=_LIST_PARAMS,
                                          response=own_list), path_params=scope_params)
        if rt.namespaced:
            add(f"{prefix}/{rt.resource}", "get",
                _operation("list", f"list{camel}{rt.kind}ForAllNamespaces", gvk, params=_LIST_PARAMS,
                           response=own_list), path_params=[])
    if "create" in verbs:
        add(collection, "post", _operation("post", f"create{camel}{scope}{rt.kind}", gvk, body=own,
                                           params=_WRITE_PARAMS, response=own), path_params=scope_params)
    if "deletecollection" in verbs:
        add(collection, "delete", _operation(
            "deletecollection", f"deleteCollection{camel}{scope}{rt.kind}", gvk,
            params=(*_DELETE_PARAMS, *_LIST_PARAMS), response=f"{_META}.Status"), path_params=scope_params)
    item_params = [name_param, *scope_params]
    item_operations = (("get", "get", "read", ()), ("update", "put", "replace", _WRITE_PARAMS),
                       ("patch", "patch", "patch", (*_WRITE_PARAMS, _FORCE)),
                       ("delete", "delete", "delete", _DELETE_PARAMS))
    for verb, method, id_verb, params in item_operations:
        if verb in verbs:
            action = "put" if method == "put" else verb
            add(item, method, _operation(action, f"{id_verb}{camel}{scope}{rt.kind}", gvk, params=params,
                                         body=own if method == "put" else "", response=own,
                                         patch=method == "patch"), path_params=item_params)

    for subresource in sorted(rt.subresources):
        own_gvk = (rt.group, rt.version, rt.kind)
        sub_group, sub_version, sub_kind = _SUBRESOURCE_KINDS.get(subresource, own_gvk)
        sub_gvk = _gvk(sub_group, sub_version, sub_kind)
        sub_schema = definition_name(sub_group, sub_version, sub_kind)
        kinds.add((sub_group, sub_version, sub_kind))
        suffix = subresource[:1].upper() + subresource[1:]
        path = f"{item}/{subresource}"
        if subresource in ("eviction", "binding", "token"):
            add(path, "post", _operation("post", f"create{camel}{scope}{rt.kind}{suffix}", sub_gvk,
                                         body=sub_schema, params=_WRITE_PARAMS, response=sub_schema),
                path_params=item_params)
            continue
        if subresource == "finalize":
            add(path, "put", _operation("put", f"replace{camel}{scope}{rt.kind}{suffix}", sub_gvk,
                                        body=sub_schema, params=_WRITE_PARAMS, response=sub_schema),
                path_params=item_params)
            continue
        add(path, "get", _operation("get", f"read{camel}{scope}{rt.kind}{suffix}", sub_gvk,
                                    response=sub_schema), path_params=item_params)
        add(path, "put", _operation("put", f"replace{camel}{scope}{rt.kind}{suffix}", sub_gvk,
                                    body=sub_schema, params=_WRITE_PARAMS, response=sub_schema),
            path_params=item_params)
        add(path, "patch", _operation("patch", f"patch{camel}{scope}{rt.kind}{suffix}", sub_gvk,
                                      params=(*_WRITE_PARAMS, _FORCE), response=sub_schema, patch=True),
            path_params=item_params)
    return paths, kinds


def _schema_for(registry: Registry, group: str, version: str, *, kind: str) -> Obj:
    rt = registry.by_kind(f"{group}/{version}" if group else version, kind)
    schema: Obj
    if rt is not None and rt.schema is not None:
        schema = json.loads(json.dumps(rt.schema))  # a copy: the registry's schema stays untouched
    else:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema["x-kubernetes-group-version-kind"] = [_gvk(group, version, kind)]
    return schema


_BEARER = {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization",
           "in": "header"}
_META_SCHEMAS: dict[str, Obj] = {
    f"{_META}.Patch": {"type": "object", "description": "The body of a PATCH request, in its patch type."},
    f"{_META}.Status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                        "x-kubernetes-group-version-kind": [_gvk("", "v1", "Status")]},
}


def openapi_v3_group_version(registry: Registry, group: str, version: str, *,
                             server_version: str = "v1.32.0") -> Obj | None:
    """The OpenAPI 3.0 document of one group-version, or None when nothing is served there."""
    types = sorted(registry.in_group_version(group, version), key=lambda rt: rt.resource)
    if not types:
        return None
    paths: dict[str, Obj] = {}
    kinds: set[tuple[str, str, str]] = set()
    for rt in types:
        rt_paths, rt_kinds = _paths_for(rt)
        paths.update(rt_paths)
        kinds |= rt_kinds
    schemas = {definition_name(group, version, kind): _schema_for(registry, group, version, kind=kind)
               for group, version, kind in sorted(kinds)}
    schemas.update(_META_SCHEMAS)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {"BearerToken": _BEARER},
        },
    }


def group_version_path(group: str, version: str) -> str:
    """The key of a group-version in the /openapi/v3 index: api/v1, apis/apps/v1."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def document_hash(document: Obj) -> str:
    """A hash of a document's content, changing whenever the document does (clients cache by it)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha512(canonical).hexdigest().upper()


def openapi_v3_root(registry: Registry, *, server_version: str = "v1.32.0") -> Obj:
    """The /openapi/v3 index: each group-version's document URL, with a content hash for caching."""
    group_versions = sorted({(rt.group, rt.version) for rt in registry})
    paths: dict[str, Obj] = {}
    for group, version in group_versions:
        document = openapi_v3_group_version(registry, group, version, server_version=server_version)
        if document is not None:
            key = group_version_path(group, version)
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={document_hash(document)}"}
    return {"paths": dict(sorted(paths.items()))}


def openapi_v2(registry: Registry, *, server_version: str = "v1.32.0") -> Obj:
    """A Swagger 2.0 document of every served resource, for clients that only read /openapi/v2.

    Serve it as Obj only: kubectl asks for protobuf, and a Obj body it cannot decode just makes it
    fall back to its compiled-in types, which is what we want.
    """
    paths: dict[str, Obj] = {}
    definitions: dict[str, Obj] = {}
    for rt in sorted(registry, key=lambda r: (r.group, r.version, r.resource)):
        rt_paths, kinds = _paths_for(rt)
        for path, item in rt_paths.items():
            paths[path] = {key: [_swagger_param(p) for p in value] if key == "parameters"
                           else _to_swagger(value) for key, value in item.items()}
        for group, version, kind in kinds:
            definitions[definition_name(group, version, kind)] = _schema_for(registry, group, version, kind=kind)
    definitions.update(_META_SCHEMAS)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
        "securityDefinitions": {"BearerToken": _BEARER},
        "security": [{"BearerToken": []}],
    }


def _swagger_param(param: Obj) -> Obj:
    converted = {k: v for k, v in param.items() if k != "schema"}
    converted["type"] = param["schema"]["type"]
    return converted


def _to_swagger(operation: Obj) -> Obj:
    """An OpenAPI 3 operation as Swagger 2 writes it: consumes/produces and body parameters."""
    converted = {k: v for k, v in operation.items() if k not in ("requestBody", "responses", "parameters")}
    parameters = [_swagger_param(p) for p in operation["parameters"]]
    body = operation.get("requestBody")
    if body is not None:
        media_types = list(body["content"])
        converted["consumes"] = media_types
        schema = next(iter(body["content"].values()))["schema"]
        parameters.insert(0, {"name": "body", "in": "body", "required": True, "schema": _v2_ref(schema)})
    converted["parameters"] = parameters
    converted["produces"] = ["application/json", "application/yaml"]
    responses: Obj = {}
    for code, response in operation["responses"].items():
        responses[code] = {"description": response["description"]}
        if "content" in response:
            responses[code]["schema"] = _v2_ref(response["content"]["application/json"]["schema"])
    converted["responses"] = responses
    converted["schemes"] = ["https"]
    return converted


def _v2_ref(schema: Obj) -> Obj:
    return {"$ref": schema["$ref"].replace("#/components/schemas/", "#/definitions/")}
