"""Memory eviction, the decisions: which best-effort pods must go when the node runs short of memory. Pure.

As koordlet's memoryEvict strategy, when the NodeSLO's `resourceUsedThresholdWithBE` enables it:
once the node's memory usage reaches `memoryEvictThresholdPercent` of its capacity,
`memory_to_release` says how much to free to get down to `memoryEvictLowerPercent`, and pods go
in `memory_eviction_order` (evictable best-effort pods only: lowest priority, then the largest
usage; unmeasured pods last, by name descending) until their usage covers it. Pods asked for
and pods refused are followed up by `eviction_followup`, since the agent only asks.

The rules and koordlet's numbers: docs/agent.md#memory-eviction
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.strategies.eviction_followup import (
    DEFAULT_PENDING_SECONDS,
    Candidate,
    EvictionFollowUp,
    EvictionRound,
    PolicyFollower,
    candidates,
)
from colocation.apimachinery.clock import MonotonicClock
from colocation.koordinator.slo_strategies import ResourceThresholdStrategy
from colocation.kube.backoff import Backoff
from colocation.nodemetrics.eviction_request import EvictionReason

RELEASE_BUFFER_PERCENT = 2  # koordlet's memoryReleaseBufferPercent: the default lower percent is this below
DEFAULT_COOL_DOWN = 4.0  # koordlet's MemoryEvictCoolTimeSeconds

_DEFAULT_THRESHOLD = ResourceThresholdStrategy.model_validate({}).memory_evict_threshold_percent


@dataclass(frozen=True, kw_only=True)
class MemoryEvictPolicy:
    """The memory eviction part of a NodeSLO's spec.resourceUsedThresholdWithBE."""

    enabled: bool = False
    threshold_percent: int = _DEFAULT_THRESHOLD
    lower_percent: int = _DEFAULT_THRESHOLD - RELEASE_BUFFER_PERCENT
    problem: str = ""  # why an enabled NodeSLO still does not evict ("" when it does)


def memory_evict_policy(nodeslo: Mapping[str, Any] | None) -> MemoryEvictPolicy:
    """The policy of a NodeSLO; a NodeSLO without the block (or none at all) disables eviction."""
    spec = ((nodeslo or {}).get("spec") or {}).get("resourceUsedThresholdWithBE") or {}
    threshold = _integer(spec.get("memoryEvictThresholdPercent"), _DEFAULT_THRESHOLD)
    lower = _integer(spec.get("memoryEvictLowerPercent"), threshold - RELEASE_BUFFER_PERCENT)
    problem = ""
    if threshold < 0:
        problem = f"memoryEvictThresholdPercent {threshold} is negative"
    elif lower >= threshold:
        problem = f"memoryEvictLowerPercent {lower} is not below memoryEvictThresholdPercent {threshold}"
    return MemoryEvictPolicy(enabled=spec.get("enable") is True and not problem, threshold_percent=threshold,
                             lower_percent=lower, problem=problem if spec.get("enable") is True else "")


def _integer(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def memory_eviction_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Lowest priority first, then the largest usage; unmeasured pods last, by name descending."""
    by_name = sorted(candidates, key=lambda c: c.name, reverse=True)
    return sorted(by_name, key=lambda c: (c.priority, c.memory_bytes == 0, -c.memory_bytes))


def memory_to_release(policy: MemoryEvictPolicy, capacity_bytes: int, used_bytes: int) -> int | None:
    """Bytes to release now, or None while usage is under the threshold (whole percents, as koordlet)."""
    if not policy.enabled or capacity_bytes <= 0:
        return None
    usage_percent = used_bytes * 100 // capacity_bytes
    if usage_percent < policy.threshold_percent:
        return None
    return capacity_bytes * (usage_percent - policy.lower_percent) // 100


def _memory(candidate: Candidate) -> int:
    return candidate.memory_bytes


class MemoryEvictor(PolicyFollower[MemoryEvictPolicy]):
    """Memory eviction's rounds (an `EvictionStrategy` of colocation.agent.strategies.pressure_evictor):
    the policy in force, the Node's memory capacity (`capacity`, None until known), and `follow_up`,
    what the rounds remember (cool-down, pods asked for, pods held back)."""

    reason: EvictionReason = "MemoryPressure"

    def __init__(self, clock: MonotonicClock, *, capacity: Callable[[], int | None] = lambda: None,
                 cool_down: float = DEFAULT_COOL_DOWN, pending_seconds: float = DEFAULT_PENDING_SECONDS,
                 backoff: Callable[[], Backoff] | None = None) -> None:
        super().__init__(memory_evict_policy)
        self.capacity = capacity
        self.follow_up = EvictionFollowUp(clock, cool_down=cool_down, pending_seconds=pending_seconds, backoff=backoff)

    def decide(self, sample: Sample, pods: Mapping[str, PodInfo]) -> EvictionRound | None:
        used = sample.node_memory_bytes if sample.node_memory_measured else None
        return self.round(self.policy, self.capacity(), used, candidates=candidates(sample, pods))

    def round(self, policy: MemoryEvictPolicy, capacity_bytes: int | None, used_bytes: int | None,
              *, candidates: Iterable[Candidate]) -> EvictionRound | None:
        """The pods to ask for now, or None (under the threshold, cooling down, or nothing to pick).

        `used_bytes` None: no fresh usage; `candidates`: the evictable pods on the node now, with
        their latest usage.
        """
        if capacity_bytes is None or used_bytes is None or not policy.enabled or self.follow_up.cooling():
            return None
        need = memory_to_release(policy, capacity_bytes, used_bytes)
        if need is None:
            return None
        pods, pending = self.follow_up.pick(need, memory_eviction_order(candidates), _memory)
        if not pods:
            return None
        usage_percent = used_bytes * 100 // capacity_bytes
        message = (f"node memory usage {usage_percent}% is at or above the eviction threshold "
                   f"{policy.threshold_percent}%: {need} bytes to release to get under {policy.lower_percent}%")
        return EvictionRound(reason="MemoryPressure", pods=tuple(pods), message=message, details={
            "usage_percent": usage_percent, "threshold_percent": policy.threshold_percent,
            "lower_percent": policy.lower_percent, "release_bytes": need, "pending_bytes": pending})
