"""Eviction by node pressure, the loop's step: from a sample and the NodeSLO to a request to the leader.

Each round (`PressureEviction.step`) a strategy (`memory_evict`, `cpu_evict`) picks pods from the
latest sample and the node's pods; the agent asks the leader to evict them with
`PUT …/nodemetrics/{node}/evictions` (through `colocation.agent.delivery`, as reports go). One
request per strategy is in flight at a time. Pods not evicted are held back by
`eviction_followup`; a request that fails whole frees its pods. With `dry_run` a round is logged
and counted, and nothing is sent. Each round that asks is logged (`eviction round`) and each
pod's outcome counted.

Why the leader evicts: docs/architecture.md#memory-eviction-the-agent-asks-the-leader-evicts
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from prometheus_client import CollectorRegistry, Counter

from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.delivery import DeliveryFailed, FailureCounter
from colocation.agent.strategies.eviction_followup import EvictionFollowUp, EvictionRound
from colocation.agent.strategies.strategy import NodeStrategy, Round
from colocation.nodemetrics.eviction_request import (
    SUBRESOURCE,
    EvictionReason,
    EvictionRequest,
    PodToEvict,
    parse_result,
)
from colocation.nodemetrics.report_schema import COLLECTION_PATH

log = logging.getLogger(__name__)


class Exchange(Protocol):
    """How a request reaches the leader and its answer comes back (colocation.agent.delivery.Delivery)."""

    async def exchange(self, path: str, body: bytes, failed: FailureCounter) -> tuple[str, str | None, Any]: ...


class EvictionStrategy(Protocol):
    """One kind of eviction by node pressure
    (colocation.agent.strategies.memory_evict.memory_evict.MemoryEvictor, ...)."""

    @property
    def reason(self) -> EvictionReason: ...

    @property
    def follow_up(self) -> EvictionFollowUp: ...

    @property
    def enabled(self) -> bool: ...

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> Any:
        """Follow the NodeSLO; the new policy if it changed, else None."""

    def decide(self, sample: Sample, pods: Mapping[str, PodInfo]) -> EvictionRound | None: ...


class EvictionMetrics:
    """One set per process (simulated agents would share it), on the agent's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.evictions = Counter(
            "colocation_agent_evictions_total",
            "Best-effort pods the agent asked the leader to evict, by reason (MemoryPressure, CPUSatisfaction) "
            "and what became of them (evicted, terminating, deferred, gone, failed: the leader's answer; "
            "unsent: the request did not get through; dry-run: not sent, --dry-run-enforcement).",
            ["reason", "result"], registry=registry)
        self.rounds = Counter(
            "colocation_agent_eviction_rounds_total",
            "Rounds of eviction by node pressure that judged a fresh sample with the strategy enabled (whether "
            "or not they asked for pods), by reason.", ["reason"], registry=registry)
        self.requests_failed = Counter(
            "colocation_agent_eviction_requests_failed_total",
            "Eviction request attempts that failed, by reason.", ["reason"], registry=registry)


class PressureEviction:
    def __init__(self, node: str, strategy: EvictionStrategy, metrics: EvictionMetrics, *,
                 exchange: Exchange | None = None, dry_run: bool = False) -> None:
        self.node = node
        self.strategy = strategy
        self.metrics = metrics
        self.exchange = exchange
        self.dry_run = dry_run
        self.path = f"{COLLECTION_PATH}/{node}/{SUBRESOURCE}"
        self._in_flight: asyncio.Task[None] | None = None

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:
        policy = self.strategy.nodeslo_changed(nodeslo)
        if policy is not None:
            log.info("eviction policy changed", extra={"node": self.node, "reason": self.strategy.reason,
                                                       "policy": str(policy)})

    def step(self, sample: Sample | None, pods: Mapping[str, PodInfo]) -> None:
        """One round (`sample` None: no fresh one, nothing is decided)."""
        if self.exchange is None or (self._in_flight is not None and not self._in_flight.done()):
            return
        if sample is None or not self.strategy.enabled:
            return
        self.metrics.rounds.labels(self.strategy.reason).inc()
        decided = self.strategy.decide(sample, pods)
        if decided is None:
            return
        log.info("eviction round", extra={
            "node": self.node, "reason": decided.reason, **decided.details, "dry_run": self.dry_run,
            "pods": [f"{pod.namespace}/{pod.name}" for pod in decided.pods]})
        if self.dry_run:
            self.metrics.evictions.labels(decided.reason, "dry-run").inc(len(decided.pods))
            return
        self._in_flight = asyncio.get_running_loop().create_task(self.ask(decided), name=f"evictions@{self.node}")

    async def ask(self, decided: EvictionRound) -> None:
        """Send one round's request and take in the leader's answer."""
        assert self.exchange is not None, "connect the exchange first"
        request = EvictionRequest(node=self.node, reason=decided.reason, message=decided.message,
                                  pods=tuple(PodToEvict(pod.namespace, pod.name, pod.uid) for pod in decided.pods))
        failed = self.metrics.requests_failed
        follow_up = self.strategy.follow_up
        try:
            _, _, answer = await self.exchange.exchange(self.path, orjson.dumps(request.body()),
                                                        lambda reason: failed.labels(reason).inc())
        except DeliveryFailed as failure:
            log.warning("eviction request failed", extra={"node": self.node, "error": str(failure)})
            follow_up.unanswered(pod.uid for pod in decided.pods)
            self.metrics.evictions.labels(decided.reason, "unsent").inc(len(decided.pods))
            return
        outcomes = parse_result(answer)
        for pod in decided.pods:
            outcome, retry_after = outcomes.get((pod.namespace, pod.name), ("failed", None))
            held = follow_up.answered(pod.uid, outcome, retry_after)
            self.metrics.evictions.labels(decided.reason, outcome).inc()
            if held is not None:
                log.info("pod not evicted, held back", extra={"node": self.node, "pod": f"{pod.namespace}/{pod.name}",
                                                              "outcome": outcome, "retry_in": round(held, 1)})

    async def settle(self) -> None:
        """Wait for the request in flight (tests; at exit)."""
        if self._in_flight is not None:
            await asyncio.gather(self._in_flight, return_exceptions=True)


class PressureEvictionEnforcer(NodeStrategy):
    """One eviction by node pressure on a node (memory, cpu): a round on each sample, the request in
    flight awaited at exit (nothing on the host to put back)."""

    failure = "eviction failed"

    def __init__(self, name: str, eviction: PressureEviction, *, interval: float) -> None:
        self.name = name
        self.eviction = eviction
        self.interval = interval

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:
        self.eviction.nodeslo_changed(nodeslo)

    def connect(self, exchange: Exchange) -> None:
        self.eviction.exchange = exchange

    def run_once(self, round: Round) -> None:
        self.eviction.step(round.sample, round.pods)

    def reads_node(self) -> bool:
        return self.eviction.strategy.enabled

    async def restore(self, timeout: float) -> None:
        await self.eviction.settle()
