"""Endpoints that are not plain storage: reviews, TokenRequest, eviction, binding and scale."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable
from typing import Any, Protocol

from aiohttp import web

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError, Cause, success_status
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.userinfo import UserInfo
from colocation_sandbox.server import request_bodies
from colocation_sandbox.server.access_reviews import subject_access_review
from colocation_sandbox.server.admission import admit
from colocation_sandbox.server.api_core import ApiCore
from colocation_sandbox.server.crd_schema import scale_replicas_causes
from colocation_sandbox.server.disruption_budgets import check_eviction
from colocation_sandbox.server.request_paths import Target
from colocation_sandbox.server.resource_types import ResourceType
from colocation_sandbox.server.verbs import json_response


class Handler(Protocol):
    """An endpoint: the request, its user, the resource type and the target (its namespace, name and
    subresource)."""

    def __call__(self, request: web.Request, user: UserInfo, rt: ResourceType, *,
                 target: Target) -> Awaitable[web.StreamResponse]: ...


def _user_json(user: UserInfo) -> dict[str, Any]:
    """authentication/v1 UserInfo: every field is omitempty."""
    fields = {"username": user.username, "uid": user.uid, "groups": list(user.groups),
              "extra": {k: list(v) for k, v in dict(user.extra).items()}}
    return {k: v for k, v in fields.items() if v}


class SpecialEndpoints:
    def __init__(self, api: ApiCore) -> None:
        self.api = api
        self._routes: dict[tuple[str, str, str, str], Handler] = {
            ("authentication.k8s.io", "tokenreviews", "", "create"): self.token_review,
            ("authentication.k8s.io", "selfsubjectreviews", "", "create"): self.self_subject_review,
            ("authorization.k8s.io", "subjectaccessreviews", "", "create"): self.subject_access_review,
            ("authorization.k8s.io", "localsubjectaccessreviews", "", "create"): self.subject_access_review,
            ("authorization.k8s.io", "selfsubjectaccessreviews", "", "create"): self.self_subject_access_review,
            ("authorization.k8s.io", "selfsubjectrulesreviews", "", "create"): self.self_subject_rules_review,
            ("", "serviceaccounts", "token", "create"): self.token_request,
            ("", "pods", "eviction", "create"): self.eviction,
            ("", "pods", "binding", "create"): self.binding,
        }

    def handler(self, rt: ResourceType, subresource: str, verb: str) -> Handler | None:
        if subresource == "scale":
            return self.scale
        return self._routes.get((rt.group, rt.resource, subresource, verb))

    async def _body(self, request: web.Request) -> Obj:
        content_type = request.headers.get("Content-Type", "application/json")
        return request_bodies.decode_object(await request.read(), content_type)

    def _review(self, rt: ResourceType, body: Obj, status: Obj) -> web.Response:
        return json_response({**body, "apiVersion": rt.api_version, "kind": rt.kind,
                              "metadata": {**(body.get("metadata") or {}),
                                           "creationTimestamp": None}, "status": status}, 201)

    # ---- authentication and authorization reviews ---------------------------------------------

    async def token_review(self, request: web.Request, user: UserInfo, rt: ResourceType, *, target: Target) \
            -> web.StreamResponse:
        body = await self._body(request)
        spec = body.get("spec") or {}
        if not spec.get("token"):
            raise ApiError.invalid(rt.group, rt.kind, "", causes=[_cause("spec.token", "Required value")])
        return self._review(rt, body, self.api.tokens.token_review(spec))

    async def self_subject_review(self, request: web.Request, user: UserInfo, rt: ResourceType,
                                  *, target: Target) -> web.StreamResponse:
        body = await self._body(request)
        return self._review(rt, body, {"userInfo": _user_json(user)})

    async def subject_access_review(self, request: web.Request, user: UserInfo, rt: ResourceType,
                                    *, target: Target) -> web.StreamResponse:
        body = await self._body(request)
        spec = dict(body.get("spec") or {})
        if rt.resource == "localsubjectaccessreviews":
            attrs = dict(spec.get("resourceAttributes") or {})
            if attrs.get("namespace", target.namespace) != target.namespace:
                raise ApiError.bad_request("spec.resourceAttributes.namespace must match the request namespace")
            spec["resourceAttributes"] = {**attrs, "namespace": target.namespace}
        if not spec.get("user") and not spec.get("groups"):
            raise ApiError.invalid(rt.group, rt.kind, "", causes=[_cause(
                "spec.user", "Invalid value: \"\": at least one of user or group must be specified")])
        return self._review(rt, body, subject_access_review(spec, self.api.rbac))

    async def self_subject_access_review(self, request: web.Request, user: UserInfo, rt: ResourceType,
                                         *, target: Target) -> web.StreamResponse:
        body = await self._body(request)
        spec = {**(body.get("spec") or {}), "user": user.username, "groups": list(user.groups),
                "uid": user.uid, "extra": {k: list(v) for k, v in dict(user.extra).items()}}
        return self._review(rt, body, subject_access_review(spec, self.api.rbac))

    async def self_subject_rules_review(self, request: web.Request, user: UserInfo, rt: ResourceType,
                                        *, target: Target) -> web.StreamResponse:
        body = await self._body(request)
        namespace = (body.get("spec") or {}).get("namespace", "")
        resource_rules, non_resource_rules = self.api.rbac.rules_for(user, namespace)
        return self._review(rt, body, {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                                       "incomplete": False})

    # ---- subresources -------------------------------------------------------------------------

    async def token_request(self, request: web.Request, user: UserInfo, rt: ResourceType, *, target: Target) \
            -> web.StreamResponse:
        body = await self._body(request)
        sa = self.api.store.get(rt, target.namespace, target.name)
        spec = body.get("spec") or {}
        expiration = int(spec.get("expirationSeconds") or 3600)
        if expiration < 600:
            raise ApiError.invalid("authentication.k8s.io", "TokenRequest", target.name, causes=[_cause(
                "spec.expirationSeconds", "Invalid value: may not specify a duration less than 10 minutes")])
        bound: Obj | None = None
        node: Obj | None = None
        ref = spec.get("boundObjectRef")
        if ref:
            if ref.get("kind") != "Pod":
                raise ApiError.bad_request("the sandbox binds tokens to Pods only")
            bound = self.api.store.get(self.api.rt("", "pods"), target.namespace, ref.get("name", ""))
            if ref.get("uid") and ref["uid"] != bound["metadata"]["uid"]:
                raise ApiError.conflict("", "pods", ref.get("name", ""), why="the UID in the bound object "
                                        "reference does not match the object")
            if (bound.get("spec") or {}).get("serviceAccountName", "default") != target.name:
                raise ApiError.bad_request(f'pod {ref.get("name")} does not run as service account {target.name}')
            if node_name := (bound.get("spec") or {}).get("nodeName"):
                # As kube-apiserver: a scheduled pod's token names its node too, if the node exists.
                with contextlib.suppress(ApiError):
                    node = self.api.store.get(self.api.rt("", "nodes"), "", node_name)
        token, expiry = self.api.tokens.issue_service_account_token(
            target.namespace, target.name, sa["metadata"]["uid"], audiences=tuple(spec.get("audiences") or ()),
            expiration_seconds=expiration, bound_object=bound, bound_node=node)
        return json_response({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                              "metadata": {"name": target.name, "namespace": target.namespace,
                                           "creationTimestamp": None},
                              "spec": {**spec, "expirationSeconds": expiration},
                              "status": {"token": token, "expirationTimestamp": format_time(expiry)}}, 201)

    async def eviction(self, request: web.Request, user: UserInfo, rt: ResourceType, *, target: Target) \
            -> web.StreamResponse:
        body = await self._body(request)
        if (body.get("metadata") or {}).get("name", target.name) != target.name:
            raise ApiError.bad_request("name in URL does not match name in Eviction object")
        store = self.api.store
        pod = store.get(rt, target.namespace, target.name)
        pdb_rt = self.api.rt("policy", "poddisruptionbudgets")
        budgets = list(store.objects(pdb_rt, target.namespace))
        pods = list(store.objects(rt, target.namespace))
        check_eviction(pod, pods, budgets)  # raises 429 when a budget would be violated
        options = body.get("deleteOptions") or {}
        dry_run = "All" in (options.get("dryRun") or []) or "All" in request.query.getall("dryRun", [])
        store.delete(rt, target.namespace, target.name, preconditions=options.get("preconditions"),
                     dry_run=dry_run)
        return json_response(success_status(201), 201)

    async def binding(self, request: web.Request, user: UserInfo, rt: ResourceType, *, target: Target) \
            -> web.StreamResponse:
        body = await self._body(request)
        node = (body.get("target") or {}).get("name", "")
        if not node:
            raise ApiError.invalid("", "Binding", target.name, causes=[_cause("target.name", "Required value")])
        pod = self.api.store.get(rt, target.namespace, target.name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise ApiError.conflict("", "pods", target.name, why=f'pod {target.name} is already assigned to node '
                                    f'"{pod["spec"]["nodeName"]}"')
        # As BindingREST does: the node name, the binding's annotations, and PodScheduled true.
        meta = pod["metadata"]
        annotations = {**(meta.get("annotations") or {}), **((body.get("metadata") or {}).get("annotations") or {})}
        status = pod.get("status") or {}
        conditions = list(status.get("conditions") or ())
        index = next((i for i, c in enumerate(conditions) if c.get("type") == "PodScheduled"), len(conditions))
        previous = conditions[index] if index < len(conditions) else {}
        since = previous["lastTransitionTime"] if previous.get("status") == "True" else None
        conditions[index:index + 1] = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                        "lastTransitionTime": since or format_time(self.api.store.clock())}]
        updated = {**pod, "metadata": {**meta, "annotations": annotations} if annotations else meta,
                   "spec": {**pod.get("spec", {}), "nodeName": node},
                   "status": {**status, "conditions": conditions}}
        self.api.store.update(rt, target.namespace, target.name, obj=updated, subresource="binding")
        return json_response(success_status(201), 201)

    async def scale(self, request: web.Request, user: UserInfo, rt: ResourceType, *, target: Target) \
            -> web.StreamResponse:
        store = self.api.store
        obj = store.get(rt, target.namespace, target.name)
        spec_path, status_path, selector_path = _scale_paths(rt)
        custom = rt.schema is not None
        if request.method not in ("PUT", "PATCH"):
            if custom and not _nested_int(obj, spec_path)[1]:
                raise _internal(f"the spec replicas field {json.dumps(spec_path)} does not exist")
            return json_response(_scale_of(obj, spec_path, status_path, selector_path=selector_path))
        current = _scale_of(obj, spec_path, status_path, selector_path=selector_path)
        if custom and not _nested_int(obj, spec_path)[1]:
            current["spec"]["replicas"] = _UNSET_REPLICAS  # apiextensions' signal: not set before
        if request.method == "PUT":
            wanted = await self._body(request)
        else:
            kind, patch_body = request_bodies.decode_patch(await request.read(),
                                                   request.headers.get("Content-Type", ""), rt)
            if kind == request_bodies.APPLY_PATCH:
                raise ApiError.unsupported_media_type(kind)
            wanted = request_bodies.apply_patch(kind, current, patch_body, rt=rt)
        replicas = (wanted.get("spec") or {}).get("replicas", 0)  # omitted is 0, as Go decodes it
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise ApiError.invalid("autoscaling", "Scale", target.name, causes=[_cause(
                "spec.replicas", f"Invalid value: {replicas!r}: must be greater than or equal to 0")])
        if custom and replicas == _UNSET_REPLICAS:
            raise ApiError.bad_request(f"the spec replicas field {json.dumps(spec_path)} cannot be empty")
        if not custom and replicas < 0:
            raise ApiError.invalid("autoscaling", "Scale", target.name, causes=[_cause(
                "spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")])
        rv = (wanted.get("metadata") or {}).get("resourceVersion")
        updated = _set_path({**obj, "metadata": {**obj["metadata"], **({"resourceVersion": rv} if rv else {})}},
                            spec_path, replicas)
        if custom:
            # A custom resource's scale writes go through its own strategy: schema and replicas paths.
            updated, _ = admit(rt, updated, "Ignore", old=obj)
        obj = store.update(rt, target.namespace, target.name, obj=updated)
        return json_response(_scale_of(obj, spec_path, status_path, selector_path=selector_path))


_UNSET_REPLICAS = -2**31  # the smallest int32


def _internal(message: str) -> ApiError:
    """An InternalError as apierrors.NewInternalError words it."""
    return ApiError(500, "InternalError", f"Internal error occurred: {message}",
                    {"causes": [{"message": message}]})


def _nested_int(obj: Any, path: str) -> tuple[int, bool]:
    """unstructured.NestedInt64: (value, found); a value of another type is an internal error."""
    causes = scale_replicas_causes(obj, path)
    if causes and "accessor error" in causes[0].message:
        raise _internal(causes[0].message.split(": ", 2)[2])
    value = _get_path(obj, path)
    return (value, True) if isinstance(value, int) and not isinstance(value, bool) else (0, False)


def _cause(field: str, message: str) -> Cause:
    return Cause(field, message, "FieldValueRequired" if message == "Required value" else "FieldValueInvalid")


def _scale_paths(rt: ResourceType) -> tuple[str, str, str]:
    if rt.scale_paths:
        return (rt.scale_paths.get("specReplicasPath", ".spec.replicas"),
                rt.scale_paths.get("statusReplicasPath", ".status.replicas"),
                rt.scale_paths.get("labelSelectorPath", ""))
    return ".spec.replicas", ".status.replicas", ".spec.selector"


def _get_path(obj: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _set_path(obj: Obj, path: str, value: Any) -> Obj:
    parts = [p for p in path.split(".") if p]
    result = dict(obj)
    cursor = result
    for part in parts[:-1]:
        cursor[part] = dict(cursor.get(part) or {})
        cursor = cursor[part]
    cursor[parts[-1]] = value
    return result


def _selector_string(selector: Any) -> str:
    if isinstance(selector, str):
        return selector
    if isinstance(selector, dict):
        return ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
    return ""


def _scale_of(obj: Obj, spec_path: str, status_path: str, *, selector_path: str) -> Obj:
    """autoscaling/v1 Scale: spec.replicas and status.selector are omitempty, status.replicas is not."""
    meta = obj["metadata"]
    status: Obj = {"replicas": _nested_int(obj, status_path)[0]}
    selector = _selector_string(_get_path(obj, selector_path)) if selector_path else ""
    if selector:
        status["selector"] = selector
    replicas = _nested_int(obj, spec_path)[0]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace", ""), "uid": meta["uid"],
                         "resourceVersion": meta["resourceVersion"],
                         "creationTimestamp": meta.get("creationTimestamp")},
            "spec": {"replicas": replicas} if replicas else {}, "status": status}
