"""Agents' eviction requests, on the leader: check every pod, then evict through the Eviction API.

An agent that finds its node short of memory (colocation.agent.strategies.memory_evict), or its best-effort
pods short of the cpu they request (colocation.agent.strategies.cpu_evict), names best-effort pods of its
node in `PUT …/nodemetrics/{node}/evictions`; the API server has already held the token to that
node (the node rule, as for reports). Here each pod is judged against the leader's
pod cache (`ClusterState`, the Pod informer):

- on another node, or not an evictable best-effort pod (`classes.is_evictable_best_effort`:
  labelled BE and of batch or free priority), or a mirror pod → the whole request is refused
  with 403 and nothing is evicted: an agent asking for that is wrong or compromised;
- not in the cache, or another pod of that name (another UID) → `gone`;
- already terminating → `terminating`;
- else evicted with `POST pods/{name}/eviction` (the UID as precondition, so a replacement of
  the same name is never hit; PodDisruptionBudgets decide): 201 → `evicted`, with a Warning Event
  on the pod (reason EvictPodByMemoryPressure or EvictPodByBECPUSatisfaction); 429 (a budget allows no disruption now) →
  `deferred`, the agent asks again later with backoff; 404/409 → `gone`; anything else →
  `failed`.

`judge` is pure; `EvictionRequestHandler` is the I/O around it. Every pod's outcome is counted in
`colocation_node_pressure_evictions_total{reason,result}` (result `refused` for the pods of a 403).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter

from colocation.apimachinery.errors import ApiError
from colocation.controllers.cluster import ClusterState
from colocation.controllers.events import WARNING, EventType, ObjectRef
from colocation.controllers.eviction import MIRROR_POD_ANNOTATION
from colocation.koordinator.classes import is_evictable_best_effort
from colocation.nodemetrics.eviction_request import EVENT_REASONS, EvictionRequest, PodOutcome, PodToEvict

log = logging.getLogger(__name__)

Verdict = Literal["evict", "gone", "terminating", "other-node", "not-best-effort", "mirror"]
_REFUSALS: dict[Verdict, str] = {
    "other-node": "is not on this node",
    "not-best-effort": "is not a best-effort pod of batch or free priority",
    "mirror": "is a static pod",
}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def judge(node: str, wanted: PodToEvict, pod: Mapping[str, Any] | None) -> Verdict:
    """What may be done with one pod a request names, given the leader's (slim) copy of it."""
    metadata = _mapping((pod or {}).get("metadata"))
    if pod is None or metadata.get("uid") != wanted.uid:
        return "gone"
    if _mapping(pod.get("spec")).get("nodeName") != node:
        return "other-node"
    if MIRROR_POD_ANNOTATION in _mapping(metadata.get("annotations")):
        return "mirror"
    if not is_evictable_best_effort(pod):
        return "not-best-effort"
    if metadata.get("deletionTimestamp"):
        return "terminating"
    return "evict"


class PodWriter(Protocol):
    """The writes this needs (colocation.controllers.writers.KubeWriter)."""

    async def evict(self, namespace: str, name: str, uid: str) -> tuple[int, Any]: ...

    async def event(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> None: ...


class EvictionRequestHandler:
    """`await handler(request)`: the outcome of every pod, or ApiError (403, 503)."""

    def __init__(self, state: ClusterState, writer: PodWriter, registry: CollectorRegistry) -> None:
        self.state = state
        self.writer = writer
        self.evictions = Counter(
            "colocation_node_pressure_evictions_total",
            "Pods agents asked the leader to evict (memory and cpu eviction), by reason and result (evicted, deferred: "
            "a PodDisruptionBudget or an error, asked again later; gone; terminating; failed; refused: the "
            "request named a pod it may not evict, nothing of it was done).", ["reason", "result"],
            registry=registry)

    async def __call__(self, request: EvictionRequest) -> list[PodOutcome]:
        if not self.state.pods_synced.is_set():
            raise ApiError.service_unavailable("the leader has not listed the pods yet", retry_after=1)
        verdicts = [(pod, judge(request.node, pod, self.state.pod((pod.namespace, pod.name))))
                    for pod in request.pods]
        refused = [(pod, verdict) for pod, verdict in verdicts if verdict in _REFUSALS]
        if refused:
            self.evictions.labels(request.reason, "refused").inc(len(request.pods))
            pod, verdict = refused[0]
            log.warning("eviction request refused", extra={"node": request.node, "pod": f"{pod.namespace}/{pod.name}",
                                                           "why": verdict})
            raise ApiError(403, "Forbidden", f'pods "{pod.name}" is forbidden: the agent of node {request.node} may '
                           f"not have it evicted: pod {pod.namespace}/{pod.name} {_REFUSALS[verdict]}",
                           {"name": pod.name, "kind": "pods"})
        outcomes = await asyncio.gather(*(self._act(request, pod, verdict) for pod, verdict in verdicts))
        for outcome in outcomes:
            self.evictions.labels(request.reason, outcome.outcome).inc()
        log.info("eviction request", extra={"node": request.node, "reason": request.reason,
                                            "pods": {f"{o.pod.namespace}/{o.pod.name}": o.outcome for o in outcomes}})
        return list(outcomes)

    async def _act(self, request: EvictionRequest, pod: PodToEvict, verdict: Verdict) -> PodOutcome:
        if verdict == "gone":
            return PodOutcome(pod, "gone", "no such pod on the node (deleted, finished, or another pod of the name)")
        if verdict == "terminating":
            return PodOutcome(pod, "terminating")
        status, body = await self.writer.evict(pod.namespace, pod.name, pod.uid)
        if status in (200, 201):
            message = f"evicted at the request of the agent of node {request.node}: {request.message}"
            await self.writer.event(ObjectRef("v1", "Pod", pod.name, pod.namespace, pod.uid), WARNING,
                                    EVENT_REASONS[request.reason], message)
            return PodOutcome(pod, "evicted")
        if status == 429:
            return PodOutcome(pod, "deferred", _message(body) or "the eviction is not allowed now")
        if status in (404, 409):
            return PodOutcome(pod, "gone", _message(body))
        return PodOutcome(pod, "failed", _message(body) or f"the Eviction API answered {status or 'nothing'}")


def _message(body: Any) -> str:
    return str(body.get("message") or "") if isinstance(body, Mapping) else ""

