"""What the aggregated API announces: the group, its version, its resources, and its Table columns."""

from __future__ import annotations

from typing import Any

GROUP = "metrics.colocation.dev"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
RESOURCE = "nodemetrics"
KIND = "NodeMetric"
LIST_KIND = "NodeMetricList"
BASE_PATH = f"/apis/{GROUP}/{VERSION}"


def api_group_list() -> dict[str, Any]:
    """/apis on the extension server: only the groups it serves."""
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group_body()]}


def api_group_body() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [version], "preferredVersion": version}


def api_group() -> dict[str, Any]:
    return {"kind": "APIGroup", "apiVersion": "v1", **api_group_body()}


def api_resource_list() -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": [
        {"name": RESOURCE, "singularName": "nodemetric", "namespaced": False, "kind": KIND,
         "verbs": ["get", "list", "watch"], "shortNames": ["nm"]},
        {"name": f"{RESOURCE}/status", "singularName": "", "namespaced": False, "kind": KIND,
         "verbs": ["get", "update"]},
    ]}
