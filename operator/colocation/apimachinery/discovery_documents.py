"""The legacy discovery documents (APIVersions, APIGroupList, APIGroup, APIResourceList), built one way
for every server: the sandbox, the operator's aggregated API, resource and custom metrics.

Keys come in the order of the Go types' fields, as kube-apiserver writes them, and optional
fields are left out when empty (`omitempty`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from colocation.apimachinery.objects import Obj


def group_version(group: str, version: str) -> str:
    """"v1" for the core group, "group/version" for the others."""
    return f"{group}/{version}" if group else version


def api_group_body(name: str, versions: Sequence[str]) -> Obj:
    """An APIGroup without its kind, as an APIGroupList lists it; the first version is preferred."""
    if not versions:
        raise ValueError(f"API group {name!r} serves no version")
    listed = [{"groupVersion": group_version(name, version), "version": version} for version in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_group(name: str, versions: Sequence[str]) -> Obj:
    """/apis/GROUP."""
    return {"kind": "APIGroup", "apiVersion": "v1", **api_group_body(name, versions)}


def api_group_list(groups: Iterable[Obj]) -> Obj:
    """/apis: the bodies of `api_group_body`, in the order given."""
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(groups)}


def api_versions(versions: Sequence[str], server_addresses: Sequence[Obj]) -> Obj:
    """/api: the core group's versions and the addresses clients reach the server at."""
    return {"kind": "APIVersions", "apiVersion": "v1", "versions": list(versions),
            "serverAddressByClientCIDRs": list(server_addresses)}


def api_resource(name: str, kind: str, verbs: Iterable[str], *, namespaced: bool, singular_name: str = "",
                 group: str = "", version: str = "", short_names: Iterable[str] = (),
                 categories: Iterable[str] = ()) -> Obj:
    """One APIResource. `name` is "resource" or "resource/subresource" (whose singular name is "");
    `group` and `version` only for a subresource whose kind lives in another group (Eviction)."""
    resource: Obj = {"name": name, "singularName": singular_name, "namespaced": namespaced}
    if group:
        resource["group"] = group
    if version:
        resource["version"] = version
    resource["kind"] = kind
    resource["verbs"] = list(verbs)
    if short := list(short_names):
        resource["shortNames"] = short
    if listed := list(categories):
        resource["categories"] = listed
    return resource


def api_resource_list(group: str, version: str, resources: Iterable[Obj]) -> Obj:
    """/api/v1 or /apis/GROUP/VERSION."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version(group, version),
            "resources": list(resources)}
