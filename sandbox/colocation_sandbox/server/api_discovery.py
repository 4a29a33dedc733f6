"""Discovery documents: /api, /apis, /apis/{group} and the resource lists of each group version.

Both forms kube-apiserver serves: the legacy one (APIVersions, APIGroupList, APIGroup,
APIResourceList) and the aggregated one (apidiscovery.k8s.io/v2 APIGroupDiscoveryList, one
document for /api or /apis, with each aggregated version's "freshness"). Groups and versions are
ordered as kube-apiserver orders them.

The order: docs/development.md#inside-the-builtin-api-server
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from colocation.apimachinery import discovery_documents as legacy
from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server.resource_types import Registry, ResourceType

_ADDRESS = [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]

# Which server of a group version aggregated discovery shows when several serve it: the lowest.
AGGREGATOR, BUILTIN, CRD = 0, 100, 200

# (groupPriorityMinimum, versionPriority) of the built-in group versions, as kube-apiserver 1.36
# registers their APIServices; a group version missing here gets 1000/15.
BUILTIN_PRIORITIES: dict[tuple[str, str], tuple[int, int]] = {
    ("apiregistration.k8s.io", "v1"): (20001, 0),
    ("apps", "v1"): (17800, 15),
    ("events.k8s.io", "v1"): (17750, 15),
    ("authentication.k8s.io", "v1"): (17700, 15),
    ("authorization.k8s.io", "v1"): (17600, 15),
    ("autoscaling", "v2"): (17500, 30),
    ("autoscaling", "v1"): (17500, 15),
    ("batch", "v1"): (17400, 15),
    ("certificates.k8s.io", "v1"): (17300, 15),
    ("networking.k8s.io", "v1"): (17200, 15),
    ("policy", "v1"): (17100, 15),
    ("rbac.authorization.k8s.io", "v1"): (17000, 15),
    ("storage.k8s.io", "v1"): (16800, 15),
    ("admissionregistration.k8s.io", "v1"): (16700, 15),
    ("apiextensions.k8s.io", "v1"): (16700, 15),
    ("scheduling.k8s.io", "v1"): (16600, 15),
    ("coordination.k8s.io", "v1"): (16500, 15),
    ("node.k8s.io", "v1"): (16300, 15),
    ("discovery.k8s.io", "v1"): (16200, 15),
    ("resource.k8s.io", "v1"): (16200, 21),
    ("flowcontrol.apiserver.k8s.io", "v1"): (16100, 21),
}
DEFAULT_PRIORITY = (1000, 15)
CRD_PRIORITY = (1000, 100)
# The verbs of a custom resource, in the order the apiextensions server lists them.
CUSTOM_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
_SUBRESOURCE_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True, kw_only=True)
class Served:
    """One group version /apis lists, with the priorities of the APIService behind it."""

    group: str
    version: str
    group_priority: int
    version_priority: int
    source: int = BUILTIN
    # Its APIVersionDiscovery; None until an aggregated backend's discovery has been fetched once
    # (kube-apiserver lists such a version in the legacy form only).
    document: dict[str, Any] | None = None


# ---- ordering ----------------------------------------------------------------------------------

_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")
_STABILITY = {"alpha": 0, "beta": 1, "": 2}


def version_key(version: str) -> tuple[int, int, int, int, str]:
    """Sorts Kubernetes versions first, GA before beta before alpha, higher numbers first; others
    after them, alphabetically (apimachinery's CompareKubeAwareVersionStrings)."""
    match = _KUBE_VERSION.match(version)
    if match is None:
        return (1, 0, 0, 0, version)
    major, stability, minor = match.groups()
    return (0, -_STABILITY[stability or ""], -int(major), -int(minor or 0), "")


def _by_version_priority(served: Served) -> tuple[int, tuple[int, int, int, int, str]]:
    return (-served.version_priority, version_key(served.version))


def _deduplicated(served: Iterable[Served]) -> list[Served]:
    """One entry per group version: the one from the lowest source (an APIService's backend wins)."""
    chosen: dict[tuple[str, str], Served] = {}
    for item in served:
        current = chosen.get((item.group, item.version))
        if current is None or item.source < current.source:
            chosen[(item.group, item.version)] = item
    return list(chosen.values())


def _legacy_groups(served: Iterable[Served]) -> dict[str, list[str]]:
    """Group -> versions, preferred first, as kube-aggregator lists its APIServices: by group
    priority, then by APIService name ("{version}.{group}"); versions by version priority."""
    rows = sorted(_deduplicated(served), key=lambda s: (-s.group_priority, f"{s.version}.{s.group}"))
    groups: dict[str, list[Served]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    return {name: [s.version for s in sorted(rows, key=_by_version_priority)] for name, rows in groups.items()}


# ---- the legacy form ---------------------------------------------------------------------------

def api_versions() -> dict[str, Any]:
    return legacy.api_versions(["v1"], _ADDRESS)


def api_group_list(served: Iterable[Served]) -> dict[str, Any]:
    return legacy.api_group_list(legacy.api_group_body(name, versions)
                                 for name, versions in _legacy_groups(served).items())


def api_group(served: Iterable[Served], name: str) -> dict[str, Any] | None:
    versions = _legacy_groups(s for s in served if s.group == name).get(name)
    if not versions:
        return None
    return legacy.api_group(name, versions)


def is_custom(rt: ResourceType) -> bool:
    """Custom resources (from CRDs) carry their structural schema; built-in types do not."""
    return rt.schema is not None


def _subresources(rt: ResourceType) -> list[str]:
    if is_custom(rt):  # the apiextensions server lists status, then scale
        return [sub for sub in ("status", "scale") if sub in rt.subresources]
    return sorted(rt.subresources)


def _resource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    entries = [legacy.api_resource(rt.resource, rt.kind, CUSTOM_VERBS if is_custom(rt) else rt.verbs,
                                   namespaced=rt.namespaced, singular_name=rt.singular,
                                   short_names=rt.short_names, categories=rt.categories)]
    for sub in _subresources(rt):
        kind, verbs = _subresource_shape(rt, sub)
        # kubectl drain checks the group and version of eviction to know the Eviction API is there
        # (else it deletes pods).
        group, version = _SUBRESOURCE_GROUP_VERSION.get(kind, ("", ""))
        entries.append(legacy.api_resource(f"{rt.resource}/{sub}", kind, verbs, namespaced=rt.namespaced,
                                           group=group, version=version))
    return entries


# Subresources whose kind lives in another API group than their resource.
_SUBRESOURCE_GROUP_VERSION = {"Eviction": ("policy", "v1"), "TokenRequest": ("authentication.k8s.io", "v1"),
                              "Scale": ("autoscaling", "v1")}


def _subresource_shape(rt: ResourceType, sub: str) -> tuple[str, list[str]]:
    if sub == "scale":
        return "Scale", list(_SUBRESOURCE_VERBS)
    if sub == "eviction":
        return "Eviction", ["create"]
    if sub == "token":
        return "TokenRequest", ["create"]
    if sub == "binding":
        return "Binding", ["create"]
    if sub == "finalize":
        return rt.kind, ["update"]
    return rt.kind, list(_SUBRESOURCE_VERBS)


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    return legacy.api_resource_list(group, version, (
        entry for rt in sorted(types, key=lambda r: r.resource) for entry in _resource_entries(rt)))


# ---- the aggregated form -----------------------------------------------------------------------

def _scope(namespaced: Any) -> str:
    return "Namespaced" if namespaced else "Cluster"


def _response_kind(entry: dict[str, Any]) -> dict[str, str]:
    return {"group": entry.get("group") or "", "version": entry.get("version") or "", "kind": entry.get("kind") or ""}


def resources_from_list(api_resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An APIResourceList's resources as APIResourceDiscovery entries: each "resource/sub" entry
    becomes a subresource of its resource (made up, with no kind or verbs, when it is not listed).
    ValueError when a subresource's scope is not its resource's, as kube-apiserver refuses it."""
    resources: dict[str, dict[str, Any]] = {}
    for item in api_resources:
        name = item.get("name") or ""
        if "/" in name:
            continue
        entry: dict[str, Any] = {"resource": name, "responseKind": _response_kind(item),
                                 "scope": _scope(item.get("namespaced")),
                                 "singularResource": item.get("singularName") or "", "verbs": item.get("verbs")}
        for key in ("shortNames", "categories"):
            if item.get(key):
                entry[key] = item[key]
        resources[name] = entry
    for item in api_resources:
        parent_name, slash, sub = (item.get("name") or "").partition("/")
        if not slash:
            continue
        scope = _scope(item.get("namespaced"))
        parent = resources.setdefault(parent_name, {
            "resource": parent_name, "responseKind": _response_kind({}), "scope": scope, "singularResource": "",
            "verbs": None})
        if parent["scope"] != scope:
            raise ValueError(f"parent {parent_name} (scope: {parent['scope']}) and subresource {sub} "
                             f"(scope: {scope}) scope do not match")
        parent.setdefault("subresources", []).append(
            {"subresource": sub, "responseKind": _response_kind(item), "verbs": item.get("verbs")})
    return list(resources.values())


def version_document(version: str, resources: list[dict[str, Any]], freshness: str = "Current") -> dict[str, Any]:
    """An APIVersionDiscovery; a version without resources has no resources list at all."""
    document: dict[str, Any] = {"version": version}
    if resources:
        document["resources"] = resources
    document["freshness"] = freshness
    return document


def _custom_resource(rt: ResourceType) -> dict[str, Any]:
    """A CRD's resource as the apiextensions server announces it: its own group and version as the
    response kind, status then scale as subresources."""
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    entry: dict[str, Any] = {"resource": rt.resource, "responseKind": kind, "scope": _scope(rt.namespaced),
                             "singularResource": rt.singular, "verbs": list(CUSTOM_VERBS)}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subresources = [{"subresource": sub, "responseKind": kind if sub == "status" else {
        "group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": list(_SUBRESOURCE_VERBS)}
        for sub in _subresources(rt)]
    if subresources:
        entry["subresources"] = subresources
    return entry


def _registry_version_document(types: list[ResourceType], version: str) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for rt in sorted(types, key=lambda r: r.resource):
        resources += [_custom_resource(rt)] if is_custom(rt) else resources_from_list(_resource_entries(rt))
    return version_document(version, resources)


def registry_served(registry: Registry, *, documents: bool = False) -> list[Served]:
    """The group versions of built-in types and CRDs (the core group excluded)."""
    served = []
    for group, versions in registry.groups().items():
        for version in versions:
            types = registry.in_group_version(group, version)
            custom = any(is_custom(rt) for rt in types)
            group_priority, version_priority = CRD_PRIORITY if custom else BUILTIN_PRIORITIES.get(
                (group, version), DEFAULT_PRIORITY)
            served.append(Served(group=group, version=version, group_priority=group_priority,
                                 version_priority=version_priority, source=CRD if custom else BUILTIN,
                                 document=_registry_version_document(types, version) if documents else None))
    return served


def _discovery_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": items}


def aggregated_groups(served: Iterable[Served]) -> dict[str, Any]:
    """/apis in the aggregated form: groups by their highest group priority, then by name."""
    groups: dict[str, list[Served]] = {}
    for item in _deduplicated(s for s in served if s.document is not None):
        groups.setdefault(item.group, []).append(item)
    names = sorted(groups, key=lambda name: (-max(s.group_priority for s in groups[name]), name))
    return _discovery_list([{"metadata": {"name": name},
                             "versions": [s.document for s in sorted(groups[name], key=_by_version_priority)]}
                            for name in names])


def aggregated_core(registry: Registry) -> dict[str, Any]:
    """/api in the aggregated form: one nameless group, v1."""
    document = _registry_version_document(registry.in_group_version("", "v1"), "v1")
    return _discovery_list([{"metadata": {}, "versions": [document]}])


# ---- content negotiation and caching -----------------------------------------------------------

AGGREGATED_V2 = ("apidiscovery.k8s.io", "v2", "APIGroupDiscoveryList")
AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_SERVED_MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
_NOT_ACCEPTABLE = "only the following media types are accepted: " + ", ".join(_SERVED_MEDIA_TYPES)


@dataclass(frozen=True, kw_only=True)
class MediaRange:
    type: str
    subtype: str
    quality: float
    params: dict[str, str]

    def matches(self, media_type: str) -> bool:
        type_, _, subtype = media_type.partition("/")
        return (self.type, self.subtype) in ((type_, subtype), (type_, "*"), ("*", "*"))

    @property
    def conversion(self) -> tuple[str, str, str] | None:
        """(group, version, kind) asked for with g=, v= and as=, or None when none is given."""
        if not {"g", "v", "as"} & self.params.keys():
            return None
        return (self.params.get("g", ""), self.params.get("v", ""), self.params.get("as", ""))


def media_ranges(header: str) -> list[MediaRange]:
    """An Accept header's ranges, most preferred first (higher quality, then the more specific)."""
    ranges = []
    for clause in header.split(","):
        media, *params = clause.split(";")
        type_, slash, subtype = media.strip().partition("/")
        if not slash:
            if type_ != "*":
                continue
            subtype = "*"
        if "/" in subtype:
            continue
        quality, options = 1.0, {}
        for param in params:
            key, equals, value = param.partition("=")
            if not equals or "=" in value:
                continue
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
            else:
                options[key.strip()] = value.strip()
        ranges.append(MediaRange(type=type_.strip(), subtype=subtype.strip(), quality=quality, params=options))
    return sorted(ranges, key=lambda r: (-r.quality, r.type == "*", r.subtype == "*"))


def wants_aggregated(accept: str, *, aggregated_served: bool) -> bool:
    """Whether to answer a discovery request in the aggregated form, or the legacy one.

    As kube-apiserver: the first range (in preference order) asking for APIGroupDiscoveryList in
    apidiscovery.k8s.io/v2 gets the aggregated form (v2beta1 is no longer served); failing that,
    the first range without g/v/as gets the legacy form; failing that, 406. The sandbox answers
    JSON only, so a range asking for the aggregated form in YAML or protobuf is passed over.
    """
    if not accept.strip():
        return False
    ranges = media_ranges(accept)
    if aggregated_served and any(r.conversion == AGGREGATED_V2 and r.matches("application/json") for r in ranges):
        return True
    if any(r.conversion is None and any(r.matches(m) for m in _SERVED_MEDIA_TYPES) for r in ranges):
        return False
    raise ApiError(406, "NotAcceptable", _NOT_ACCEPTABLE)


def is_aggregated_content_type(content_type: str) -> bool:
    """Whether a response is an APIGroupDiscoveryList (v2, or the v2beta1 older servers answer)."""
    ranges = media_ranges(content_type)
    return bool(ranges) and ranges[0].matches("application/json") and ranges[0].conversion in (
        AGGREGATED_V2, ("apidiscovery.k8s.io", "v2beta1", "APIGroupDiscoveryList"))


def aggregated_response(request: web.Request, body: dict[str, Any]) -> web.Response:
    """The document with an ETag (a hash of its JSON), 304 Not Modified when the client has it."""
    raw = orjson.dumps(body)
    etag = f'"{hashlib.sha512(raw).hexdigest().upper()}"'
    headers = {"ETag": etag, "Vary": "Accept", "Cache-Control": "public"}
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    return web.Response(body=raw, headers={**headers, "Content-Type": AGGREGATED_CONTENT_TYPE})
