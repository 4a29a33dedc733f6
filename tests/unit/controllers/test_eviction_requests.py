"""The leader's side of agents' eviction requests: which pods it evicts, refuses, or reports gone."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from colocation.apimachinery.errors import ApiError
from colocation.controllers.cluster import ClusterState
from colocation.controllers.events import EventType, ObjectRef
from colocation.controllers.eviction_requests import EvictionRequestHandler, judge
from colocation.nodemetrics.eviction_request import EvictionRequest, PodToEvict

NODE = "node-1"


def pod(name: str, *, node: str = NODE, qos: str | None = "BE", priority: str | None = None,
        terminating: bool = False, mirror: bool = False, namespace: str = "batch") -> dict[str, Any]:
    labels = {}
    if qos:
        labels["koordinator.sh/qosClass"] = qos
    if priority:
        labels["koordinator.sh/priority-class"] = priority
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels}
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if mirror:
        metadata["annotations"] = {"kubernetes.io/config.mirror": "hash"}
    return {"metadata": metadata, "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


def ref(name: str, namespace: str = "batch", uid: str | None = None) -> PodToEvict:
    return PodToEvict(namespace, name, uid or f"uid-{name}")


@pytest.mark.parametrize(("obj", "wanted", "verdict"), [
    (pod("a"), ref("a"), "evict"),
    (pod("a", priority="koord-free"), ref("a"), "evict"),
    (None, ref("a"), "gone"),
    (pod("a"), ref("a", uid="uid-of-an-older-a"), "gone"),
    (pod("a", terminating=True), ref("a"), "terminating"),
    (pod("a", node="node-2"), ref("a"), "other-node"),
    (pod("a", qos="LS"), ref("a"), "not-best-effort"),
    (pod("a", qos=None), ref("a"), "not-best-effort"),  # Kubernetes BestEffort without the label
    (pod("a", priority="koord-prod"), ref("a"), "not-best-effort"),
    (pod("a", priority="koord-mid"), ref("a"), "not-best-effort"),
    (pod("a", mirror=True), ref("a"), "mirror"),
])
def test_judge(obj: dict[str, Any] | None, wanted: PodToEvict, verdict: str) -> None:
    assert judge(NODE, wanted, obj) == verdict


class FakeWriter:
    def __init__(self, answers: dict[str, tuple[int, Any]] | None = None) -> None:
        self.answers = answers or {}
        self.evicted: list[tuple[str, str, str]] = []
        self.events: list[tuple[str, EventType, str, str]] = []

    async def evict(self, namespace: str, name: str, uid: str) -> tuple[int, Any]:
        self.evicted.append((namespace, name, uid))
        return self.answers.get(name, (201, {"kind": "Status", "status": "Success"}))

    async def event(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> None:
        self.events.append((f"{ref.namespace}/{ref.name}", type_, reason, message))


async def state_with(*pods: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    await state.pods_synced_with(list(pods), "1")
    return state


def request(*names: str) -> EvictionRequest:
    return EvictionRequest(node=NODE, reason="MemoryPressure", message="node memory usage 90%",
                           pods=tuple(ref(name) for name in names))


def counted(registry: CollectorRegistry, result: str) -> float:
    return registry.get_sample_value("colocation_node_pressure_evictions_total",
                                     {"reason": "MemoryPressure", "result": result}) or 0.0


async def test_best_effort_pods_are_evicted_with_an_event_and_the_rest_told_apart() -> None:
    writer = FakeWriter({"guarded": (429, {"message": "Cannot evict pod as it would violate the pod's "
                                                     "disruption budget."}),
                         "raced": (404, {"message": 'pods "raced" not found'})})
    registry = CollectorRegistry()
    handler = EvictionRequestHandler(await state_with(pod("big"), pod("guarded"), pod("raced"),
                                                      pod("leaving", terminating=True)), writer, registry)
    outcomes = await handler(request("big", "guarded", "raced", "leaving", "unknown"))
    assert [(o.pod.name, o.outcome) for o in outcomes] == [
        ("big", "evicted"), ("guarded", "deferred"), ("raced", "gone"), ("leaving", "terminating"),
        ("unknown", "gone")]
    assert "disruption budget" in outcomes[1].message
    assert writer.evicted == [("batch", "big", "uid-big"), ("batch", "guarded", "uid-guarded"),
                              ("batch", "raced", "uid-raced")]
    assert [(obj, type_, reason) for obj, type_, reason, _ in writer.events] == [
        ("batch/big", "Warning", "EvictPodByMemoryPressure")]
    assert "node-1" in writer.events[0][3] and "node memory usage 90%" in writer.events[0][3]
    assert (counted(registry, "evicted"), counted(registry, "deferred"), counted(registry, "gone")) == (1, 1, 2)


@pytest.mark.parametrize(("pods", "names", "why"), [
    ((pod("be"), pod("web", qos="LS")), ("be", "web"), "is not a best-effort pod"),
    ((pod("be"), pod("elsewhere", node="node-2")), ("be", "elsewhere"), "is not on this node"),
    ((pod("static", mirror=True),), ("static",), "is a static pod"),
])
async def test_a_request_naming_a_pod_it_may_not_evict_is_refused_whole(
        pods: tuple[dict[str, Any], ...], names: tuple[str, ...], why: str) -> None:
    writer = FakeWriter()
    registry = CollectorRegistry()
    handler = EvictionRequestHandler(await state_with(*pods), writer, registry)
    with pytest.raises(ApiError) as caught:
        await handler(request(*names))
    assert (caught.value.code, caught.value.reason) == (403, "Forbidden")
    assert why in caught.value.message
    assert writer.evicted == [] and writer.events == []
    assert counted(registry, "refused") == len(names)


async def test_before_the_pods_are_listed_the_leader_answers_503() -> None:
    handler = EvictionRequestHandler(ClusterState(), FakeWriter(), CollectorRegistry())
    with pytest.raises(ApiError) as caught:
        await handler(request("a"))
    assert caught.value.code == 503


async def test_an_unreachable_api_server_is_a_failure_the_agent_may_retry() -> None:
    writer = FakeWriter({"a": (0, None)})
    outcomes = await EvictionRequestHandler(await state_with(pod("a")), writer, CollectorRegistry())(request("a"))
    assert [(o.outcome, o.message) for o in outcomes] == [("failed", "the Eviction API answered nothing")]


async def test_cpu_eviction_requests_get_their_own_event_reason() -> None:
    writer = FakeWriter()
    registry = CollectorRegistry()
    handler = EvictionRequestHandler(await state_with(pod("a")), writer, registry)
    outcomes = await handler(EvictionRequest(node=NODE, reason="CPUSatisfaction", message="best-effort pods get 30%",
                                             pods=(ref("a"),)))
    assert [o.outcome for o in outcomes] == ["evicted"]
    assert [reason for _, _, reason, _ in writer.events] == ["EvictPodByBECPUSatisfaction"]
    assert registry.get_sample_value("colocation_node_pressure_evictions_total",
                                     {"reason": "CPUSatisfaction", "result": "evicted"}) == 1
