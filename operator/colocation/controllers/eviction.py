"""The exit process: which pods to evict from unhealthy nodes, and when. Pure, on an injected clock.

Two parts, both decisions only; the controller's I/O shell calls the Eviction API
(`POST pods/{name}/eviction`, so PodDisruptionBudgets are respected) with what they return.

`EvictionGuard` — whether evictions may happen at all, from every node's `NodeHealth`. The node
lifecycle controller's lessons (kube-controller-manager `ComputeZoneState`): when many nodes fail
at once, the fault is more likely ours (the operator is partitioned from the agents, the
apiserver is struggling) than theirs, and evicting would turn our outage into the workloads'.
Evictions stop:
- during the startup grace (a node not yet judged cannot be judged healthy either);
- when every node is unhealthy ("full disruption", whatever the count: with one or two nodes the
  minimum below would never trigger, yet losing all of them at once is the clearest sign);
- when more than `min_unhealthy` nodes *and* more than `unhealthy_zone_threshold` of all nodes
  are unhealthy. Both comparisons are strict ("more than 55 %", docs/architecture.md); upstream
  stops at `>=` the threshold, which only differs at an exact ratio such as 11 of 20.

`EvictionPlanner` — rate limiting and pod choice. A token bucket over *nodes*, like upstream's
pod evictor: `rate` nodes per second with `burst` tokens (the bucket starts full); a node due for
eviction waits in a first-come queue until it gets a token, and from then on, for as long as it
stays due, every evictable pod on it is offered (pods appearing later included). A node that is
no longer due (it recovered, was deleted, or the guard stopped evictions) is released: should it
become due again it queues for a new token. Evictable pods are the batch and free ones
(`colocation.koordinator.classes.priority_of`: label, else priority band, else QoS), never prod or
mid; never a pod already terminating (`metadata.deletionTimestamp`) or terminated (phase
Succeeded or Failed), nor a mirror pod (a static pod: the kubelet owns it, eviction is refused).

A pod offered once is not offered again for `retry_interval`, so a plan made before the informer
has seen the eviction land does not repeat it. A pod whose eviction was refused for now (429:
a PodDisruptionBudget allows no disruption; or any transient error) is handed back with
`deferred(eviction)` and offered again after an exponential backoff.

Thresholds (constructor parameters; docs/architecture.md, Node health and the exit process):

- `EvictionGuard.unhealthy_zone_threshold` = 0.55: fraction of unhealthy nodes that stops evictions.
- `EvictionGuard.min_unhealthy` = 2: ... provided more than this many nodes are unhealthy.
- `EvictionPlanner.rate` = 0.1 nodes/s (one node every 10 s); 0 disables evictions.
- `EvictionPlanner.burst` = 1 node.
- `EvictionPlanner.retry_interval` = 30.0 s: before offering again a pod already offered.
- `EvictionPlanner.backoff`: after `deferred`, 5 s doubling up to 60 s (kubectl drain retries a
  PDB-blocked eviction every 5 s).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from colocation.apimachinery.clock import MonotonicClock
from colocation.controllers.health import NodeHealth
from colocation.koordinator.classes import PriorityClass, is_high_priority, priority_of
from colocation.kube.backoff import Backoff

MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"

GUARD_ALLOWED: Final = "EvictionAllowed"
GUARD_STARTUP: Final = "StartupGrace"
GUARD_FULL_DISRUPTION: Final = "FullDisruption"
GUARD_PARTIAL_DISRUPTION: Final = "PartialDisruption"


# --- The guard -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GuardDecision:
    allowed: bool
    reason: str
    message: str
    unhealthy: int
    total: int


@dataclasses.dataclass(frozen=True)
class EvictionGuard:
    unhealthy_zone_threshold: float = 0.55
    min_unhealthy: int = 2

    def __post_init__(self) -> None:
        if not 0 <= self.unhealthy_zone_threshold <= 1:
            raise ValueError(f"unhealthy_zone_threshold must be within [0, 1], got {self.unhealthy_zone_threshold}")
        if self.min_unhealthy < 0:
            raise ValueError(f"min_unhealthy must not be negative, got {self.min_unhealthy}")

    def decide(self, healths: Iterable[NodeHealth]) -> GuardDecision:
        """Whether evictions may go ahead, given the health of every node in the cluster."""
        healths = list(healths)
        total = len(healths)
        unhealthy = sum(not health.healthy for health in healths)
        counts = f"{unhealthy} of {total} nodes unhealthy"
        if any(not health.judged for health in healths):
            return GuardDecision(False, GUARD_STARTUP, f"no evictions during the startup grace ({counts})",
                                 unhealthy, total)
        if total and unhealthy == total:
            return GuardDecision(False, GUARD_FULL_DISRUPTION,
                                 f"every node is unhealthy ({counts}): more likely our fault than theirs, "
                                 "no evictions", unhealthy, total)
        if unhealthy > self.min_unhealthy and unhealthy / total > self.unhealthy_zone_threshold:
            return GuardDecision(False, GUARD_PARTIAL_DISRUPTION,
                                 f"{counts}, more than {self.unhealthy_zone_threshold:.0%} and more than "
                                 f"{self.min_unhealthy}: more likely our fault than theirs, no evictions",
                                 unhealthy, total)
        return GuardDecision(True, GUARD_ALLOWED, counts, unhealthy, total)


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


@dataclasses.dataclass(frozen=True)
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
    return PodEviction(node, str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""),
                       str(metadata.get("uid") or ""), priority_of(pod))


# --- The planner -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EvictionPlan:
    evictions: tuple[PodEviction, ...]  # to make now, by node then namespace/name
    draining: tuple[str, ...]  # nodes holding a token: their evictable pods are being evicted
    started: tuple[str, ...]  # the nodes among `draining` that got their token in this plan
    waiting: tuple[str, ...]  # due nodes queued for a token, in queue order
    next_plan_at: float | None  # when planning again may offer more (a token, a retry); None: nothing pending


def _default_backoff() -> Backoff:
    return Backoff(initial=5.0, maximum=60.0, factor=2.0, jitter=0.2)


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
        self._tokens = float(burst)
        self._refilled_at = clock()
        self._queue: list[str] = []  # due nodes waiting for a token, first come first
        self._draining: set[str] = set()
        self._not_before: dict[str, float] = {}  # pod key → earliest time to offer it again
        self._backoffs: dict[str, Backoff] = {}

    def plan(self, due: Mapping[str, Sequence[Mapping[str, Any]]]) -> EvictionPlan:
        """The evictions to make now, given every node due for eviction and the pods bound to it.

        Pass only nodes whose `NodeHealth.evict` is set, and none while `EvictionGuard` says no:
        a node left out is released (and must queue for a token again later).
        """
        now = self._clock()
        self._release(set(due))
        for node in sorted(due):
            if node not in self._draining and node not in self._queue:
                self._queue.append(node)
        started = self._admit(now)

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

        if self._queue and self.rate > 0:
            held_until.append(self._refilled_at + (1.0 - self._tokens) / self.rate)
        evictions.sort(key=lambda e: (e.node, e.namespace, e.name))
        return EvictionPlan(tuple(evictions), tuple(sorted(self._draining)), tuple(started), tuple(self._queue),
                            min(held_until, default=None))

    def deferred(self, eviction: PodEviction) -> float:
        """The eviction was refused for now (429 from a PodDisruptionBudget, a 5xx): retry later.

        Returns the delay before the pod is offered again; each refusal in a row doubles it.
        """
        backoff = self._backoffs.setdefault(eviction.key, self._backoff())
        delay = backoff.next_delay()
        self._not_before[eviction.key] = self._clock() + delay
        return delay

    # --- internals ----------------------------------------------------------------------------------

    def _release(self, due: set[str]) -> None:
        self._draining &= due
        self._queue = [node for node in self._queue if node in due]

    def _admit(self, now: float) -> list[str]:
        """Give tokens to queued nodes, first come first, as the bucket allows."""
        if self.rate <= 0:
            return []
        self._tokens = min(float(self.burst), self._tokens + (now - self._refilled_at) * self.rate)
        self._refilled_at = now
        started: list[str] = []
        # The tolerance absorbs float rounding: 10 s at 0.1/s must make exactly one token.
        while self._queue and self._tokens >= 1.0 - 1e-9:
            self._tokens = max(0.0, self._tokens - 1.0)
            node = self._queue.pop(0)
            self._draining.add(node)
            started.append(node)
        return started

    def _drop_pods_except(self, live: set[str]) -> None:
        for key in set(self._not_before) - live:
            del self._not_before[key]
        for key in set(self._backoffs) - live:
            del self._backoffs[key]
