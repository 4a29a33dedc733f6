"""What the leader knows of the cluster: the objects its watches delivered, in memory.

The Node, Lease and Pod informers and Kopf's event handlers (`kopf_app`) write here; the
reconciler reads. Pods and Nodes are slimmed to the fields the controllers read: a pod's
requests, QoS class and Koordinator classes are derived once, when it arrives, and its
containers dropped. What many pods have in common is kept once and shared (`SharedParts`); the
kept objects are read, never changed. Everything runs on one event loop, so there are no locks.

Why: docs/architecture.md#what-an-evaluation-costs
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from cachetools import LRUCache

from colocation.apimachinery import pods
from colocation.apimachinery.objects import Obj, interned_strings
from colocation.controllers.eviction import MIRROR_POD_ANNOTATION
from colocation.controllers.kept_pod import KeptPod, PodShape
from colocation.controllers.packed_status import PackedStatus
from colocation.controllers.pod_table import PodTable
from colocation.koordinator.batch_formula import RESERVATION_ANNOTATION
from colocation.koordinator.classes import PRIORITY_LABEL, QOS_LABEL, kept_classes

PodKey = tuple[str, str]  # (namespace, name)

_CLASS_LABELS = (PRIORITY_LABEL, QOS_LABEL)  # the only labels priority and QoS are read from
# Distinct label sets, statuses and requests kept for sharing. Replicas of one workload
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

    def __len__(self) -> int:
        """How many parts are kept for sharing."""
        return 0 if self._parts is None else len(self._parts)

    def mapping(self, kind: str, mapping: Obj) -> Obj:
        return self.share((kind, *sorted(mapping.items())), mapping)



def slim_pod(pod: Mapping[str, Any], shared: SharedParts | None = None) -> KeptPod:
    """What the leader keeps of a Pod: the fields priority, QoS and eviction read, its Kubernetes
    QoS class (status.qosClass, computed here when the API has not set it) and its effective
    requests (`pods.KEPT_REQUESTS`), both derived ONCE from the containers, which are then dropped,
    and its Koordinator classes (`classes.KEPT_CLASSES`), which every evaluation reads.
    What it has in common with other pods is one `PodShape` for all of them, and its requests are
    those of the pods with equal requests (`shared`): the result is read-only. Idempotent: a kept
    pod keeps itself (its requests and class are read back, not recomputed to zero)."""
    if isinstance(pod, KeptPod):
        return pod
    shared = shared if shared is not None else SharedParts(size=0)
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    mirror = annotations.get(MIRROR_POD_ANNOTATION)
    priority = spec.get("priority")
    slim_status: Obj = {key: status[key] for key in ("phase",) if key in status}
    slim_status["qosClass"] = pods.qos_class(pod)
    shape = PodShape(
        namespace=_interned(metadata.get("namespace")),
        labels=shared.mapping("labels", {key: labels[key] for key in _CLASS_LABELS if key in labels}),
        annotations=None if mirror is None else {MIRROR_POD_ANNOTATION: mirror},
        deletion_timestamp=metadata.get("deletionTimestamp") or None,
        priority=priority,
        status=shared.mapping("status", slim_status), classes=kept_classes(pod))
    if shape.deletion_timestamp is None and shape.annotations is None:
        # A deletion time or a static pod's marker is the pod's own: its shape is not shared.
        shape = shared.share(("shape", *_shape_key(shape)), shape)
    requests = pods.pod_requests(pod)
    return KeptPod(metadata.get("name"), metadata.get("uid"), _interned(spec.get("nodeName")),
                   requests=shared.share(("requests", *requests), requests), shape=shape)


def _shape_key(shape: PodShape) -> tuple[Any, ...]:
    """What tells one shape from another: its parts, the mappings as their items, a priority that
    is not an int (kept as the API gave it) as its repr."""
    return tuple(tuple(sorted(part.items())) if isinstance(part, Mapping)
                 else repr(part) if field == "priority" and type(part) is not int else part
                 for field, part in zip(PodShape._fields, shape, strict=True))


def _interned(value: object) -> str | None:
    """Namespaces and node names repeat across pods: one string each (the API gives no other type)."""
    return sys.intern(value) if isinstance(value, str) else None


def slim_node(node: Mapping[str, Any]) -> Obj:
    """The fields of a Node that the controllers read: name, uid, labels (NodeSLO rules, zones),
    the reservation annotation, and status capacity and allocatable (the formula, the writes).
    The names and most values of labels and resources repeat across Nodes: one string each. (Not
    one mapping for equal capacities or allocatables: ours, the batch resources, differ by node
    and change at every write.)"""
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    annotations = metadata.get("annotations") or {}
    slim_meta: Obj = {key: metadata[key] for key in ("name", "uid", "resourceVersion") if key in metadata}
    slim_meta["labels"] = interned_strings(metadata.get("labels") or {}, slim_meta.get("name"))
    if RESERVATION_ANNOTATION in annotations:
        slim_meta["annotations"] = {RESERVATION_ANNOTATION: annotations[RESERVATION_ANNOTATION]}
    slim_status = {key: interned_strings(status[key]) for key in ("capacity", "allocatable")
                   if isinstance(status.get(key), Mapping)}
    return {"metadata": slim_meta, "status": slim_status}


def slim_own_object(obj: Mapping[str, Any], shared: SharedParts | None = None, *,
                    pack_status: bool = False) -> Obj:
    """What the controllers read of a NodeSLO or a NodeResource: its name, resourceVersion and
    generation, its spec and its status (not its managedFields, ownerReferences or labels). The
    NodeSLOs rendered from one configuration have equal specs, as most NodeResources do (none):
    one copy of each is kept (`shared`), read-only like the pods'. A NodeResource's status is kept
    as its JSON (`pack_status`, `packed_status.PackedStatus`)."""
    metadata = obj.get("metadata") or {}
    kept: Obj = {"metadata": {key: metadata[key] for key in ("name", "resourceVersion", "generation")
                              if key in metadata}}
    spec = obj.get("spec")
    if spec is not None:
        kept["spec"] = spec if shared is None else shared.share(
            ("spec", orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)), spec)
    if "status" in obj:
        status = obj["status"]
        packable = pack_status and isinstance(status, Mapping) and not isinstance(status, PackedStatus)
        kept["status"] = PackedStatus(status) if packable else status
    return kept


def _same_node(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether two slim copies of a Node say the same but for their resourceVersion: the kubelet
    rewrites its Node's status every few minutes, and our own writes come back by the watch."""
    if before.get("status") != after.get("status"):
        return False
    meta_before, meta_after = before.get("metadata") or {}, after.get("metadata") or {}
    return all(meta_before.get(key) == meta_after.get(key) for key in meta_before.keys() | meta_after.keys()
               if key != "resourceVersion")


class ClusterState:
    def __init__(self) -> None:
        self.nodes: dict[str, Obj] = {}
        # Bumped on every change of a node (but for its resourceVersion alone) or of its pods.
        self.node_versions: dict[str, int] = {}
        self.pods = PodTable()
        self.shared_parts = SharedParts()  # read-only to all but this state
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
        before = self.nodes.get(name)
        self.nodes[name] = node  # slim already (`slim_node`, the Node informer's transform)
        self.deleted_nodes.discard(name)
        if before is None or not _same_node(before, node):
            self._bump(name)
        if before is None:
            self.wake.set()

    # ---- pods (the informer's callbacks) ---------------------------------------------------------

    async def pods_synced_with(self, items: Sequence[Mapping[str, Any]], resource_version: str) -> None:
        self.pods = PodTable()
        for item in items:
            self._put_pod(item)
        for node in self.nodes:
            self._bump(node)
        self.pods_synced.set()

    def pod_kept(self, pod: Obj) -> KeptPod:
        """What this state keeps of a Pod (the Pod informer's transform: applied as pages arrive)."""
        return slim_pod(pod, self.shared_parts)

    async def pod_event(self, type_: str, pod: Mapping[str, Any]) -> None:
        if type_ == "DELETED":
            metadata = pod.get("metadata") or {}
            self._changed(self.pods.drop(str(metadata.get("namespace") or ""), str(metadata.get("name") or "")))
        else:
            self._put_pod(pod)

    def _put_pod(self, whole_or_kept: Mapping[str, Any]) -> None:
        # Kept already, as a rule (`pod_kept`, the informer's transform).
        pod = slim_pod(whole_or_kept, self.shared_parts)
        self._changed(self.pods.put(pod))
        self._changed(pod.node_name)

    def _changed(self, node: str | None) -> None:
        if node:
            self._bump(node)

    def pod(self, key: PodKey) -> KeptPod | None:
        """The (slim) pod, if bound and not finished."""
        return self.pods.get(*key)

    def pods_on(self, node: str) -> list[KeptPod]:
        return self.pods.on(node)

    # ---- our own objects -----------------------------------------------------------------------

    def nodeslo_event(self, type_: str | None, obj: Obj) -> None:
        _track(self.nodeslos, type_, slim_own_object(obj, self.shared_parts))

    def noderesource_event(self, type_: str | None, obj: Obj) -> None:
        name = str(obj["metadata"]["name"])
        before = self.noderesources.get(name)
        _track(self.noderesources, type_, slim_own_object(obj, self.shared_parts, pack_status=True))
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
