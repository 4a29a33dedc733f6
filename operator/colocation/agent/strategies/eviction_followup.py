"""What eviction by node pressure remembers between rounds, whatever the pressure (memory, cpu). Pure.

The agent only asks; the leader evicts. So between rounds it keeps, on an injected monotonic
clock: a cool-down after a round that asked; the pods answered evicted or terminating, not asked
for again for `pending_seconds` and counted as already being released; and the pods the leader
could not evict, left out for a backoff (at least what the leader suggests) so the next pod in
the order may go instead. A pod no longer among the candidates is forgotten.

The timings: docs/agent.md#memory-eviction
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.apimachinery.clock import MonotonicClock
from colocation.kube.backoff import Backoff
from colocation.nodemetrics.eviction_request import EvictionReason

DEFAULT_PENDING_SECONDS = 30.0


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A pod eviction may pick: identity, `spec.priority`, and what it holds in the latest sample."""

    namespace: str
    name: str
    uid: str
    priority: int
    memory_bytes: int = 0  # 0: not measured
    cpu_millis: int = 0
    cpu_request_millis: int = 0  # its kubernetes.io/batch-cpu request


@dataclass(frozen=True, kw_only=True)
class EvictionRound:
    """What one round decided: ask the leader to evict `pods`, for `reason`."""

    reason: EvictionReason
    pods: tuple[Candidate, ...]
    message: str  # for the pods' Events
    details: Mapping[str, Any]  # the figures the decision took, for the log line


def candidates(sample: Sample, pods: Mapping[str, PodInfo]) -> list[Candidate]:
    """The node's evictable pods (classify: labelled BE, batch or free priority) with their latest usage."""
    usage = {pod.uid: pod for pod in sample.pods}
    found = []
    for uid, info in pods.items():
        if info.evictable and uid:
            measured = usage.get(uid)
            found.append(Candidate(namespace=info.namespace, name=info.name, uid=uid, priority=info.priority_value,
                                   memory_bytes=measured.memory_bytes if measured else 0,
                                   cpu_millis=measured.cpu_millis if measured else 0,
                                   cpu_request_millis=info.batch_cpu_request_millis))
    return found


def choose(ordered: Iterable[Candidate], need: int, amount: Callable[[Candidate], int]) -> list[Candidate]:
    """The first pods of `ordered` whose `amount` together covers `need` (all of them if it never does)."""
    chosen: list[Candidate] = []
    released = 0
    for candidate in ordered:
        if released >= need:
            break
        chosen.append(candidate)
        released += amount(candidate)
    return chosen


class _Policy(Protocol):
    @property
    def enabled(self) -> bool: ...


PolicyT = TypeVar("PolicyT", bound=_Policy)


class PolicyFollower(Generic[PolicyT]):
    """A strategy's policy as the NodeSLO sets it (`parse` reads it), and whether it is enabled."""

    def __init__(self, parse: Callable[[Mapping[str, Any] | None], PolicyT]) -> None:
        self._parse = parse
        self.policy = parse(None)

    @property
    def enabled(self) -> bool:
        return self.policy.enabled

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> PolicyT | None:
        """Follow the NodeSLO; the new policy if it changed."""
        policy = self._parse(nodeslo)
        changed, self.policy = policy != self.policy, policy
        return policy if changed else None


def _default_backoff() -> Backoff:
    return Backoff(initial=5.0, maximum=60.0, factor=2.0, jitter=0.2)


class EvictionFollowUp:
    def __init__(self, clock: MonotonicClock, *, cool_down: float, pending_seconds: float = DEFAULT_PENDING_SECONDS,
                 backoff: Callable[[], Backoff] | None = None, cool_from_start: bool = False) -> None:
        self._clock = clock
        self.cool_down = cool_down
        self.pending_seconds = pending_seconds
        self._backoff = backoff or _default_backoff
        self._last_asked: float | None = clock() if cool_from_start else None
        self._pending: dict[str, float] = {}  # uid → until when it counts as being released
        self._held: dict[str, float] = {}  # uid → not to be asked for before
        self._backoffs: dict[str, Backoff] = {}

    def cooling(self) -> bool:
        return self._last_asked is not None and self._clock() - self._last_asked < self.cool_down

    def pick(self, need: int, ordered: Sequence[Candidate], amount: Callable[[Candidate], int]
             ) -> tuple[list[Candidate], int]:
        """The pods to ask for now to cover `need` (in the order of `ordered`, the node's candidates
        now), and what those already on their way out hold. Asking for them starts the cool-down."""
        now = self._clock()
        self._forget(now, {candidate.uid for candidate in ordered})
        pending = sum(amount(candidate) for candidate in ordered if candidate.uid in self._pending)
        if pending >= need:
            return [], pending
        open_ones = [c for c in ordered if c.uid not in self._pending and c.uid not in self._held]
        chosen = choose(open_ones, need - pending, amount)
        if chosen:
            self._last_asked = now
            for candidate in chosen:
                self._pending[candidate.uid] = now + self.pending_seconds
        return chosen, pending

    def answered(self, uid: str, outcome: str, retry_after: float | None = None) -> float | None:
        """What the leader did with a pod asked for; returns the seconds it is held back, if it is."""
        if outcome in ("evicted", "terminating"):
            self._backoffs.pop(uid, None)
            return None
        self._pending.pop(uid, None)  # not on its way out: what it holds is still there
        delay = self._backoffs.setdefault(uid, self._backoff()).next_delay()
        if retry_after is not None:
            delay = max(delay, retry_after)
        self._held[uid] = self._clock() + delay
        return delay

    def unanswered(self, uids: Iterable[str]) -> None:
        """The request did not reach the leader (or it refused the whole of it): those pods were not
        asked for after all; a later round may pick them again, after the cool-down."""
        for uid in uids:
            self._pending.pop(uid, None)

    def _forget(self, now: float, present: set[str]) -> None:
        self._pending = {uid: until for uid, until in self._pending.items() if uid in present and until > now}
        self._held = {uid: until for uid, until in self._held.items() if uid in present and until > now}
        self._backoffs = {uid: backoff for uid, backoff in self._backoffs.items() if uid in present}
