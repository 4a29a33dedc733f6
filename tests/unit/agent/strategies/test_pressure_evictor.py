"""Eviction by node pressure, the loop's step: a sample and the NodeSLO in, a request to the leader out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.classify import PodInfo
from colocation.agent.collector import PodSample, Sample
from colocation.agent.delivery import DeliveryFailed, FailureCounter
from colocation.agent.enforcement import EnforcementOptions, NodeEnforcement, node_enforcement
from colocation.agent.strategies.batch_cgroups.batch_cgroups_strategy import BatchCgroupsOptions
from colocation.agent.strategies.cpu_evict.cpu_evict_strategy import CpuEvictOptions
from colocation.agent.strategies.cpu_suppress.cpu_suppress_strategy import CpuSuppressOptions
from colocation.agent.strategies.memory_evict.memory_evict import MemoryEvictor
from colocation.agent.strategies.pressure_evictor import EvictionMetrics, PressureEviction, PressureEvictionEnforcer
from colocation.agent.strategies.strategy import Round
from colocation.kube.backoff import Backoff
from tests.clock import FakeClock

GI = 2**30
NODESLO = {"spec": {"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}}}


def info(uid: str, name: str, *, evictable: bool, priority: int = 5000) -> PodInfo:
    return PodInfo(uid=uid, namespace="batch", name=name, priority="koord-batch" if evictable else "koord-prod",
                   qos="BE" if evictable else "LS", cpu_request_millis=0, memory_request_bytes=0, evictable=evictable,
                   priority_value=priority)


PODS = {"u-big": info("u-big", "big", evictable=True), "u-small": info("u-small", "small", evictable=True),
        "u-web": info("u-web", "web", evictable=False, priority=9000)}


def sample(used: int, **pods: int) -> Sample:
    return Sample(timestamp=1e9, node_cpu_millis=0, node_memory_bytes=used,
                  pods=tuple(PodSample(uid=f"u-{name}", cpu_millis=0, memory_bytes=memory, cgroup_path="") for name,
                             memory in pods.items()))


class FakeLeader:
    """Answers every pod with the outcome set for it (default evicted), or fails the whole request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.outcomes: dict[str, str] = {}
        self.failure: DeliveryFailed | None = None

    async def exchange(self, path: str, body: bytes, failed: FailureCounter) -> tuple[str, str | None, Any]:
        request = orjson.loads(body)
        self.requests.append({"path": path, **request})
        if self.failure is not None:
            failed(self.failure.reason)
            raise self.failure
        return "leader", "operator-0", {"pods": [
            {"namespace": p["namespace"], "name": p["name"], "outcome": self.outcomes.get(p["name"], "evicted")}
            for p in request["pods"]]}


def eviction(leader: FakeLeader, clock: FakeClock, *,
             dry_run: bool = False) -> tuple[PressureEviction, CollectorRegistry]:
    registry = CollectorRegistry()
    evictor = MemoryEvictor(clock, capacity=lambda: 10 * GI, cool_down=4.0,
                            backoff=lambda: Backoff(5.0, 60.0, jitter=0.0))
    return PressureEviction("node-1", evictor, EvictionMetrics(registry), exchange=leader, dry_run=dry_run), registry


def counted(registry: CollectorRegistry, result: str) -> float:
    return registry.get_sample_value("colocation_agent_evictions_total",
                                     {"reason": "MemoryPressure", "result": result}) or 0.0


async def test_over_the_threshold_the_agent_asks_the_leader_for_the_best_effort_pods_in_order() -> None:
    leader, clock = FakeLeader(), FakeClock(0.0)
    memory, registry = eviction(leader, clock)
    enforcer = PressureEvictionEnforcer("memory-evict", memory, interval=1.0)
    enforcement = NodeEnforcement("node-1", [enforcer])
    enforcement.run_once(enforcer, Round(sample(9 * GI, big=3 * GI, small=GI, web=4 * GI), PODS))
    assert leader.requests == []  # the NodeSLO has not been listed yet: nothing is decided
    enforcement.nodeslo_changed(NODESLO, listed=True)
    enforcement.run_once(enforcer, Round(sample(9 * GI, big=3 * GI, small=GI, web=4 * GI), PODS))
    await memory.settle()
    # 90 % of 10 GiB, down to 68 %: 2.2 GiB to release, which "big" (3 GiB, the largest) covers.
    assert [(r["path"], r["node"], r["reason"], [p["name"] for p in r["pods"]]) for r in leader.requests] == [
        ("/apis/metrics.colocation.dev/v1alpha1/nodemetrics/node-1/evictions", "node-1", "MemoryPressure", ["big"])]
    assert "90%" in leader.requests[0]["message"]
    assert counted(registry, "evicted") == 1


async def test_a_deferred_pod_is_asked_for_again_only_after_its_backoff() -> None:
    leader, clock = FakeLeader(), FakeClock(0.0)
    leader.outcomes["big"] = "deferred"
    memory, registry = eviction(leader, clock)
    memory.nodeslo_changed(NODESLO)
    memory.step(sample(9 * GI, big=3 * GI, small=GI), PODS)
    await memory.settle()
    clock.now += 4.0  # the cool-down is over; "big" is held back for 5 s: "small" goes in its place
    memory.step(sample(9 * GI, big=3 * GI, small=GI), PODS)
    await memory.settle()
    clock.now += 4.0
    memory.step(sample(9 * GI, big=3 * GI, small=GI), PODS)
    await memory.settle()
    assert [[p["name"] for p in r["pods"]] for r in leader.requests] == [["big"], ["small"], ["big"]]
    assert (counted(registry, "deferred"), counted(registry, "evicted")) == (2, 1)


async def test_a_request_that_fails_whole_frees_its_pods_and_is_counted() -> None:
    leader, clock = FakeLeader(), FakeClock(0.0)
    leader.failure = DeliveryFailed("unreachable", "no route")
    memory, registry = eviction(leader, clock)
    memory.nodeslo_changed(NODESLO)
    memory.step(sample(9 * GI, big=3 * GI), PODS)
    await memory.settle()
    leader.failure = None
    clock.now += 4.0
    memory.step(sample(9 * GI, big=3 * GI), PODS)
    await memory.settle()
    assert [[p["name"] for p in r["pods"]] for r in leader.requests] == [["big"], ["big"]]
    assert (counted(registry, "unsent"), counted(registry, "evicted")) == (1, 1)
    assert registry.get_sample_value("colocation_agent_eviction_requests_failed_total", {"reason": "unreachable"}) == 1
    assert registry.get_sample_value("colocation_agent_eviction_rounds_total", {"reason": "MemoryPressure"}) == 2


async def test_dry_run_decides_and_counts_but_sends_nothing() -> None:
    leader, clock = FakeLeader(), FakeClock(0.0)
    memory, registry = eviction(leader, clock, dry_run=True)
    memory.nodeslo_changed(NODESLO)
    memory.step(sample(9 * GI, big=3 * GI), PODS)
    await memory.settle()
    assert leader.requests == []
    assert counted(registry, "dry-run") == 1


async def test_under_the_threshold_or_disabled_nothing_is_asked() -> None:
    leader, clock = FakeLeader(), FakeClock(0.0)
    memory, _ = eviction(leader, clock)
    memory.step(sample(9 * GI, big=3 * GI), PODS)  # the default policy: off
    memory.nodeslo_changed(NODESLO)
    memory.step(sample(6 * GI, big=3 * GI), PODS)
    await memory.settle()
    assert leader.requests == []



class NodeKube:
    """Answers GET Node with 10 GiB of memory capacity."""

    def __init__(self) -> None:
        self.gets = 0
        self.answered = asyncio.Event()

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        assert (method, path) == ("GET", "/api/v1/nodes/node-1")
        self.gets += 1
        self.answered.set()
        return 200, {"status": {"capacity": {"cpu": "4", "memory": "10Gi"}}}


async def test_the_nodes_memory_capacity_is_read_only_once_memory_eviction_is_enabled(tmp_path: Path) -> None:
    kube = NodeKube()
    enforcement = node_enforcement("node-1", tmp_path, tmp_path, options=EnforcementOptions(strategies=(
        CpuSuppressOptions(interval=0), BatchCgroupsOptions(interval=0), CpuEvictOptions(interval=0))),
        kube=kube, metrics=AgentMetrics(), cpus=lambda: 4, timeout=1.0)  # type: ignore[arg-type]
    evictions = [s.eviction for s in enforcement.strategies if isinstance(s, PressureEvictionEnforcer)]
    assert [e.strategy.reason for e in evictions] == ["MemoryPressure"]
    assert enforcement.find("cpu-suppress") is None and enforcement.reservation is not None
    memory = evictions[0].strategy
    assert isinstance(memory, MemoryEvictor)
    enforcement.reservation.poll = 0.01
    assert not enforcement._node_wanted()  # eviction off (no NodeSLO yet): the Node is not read
    tasks = [asyncio.create_task(coroutine) for _, coroutine in enforcement.background()]
    try:
        assert memory.capacity() is None
        enforcement.nodeslo_changed(NODESLO, listed=True)
        assert enforcement._node_wanted()
        await asyncio.wait_for(kube.answered.wait(), timeout=10)
        assert memory.capacity() == 10 * GI
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
