"""The stored NodeMetrics read as resource metrics: cpu and memory usage per node and per pod, with a window.

metrics.k8s.io and the built-in custom metrics both read the figures here. `usage` and `window`
are Koordinator's (`nodeUsage`, `podUsage`), which custom metrics use; `served()` and
`served_pod()` are what metrics.k8s.io serves: the short-window `recentUsage` with its window,
else Koordinator's figure. A pod reported by two nodes has the figures of the report this replica
received last. Stored bodies are parsed when read, and the result kept per resourceVersion.

The choices where our data is not metrics-server's: docs/metrics-apis.md#serving-kubectl-top
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from colocation.apimachinery.goduration import format_go_duration, parse_go_duration
from colocation.apimachinery.selectors import LabelSelector
from colocation.nodemetrics.storage_interface import Entry, NodeMetricReader

FALLBACK_WINDOW = "10s"
SERVED_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True, slots=True, kw_only=True)
class PodUsage:
    namespace: str
    name: str
    usage: Mapping[str, str]  # podUsage
    recent: Mapping[str, str] | None = None  # recentUsage, when reported


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeUsage:
    name: str
    labels: Mapping[str, str]
    timestamp: str  # RFC 3339, the report's updateTime
    window: str  # a Go duration, of `usage`
    usage: Mapping[str, str]  # nodeUsage
    pods: tuple[PodUsage, ...]
    recent: Mapping[str, str] | None = None  # recentUsage, when reported
    recent_window: str = ""  # a Go duration, of `recent` and the pods' `recent`

    def served(self) -> tuple[Mapping[str, str], str]:
        """The node's usage and window that metrics.k8s.io serves: the short window's when reported."""
        return (self.recent, self.recent_window) if self.recent is not None else (self.usage, self.window)

    def served_pod(self, pod: PodUsage) -> tuple[Mapping[str, str], str]:
        """A pod's usage and window that metrics.k8s.io serves, by the same rule."""
        return (pod.recent, self.recent_window) if pod.recent is not None else (pod.usage, self.window)


def _served(resource_map: Mapping[str, Any] | None) -> Mapping[str, str]:
    # A resource the report lacks is left out, not zero: the HPA skips a pod without it.
    resources = (resource_map or {}).get("resources") or {}
    return MappingProxyType({name: str(resources[name]) for name in SERVED_RESOURCES if name in resources})


def _recent(node_metric: Mapping[str, Any]) -> tuple[Mapping[str, str] | None, str]:
    recent = node_metric.get("recentUsage")
    seconds = recent.get("windowSeconds") if isinstance(recent, Mapping) else None
    if not isinstance(seconds, int) or seconds <= 0:  # absent: an agent older than the field
        return None, ""
    return _served(recent), format_go_duration(seconds * 10**9)


def report_window(node_metric: Mapping[str, Any]) -> str:
    """The window the usage was averaged over: see the module docstring."""
    durations = [nanos for usage in node_metric.get("aggregatedNodeUsages") or ()
                 if (nanos := parse_go_duration(str(usage.get("duration") or ""))) is not None and nanos > 0]
    return format_go_duration(min(durations)) if durations else FALLBACK_WINDOW


def node_usage_of(obj: Mapping[str, Any]) -> NodeUsage:
    """Read a NodeMetric object (already validated when it was stored)."""
    metadata, status = obj["metadata"], obj.get("status") or {}
    node_metric = status.get("nodeMetric") or {}
    recent, recent_window = _recent(node_metric)
    pods = tuple(PodUsage(namespace=pod["namespace"], name=pod["name"], usage=_served(pod.get("podUsage")),
                          recent=_served(pod["recentUsage"]) if recent is not None and pod.get("recentUsage") else None)
                 for pod in status.get("podsMetric") or ())
    return NodeUsage(name=metadata["name"], labels=MappingProxyType(dict(metadata.get("labels") or {})),
                     timestamp=str(status.get("updateTime") or ""), window=report_window(node_metric),
                     usage=_served(node_metric.get("nodeUsage")), pods=pods, recent=recent, recent_window=recent_window)


class ResourceMetricsView:
    """The store's entries read as NodeUsage, parsed once per entry resourceVersion."""

    def __init__(self, store: NodeMetricReader) -> None:
        self._store = store
        self._parsed: dict[str, tuple[int, NodeUsage]] = {}
        self._index_key: tuple[tuple[str, int], ...] = ()
        self._pod_index: dict[tuple[str, str], tuple[NodeUsage, PodUsage]] = {}

    def _usage(self, entry: Entry) -> NodeUsage:
        cached = self._parsed.get(entry.name)
        if cached is not None and cached[0] == entry.resource_version:
            return cached[1]
        usage = node_usage_of(orjson.loads(entry.body))
        self._parsed[entry.name] = (entry.resource_version, usage)
        return usage

    def node(self, name: str) -> NodeUsage | None:
        entry = self._store.get(name)
        return self._usage(entry) if entry is not None else None

    def nodes(self, selector: LabelSelector | None = None, name: str | None = None) -> list[NodeUsage]:
        """In name order, as the store lists them."""
        entries, _ = self._store.list(selector, name)
        if selector is None and name is None:
            self._forget_all_but(entries)
        return [self._usage(entry) for entry in entries]

    def pods(self) -> Mapping[tuple[str, str], tuple[NodeUsage, PodUsage]]:
        """(namespace, name) -> the pod's figures and the node report they came from."""
        entries, _ = self._store.list()
        key = tuple((entry.name, entry.resource_version) for entry in entries)
        if key != self._index_key:
            index: dict[tuple[str, str], tuple[NodeUsage, PodUsage]] = {}
            received: dict[tuple[str, str], float] = {}
            for entry in entries:
                node = self._usage(entry)
                for pod in node.pods:
                    if received.get((pod.namespace, pod.name), -1.0) < entry.received_at:
                        index[(pod.namespace, pod.name)] = (node, pod)
                        received[(pod.namespace, pod.name)] = entry.received_at
            self._forget_all_but(entries)
            self._index_key, self._pod_index = key, index
        return self._pod_index

    def _forget_all_but(self, entries: list[Entry]) -> None:
        # Nodes dropped from the store (silent, or deleted) leave the cache too.
        if len(self._parsed) > len(entries):
            live = {entry.name for entry in entries}
            self._parsed = {name: parsed for name, parsed in self._parsed.items() if name in live}
