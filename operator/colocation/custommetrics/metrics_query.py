"""Answering metric requests from the series store and the built-in metrics.

The value of a custom metric for an object is the sum, over its series that match the
`metricLabelSelector`, of each series' newest sample (or of its aggregation, with an `_agg_*`
suffix): the sum of what the pod's endpoint exposes, as a Prometheus `sum by (pod)` gives. An
external metric is one value per series (its labels as `metricLabels`): the HPA adds them up.
Only objects that exist are served (the Pod informer, the Node list), so label selectors apply to
the Kubernetes labels of Pods and Nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import LabelSelector
from colocation.custommetrics.builtin_metrics import BUILTIN_METRICS, BuiltinMetrics, Point, is_builtin
from colocation.custommetrics.metric_value_shapes import CUSTOM_GROUP, MetricValue
from colocation.custommetrics.series_store import NODES, PODS, Series, SeriesStore
from colocation.custommetrics.suffix_aggregations import MetricRequest, parse_metric_name, reduce

ALL_OBJECTS = "*"


class PodLabels(Protocol):
    def labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The labels of a Pod that exists, else None."""


def metric_not_found_for(resource: str, metric: str, name: str) -> ApiError:
    # custom-metrics-apiserver's wording (provider.NewMetricNotFoundForError).
    return ApiError(404, "NotFound", f"the server could not find the metric {metric} for {resource} {name}",
                    {"group": CUSTOM_GROUP, "kind": resource, "name": name})


def metric_not_found(resource: str, metric: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the descriptor for metric {metric} for {resource}",
                    {"group": CUSTOM_GROUP, "kind": resource})


def combine(series: Iterable[Series], oldest: float, aggregation: str) -> Point | None:
    """The per-series values (newest sample or aggregation) summed; None when no sample is left."""
    total, newest, earliest, found = 0.0, 0.0, float("inf"), False
    for one in series:
        timestamps, values = one.window(oldest)
        if not values:
            continue
        found = True
        total += reduce(values, aggregation)
        newest = max(newest, timestamps[-1])
        earliest = min(earliest, timestamps[0] if aggregation else timestamps[-1])
    if not found:
        return None
    return Point(total, newest, round(newest - earliest) if aggregation else None)


class MetricsQuery:
    def __init__(self, series: SeriesStore, builtins: BuiltinMetrics, pods: PodLabels,
                 *, node_labels: Callable[[str], Mapping[str, str] | None]) -> None:
        self.series = series
        self.builtins = builtins
        self.pods = pods
        self.node_labels = node_labels

    # -- custom.metrics.k8s.io ------------------------------------------------------------------

    def custom(self, resource: str, namespace: str, name: str, *, metric_name: str,
               selector: LabelSelector | None, metric_selector: LabelSelector | None) -> list[MetricValue]:
        """Values for one object (`name`) or every object matching `selector` (name "*")."""
        if resource not in (PODS, NODES):
            raise metric_not_found(resource, metric_name)
        metric = parse_metric_name(metric_name)
        if name != ALL_OBJECTS:
            labels = self._labels(resource, namespace, name)
            point = self._point(resource, namespace, name, metric=metric,
                                metric_selector=metric_selector) if labels is not None else None
            if point is None:
                raise metric_not_found_for(resource, metric_name, name)
            return [self._value(resource, namespace, name, metric=metric, point=point)]
        builtin = is_builtin(metric)
        if not builtin and (metric.base not in {m for r, m in self.series.metrics() if r == resource}):
            raise metric_not_found(resource, metric_name)
        candidates: Iterable[str] = (self.builtins.pod_names(namespace) if resource == PODS
                                     else self.builtins.node_names()) if builtin \
            else self.series.object_names(metric.base, resource, namespace)
        values = []
        for candidate in sorted(set(candidates)):
            labels = self._labels(resource, namespace, candidate)
            if labels is None or (selector is not None and not selector.matches(labels)):
                continue
            point = self._point(resource, namespace, candidate, metric=metric, metric_selector=metric_selector)
            if point is not None:
                values.append(self._value(resource, namespace, candidate, metric=metric, point=point))
        return values

    def _labels(self, resource: str, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.pods.labels(namespace, name) if resource == PODS else self.node_labels(name)

    def _point(self, resource: str, namespace: str, name: str, *, metric: MetricRequest,
               metric_selector: LabelSelector | None) -> Point | None:
        if is_builtin(metric):
            if metric_selector is not None and not metric_selector.matches({}):
                return None  # built-in metrics have no labels
            return self.builtins.pod_value(namespace, name, metric) if resource == PODS \
                else self.builtins.node_value(name, metric)
        series = self.series.series_of(metric.base, resource, namespace, name=name, metric_selector=metric_selector)
        return combine(series, self.series.oldest_kept(), metric.aggregation)

    @staticmethod
    def _value(resource: str, namespace: str, name: str, *, metric: MetricRequest, point: Point) -> MetricValue:
        return MetricValue(resource=resource, namespace=namespace, name=name, metric=metric.name,
                           timestamp=point.timestamp, window_seconds=point.window_seconds, value=point.value)

    def custom_metrics(self) -> set[tuple[str, str]]:
        """(resource, metric) pairs for discovery: the built-ins and every metric held."""
        return {(resource, metric) for resource in (PODS, NODES) for metric in BUILTIN_METRICS} \
            | self.series.metrics()

    # -- external.metrics.k8s.io ----------------------------------------------------------------

    def external(self, namespace: str, metric_name: str, selector: LabelSelector | None) -> list[MetricValue]:
        """One value per pod series of the metric in the namespace whose labels match `selector`."""
        metric = parse_metric_name(metric_name)
        oldest = self.series.oldest_kept()
        values = []
        for series in self.series.series_in(metric.base, PODS, namespace, metric_selector=selector):
            point = combine((series,), oldest, metric.aggregation)
            if point is not None:
                values.append(MetricValue(resource=PODS, namespace=namespace, name=series.key.name, metric=metric.name,
                                          timestamp=point.timestamp, window_seconds=point.window_seconds,
                                          value=point.value, labels=series.labels))
        values.sort(key=lambda value: (sorted((value.labels or {}).items()), value.name))
        return values

    def external_metrics(self) -> set[str]:
        return {metric for resource, metric in self.series.metrics() if resource == PODS}
