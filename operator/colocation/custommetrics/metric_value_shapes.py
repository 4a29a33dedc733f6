"""The JSON the metric APIs answer with, as k8s.io/metrics defines it and the HPA's client reads it.

custom.metrics.k8s.io: MetricValueList; v1beta2 items carry `metric: {name, selector}` and
`windowSeconds`, v1beta1 items `metricName`, `selector` and `window`. external.metrics.k8s.io:
ExternalMetricValueList with `metricName`, `metricLabels`, `window`. The described object's
apiVersion is "/v1", as custom-metrics-apiserver writes the core group. Values are Quantities in
milli-units ("1500m", "3"): the HPA reads them with MilliValue().
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery import discovery_documents as legacy
from colocation.apimachinery.clock import format_time
from colocation.apimachinery.quantity import format_millis
from colocation.apimachinery.selectors import LabelSelector, Operator

CUSTOM_GROUP = "custom.metrics.k8s.io"
EXTERNAL_GROUP = "external.metrics.k8s.io"
CUSTOM_VERSIONS = ("v1beta2", "v1beta1")  # preferred first
EXTERNAL_VERSION = "v1beta1"
_KIND_OF = {"pods": "Pod", "nodes": "Node"}
_MAX_MILLIS = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricValue:
    """One answer: a value of a metric for one object (custom) or one series (external)."""

    resource: str  # "pods" or "nodes"
    namespace: str
    name: str
    metric: str
    timestamp: float
    window_seconds: int | None
    value: float
    labels: Mapping[str, str] | None = None  # external: the series' labels


def quantity(value: float) -> str:
    """A float as a Quantity in milli-units (the precision the HPA reads), clamped to int64."""
    millis = max(-_MAX_MILLIS, min(_MAX_MILLIS, round(value * 1000)))
    return format_millis(millis)


def label_selector_object(selector: LabelSelector | None) -> dict[str, Any] | None:
    """A parsed selector back as metav1.LabelSelector (null when none was given)."""
    if selector is None or selector.empty:
        return None
    match_labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for requirement in selector.requirements:
        op = requirement.operator
        if op in (Operator.EQUALS, Operator.DOUBLE_EQUALS):
            match_labels[requirement.key] = requirement.values[0]
        elif op in (Operator.IN, Operator.NOT_IN, Operator.NOT_EQUALS):
            expressions.append({"key": requirement.key, "operator": "In" if op is Operator.IN else "NotIn",
                                "values": list(requirement.values)})
        elif op in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            expressions.append({"key": requirement.key,
                                "operator": "Exists" if op is Operator.EXISTS else "DoesNotExist"})
        # gt and lt have no metav1.LabelSelector form; they still filtered the answer.
    result: dict[str, Any] = {}
    if match_labels:
        result["matchLabels"] = match_labels
    if expressions:
        result["matchExpressions"] = expressions
    return result


def _described(value: MetricValue) -> dict[str, Any]:
    described: dict[str, Any] = {"kind": _KIND_OF[value.resource]}
    if value.namespace:
        described["namespace"] = value.namespace
    described.update(name=value.name, apiVersion="/v1")
    return described


def metric_value_list(version: str, values: Iterable[MetricValue],
                      metric_selector: LabelSelector | None) -> dict[str, Any]:
    group_version = f"{CUSTOM_GROUP}/{version}"
    selector = label_selector_object(metric_selector)
    items = []
    for value in values:
        item: dict[str, Any] = {"describedObject": _described(value)}
        if version == "v1beta1":
            item.update(metricName=value.metric, timestamp=format_time(value.timestamp))
            if value.window_seconds is not None:
                item["window"] = value.window_seconds
            item.update(value=quantity(value.value), selector=selector)
        else:
            item.update(metric={"name": value.metric, "selector": selector}, timestamp=format_time(value.timestamp))
            if value.window_seconds is not None:
                item["windowSeconds"] = value.window_seconds
            item["value"] = quantity(value.value)
        items.append(item)
    return {"kind": "MetricValueList", "apiVersion": group_version, "metadata": {}, "items": items}


def external_metric_value_list(values: Iterable[MetricValue]) -> dict[str, Any]:
    items = []
    for value in values:
        item: dict[str, Any] = {"metricName": value.metric, "metricLabels": dict(value.labels or {}),
                                "timestamp": format_time(value.timestamp)}
        if value.window_seconds is not None:
            item["window"] = value.window_seconds
        item["value"] = quantity(value.value)
        items.append(item)
    return {"kind": "ExternalMetricValueList", "apiVersion": f"{EXTERNAL_GROUP}/{EXTERNAL_VERSION}",
            "metadata": {}, "items": items}


# ---- discovery ---------------------------------------------------------------------------------


def custom_resource_list(version: str, metrics: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """One resource per (object resource, metric): "pods/http_requests", "nodes/cpu_usage"."""
    return legacy.api_resource_list(CUSTOM_GROUP, version, (
        legacy.api_resource(f"{resource}/{metric}", "MetricValueList", ("get",), namespaced=resource == "pods")
        for resource, metric in sorted(metrics)))


def external_resource_list(metrics: Iterable[str]) -> dict[str, Any]:
    return legacy.api_resource_list(EXTERNAL_GROUP, EXTERNAL_VERSION, (
        legacy.api_resource(metric, "ExternalMetricValueList", ("get",), namespaced=True)
        for metric in sorted(metrics)))
