"""CPU eviction, the decisions: which best-effort pods must go when they get too little of the cpu they asked for. Pure.

As koordlet's BECPUEvict strategy, when the NodeSLO's `resourceUsedThresholdWithBE` enables it
with a valid pair of satisfaction percents. Each round records the best-effort pods' cpu usage,
batch-cpu requests and limit (`BeCpuHistory`). When they use most of their limit and their
satisfaction (limit / request) is at or below the lower percent, over the window and in the
latest sample, `release_by_satisfaction` says how much batch-cpu to release; pods go in
`cpu_eviction_order` until their requests cover it. Cool-down and follow-up are
`eviction_followup`'s.

The rules and koordlet's numbers: docs/agent.md#cpu-eviction
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.strategies.cpu_suppress.cpu_suppress import is_best_effort
from colocation.agent.strategies.eviction_followup import (
    Candidate,
    EvictionFollowUp,
    EvictionRound,
    PolicyFollower,
    candidates,
)
from colocation.apimachinery.clock import MonotonicClock
from colocation.kube.backoff import Backoff
from colocation.nodemetrics.eviction_request import EvictionReason

SATISFACTION_LOWER_MAX = 60  # koordlet's beCPUSatisfactionLowPercentMax
SATISFACTION_UPPER_MAX = 100  # exclusive
DEFAULT_USAGE_THRESHOLD = 90  # koordlet's beCPUUsageThresholdPercent
DEFAULT_CPU_COOL_DOWN = 20.0  # koordlet's CPUEvictCoolTimeSeconds
_HISTORY = 4096  # samples kept at most, whatever the window


@dataclass(frozen=True, kw_only=True)
class CpuEvictPolicy:
    """The cpu eviction part of a NodeSLO's spec.resourceUsedThresholdWithBE."""

    enabled: bool = False
    lower_percent: int = 0
    upper_percent: int = 0
    usage_threshold_percent: int = DEFAULT_USAGE_THRESHOLD
    window_seconds: int = 0  # cpuEvictTimeWindowSeconds (0: unset)
    by_allocatable: bool = False  # cpuEvictPolicy: evictByAllocatable
    problem: str = ""  # why an enabled NodeSLO with satisfaction percents still does not evict


def cpu_evict_policy(nodeslo: Mapping[str, Any] | None) -> CpuEvictPolicy:
    spec = ((nodeslo or {}).get("spec") or {}).get("resourceUsedThresholdWithBE") or {}
    lower = _integer(spec.get("cpuEvictBESatisfactionLowerPercent"))
    upper = _integer(spec.get("cpuEvictBESatisfactionUpperPercent"))
    if spec.get("enable") is not True or (lower is None and upper is None):
        return CpuEvictPolicy()
    problem = ""
    if lower is None or upper is None:
        problem = "cpuEvictBESatisfactionLowerPercent and cpuEvictBESatisfactionUpperPercent must both be set"
    elif not 0 < lower <= SATISFACTION_LOWER_MAX:
        problem = f"cpuEvictBESatisfactionLowerPercent {lower} is not in (0, {SATISFACTION_LOWER_MAX}]"
    elif not 0 < upper < SATISFACTION_UPPER_MAX:
        problem = f"cpuEvictBESatisfactionUpperPercent {upper} is not in (0, {SATISFACTION_UPPER_MAX})"
    elif upper < lower:
        problem = f"cpuEvictBESatisfactionUpperPercent {upper} is below the lower percent {lower}"
    threshold = _integer(spec.get("cpuEvictBEUsageThresholdPercent"))
    return CpuEvictPolicy(enabled=not problem, lower_percent=lower or 0, upper_percent=upper or 0,
                          usage_threshold_percent=DEFAULT_USAGE_THRESHOLD if threshold is None else threshold,
                          window_seconds=_integer(spec.get("cpuEvictTimeWindowSeconds")) or 0,
                          by_allocatable=spec.get("cpuEvictPolicy") == "evictByAllocatable", problem=problem)


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class BeCpu:
    """The BE pods' cpu at one moment (milli-cpus; averages may be fractional)."""

    usage: float
    request: float
    limit: float


def usage_high_enough(be: BeCpu, threshold_percent: int) -> bool:
    """BE pods use enough of their limit for their lack of cpu to matter (a limit under one cpu always does)."""
    if be.limit <= 0:
        return False
    return be.limit < 1000 or be.usage / be.limit >= threshold_percent / 100


def release_by_satisfaction(be: BeCpu, policy: CpuEvictPolicy) -> int:
    """Milli-cpus of batch requests to evict so that satisfaction gets back to the upper percent (0: none)."""
    if be.request <= 0:
        return 0
    satisfaction = be.limit / be.request
    if satisfaction > policy.lower_percent / 100:
        return 0
    # request * (upper / 100 - satisfaction), written so that whole figures stay exact
    release = be.request * policy.upper_percent / 100 - be.limit
    return int(release) if release > 0 else 0


class BeCpuHistory:
    """The BE cpu of the recent rounds, on the monotonic clock; bounded."""

    def __init__(self) -> None:
        self._entries: deque[tuple[float, BeCpu]] = deque(maxlen=_HISTORY)

    def add(self, at: float, be: BeCpu) -> None:
        self._entries.append((at, be))

    def latest(self) -> BeCpu | None:
        return self._entries[-1][1] if self._entries else None

    def average(self, now: float, window: float) -> tuple[BeCpu, int]:
        """The mean over the last `window` seconds, and how many rounds it covers; older ones are dropped."""
        while self._entries and self._entries[0][0] < now - window:
            self._entries.popleft()
        count = len(self._entries)
        if not count:
            return BeCpu(0.0, 0.0, 0.0), 0
        return BeCpu(sum(be.usage for _, be in self._entries) / count,
                     sum(be.request for _, be in self._entries) / count,
                     sum(be.limit for _, be in self._entries) / count), count


def cpu_eviction_order(found: Iterable[Candidate]) -> list[Candidate]:
    """Lowest priority first, then the largest usage / batch-cpu request."""
    def ratio(candidate: Candidate) -> float:
        return candidate.cpu_millis / candidate.cpu_request_millis if candidate.cpu_request_millis > 0 else 0.0

    return sorted(found, key=lambda c: (c.priority, -ratio(c)))


def _cpu_request(candidate: Candidate) -> int:
    return candidate.cpu_request_millis


class CpuEvictor(PolicyFollower[CpuEvictPolicy]):
    """CPU eviction's rounds (an `EvictionStrategy` of
    colocation.agent.strategies.pressure_evictor).

    `real_limit()` is what BE pods may use now (milli-cpus: the CPU suppress budget in force, else
    the node's cpus); `batch_allocatable()` the Node's allocatable batch-cpu (None until known).
    """

    reason: EvictionReason = "CPUSatisfaction"

    def __init__(self, clock: MonotonicClock, *, collect_interval: float, real_limit: Callable[[], int],
                 batch_allocatable: Callable[[], int | None] = lambda: None, cool_down: float = DEFAULT_CPU_COOL_DOWN,
                 backoff: Callable[[], Backoff] | None = None) -> None:
        super().__init__(cpu_evict_policy)
        self._clock = clock
        self.collect_interval = collect_interval
        self.real_limit = real_limit
        self.batch_allocatable = batch_allocatable
        self.history = BeCpuHistory()
        self.follow_up = EvictionFollowUp(clock, cool_down=cool_down, backoff=backoff, cool_from_start=True)

    def be_cpu(self, sample: Sample, pods: Mapping[str, PodInfo]) -> BeCpu | None:
        """The BE pods' cpu in this sample (None: no cpu rate in it, or no limit known)."""
        if not sample.node_cpu_measured:
            return None
        limit: int | None = self.real_limit()
        if self.policy.by_allocatable:
            allocatable = self.batch_allocatable()
            limit = None if allocatable is None else max(allocatable, 1)  # 0 still has a satisfaction: koordlet's 1
        if limit is None:
            return None
        usage = sum(pod.cpu_millis for pod in sample.pods if is_best_effort(pod.uid, pod.cgroup_path, pods))
        request = sum(info.batch_cpu_request_millis for info in pods.values()
                      if info.qos == "BE" or info.kube_qos == "BestEffort")
        return BeCpu(float(usage), float(request), float(limit))

    def decide(self, sample: Sample, pods: Mapping[str, PodInfo]) -> EvictionRound | None:
        be = self.be_cpu(sample, pods)
        return None if be is None else self.round(be, candidates(sample, pods))

    def round(self, current: BeCpu, found: Iterable[Candidate]) -> EvictionRound | None:
        """Record this round's BE cpu; the pods to ask for now, or None."""
        now = self._clock()
        self.history.add(now, current)
        if not self.policy.enabled or self.follow_up.cooling():
            return None
        window = max(self.collect_interval, float(self.policy.window_seconds))
        average, count = self.history.average(now, window)
        if count * self.collect_interval < window / 3:
            return None  # too few samples in the window yet
        if not usage_high_enough(average, self.policy.usage_threshold_percent) or \
                not usage_high_enough(current, self.policy.usage_threshold_percent):
            return None
        release = release_by_satisfaction(average, self.policy)
        if release > 0 and (current.request, current.limit) != (average.request, average.limit):
            release = min(release, release_by_satisfaction(current, self.policy))
        if release <= 0:
            return None
        pods, pending = self.follow_up.pick(release, cpu_eviction_order(found), _cpu_request)
        if not pods:
            return None
        satisfaction = round(100 * current.limit / current.request) if current.request else 0
        message = (f"best-effort pods get {satisfaction}% of the batch cpu they request (at or below "
                   f"{self.policy.lower_percent}%): {release}m of requests to evict to get back to "
                   f"{self.policy.upper_percent}%")
        return EvictionRound(reason=self.reason, pods=tuple(pods), message=message, details={
            "be_usage_millicores": round(current.usage), "be_request_millicores": round(current.request),
            "be_limit_millicores": round(current.limit), "window_seconds": window, "release_millicores": release,
            "pending_millicores": pending})
