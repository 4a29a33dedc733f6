"""Memory eviction, the decisions: which best-effort pods must go when the node runs short of memory. Pure.

As Koordinator's koordlet (its memoryEvict strategy), driven by the NodeSLO's
`resourceUsedThresholdWithBE`: when `enable` is true and the node's memory usage, in whole
percent of its capacity (the Node's status.capacity.memory), is at or above
`memoryEvictThresholdPercent` (default 70), best-effort pods are evicted until

    memory to release = capacity * (usage percent - memoryEvictLowerPercent) / 100

is covered by the usage of the pods chosen. `memoryEvictLowerPercent` defaults to the threshold
minus 2; a lower percent that is not below the threshold turns eviction off (koordlet skips the
round and says why), and so does a negative threshold.

The pods that may go are those `classes.is_evictable_best_effort` accepts (labelled BE, batch or
free priority: never a prod, mid or LS pod), in koordlet's order: lowest `spec.priority` first,
then the largest memory usage; pods with no usage measured last (by name, descending, as koordlet).

What is not koordlet's, because the agent only asks and the leader evicts
(colocation.agent.memory_evictor):
- a pod already asked for, answered evicted or terminating, is not asked for again for
  `pending_seconds` (30 s), and its usage counts as already being released meanwhile, so that the
  next rounds do not pick more pods for memory that is on its way out;
- a pod the leader could not evict (deferred: a PodDisruptionBudget forbids it now; failed; gone)
  is left out for a backoff (5 s doubling to 60 s, with jitter) and the next pod in the order may
  be taken instead.

Rate: a round at most every `--memory-evict-interval` (1 s, koordlet's default), and none for
`cool_down` seconds (4 s, koordlet's memory evict cool time) after a round that asked for pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.clock import MonotonicClock
from colocation.koordinator.slo_strategies import ResourceThresholdStrategy
from colocation.kube.backoff import Backoff

RELEASE_BUFFER_PERCENT = 2  # koordlet's memoryReleaseBufferPercent: the default lower percent is this below
DEFAULT_COOL_DOWN = 4.0  # koordlet's MemoryEvictCoolTimeSeconds
DEFAULT_PENDING_SECONDS = 30.0

_DEFAULT_THRESHOLD = ResourceThresholdStrategy.model_validate({}).memory_evict_threshold_percent


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Candidate:
    """A pod memory eviction may pick, with its usage in the latest sample (0: not measured)."""

    namespace: str
    name: str
    uid: str
    priority: int
    memory_bytes: int


def eviction_order(candidates: Iterable[Candidate]) -> list[Candidate]:
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


def choose(ordered: Iterable[Candidate], need_bytes: int) -> list[Candidate]:
    """The first pods of `ordered` whose usage together covers `need_bytes` (all of them if it never does)."""
    chosen: list[Candidate] = []
    released = 0
    for candidate in ordered:
        if released >= need_bytes:
            break
        chosen.append(candidate)
        released += candidate.memory_bytes
    return chosen


@dataclass(frozen=True)
class EvictionRound:
    """What one round decided: ask the leader to evict `pods`."""

    usage_percent: int
    threshold_percent: int
    lower_percent: int
    need_bytes: int  # what the node must release to get under the lower percent
    pending_bytes: int  # usage of pods already on their way out, counted against `need_bytes`
    pods: tuple[Candidate, ...]

    @property
    def message(self) -> str:
        return (f"node memory usage {self.usage_percent}% is at or above the eviction threshold "
                f"{self.threshold_percent}%: {self.need_bytes} bytes to release to get under {self.lower_percent}%")


def _default_backoff() -> Backoff:
    return Backoff(initial=5.0, maximum=60.0, factor=2.0, jitter=0.2)


class MemoryEvictor:
    """The state between rounds: cool-down, pods asked for, pods held back after a refusal."""

    def __init__(self, clock: MonotonicClock, *, cool_down: float = DEFAULT_COOL_DOWN,
                 pending_seconds: float = DEFAULT_PENDING_SECONDS,
                 backoff: Callable[[], Backoff] = _default_backoff) -> None:
        self._clock = clock
        self.cool_down = cool_down
        self.pending_seconds = pending_seconds
        self._backoff = backoff
        self._last_asked: float | None = None
        self._pending: dict[str, float] = {}  # uid → until when its usage counts as being released
        self._held: dict[str, float] = {}  # uid → not to be asked for before
        self._backoffs: dict[str, Backoff] = {}

    def round(self, policy: MemoryEvictPolicy, capacity_bytes: int | None, used_bytes: int | None,
              candidates: Iterable[Candidate]) -> EvictionRound | None:
        """The pods to ask for now, or None (under the threshold, cooling down, or nothing to pick).

        `used_bytes` None: no fresh usage (neither act nor forget); `candidates`: the evictable
        pods on the node now, with their latest usage.
        """
        now = self._clock()
        if capacity_bytes is None or used_bytes is None or not policy.enabled:
            return None
        if self._last_asked is not None and now - self._last_asked < self.cool_down:
            return None
        need = memory_to_release(policy, capacity_bytes, used_bytes)
        present = {candidate.uid: candidate for candidate in candidates}
        self._forget(now, present.keys())
        if need is None:
            return None
        pending = sum(present[uid].memory_bytes for uid in self._pending)
        open_candidates = [c for c in present.values() if c.uid not in self._pending and c.uid not in self._held]
        pods = choose(eviction_order(open_candidates), need - pending) if pending < need else []
        if not pods:
            return None
        self._last_asked = now
        for pod in pods:
            self._pending[pod.uid] = now + self.pending_seconds
        return EvictionRound(used_bytes * 100 // capacity_bytes, policy.threshold_percent, policy.lower_percent,
                             need, pending, tuple(pods))

    def answered(self, uid: str, outcome: str, retry_after: float | None = None) -> float | None:
        """What the leader did with a pod asked for; returns the seconds it is held back, if it is."""
        if outcome in ("evicted", "terminating"):
            self._backoffs.pop(uid, None)
            return None
        self._pending.pop(uid, None)  # not on its way out: its usage is still there
        delay = self._backoffs.setdefault(uid, self._backoff()).next_delay()
        if retry_after is not None:
            delay = max(delay, retry_after)
        self._held[uid] = self._clock() + delay
        return delay

    def unanswered(self, uids: Iterable[str]) -> None:
        """The request did not reach the leader (or it refused the whole of it): those pods were not
        asked for after all; the next round may pick them again, after the cool-down."""
        for uid in uids:
            self._pending.pop(uid, None)

    def _forget(self, now: float, present: Iterable[str]) -> None:
        """Drop pods no longer on the node and holds that are over (the state stays bounded by the pods)."""
        live = set(present)
        self._pending = {uid: until for uid, until in self._pending.items() if uid in live and until > now}
        self._held = {uid: until for uid, until in self._held.items() if uid in live and until > now}
        self._backoffs = {uid: backoff for uid, backoff in self._backoffs.items() if uid in live}

