"""The collection policy of a node: its NodeSLO's spec.metricCollectPolicy, with defaults when absent."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from colocation.agent.aggregate import DEFAULT_DURATIONS, DEFAULT_WINDOW_SECONDS
from colocation.agent.collector import DEFAULT_MEMORY_POLICY, MEMORY_POLICIES, MemoryPolicy

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration ("5m", "1h30m", "90s", "1.5h"); raises ValueError otherwise."""
    value = text.strip()
    if value == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(value) or not value:
        raise ValueError(f"invalid duration {text!r}")
    return total


@dataclass(frozen=True)
class CollectPolicy:
    aggregate_duration_seconds: int = DEFAULT_WINDOW_SECONDS
    report_interval_seconds: int | None = None  # None: the agent's --max-report-interval
    durations: tuple[int, ...] = DEFAULT_DURATIONS
    memory_policy: MemoryPolicy = DEFAULT_MEMORY_POLICY


def collect_policy(nodeslo: Mapping[str, Any] | None) -> CollectPolicy:
    """The policy in a NodeSLO; a field that is absent or unusable keeps its default."""
    spec = ((nodeslo or {}).get("spec") or {}).get("metricCollectPolicy") or {}
    defaults = CollectPolicy()
    window = _positive_int(spec.get("aggregateDurationSeconds")) or defaults.aggregate_duration_seconds
    report = _positive_int(spec.get("reportIntervalSeconds"))
    durations = defaults.durations
    raw = (spec.get("nodeAggregatePolicy") or {}).get("durations")
    if isinstance(raw, list):
        parsed = []
        for item in raw:
            try:
                seconds = int(parse_go_duration(str(item)))
            except ValueError:
                continue
            if seconds > 0:
                parsed.append(seconds)
        durations = tuple(sorted(set(parsed))) or durations
    memory = spec.get("nodeMemoryCollectPolicy")
    memory_policy = cast(MemoryPolicy, memory) if memory in MEMORY_POLICIES else defaults.memory_policy
    return CollectPolicy(window, report, durations, memory_policy)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        return None
    return int(value)
