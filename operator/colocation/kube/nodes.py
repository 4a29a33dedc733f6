"""Which Nodes exist and their labels, followed with one list-then-watch of the Node collection."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from colocation.apimachinery.objects import Obj
from colocation.kube import permissions
from colocation.kube.informer import Informer, Transport

_LIST_NODES = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall("", "nodes", "list", None))
_WATCH_NODES = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall("", "nodes", "watch", None))


class NodeDirectory:
    """Node name -> labels. Read-only views are handed out; the informer is the only writer."""

    def __init__(self) -> None:
        self._labels: dict[str, Mapping[str, str]] = {}

    def labels(self, name: str) -> Mapping[str, str] | None:
        return self._labels.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._labels

    def __len__(self) -> int:
        return len(self._labels)

    async def on_sync(self, items: list[Obj], resource_version: str) -> None:
        self._labels = {item["metadata"]["name"]: _labels(item) for item in items}

    async def on_event(self, type_: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if type_ == "DELETED":
            self._labels.pop(name, None)
        else:
            self._labels[name] = _labels(obj)

    def informer(self, transport: Transport) -> Informer:
        return Informer(transport, "/api/v1/nodes", on_sync=self.on_sync, on_event=self.on_event, name="nodes")


def _labels(node: Obj) -> Mapping[str, str]:
    return MappingProxyType(dict((node.get("metadata") or {}).get("labels") or {}))
