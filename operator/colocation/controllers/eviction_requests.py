"""Agents' eviction requests, on the leader: check every pod, then evict through the Eviction API.

The API server has already held the agent's token to its node. Here `judge` (pure) checks each
pod against the leader's Pod informer: a pod on another node, not an evictable best-effort pod,
or a mirror pod refuses the whole request (403, nothing evicted); a pod not in the cache, or of
another UID, is `gone`; a terminating one `terminating`. `EvictionRequestHandler` evicts the
others through the Eviction API with the UID as precondition, posts a Warning Event on each pod
evicted, and counts each outcome in `colocation_node_pressure_evictions_total`.

The outcomes, and why the leader evicts: docs/agent.md#memory-eviction
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

    async def event(self, ref: ObjectRef, type_: EventType, reason: str, *, message: str) -> None: ...


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
            return PodOutcome(pod=pod, outcome="gone",
                              message="no such pod on the node (deleted, finished, or another pod of the name)")
        if verdict == "terminating":
            return PodOutcome(pod=pod, outcome="terminating")
        status, body = await self.writer.evict(pod.namespace, pod.name, pod.uid)
        if status in (200, 201):
            message = f"evicted at the request of the agent of node {request.node}: {request.message}"
            await self.writer.event(ObjectRef(api_version="v1", kind="Pod", name=pod.name, namespace=pod.namespace,
                                              uid=pod.uid), WARNING, EVENT_REASONS[request.reason], message=message)
            return PodOutcome(pod=pod, outcome="evicted")
        if status == 429:
            return PodOutcome(pod=pod, outcome="deferred", message=_message(body) or "the eviction is not allowed now")
        if status in (404, 409):
            return PodOutcome(pod=pod, outcome="gone", message=_message(body))
        return PodOutcome(pod=pod, outcome="failed",
                          message=_message(body) or f"the Eviction API answered {status or 'nothing'}")


def _message(body: Any) -> str:
    return str(body.get("message") or "") if isinstance(body, Mapping) else ""

