"""Every node's `NodeFigures`, computed ahead of the scheduling requests, which only read them.

A node's figures depend on its NodeMetric (its resourceVersion), its bound pods (`BoundPods`'
version), its allocatable and the configuration; the parsed report (`ReportedLoad`) on the first
and the last only. `refresh` (every second) computes again the figures of each node whose inputs
changed, parsing each report once, and forgets the nodes that went away. It looks only at the
nodes the store names as changed since the last refresh (`names_changed_since`), and at every node
once every `full_walk_every` refreshes, after a configuration change, or when the store cannot
tell (its watch window no longer reaches back): a Node's new allocatable, which the store does not
see, counts at the node's next report or at the next full walk. A request first takes the nodes
whose pods changed since (`BoundPods.take_changed`), so a binding counts at once, and a new report
at most a refresh later. A node with pods placed tentatively is computed for the
request: its cached figures plus the tentative pods' share. A node without a NodeMetric or whose
allocatable is unknown has no figures: it is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping

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
                 allocatable: Callable[[str], Resources | None], full_walk_every: int = 30) -> None:
        self._store = store
        self._full_walk_every = max(1, full_walk_every)
        self._since_full_walk = 0  # refreshes since the last full walk
        self._refreshed_at: int | None = None  # the store's resourceVersion at the last refresh
        self._pods = pods
        self._tentatives = tentatives
        self._allocatable = allocatable
        self._config: LoadAwareConfig | None = None  # what `_current` was computed with
        self._reports: dict[str, tuple[int, ReportedLoad]] = {}  # name -> (resourceVersion, parsed)
        self._inputs: dict[str, _Inputs] = {}
        self._assigned: dict[str, list[AssignedPod]] = {}  # each node's bound pods, estimated
        self._current: dict[str, NodeFigures] = {}
        self.parsed = 0  # reports parsed: a figure for tests and benchmarks
        self.full_walks = 0  # refreshes that looked at every node: the same

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
        for _ in self.refresh_in_steps(config):
            pass

    def refresh_in_steps(self, config: LoadAwareConfig, *, step: int = 200) -> Iterator[None]:
        """`refresh`, pausing after every `step` nodes, so that its caller can let requests in
        between (at 100,000 nodes a refresh computes about 10,000 nodes' figures). Each node is
        read from the store when its turn comes. A configuration change between steps ends it: the
        request that saw the change refreshed everything."""
        if config is not self._config:
            self._config = config
            self._reports.clear()
            self._inputs.clear()
            self._assigned.clear()
            self._refreshed_at = None
        self._since_full_walk += 1
        changes = None
        if self._refreshed_at is not None and self._since_full_walk < self._full_walk_every:
            changes = self._store.names_changed_since(self._refreshed_at)
        if changes is None:
            self._pods.take_changed()  # every node is looked at below
            entries, self._refreshed_at = self._store.list()
            names: Collection[str] = [entry.name for entry in entries]
            self._since_full_walk = 0
            self.full_walks += 1
        else:
            names, self._refreshed_at = changes
        for index, name in enumerate(names, start=1):
            self._update(name, config)
            if index % step == 0:
                yield
                if config is not self._config:
                    return
        if changes is None:  # forget the nodes gone from the store since they were looked at
            for name in [name for name in self._reports.keys() | self._inputs.keys() if self._store.get(name) is None]:
                self._forget(name)

    def _update(self, name: str, config: LoadAwareConfig) -> None:
        entry = self._store.get(name)
        allocatable = self._allocatable(name)
        if entry is None or allocatable is None:
            self._forget(name)
            return
        inputs = (entry.resource_version, self._pods.version(name), allocatable)
        before = self._inputs.get(name)
        if before is not None and before[0] == inputs[0] and before[1] == inputs[1] and before[2] is allocatable:
            return
        assigned = self._assigned[name] = [_assigned(pod, config) for pod in self._pods.on(name)]
        # A dict of its own: read thousands of times a request, faster than the directory's read-only view.
        self._current[name] = node_figures(allocatable=dict(allocatable), report=self._report(entry, config),
                                           assigned=assigned, prod_usage=_prod_usage(config))
        self._inputs[name] = inputs

    def _forget(self, name: str) -> None:
        for cache in (self._reports, self._inputs, self._current, self._assigned):
            cache.pop(name, None)

    def _with_tentative(self, name: str) -> NodeFigures | None:
        """The node's figures with its tentative pods added. `node_figures` adds each pod on its own,
        so the tentative pods' share is computed alone and added to the cached figures."""
        base = self._current.get(name)
        cached = self._reports.get(name)
        if base is None or cached is None:
            return None
        report = cached[1]
        extra = node_figures(allocatable=base.allocatable, report=report, assigned=self._tentatives.on_node(name),
                             prod_usage=self._config is None or _prod_usage(self._config))
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


def _prod_usage(config: LoadAwareConfig) -> bool:
    """Whether anything reads the prod figure: the filter, only with prodUsageThresholds."""
    return any(config.prod_usage_thresholds.values())
