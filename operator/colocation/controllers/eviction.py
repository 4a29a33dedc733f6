"""The exit process: which pods to evict from unhealthy nodes, and when. Pure, on an injected clock.

A decision only: the controller sends what `EvictionPlanner` returns to the Eviction API, so
PodDisruptionBudgets decide. Each zone has a token bucket over nodes, at the rate the
mass-failure guard gives it (`colocation.controllers.disruption`). A node that gets a token has
every evictable pod offered while it stays due: batch and free pods, never terminating,
finished or mirror pods. A pod offered is not offered again for `retry_interval`; one handed
back with `deferred` is offered again after a backoff.

Why, and the defaults: docs/architecture.md#node-health-and-the-exit-process
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from colocation.apimachinery.clock import MonotonicClock
from colocation.koordinator.classes import PriorityClass, is_high_priority, priority_of
from colocation.kube.backoff import Backoff

MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"


# --- Pods ------------------------------------------------------------------------------------------

def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def evictable(pod: Mapping[str, Any]) -> bool:
    """Whether the exit process may evict this pod: a live, API-managed batch or free pod."""
    metadata = _mapping(pod.get("metadata"))
    if metadata.get("deletionTimestamp"):
        return False
    if _mapping(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
        return False
    if MIRROR_POD_ANNOTATION in _mapping(metadata.get("annotations")):
        return False
    return not is_high_priority(priority_of(pod))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodEviction:
    """One eviction to make: `uid` goes into the Eviction's preconditions when known."""

    node: str
    namespace: str
    name: str
    uid: str
    priority: PriorityClass

    @property
    def key(self) -> str:
        return self.uid or f"{self.namespace}/{self.name}"


def _pod_eviction(node: str, pod: Mapping[str, Any]) -> PodEviction:
    metadata = _mapping(pod.get("metadata"))
    return PodEviction(node=node, namespace=str(metadata.get("namespace") or "default"),
                       name=str(metadata.get("name") or ""), uid=str(metadata.get("uid") or ""),
                       priority=priority_of(pod))


# --- The planner -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class EvictionPlan:
    evictions: tuple[PodEviction, ...]  # to make now, by node then namespace/name
    draining: tuple[str, ...]  # nodes holding a token: their evictable pods are being evicted
    started: tuple[str, ...]  # the nodes among `draining` that got their token in this plan
    waiting: tuple[str, ...]  # due nodes queued for a token, in queue order
    next_plan_at: float | None  # when planning again may offer more (a token, a retry); None: nothing pending


def _default_backoff() -> Backoff:
    return Backoff(initial=5.0, maximum=60.0, factor=2.0, jitter=0.2)


@dataclasses.dataclass(kw_only=True)
class _Bucket:
    """One zone's token bucket and its queue of due nodes, first come first."""

    rate: float
    tokens: float
    refilled_at: float
    queue: list[str] = dataclasses.field(default_factory=list)

    def refill(self, now: float, rate: float, burst: int) -> None:
        """Add what the old rate earned up to now, then go on at `rate` (a stopped bucket is empty)."""
        self.tokens = min(float(burst), self.tokens + (now - self.refilled_at) * self.rate)
        self.refilled_at = now
        self.rate = rate
        if rate <= 0:
            self.tokens = 0.0

    def next_token_at(self) -> float | None:
        if not self.queue or self.rate <= 0:
            return None
        return self.refilled_at + (1.0 - self.tokens) / self.rate


class EvictionPlanner:
    def __init__(
        self,
        clock: MonotonicClock,
        *,
        rate: float = 0.1,
        burst: int = 1,
        retry_interval: float = 30.0,
        backoff: Callable[[], Backoff] = _default_backoff,
    ) -> None:
        if rate < 0:
            raise ValueError(f"eviction rate must not be negative, got {rate}")
        if burst < 1:
            raise ValueError(f"eviction burst must be at least 1, got {burst}")
        self._clock = clock
        self.rate = rate
        self.burst = burst
        self.retry_interval = retry_interval
        self._backoff = backoff
        self._buckets: dict[str, _Bucket] = {}  # zone → its bucket and queue
        self._draining: set[str] = set()
        self._not_before: dict[str, float] = {}  # pod key → earliest time to offer it again
        self._backoffs: dict[str, Backoff] = {}

    def plan(self, due: Mapping[str, Sequence[Mapping[str, Any]]], *, zones: Mapping[str, str] | None = None,
             rates: Mapping[str, float] | None = None) -> EvictionPlan:
        """The evictions to make now, given every node due for eviction and the pods bound to it.

        `zones` maps a node to its zone (a node not in it: zone ""), `rates` a zone to its rate in
        nodes per second (`DisruptionGuard`; a zone not in it: `self.rate`). Pass only nodes whose
        `NodeHealth.evict` is set: a node left out, or in a zone whose rate is 0, is released (and
        must queue for a token again later).
        """
        now = self._clock()
        zone_of = zones or {}
        self._refill(now, {zone_of.get(node, "") for node in due}, rates or {})
        due = {node: pods for node, pods in due.items() if self._buckets[zone_of.get(node, "")].rate > 0}
        self._release(set(due))
        for node in sorted(due):
            queue = self._buckets[zone_of.get(node, "")].queue
            if node not in self._draining and node not in queue:
                queue.append(node)
        started = self._admit()

        evictions: list[PodEviction] = []
        live: set[str] = set()
        held_until: list[float] = []
        for node in sorted(self._draining):
            for pod in due[node]:
                if not evictable(pod):
                    continue
                eviction = _pod_eviction(node, pod)
                live.add(eviction.key)
                not_before = self._not_before.get(eviction.key)
                if not_before is not None and now < not_before:
                    held_until.append(not_before)
                    continue
                evictions.append(eviction)
                self._not_before[eviction.key] = now + self.retry_interval
                held_until.append(now + self.retry_interval)
        self._drop_pods_except(live)

        held_until += [at for bucket in self._buckets.values() if (at := bucket.next_token_at()) is not None]
        evictions.sort(key=lambda e: (e.node, e.namespace, e.name))
        waiting = [node for zone in sorted(self._buckets) for node in self._buckets[zone].queue]
        return EvictionPlan(evictions=tuple(evictions), draining=tuple(sorted(self._draining)), started=tuple(started),
                            waiting=tuple(waiting), next_plan_at=min(held_until, default=None))

    def deferred(self, eviction: PodEviction) -> float:
        """The eviction was refused for now (429 from a PodDisruptionBudget, a 5xx): retry later.

        Returns the delay before the pod is offered again; each refusal in a row doubles it.
        """
        backoff = self._backoffs.setdefault(eviction.key, self._backoff())
        delay = backoff.next_delay()
        self._not_before[eviction.key] = self._clock() + delay
        return delay

    # --- internals ----------------------------------------------------------------------------------

    def _refill(self, now: float, due_zones: set[str], rates: Mapping[str, float]) -> None:
        """Bring every zone's bucket up to now at its rate. A full bucket of a zone with nothing
        due is dropped: a new one would be the same (this keeps the zones known bounded)."""
        for zone in due_zones | rates.keys() | self._buckets.keys():
            rate = rates.get(zone, self.rate)
            bucket = self._buckets.get(zone)
            if bucket is None:
                bucket = self._buckets[zone] = _Bucket(rate=rate, tokens=float(self.burst) if rate > 0 else 0.0,
                                                       refilled_at=now)
            else:
                bucket.refill(now, rate, self.burst)
            if zone not in due_zones and bucket.tokens >= self.burst - 1e-9:
                del self._buckets[zone]

    def _release(self, due: set[str]) -> None:
        self._draining &= due
        for bucket in self._buckets.values():
            bucket.queue = [node for node in bucket.queue if node in due]

    def _admit(self) -> list[str]:
        """Give tokens to queued nodes, first come first in each zone, as the zone's bucket allows."""
        started: list[str] = []
        for zone in sorted(self._buckets):
            bucket = self._buckets[zone]
            # The tolerance absorbs float rounding: 10 s at 0.1/s must make exactly one token.
            while bucket.queue and bucket.rate > 0 and bucket.tokens >= 1.0 - 1e-9:
                bucket.tokens = max(0.0, bucket.tokens - 1.0)
                node = bucket.queue.pop(0)
                self._draining.add(node)
                started.append(node)
        return started

    def _drop_pods_except(self, live: set[str]) -> None:
        for key in set(self._not_before) - live:
            del self._not_before[key]
        for key in set(self._backoffs) - live:
            del self._backoffs[key]
