"""The bound pods of every node, as the extender reads them: what estimates a pod, and when it was bound.

Fed by the replica's one Pod informer of bound, unfinished pods (`consumer`), which the
controllers' and the metric APIs' caches share: no API call per scheduling request. Each pod is
pruned as it arrives (`pruned_pod`) to the fields Koordinator's estimator and the filter read
(class labels, priority, QoS class, owners' kinds, the containers' resources, overhead) and its
PodScheduled time. Each node has a version, bumped when its pods change, that the figures cache
compares, and `take_changed` names the nodes whose pods changed since it was last called.
`on_bound(uid)` hears of every pod the watch shows bound or gone: its tentative
placement ends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.clock import parse_time
from colocation.koordinator.classes import PRIORITY_LABEL, QOS_LABEL
from colocation.kube.shared_informer import InformerConsumer

_CLASS_LABELS = (PRIORITY_LABEL, QOS_LABEL)


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundPod:
    namespace: str
    name: str
    uid: str
    node: str
    pod: Mapping[str, Any]  # `pruned_pod`: what the estimator reads
    assigned_at: float | None  # PodScheduled's lastTransitionTime, seconds since the epoch


def pruned_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a Pod the estimator, the classes and the filter read, and no others."""
    metadata = _mapping(pod.get("metadata"))
    spec = _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    labels = _mapping(metadata.get("labels"))
    owners = metadata.get("ownerReferences")
    kept_meta: dict[str, Any] = {key: metadata[key] for key in ("name", "namespace", "uid") if key in metadata}
    kept_meta["labels"] = {key: labels[key] for key in _CLASS_LABELS if key in labels}
    if isinstance(owners, list):
        kept_meta["ownerReferences"] = [{"kind": _mapping(owner).get("kind")} for owner in owners]
    kept_spec: dict[str, Any] = {key: spec[key] for key in ("nodeName", "priority", "resources", "overhead")
                                 if key in spec}
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            kept_spec[key] = [{field: _mapping(container)[field] for field in ("resources", "restartPolicy")
                               if field in _mapping(container)} for container in containers]
    kept_status: dict[str, Any] = {key: status[key] for key in ("phase", "qosClass") if key in status}
    conditions = status.get("conditions")
    scheduled = [condition for condition in conditions if _mapping(condition).get("type") == "PodScheduled"] \
        if isinstance(conditions, list) else []
    if scheduled:
        kept_status["conditions"] = scheduled[:1]
    return {"metadata": kept_meta, "spec": kept_spec, "status": kept_status}


def assigned_time(pod: Mapping[str, Any]) -> float | None:
    """When the pod was bound: its PodScheduled condition's lastTransitionTime, if it has one."""
    conditions = _mapping(pod.get("status")).get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        condition = _mapping(condition)
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            try:
                return parse_time(str(condition.get("lastTransitionTime")))
            except ValueError:
                return None
    return None


class BoundPods:
    """Node -> its bound pods; one event loop owns it."""

    def __init__(self, *, on_bound: Callable[[str], None] | None = None) -> None:
        self._by_node: dict[str, dict[tuple[str, str], BoundPod]] = {}
        self._node_of: dict[tuple[str, str], str] = {}
        self._versions: dict[str, int] = {}
        self._version = 0
        self._changed: set[str] = set()  # bounded by the nodes
        self._on_bound = on_bound
        self.synced = False

    def __len__(self) -> int:
        return len(self._node_of)

    def on(self, node: str) -> tuple[BoundPod, ...]:
        return tuple(self._by_node.get(node, {}).values())

    def version(self, node: str) -> int:
        """Changes whenever the node's pods change (0: it never had any)."""
        return self._versions.get(node, 0)

    def take_changed(self) -> set[str]:
        """The nodes whose pods changed since the last call (one reader: the figures cache)."""
        changed, self._changed = self._changed, set()
        return changed

    async def on_sync(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self._changed.update(self._by_node)
        self._by_node, self._node_of, self._versions = {}, {}, {}
        for item in items:
            self._put(item)
        self.synced = True

    async def on_event(self, type_: str, obj: dict[str, Any]) -> None:
        if type_ == "DELETED":
            self._drop(_key(obj))
            self._bound(obj)
        else:
            self._put(obj)

    def consumer(self) -> InformerConsumer[dict[str, Any]]:
        """Bound pods that have not finished (the informer's selector): the load a node carries or is about to."""
        return InformerConsumer(name="scheduler extender", transform=pruned_pod, on_sync=self.on_sync,
                                on_event=self.on_event)

    def _put(self, pod: Mapping[str, Any]) -> None:
        key = _key(pod)
        node = str(_mapping(pod.get("spec")).get("nodeName") or "")
        self._drop(key)
        if node:
            metadata = _mapping(pod.get("metadata"))
            self._by_node.setdefault(node, {})[key] = BoundPod(
                namespace=key[0], name=key[1], uid=str(metadata.get("uid") or ""), node=node, pod=pod,
                assigned_at=assigned_time(pod))
            self._node_of[key] = node
            self._bump(node)
        self._bound(pod)

    def _drop(self, key: tuple[str, str]) -> None:
        node = self._node_of.pop(key, None)
        if node is None:
            return
        pods = self._by_node[node]
        del pods[key]
        if not pods:
            del self._by_node[node]
        self._bump(node)

    def _bump(self, node: str) -> None:
        # A node without pods has no version (0), as it had none before: the map stays bounded.
        self._changed.add(node)
        if node in self._by_node:
            self._version += 1
            self._versions[node] = self._version
        else:
            self._versions.pop(node, None)

    def _bound(self, pod: Mapping[str, Any]) -> None:
        uid = _mapping(pod.get("metadata")).get("uid")
        if uid and self._on_bound is not None:
            self._on_bound(str(uid))


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = _mapping(pod.get("metadata"))
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
