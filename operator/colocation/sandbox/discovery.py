"""Discovery documents: /api, /apis, /apis/{group} and the resource lists of each group version."""

from __future__ import annotations

from typing import Any

from colocation.sandbox.resources import Registry, ResourceType

_ADDRESS = [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"],
            "serverAddressByClientCIDRs": _ADDRESS}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def _all_groups(registry: Registry, aggregated: dict[str, list[str]] | None) -> dict[str, list[str]]:
    groups = {name: list(versions) for name, versions in registry.groups().items()}
    for name, versions in (aggregated or {}).items():
        groups.setdefault(name, []).extend(v for v in versions if v not in groups[name])
    return groups


def api_group_list(registry: Registry, aggregated: dict[str, list[str]] | None = None) -> dict[str, Any]:
    groups = [_group(name, versions) for name, versions in _all_groups(registry, aggregated).items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, name: str, aggregated: dict[str, list[str]] | None = None) \
        -> dict[str, Any] | None:
    versions = _all_groups(registry, aggregated).get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _resource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {"name": rt.resource, "singularName": rt.singular, "namespaced": rt.namespaced,
                            "kind": rt.kind, "verbs": list(rt.verbs)}
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    entries = [main]
    for sub in sorted(rt.subresources):
        kind, verbs = _subresource_shape(rt, sub)
        entry: dict[str, Any] = {"name": f"{rt.resource}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                 "kind": kind, "verbs": verbs}
        if kind in _SUBRESOURCE_GROUP_VERSION:
            # kubectl drain checks these to know the Eviction API is there (else it deletes pods).
            entry["group"], entry["version"] = _SUBRESOURCE_GROUP_VERSION[kind]
        entries.append(entry)
    return entries


# Subresources whose kind lives in another API group than their resource.
_SUBRESOURCE_GROUP_VERSION = {"Eviction": ("policy", "v1"), "TokenRequest": ("authentication.k8s.io", "v1"),
                              "Scale": ("autoscaling", "v1")}


def _subresource_shape(rt: ResourceType, sub: str) -> tuple[str, list[str]]:
    if sub == "scale":
        return "Scale", ["get", "patch", "update"]
    if sub == "eviction":
        return "Eviction", ["create"]
    if sub == "token":
        return "TokenRequest", ["create"]
    if sub == "binding":
        return "Binding", ["create"]
    if sub == "finalize":
        return rt.kind, ["update"]
    return rt.kind, ["get", "patch", "update"]


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources = [entry for rt in sorted(types, key=lambda r: r.resource) for entry in _resource_entries(rt)]
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": resources}
