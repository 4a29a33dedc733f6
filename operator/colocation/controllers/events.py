"""Kubernetes Events about Nodes, Pods and the ConfigMap: bodies and deduplication. Pure.

Events are core/v1 Events (what `kubectl describe` and `kubectl get events` show), with
`reportingComponent: colocation-operator`. An Event identical to one posted within
`window` seconds (same object, type, reason and message) is not posted again: the earlier
one's `count` goes up and its `lastTimestamp` moves, as client-go's EventCorrelator does
(`EventRecorder` returns a patch for that). Events about cluster-scoped objects (Nodes) go to
namespace `default`, as the kubelet's and the node lifecycle controller's do.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from colocation.apimachinery.clock import format_time

REPORTING_COMPONENT: Final = "colocation-operator"
NORMAL: Final = "Normal"
WARNING: Final = "Warning"
_MESSAGE_LIMIT = 1024  # events.k8s.io's note limit; core/v1 allows more, nobody reads more

EventType = Literal["Normal", "Warning"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjectRef:
    """The involvedObject of an Event."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""  # "" for cluster-scoped objects
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        metadata = obj.get("metadata") or {}
        return cls(api_version=str(obj.get("apiVersion") or "v1"), kind=str(obj.get("kind") or ""),
                   name=str(metadata.get("name") or ""), namespace=str(metadata.get("namespace") or ""),
                   uid=str(metadata.get("uid") or ""))

    @property
    def event_namespace(self) -> str:
        return self.namespace or "default"

    def as_json(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclasses.dataclass(frozen=True)
class Create:
    namespace: str
    body: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Patch:
    namespace: str
    name: str
    body: dict[str, Any]  # a JSON merge patch
    key: tuple[Any, ...]  # to `forget` it if the Event is gone (TTL) and must be created again


@dataclasses.dataclass
class _Series:
    name: str
    count: int
    last_seen: float


class EventRecorder:
    """Decides, for each Event to post, whether it is new (create) or a repeat (patch the count)."""

    def __init__(self, wall: Callable[[], float], instance: str, *, window: float = 600.0,
                 capacity: int = 4096) -> None:
        self._wall = wall
        self.instance = instance
        self.window = window
        self.capacity = capacity
        self._series: OrderedDict[tuple[Any, ...], _Series] = OrderedDict()
        self._sequence = 0

    def record(self, ref: ObjectRef, type_: EventType, reason: str, *, message: str) -> Create | Patch:
        now = self._wall()
        message = message if len(message) <= _MESSAGE_LIMIT else message[:_MESSAGE_LIMIT - 1] + "…"
        key = (ref, type_, reason, message)
        series = self._series.get(key)
        if series is not None and now - series.last_seen <= self.window:
            series.count += 1
            series.last_seen = now
            self._series.move_to_end(key)
            return Patch(namespace=ref.event_namespace, name=series.name,
                         body={"count": series.count, "lastTimestamp": format_time(now)}, key=key)
        name = self._name(ref, now)
        self._series[key] = _Series(name, 1, now)
        self._series.move_to_end(key)
        while len(self._series) > self.capacity:
            self._series.popitem(last=False)
        stamp = format_time(now)
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ref.event_namespace},
            "involvedObject": ref.as_json(),
            "reason": reason, "message": message, "type": type_,
            "count": 1, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": REPORTING_COMPONENT},
            "reportingComponent": REPORTING_COMPONENT, "reportingInstance": self.instance,
        }
        return Create(ref.event_namespace, body)

    def forget(self, key: tuple[Any, ...]) -> None:
        """The Event of this series is gone (expired): the next repeat creates a new one."""
        self._series.pop(key, None)

    def _name(self, ref: ObjectRef, now: float) -> str:
        # client-go names events <object>.<unix nanoseconds in hex>; a sequence keeps two events of
        # one object in the same nanosecond apart.
        self._sequence += 1
        return f"{ref.name[:200]}.{int(now * 1e9) + self._sequence:x}"  # within 253 characters
