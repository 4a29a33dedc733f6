"""Every node's `NodeFigures`, computed ahead of the scheduling requests, which only read them.

A node's figures depend on its NodeMetric (its resourceVersion), its bound pods (`BoundPods`'
version), its allocatable and the configuration; the parsed report (`ReportedLoad`) on the first
and the last only. `refresh` (every second) computes again the figures of each node whose inputs
changed, parsing each report once, and forgets the nodes that went away; a request first takes
the nodes whose pods changed since (`BoundPods.take_changed`), so a binding counts at once, and a
new report at most a refresh later. A node with pods placed tentatively is computed for the
request: its cached figures plus the tentative pods' share. A node without a NodeMetric or whose
allocatable is unknown has no figures: it is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson

from colocation.koordinator.classes import priority_of
from colocation.loadaware.bound_pods import BoundPod, BoundPods
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.node_figures import AssignedPod, NodeFigures, ReportedLoad, node_figures, reported_load
from colocation.loadaware.pod_estimate import Resources, estimate_pod
from colocation.loadaware.tentative_placements import TentativePlacements
from colocation.nodemetrics.storage_interface import Entry, NodeMetricReader

# What a node's figures were computed from: resourceVersion, pods' version, allocatable (by identity).
_Inputs = tuple[int, int, Resources]


class NodeFigureCache:
    """Not thread-safe: one event loop owns it."""

    def __init__(self, store: NodeMetricReader, pods: BoundPods, tentatives: TentativePlacements, *,
                 allocatable: Callable[[str], Resources | None]) -> None:
        self._store = store
        self._pods = pods
        self._tentatives = tentatives
        self._allocatable = allocatable
        self._config: LoadAwareConfig | None = None  # what `_current` was computed with
        self._reports: dict[str, tuple[int, ReportedLoad]] = {}  # name -> (resourceVersion, parsed)
        self._inputs: dict[str, _Inputs] = {}
        self._assigned: dict[str, list[AssignedPod]] = {}  # each node's bound pods, estimated
        self._current: dict[str, NodeFigures] = {}
        self.parsed = 0  # reports parsed: a figure for tests and benchmarks

    def figures(self, config: LoadAwareConfig) -> Mapping[str, NodeFigures]:
        """Node name -> figures, for every node that has them (read, never kept, by the caller)."""
        if config is not self._config:
            self.refresh(config)
        for name in self._pods.take_changed():
            self._update(name, config)
        tentative = self._tentatives.nodes()
        if not tentative:
            return self._current
        figures = dict(self._current)  # a copy: the tentative placements count for this request only
        for name in tentative:
            held = self._with_tentative(name)
            if held is not None:
                figures[name] = held
        return figures

    def node(self, name: str, config: LoadAwareConfig) -> NodeFigures | None:
        return self.figures(config).get(name)

    def refresh(self, config: LoadAwareConfig) -> None:
        """Compute again the figures of every node whose inputs changed, and forget those gone."""
        if config is not self._config:
            self._config = config
            self._reports.clear()
            self._inputs.clear()
            self._assigned.clear()
        self._pods.take_changed()  # every node is looked at below
        entries, _ = self._store.list()
        for entry in entries:
            self._update(entry.name, config, entry)
        live = {entry.name for entry in entries}
        for cache in (self._reports, self._inputs, self._current, self._assigned):
            for name in [name for name in cache if name not in live]:
                del cache[name]

    def _update(self, name: str, config: LoadAwareConfig, entry: Entry | None = None) -> None:
        entry = entry or self._store.get(name)
        allocatable = self._allocatable(name)
        if entry is None or allocatable is None:
            for cache in (self._current, self._inputs, self._assigned):
                cache.pop(name, None)
            return
        inputs = (entry.resource_version, self._pods.version(name), allocatable)
        before = self._inputs.get(name)
        if before is not None and before[0] == inputs[0] and before[1] == inputs[1] and before[2] is allocatable:
            return
        assigned = self._assigned[name] = [_assigned(pod, config) for pod in self._pods.on(name)]
        # A dict of its own: read thousands of times a request, faster than the directory's read-only view.
        self._current[name] = node_figures(allocatable=dict(allocatable), report=self._report(entry, config),
                                           assigned=assigned)
        self._inputs[name] = inputs

    def _with_tentative(self, name: str) -> NodeFigures | None:
        """The node's figures with its tentative pods added. `node_figures` adds each pod on its own,
        so the tentative pods' share is computed alone and added to the cached figures."""
        base = self._current.get(name)
        cached = self._reports.get(name)
        if base is None or cached is None:
            return None
        report = cached[1]
        extra = node_figures(allocatable=base.allocatable, report=report, assigned=self._tentatives.on_node(name))
        used = {key: value + extra.used.get(key, 0) - report.node_usage.get(key, 0) for key, value in base.used.items()}
        prod_used = {key: value + extra.prod_used.get(key, 0) for key, value in base.prod_used.items()}
        return NodeFigures(allocatable=base.allocatable, received_at=base.received_at, used=used, prod_used=prod_used)

    def _report(self, entry: Entry, config: LoadAwareConfig) -> ReportedLoad:
        cached = self._reports.get(entry.name)
        if cached is not None and cached[0] == entry.resource_version:
            return cached[1]
        status = orjson.loads(entry.body).get("status") or {}
        report = reported_load(status, received_at=entry.received_at, config=config)
        self._reports[entry.name] = (entry.resource_version, report)
        self.parsed += 1
        return report


def _assigned(pod: BoundPod, config: LoadAwareConfig) -> AssignedPod:
    return AssignedPod(namespace=pod.namespace, name=pod.name,
                       estimate=estimate_pod(pod.pod, scaling_factors=config.estimated_scaling_factors),
                       prod=priority_of(pod.pod) == "koord-prod", assigned_at=pod.assigned_at)
