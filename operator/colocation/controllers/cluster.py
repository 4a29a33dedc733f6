"""What the leader knows of the cluster: the objects its watches delivered, in memory.

The Node, Lease and Pod informers and Kopf's event handlers (`kopf_app`, for our own objects and
the ConfigMap) write here; the reconciler reads. Each writer keeps only what the controllers use:
pods and Nodes are slimmed to the fields the batch formula, the NodeSLO rendering and the exit
process read, because a cluster of 10,000 nodes has some 300,000 pods, and a real Node carries
its images, addresses and conditions. Everything runs on one event loop, so there are no locks.

What many slim pods have in common (the containers of a workload's replicas, the class labels, the
phase) is kept once and shared (`SharedParts`): the cached objects are read, never changed, by
every reader of this state.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Hashable, Mapping
from typing import Any, TypeVar

import orjson
from cachetools import LRUCache

from colocation.apimachinery.objects import Obj
from colocation.controllers.eviction import MIRROR_POD_ANNOTATION
from colocation.koordinator.batch_formula import RESERVATION_ANNOTATION
from colocation.koordinator.classes import PRIORITY_LABEL, QOS_LABEL

PodKey = tuple[str, str]  # (namespace, name)

_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
_CLASS_LABELS = (PRIORITY_LABEL, QOS_LABEL)  # the only labels priority and QoS are read from
# Distinct container specs, label sets and statuses kept for sharing. Replicas of one workload
# share theirs; beyond this many distinct ones, the least recently seen are no longer shared
# (still correct, only larger).
SHARED_PARTS = 65_536

Part = TypeVar("Part")


class SharedParts:
    """One copy of each equal part, for the pods that have it (a bounded cache: a miss only costs
    memory)."""

    def __init__(self, size: int = SHARED_PARTS) -> None:
        self._parts: LRUCache[Hashable, Any] | None = LRUCache(maxsize=size) if size > 0 else None

    def share(self, key: Hashable, part: Part) -> Part:
        if self._parts is None:
            return part
        kept = self._parts.get(key)
        if kept is None:
            self._parts[key] = kept = part
        return kept

    def containers(self, containers: list[Obj]) -> list[Obj]:
        return self.share(orjson.dumps(containers, option=orjson.OPT_SORT_KEYS), containers)

    def mapping(self, kind: str, mapping: Obj) -> Obj:
        return self.share((kind, *sorted(mapping.items())), mapping)



def slim_pod(pod: Mapping[str, Any], shared: SharedParts | None = None) -> Obj:
    """The fields of a Pod that priority, QoS, requests and eviction read; the rest is dropped.
    Parts equal to another pod's are that pod's (`shared`): the result is read-only."""
    shared = shared if shared is not None else SharedParts(size=0)
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    namespace = metadata.get("namespace")
    slim_meta: Obj = {"name": metadata.get("name"),
                      "namespace": sys.intern(namespace) if isinstance(namespace, str) else namespace,
                      "uid": metadata.get("uid"),
                      "labels": shared.mapping("labels", {key: labels[key] for key in _CLASS_LABELS
                                                          if key in labels})}
    if MIRROR_POD_ANNOTATION in annotations:
        slim_meta["annotations"] = {MIRROR_POD_ANNOTATION: annotations[MIRROR_POD_ANNOTATION]}
    if metadata.get("deletionTimestamp"):
        slim_meta["deletionTimestamp"] = metadata["deletionTimestamp"]
    node = spec.get("nodeName")
    slim_spec: Obj = {"nodeName": sys.intern(node) if isinstance(node, str) else node}
    for key in ("priority", "overhead", "resources"):
        if spec.get(key) is not None:
            slim_spec[key] = spec[key]
    for key in ("containers", "initContainers"):
        if spec.get(key):
            slim_spec[key] = shared.containers(
                [{field: container[field] for field in _CONTAINER_FIELDS if field in container}
                 for container in spec[key] if isinstance(container, Mapping)])
    slim_status = shared.mapping("status", {key: status[key] for key in ("phase", "qosClass") if key in status})
    return {"metadata": slim_meta, "spec": slim_spec, "status": slim_status}


def slim_node(node: Mapping[str, Any]) -> Obj:
    """The fields of a Node that the controllers read: name, uid, labels (NodeSLO rules, zones),
    the reservation annotation, and status capacity and allocatable (the formula, the writes)."""
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    annotations = metadata.get("annotations") or {}
    slim_meta: Obj = {key: metadata[key] for key in ("name", "uid", "resourceVersion") if key in metadata}
    slim_meta["labels"] = dict(metadata.get("labels") or {})
    if RESERVATION_ANNOTATION in annotations:
        slim_meta["annotations"] = {RESERVATION_ANNOTATION: annotations[RESERVATION_ANNOTATION]}
    slim_status = {key: dict(status[key]) for key in ("capacity", "allocatable")
                   if isinstance(status.get(key), Mapping)}
    return {"metadata": slim_meta, "status": slim_status}


class ClusterState:
    def __init__(self) -> None:
        self.nodes: dict[str, Obj] = {}
        self.node_versions: dict[str, int] = {}  # bumped on every change of the node or its pods
        self.pods_by_node: dict[str, dict[PodKey, Obj]] = {}
        self._pod_node: dict[PodKey, str] = {}
        self._shared = SharedParts()
        self.pods_synced = asyncio.Event()
        self.nodeslos: dict[str, Obj] = {}
        self.noderesources: dict[str, Obj] = {}
        self.lease_renew_times: dict[str, str] = {}
        self.service_accounts: dict[str, str] = {}  # name -> uid, in the operator's namespace
        self.service_accounts_synced = False
        self.deleted_nodes: set[str] = set()  # seen going: their NodeSLO and NodeResource go too
        self.wake = asyncio.Event()  # something changed that deserves an evaluation before the next tick
        self._version = 0

    def _bump(self, node: str) -> None:
        self._version += 1
        self.node_versions[node] = self._version

    # ---- nodes ---------------------------------------------------------------------------------

    async def nodes_synced_with(self, items: list[Obj], resource_version: str) -> None:
        """The Node informer's full list: a Node missing from it went away in a gap of the watch."""
        fresh = {str(item["metadata"]["name"]) for item in items}
        for name in sorted(self.nodes.keys() - fresh):
            self.node_event("DELETED", self.nodes[name])
        for item in items:
            self.node_event("ADDED", item)

    async def node_changed(self, type_: str, node: Obj) -> None:
        self.node_event(type_, node)

    def node_event(self, type_: str | None, node: Obj) -> None:
        name = str(node["metadata"]["name"])
        if type_ == "DELETED":
            if self.nodes.pop(name, None) is not None:
                self.deleted_nodes.add(name)
            self.node_versions.pop(name, None)
            self.wake.set()
            return
        new = name not in self.nodes
        self.nodes[name] = slim_node(node)
        self.deleted_nodes.discard(name)
        self._bump(name)
        if new:
            self.wake.set()

    # ---- pods (the informer's callbacks) ---------------------------------------------------------

    async def pods_synced_with(self, items: list[Obj], resource_version: str) -> None:
        self.pods_by_node = {}
        self._pod_node = {}
        for item in items:
            self._put_pod(slim_pod(item, self._shared))
        for node in self.nodes:
            self._bump(node)
        self.pods_synced.set()

    def pod_kept(self, pod: Obj) -> Obj:
        """What this state keeps of a Pod (the Pod informer's transform: applied as pages arrive)."""
        return slim_pod(pod, self._shared)

    async def pod_event(self, type_: str, pod: Obj) -> None:
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if type_ == "DELETED":
            self._drop_pod(key)
        else:
            self._put_pod(slim_pod(pod, self._shared))

    def _put_pod(self, pod: Obj) -> None:
        key = (str(pod["metadata"].get("namespace") or ""), str(pod["metadata"].get("name") or ""))
        node = pod["spec"].get("nodeName")
        self._drop_pod(key)
        if not node:
            return
        self.pods_by_node.setdefault(node, {})[key] = pod
        self._pod_node[key] = node
        self._bump(node)

    def _drop_pod(self, key: PodKey) -> None:
        node = self._pod_node.pop(key, None)
        if node is None:
            return
        pods = self.pods_by_node.get(node)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self.pods_by_node[node]
        self._bump(node)

    def pod(self, key: PodKey) -> Obj | None:
        """The (slim) pod, if bound and not finished."""
        node = self._pod_node.get(key)
        return None if node is None else (self.pods_by_node.get(node) or {}).get(key)

    def pods_on(self, node: str) -> list[Obj]:
        return list((self.pods_by_node.get(node) or {}).values())

    # ---- our own objects -----------------------------------------------------------------------

    def nodeslo_event(self, type_: str | None, obj: Obj) -> None:
        _track(self.nodeslos, type_, obj)

    def noderesource_event(self, type_: str | None, obj: Obj) -> None:
        name = str(obj["metadata"]["name"])
        before = self.noderesources.get(name)
        _track(self.noderesources, type_, obj)
        if type_ != "DELETED" and before is not None and before.get("spec") != obj.get("spec"):
            self.wake.set()  # a new override: apply it now

    async def service_accounts_synced_with(self, items: list[Obj], resource_version: str) -> None:
        self.service_accounts = {str(item["metadata"]["name"]): str(item["metadata"].get("uid") or "")
                                 for item in items}
        self.service_accounts_synced = True

    async def service_account_changed(self, type_: str, account: Obj) -> None:
        name = str(account["metadata"]["name"])
        if type_ == "DELETED":
            self.service_accounts.pop(name, None)
        else:
            self.service_accounts[name] = str(account["metadata"].get("uid") or "")

    def leases_synced_with(self, items: list[Obj]) -> None:
        """The Lease informer's full list: Leases missing from it were deleted in a gap of the watch."""
        self.lease_renew_times = {}
        for item in items:
            self.lease_event("ADDED", item)

    def lease_event(self, type_: str | None, lease: Obj) -> None:
        name = str(lease["metadata"]["name"])
        if type_ == "DELETED":
            self.lease_renew_times.pop(name, None)
            return
        renew = (lease.get("spec") or {}).get("renewTime")
        if renew:
            self.lease_renew_times[name] = str(renew)


def _track(objects: dict[str, Obj], type_: str | None, obj: Obj) -> None:
    name = str(obj["metadata"]["name"])
    if type_ == "DELETED":
        objects.pop(name, None)
    else:
        objects[name] = obj
