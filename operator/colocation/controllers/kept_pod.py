"""A kept pod: one small object holding what is its own, and a shared shape holding the rest.

A `KeptPod` holds its name, uid, node and requests (equal requests shared); what many pods have
in common (namespace, class labels, priority, phase and QoS class, Koordinator classes, a
deletion time, a static pod's marker) is one `PodShape`, kept once (`cluster.SharedParts`). It
reads as the `Mapping` `slim_pod` once made: `metadata` and `spec` are views made when read, a
field the pod lacks is absent, it compares equal to that dict and `dict(pod)` gives it back.
Nothing kept can be changed.

Why, and what it saves: docs/architecture.md#what-an-evaluation-costs
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, NamedTuple

from colocation.apimachinery.pods import KEPT_REQUESTS
from colocation.koordinator.classes import KEPT_CLASSES


class PodShape(NamedTuple):
    """What a pod may have in common with others: shared, read-only."""

    namespace: str | None
    labels: Mapping[str, str]  # the class labels only
    annotations: Mapping[str, str] | None  # the static pod's marker only
    deletion_timestamp: str | None
    priority: int | None
    status: Mapping[str, str]  # phase and qosClass
    classes: tuple[str, str]


class _ReadOnlyMapping(Mapping[str, Any]):
    """A mapping over fixed keys, each read by a function of the object; a None value is absent."""

    __slots__ = ()
    READERS: ClassVar[dict[str, Callable[[Any], Any]]] = {}

    def get(self, key: str, default: Any = None) -> Any:  # the readers' one access: kept fast
        reader = self.READERS.get(key)
        if reader is not None:
            value = reader(self)
            if value is not None:
                return value
        return default

    def __getitem__(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        return (key for key, reader in self.READERS.items() if reader(self) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # `pod.get("metadata") or {}`, in every reader: not a count of the keys
        return any(reader(self) is not None for reader in self.READERS.values())

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"


class KeptPod(_ReadOnlyMapping):
    """metadata and spec (views, `KeptPodMetadata` and `KeptPodSpec`), status, and the requests
    and classes derived once (`pods.KEPT_REQUESTS`, `classes.KEPT_CLASSES`)."""

    __slots__ = ("name", "node_name", "requests", "shape", "uid")
    name: str | None
    uid: str | None
    node_name: str | None
    requests: tuple[int, int]
    shape: PodShape

    def __init__(self, name: str | None, uid: str | None, node_name: str | None, *, requests: tuple[int, int],
                 shape: PodShape) -> None:
        for key, value in (("name", name), ("uid", uid), ("node_name", node_name), ("requests", requests),
                           ("shape", shape)):
            object.__setattr__(self, key, value)

    @property
    def namespace(self) -> str | None:
        return self.shape.namespace

    def get(self, key: str, default: Any = None) -> Any:
        # The formulas' hottest loop reads these of every pod: no look-up of a reader.
        if key == "status":
            return self.shape.status
        if key == "metadata":
            return KeptPodMetadata(self)
        if key == KEPT_CLASSES:
            return self.shape.classes
        if key == KEPT_REQUESTS:
            return self.requests
        return super().get(key, default)

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle: __setattr__ refuses theirs
        return _rebuilt, ((self.name, self.uid, self.node_name, self.requests, self.shape),)


def _rebuilt(fields: tuple[str | None, str | None, str | None, tuple[int, int], PodShape]) -> KeptPod:
    """A copied or unpickled KeptPod (pickle passes the arguments by position)."""
    name, uid, node_name, requests, shape = fields
    return KeptPod(name, uid, node_name, requests=requests, shape=shape)


class _PodView(_ReadOnlyMapping):
    """A part of a kept pod (its metadata, its spec), made when read: it holds only the pod."""

    __slots__ = ("_pod",)
    _pod: KeptPod

    def __init__(self, pod: KeptPod) -> None:
        object.__setattr__(self, "_pod", pod)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self._pod,)


class KeptPodMetadata(_PodView):
    """A kept pod's metadata, as read."""

    __slots__ = ()

    def get(self, key: str, default: Any = None) -> Any:
        if key == "name" or key == "namespace":  # every evaluation, every pod: the pod's metric
            value = self._pod.name if key == "name" else self._pod.shape.namespace
            return default if value is None else value
        return super().get(key, default)

    def __bool__(self) -> bool:
        return self._pod.name is not None or super().__bool__()


class KeptPodSpec(_PodView):
    """A kept pod's spec, as read."""

    __slots__ = ()


KeptPod.READERS = {"metadata": KeptPodMetadata, "spec": KeptPodSpec,
                   "status": lambda pod: pod.shape.status,
                   KEPT_REQUESTS: lambda pod: pod.requests,
                   KEPT_CLASSES: lambda pod: pod.shape.classes}
KeptPodMetadata.READERS = {"annotations": lambda meta: meta._pod.shape.annotations,
                           "deletionTimestamp": lambda meta: meta._pod.shape.deletion_timestamp,
                           "labels": lambda meta: meta._pod.shape.labels,
                           "name": lambda meta: meta._pod.name,
                           "namespace": lambda meta: meta._pod.shape.namespace,
                           "uid": lambda meta: meta._pod.uid}
KeptPodSpec.READERS = {"nodeName": lambda spec: spec._pod.node_name,
                       "priority": lambda spec: spec._pod.shape.priority}
