"""Aggregations asked for by a suffix of the metric name: `http_requests_agg_p95` and the like.

Computed over the samples a series holds (the retention window). Percentiles are nearest-rank
(the sample at rank ⌈p·n/100⌉), as the agent computes its aggregated usages, so a value served
is always one that was measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

AGGREGATION_SUFFIXES = ("_agg_avg", "_agg_max", "_agg_min", "_agg_p90", "_agg_p95", "_agg_p99", "_agg_latest")


def nearest_rank(values: Sequence[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1]


def _average(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


_FUNCTIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "avg": _average,
    "max": max,
    "min": min,
    "p90": lambda values: nearest_rank(values, 90),
    "p95": lambda values: nearest_rank(values, 95),
    "p99": lambda values: nearest_rank(values, 99),
    "latest": lambda values: values[-1],
}


@dataclass(frozen=True, slots=True)
class MetricRequest:
    """A requested metric name split into the metric stored and how to reduce its samples."""

    name: str  # as requested, and as served back
    base: str  # the stored metric
    aggregation: str  # "" (the newest sample) or a key of _FUNCTIONS

    @property
    def aggregated(self) -> bool:
        return bool(self.aggregation)


def parse_metric_name(name: str) -> MetricRequest:
    """`cpu_usage_agg_p90` → base cpu_usage, p90. Names ending so are reserved for aggregations."""
    for suffix in AGGREGATION_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return MetricRequest(name, name[: -len(suffix)], suffix.removeprefix("_agg_"))
    return MetricRequest(name, name, "")


def reduce(values: Sequence[float], aggregation: str) -> float:
    """The newest value (no aggregation) or the aggregation of `values`, which are oldest first."""
    if not values:
        raise ValueError("no samples to reduce")
    return _FUNCTIONS[aggregation or "latest"](values)
