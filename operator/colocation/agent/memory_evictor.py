"""Memory eviction, the loop's step: from a sample and the NodeSLO to a request to the leader.

Each round (`MemoryEviction.step`, every `--memory-evict-interval`, 1 s like koordlet) takes the
latest sample and the node's pods, and lets the pure core (colocation.agent.memory_evict) decide.
The agent does not evict: it asks the leader with `PUT …/nodemetrics/{node}/evictions` (the same
way, checks and fallbacks as its reports: colocation.agent.delivery), and the leader checks each
pod and evicts it through the Eviction API (colocation.controllers.eviction_requests). So an
agent's token never holds the right to evict pods, on its node or any other.

One request is in flight at a time; while it is, rounds are skipped. The leader answers per pod;
a pod deferred (a PodDisruptionBudget allows no disruption now) or not evicted for another reason
is held back with backoff (the core's `answered`). A request that fails whole (leader and
kube-apiserver unreachable, refused) frees its pods for a later round. With `dry_run`
(--dry-run-enforcement) a round is logged and counted but nothing is sent.

Every round that asks writes one structured log line ("memory eviction"); every pod's outcome is
counted in `colocation_agent_memory_evictions_total{result}`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import orjson
from prometheus_client import CollectorRegistry, Counter

from colocation.agent.classify import PodInfo
from colocation.agent.collector import PodSample, Sample
from colocation.agent.delivery import DeliveryFailed, FailureCounter
from colocation.agent.memory_evict import Candidate, EvictionRound, MemoryEvictor, MemoryEvictPolicy
from colocation.nodemetrics.eviction_request import (
    SUBRESOURCE,
    EvictionRequest,
    PodToEvict,
    parse_result,
)
from colocation.nodemetrics.report_schema import COLLECTION_PATH

log = logging.getLogger(__name__)


class Exchange(Protocol):
    """How a request reaches the leader and its answer comes back (colocation.agent.delivery.Delivery)."""

    async def exchange(self, path: str, body: bytes, failed: FailureCounter) -> tuple[str, str | None, Any]: ...


class MemoryEvictionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.evictions = Counter(
            "colocation_agent_memory_evictions_total",
            "Best-effort pods memory eviction asked the leader to evict, by what became of them (evicted, "
            "terminating, deferred, gone, failed: the leader's answer; unsent: the request did not get "
            "through; dry-run: not sent, --dry-run-enforcement).", ["result"], registry=registry)
        self.rounds = Counter(
            "colocation_agent_memory_evict_rounds_total",
            "Rounds of memory eviction that judged a fresh sample with eviction enabled (whether or not they "
            "asked for pods).", registry=registry)
        self.requests_failed = Counter(
            "colocation_agent_eviction_requests_failed_total",
            "Eviction request attempts that failed, by reason.", ["reason"], registry=registry)


def candidates(sample: Sample, pods: Mapping[str, PodInfo]) -> list[Candidate]:
    """The node's evictable pods (classify: labelled BE, batch or free priority) with their usage."""
    usage = _usage_by_uid(sample.pods)
    return [Candidate(info.namespace, info.name, uid, info.priority_value, usage.get(uid, 0))
            for uid, info in pods.items() if info.evictable and uid]


def _usage_by_uid(samples: Iterable[PodSample]) -> dict[str, int]:
    return {pod.uid: pod.memory_bytes for pod in samples}


class MemoryEviction:
    def __init__(self, node: str, exchange: Exchange | None, evictor: MemoryEvictor, metrics: MemoryEvictionMetrics, *,
                 capacity: Callable[[], int | None], dry_run: bool = False) -> None:
        self.node = node
        self.exchange = exchange
        self.evictor = evictor
        self.metrics = metrics
        self.capacity = capacity
        self.dry_run = dry_run
        self.policy = MemoryEvictPolicy()
        self.path = f"{COLLECTION_PATH}/{node}/{SUBRESOURCE}"
        self._in_flight: asyncio.Task[None] | None = None

    def policy_changed(self, policy: MemoryEvictPolicy) -> None:
        if policy != self.policy:
            log.info("memory eviction policy changed", extra={
                "node": self.node, "enabled": policy.enabled, "threshold_percent": policy.threshold_percent,
                "lower_percent": policy.lower_percent, "problem": policy.problem or None})
        self.policy = policy

    def step(self, sample: Sample | None, pods: Mapping[str, PodInfo]) -> None:
        """One round (`sample` None: no fresh one, nothing is decided)."""
        if self.exchange is None or (self._in_flight is not None and not self._in_flight.done()):
            return
        if sample is None or not sample.node_memory_measured or not self.policy.enabled:
            return
        self.metrics.rounds.inc()
        decided = self.evictor.round(self.policy, self.capacity(), sample.node_memory_bytes, candidates(sample, pods))
        if decided is None:
            return
        log.info("memory eviction", extra={
            "node": self.node, "usage_percent": decided.usage_percent, "threshold_percent": decided.threshold_percent,
            "lower_percent": decided.lower_percent, "release_bytes": decided.need_bytes,
            "pending_bytes": decided.pending_bytes, "dry_run": self.dry_run,
            "pods": [f"{pod.namespace}/{pod.name}" for pod in decided.pods]})
        if self.dry_run:
            self.metrics.evictions.labels("dry-run").inc(len(decided.pods))
            return
        self._in_flight = asyncio.get_running_loop().create_task(self.ask(decided), name=f"evictions@{self.node}")

    async def ask(self, decided: EvictionRound) -> None:
        """Send one round's request and take in the leader's answer."""
        assert self.exchange is not None, "connect() first"
        request = EvictionRequest(self.node, "MemoryPressure", decided.message,
                                  tuple(PodToEvict(pod.namespace, pod.name, pod.uid) for pod in decided.pods))
        failed = self.metrics.requests_failed
        try:
            _, _, answer = await self.exchange.exchange(self.path, orjson.dumps(request.body()),
                                                        lambda reason: failed.labels(reason).inc())
        except DeliveryFailed as failure:
            log.warning("eviction request failed", extra={"node": self.node, "error": str(failure)})
            self.evictor.unanswered(pod.uid for pod in decided.pods)
            self.metrics.evictions.labels("unsent").inc(len(decided.pods))
            return
        outcomes = parse_result(answer)
        for pod in decided.pods:
            outcome, retry_after = outcomes.get((pod.namespace, pod.name), ("failed", None))
            held = self.evictor.answered(pod.uid, outcome, retry_after)
            self.metrics.evictions.labels(outcome).inc()
            if held is not None:
                log.info("pod not evicted, held back", extra={"node": self.node, "pod": f"{pod.namespace}/{pod.name}",
                                                              "outcome": outcome, "retry_in": round(held, 1)})

    async def settle(self) -> None:
        """Wait for the request in flight (tests; at exit)."""
        if self._in_flight is not None:
            await asyncio.gather(self._in_flight, return_exceptions=True)
