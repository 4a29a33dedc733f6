"""Turning a request path and method into what is asked: the resource, the verb, the scope."""

from __future__ import annotations

from dataclasses import dataclass

from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server.resource_types import Registry, ResourceType


@dataclass(frozen=True, kw_only=True)
class Target:
    """A request for a resource: /api/v1/namespaces/ns/pods/name/status and the like."""

    group: str
    version: str
    resource: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    legacy_watch: bool = False  # /apis/.../watch/... paths (deprecated, still used by old clients)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def parse_target(path: str) -> Target | None:
    """The resource a path names, or None for discovery and other non-resource paths."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch = False
    if rest and rest[0] == "watch":
        watch, rest = True, rest[1:]
        if not rest:
            return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = "/".join(rest[2:])
    return Target(group=group, version=version, resource=resource, namespace=namespace, name=name,
                  subresource=subresource, legacy_watch=watch)


def verb_for(method: str, target: Target, watch_param: bool) -> str:
    """The RBAC verb of a request, as kube-apiserver's RequestInfoFactory derives it."""
    if target.legacy_watch:
        return "watch"
    if method in ("GET", "HEAD"):
        if watch_param:
            return "watch"
        return "get" if target.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    raise ApiError.method_not_allowed(f"method {method} is not supported")


def resolve(registry: Registry, target: Target) -> ResourceType:
    rt = registry.get(target.group, target.version, target.resource)
    if rt is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource",
                       {"group": target.group, "kind": target.resource})
    if target.namespace and not rt.namespaced:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if target.subresource and target.subresource not in rt.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return rt
