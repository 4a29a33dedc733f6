"""Which Nodes exist, their labels and allocatable, followed with one list-then-watch of the Node collection."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from colocation.apimachinery.objects import Obj, interned_strings
from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.kube import permissions
from colocation.kube.informer import Informer, Transport

_LIST_NODES = permissions.declared(permissions.OPERATOR_API_CALLS,
                                   permissions.ApiCall(group="", resource="nodes", verb="list", namespace=None))
_WATCH_NODES = permissions.declared(permissions.OPERATOR_API_CALLS,
                                    permissions.ApiCall(group="", resource="nodes", verb="watch", namespace=None))


class NodeDirectory:
    """Node name -> labels. Read-only views are handed out; the informer is the only writer.

    `on_deleted` hears of every Node that went away: a DELETED event, or a Node missing from a
    relist (its deletion fell in a gap of the watch).
    """

    def __init__(self, on_deleted: Callable[[str], None] | None = None) -> None:
        self._labels: dict[str, Mapping[str, str]] = {}
        # {"cpu": milli-cores, "memory": bytes}; an unchanged one stays the same object (readers cache by it).
        self._allocatable: dict[str, Mapping[str, int]] = {}
        self._on_deleted = on_deleted
        self.synced = False  # a full list has arrived: absence from it means the Node is gone

    def labels(self, name: str) -> Mapping[str, str] | None:
        return self._labels.get(name)

    def allocatable(self, name: str) -> Mapping[str, int] | None:
        return self._allocatable.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._labels

    def __len__(self) -> int:
        return len(self._labels)

    async def on_sync(self, items: list[Obj], resource_version: str) -> None:
        fresh = {item["metadata"]["name"]: _labels(item) for item in items}
        gone = sorted(set(self._labels) - set(fresh))
        self._labels = fresh
        self._allocatable = {item["metadata"]["name"]: self._kept_allocatable(item) for item in items}
        self.synced = True
        for name in gone:
            self._deleted(name)

    async def on_event(self, type_: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if type_ == "DELETED":
            self._labels.pop(name, None)
            self._allocatable.pop(name, None)
            self._deleted(name)
        else:
            self._labels[name] = _labels(obj)
            self._allocatable[name] = self._kept_allocatable(obj)

    def _kept_allocatable(self, node: Obj) -> Mapping[str, int]:
        allocatable = _allocatable(node)
        before = self._allocatable.get(str(node["metadata"]["name"]))
        return before if before == allocatable else allocatable

    def _deleted(self, name: str) -> None:
        if self._on_deleted is not None:
            self._on_deleted(name)

    def informer(self, transport: Transport) -> Informer[Obj]:
        return Informer(transport, "/api/v1/nodes", on_sync=self.on_sync, on_event=self.on_event, name="nodes")


def _labels(node: Obj) -> Mapping[str, str]:
    metadata = node.get("metadata") or {}
    return MappingProxyType(interned_strings(metadata.get("labels") or {}, metadata.get("name")))


def _allocatable(node: Obj) -> Mapping[str, int]:
    values = (node.get("status") or {}).get("allocatable") or {}
    kept: dict[str, int] = {}
    for name, convert in (("cpu", cpu_millis), ("memory", byte_value)):
        try:
            if name in values:
                kept[name] = convert(values[name])
        except (ValueError, TypeError):
            continue  # a Node the API server accepted has none
    return MappingProxyType(kept)
