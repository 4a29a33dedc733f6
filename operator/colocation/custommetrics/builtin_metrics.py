"""Built-in metrics of every Pod and Node, from the NodeMetric reports every replica already holds.

`cpu_usage` and `memory_usage` come from the latest report; a node's p90 and p99 are the agent's
own percentiles; a pod's, and every `_agg_*`, come from a history of the reports. Nothing is done
when a report arrives: the latest figures are read when asked, and `sample_history`, called by
every replica on its own timer, records the nodes whose report changed, at the time this replica
received it (`Entry.received_at`), never at its `updateTime`. A quantity that cannot be read is
left out, never an error.

The metrics, and why by receipt time: docs/metrics-apis.md#what-is-served and
docs/operator.md#the-nodemetric-api
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from colocation.apimachinery.clock import parse_time
from colocation.apimachinery.goduration import parse_go_duration
from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.custommetrics.series_store import NODES, PODS, SeriesKey, SeriesStore
from colocation.custommetrics.suffix_aggregations import MetricRequest, nearest_rank, reduce
from colocation.nodemetrics.resource_metrics_view import NodeUsage, ResourceMetricsView
from colocation.nodemetrics.storage_interface import Entry, NodeMetricReader

CPU_USAGE = "cpu_usage"
MEMORY_USAGE = "memory_usage"
_RESOURCE_OF = {CPU_USAGE: "cpu", MEMORY_USAGE: "memory"}
PERCENTILES = {"p90": 90, "p99": 99}
BUILTIN_METRICS = (CPU_USAGE, MEMORY_USAGE, *(f"{base}_{p}" for base in _RESOURCE_OF for p in PERCENTILES))


@dataclass(frozen=True, slots=True)
class Point:
    """One served value: what it is, when it was measured, over how many seconds."""

    value: float
    timestamp: float
    window_seconds: int | None = None


def is_builtin(metric: MetricRequest) -> bool:
    return metric.base in _RESOURCE_OF or (metric.base in BUILTIN_METRICS and not metric.aggregated)


def _amount(resource: str, quantity: str) -> float | None:
    """Cores for cpu (from milli-cores), bytes for memory; None if it is not a quantity."""
    try:
        return cpu_millis(quantity) / 1000 if resource == "cpu" else float(byte_value(quantity))
    except (ValueError, ArithmeticError):
        return None


def _epoch(time: str) -> float:
    try:
        return parse_time(time) if time else 0.0
    except ValueError:
        return 0.0


def _split(metric: MetricRequest) -> tuple[str, str]:
    """(resource, percentile or "") of a built-in metric name."""
    base, _, percentile = metric.base.rpartition("_")
    if percentile in PERCENTILES:
        return _RESOURCE_OF[base], percentile
    return _RESOURCE_OF[metric.base], ""


class BuiltinMetrics:
    def __init__(self, store: NodeMetricReader, view: ResourceMetricsView, history: SeriesStore) -> None:
        self._store = store
        self._view = view
        self.history = history
        self._sampled: dict[str, int] = {}  # node → the resourceVersion last sampled
        self._node_percentiles: dict[str, tuple[int, Mapping[tuple[str, str], Point]]] = {}

    # -- the objects that have built-in metrics --------------------------------------------------

    def node_names(self) -> list[str]:
        return [entry.name for entry in self._store.list()[0]]

    def pod_names(self, namespace: str) -> list[str]:
        return [name for pod_namespace, name in self._view.pods() if pod_namespace == namespace]

    # -- values ----------------------------------------------------------------------------------

    def node_value(self, name: str, metric: MetricRequest) -> Point | None:
        entry = self._store.get(name)
        if entry is None:
            return None
        resource, percentile = _split(metric)
        if percentile:
            return self._percentiles(entry).get((resource, percentile))
        if metric.aggregated:
            return self._from_history(SeriesKey(metric=metric.base, resource=NODES, namespace="", name=name, labels=()),
                                      metric.aggregation)
        figures = entry.figures
        value = figures.cpu_millis / 1000 if resource == "cpu" else float(figures.memory_bytes)
        return Point(value, figures.update_time)

    def pod_value(self, namespace: str, name: str, metric: MetricRequest) -> Point | None:
        found = self._view.pods().get((namespace, name))
        if found is None:
            return None
        resource, percentile = _split(metric)
        if percentile or metric.aggregated:
            base = f"{metric.base.rpartition('_')[0]}" if percentile else metric.base
            return self._from_history(SeriesKey(metric=base, resource=PODS, namespace=namespace, name=name, labels=()),
                                      percentile or metric.aggregation)
        node, pod = found
        quantity = pod.usage.get(resource)
        amount = _amount(resource, quantity) if quantity is not None else None
        return Point(amount, _epoch(node.timestamp)) if amount is not None else None

    def _from_history(self, key: SeriesKey, aggregation: str) -> Point | None:
        series = self.history.series_of(key.metric, key.resource, key.namespace, name=key.name)
        if not series:
            return None
        timestamps, values = series[0].window(self.history.oldest_kept())
        if not values:
            return None
        value = nearest_rank(values, PERCENTILES[aggregation]) if aggregation in PERCENTILES \
            else reduce(values, aggregation)
        return Point(value, timestamps[-1], round(timestamps[-1] - timestamps[0]))

    def _percentiles(self, entry: Entry) -> Mapping[tuple[str, str], Point]:
        cached = self._node_percentiles.get(entry.name)
        if cached is not None and cached[0] == entry.resource_version:
            return cached[1]
        if len(self._node_percentiles) > self._store.node_count:  # nodes gone: forget them
            live = set(self.node_names())
            self._node_percentiles = {n: c for n, c in self._node_percentiles.items() if n in live}
        points = _report_percentiles(orjson.loads(entry.body), entry.figures.update_time)
        self._node_percentiles[entry.name] = (entry.resource_version, points)
        return points

    # -- history (on each replica's timer) ------------------------------------------------------

    def sample_history(self) -> int:
        """Record the usage of every node whose report changed since the last call, and its pods'."""
        recorded = 0
        entries, _ = self._store.list()
        for entry in entries:
            if self._sampled.get(entry.name) == entry.resource_version:
                continue
            self._sampled[entry.name] = entry.resource_version
            usage = self._view.node(entry.name)
            if usage is not None:
                recorded += self._record(usage, entry)
        if len(self._sampled) > len(entries):
            live = {entry.name for entry in entries}
            self._sampled = {name: rv for name, rv in self._sampled.items() if name in live}
        return recorded

    def _record(self, usage: NodeUsage, entry: Entry) -> int:
        # At the time the report was received: the agent's updateTime is its own clock, and a
        # skewed one would put the sample out of order with other nodes' or beyond the retention.
        at, recorded = entry.received_at, 0
        samples: list[tuple[SeriesKey, float]] = [
            (SeriesKey(metric=CPU_USAGE, resource=NODES, namespace="", name=entry.name, labels=()),
             entry.figures.cpu_millis / 1000),
            (SeriesKey(metric=MEMORY_USAGE, resource=NODES, namespace="", name=entry.name, labels=()),
             float(entry.figures.memory_bytes))]
        for pod in usage.pods:
            for metric, resource in _RESOURCE_OF.items():
                if resource in pod.usage and (amount := _amount(resource, pod.usage[resource])) is not None:
                    samples.append((SeriesKey(metric=metric, resource=PODS, namespace=pod.namespace, name=pod.name,
                                              labels=()), amount))
        for key, value in samples:
            recorded += self.history.record(key, at, value)
        return recorded


def _report_percentiles(obj: Mapping[str, Any], at: float) -> dict[tuple[str, str], Point]:
    """(resource, p90|p99) → the agent's figure over its shortest aggregation duration."""
    node_metric = (obj.get("status") or {}).get("nodeMetric") or {}
    durations: Iterable[tuple[int, Mapping[str, Any]]] = (
        (nanos, aggregated.get("usage") or {}) for aggregated in node_metric.get("aggregatedNodeUsages") or ()
        if (nanos := parse_go_duration(str(aggregated.get("duration") or ""))) is not None and nanos > 0)
    points: dict[tuple[str, str], Point] = {}
    for nanos, usage in sorted(durations, key=lambda pair: -pair[0]):  # the shortest is written last
        for percentile in PERCENTILES:
            resources = (usage.get(percentile) or {}).get("resources") or {}
            for resource in _RESOURCE_OF.values():
                if resource in resources and (amount := _amount(resource, str(resources[resource]))) is not None:
                    points[(resource, percentile)] = Point(amount, at, nanos // 10**9)
    return points
