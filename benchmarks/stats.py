"""Summaries of measured samples: percentiles, rates, and human-readable figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.results import NanFloat


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (what latency SLOs are stated in); NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Latency:
    """Seconds: count, p50, p99, max (NaN without samples: null where saved in a benchmark's figures)."""

    count: int
    p50: NanFloat
    p99: NanFloat
    max: NanFloat

    @classmethod
    def of(cls, samples: Sequence[float]) -> Latency:
        return cls(len(samples), percentile(samples, 0.50), percentile(samples, 0.99),
                   max(samples) if samples else math.nan)


def ms(seconds: float) -> str:
    """Milliseconds with precision that suits the magnitude."""
    if math.isnan(seconds):
        return "n/a"
    value = seconds * 1000
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def size(n_bytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes:,.0f} B"


def ratio(value: float, reference: float) -> str:
    if not reference or math.isnan(value) or math.isnan(reference):
        return "n/a"
    return f"{value / reference:.2f}x"
