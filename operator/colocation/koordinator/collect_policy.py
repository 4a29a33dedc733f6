"""A node's metric collection policy: its NodeSLO's spec.metricCollectPolicy, defaults where absent.

The operator renders the policy from colocation-config (`slo_strategies.render_nodeslo_spec`);
the agent reads it back here. Both take their defaults from `ColocationStrategy`, so a node
without a NodeSLO collects exactly as one whose NodeSLO carries the defaults.
See docs/architecture.md, Koordinator's model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from colocation.apimachinery.goduration import parse_go_duration
from colocation.koordinator.slo_strategies import MEMORY_COLLECT_POLICIES, ColocationStrategy, MemoryCollectPolicy

_DEFAULTS = ColocationStrategy.model_validate({})


def duration_seconds(text: str) -> float:
    """Seconds in a Go duration ("5m", "1h30m", "90s", "1.5h"); ValueError when it is not one."""
    nanos = parse_go_duration(text.strip())
    if nanos is None:
        raise ValueError(f"invalid duration {text!r}")
    return nanos / 1e9


DEFAULT_AGGREGATE_SECONDS: int = _DEFAULTS.metric_aggregate_duration_seconds
DEFAULT_DURATIONS: tuple[int, ...] = tuple(
    int(duration_seconds(text)) for text in _DEFAULTS.metric_aggregate_policy.durations)
DEFAULT_MEMORY_POLICY: MemoryCollectPolicy = _DEFAULTS.metric_memory_collect_policy


@dataclass(frozen=True, kw_only=True)
class CollectPolicy:
    aggregate_duration_seconds: int = DEFAULT_AGGREGATE_SECONDS
    report_interval_seconds: int | None = None  # None: the agent's --max-report-interval
    durations: tuple[int, ...] = DEFAULT_DURATIONS
    memory_policy: MemoryCollectPolicy = DEFAULT_MEMORY_POLICY


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
                seconds = int(duration_seconds(str(item)))
            except ValueError:
                continue
            if seconds > 0:
                parsed.append(seconds)
        durations = tuple(sorted(set(parsed))) or durations
    memory = spec.get("nodeMemoryCollectPolicy")
    memory_policy = cast(MemoryCollectPolicy, memory) if memory in MEMORY_COLLECT_POLICIES else defaults.memory_policy
    return CollectPolicy(aggregate_duration_seconds=window, report_interval_seconds=report, durations=durations,
                         memory_policy=memory_policy)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        return None
    return int(value)
