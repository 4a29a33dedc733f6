"""CPU eviction's decisions: the NodeSLO's keys, the satisfaction arithmetic at fixed figures, the window, the pods."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.agent.classify import PodInfo
from colocation.agent.collector import PodSample, Sample
from colocation.agent.strategies.cpu_evict.cpu_evict import (
    BeCpu,
    CpuEvictor,
    CpuEvictPolicy,
    cpu_evict_policy,
    cpu_eviction_order,
    release_by_satisfaction,
    usage_high_enough,
)
from colocation.agent.strategies.eviction_followup import Candidate
from colocation.kube.backoff import Backoff
from tests.clock import FakeClock

POLICY = CpuEvictPolicy(enabled=True, lower_percent=40, upper_percent=60)


def nodeslo(**fields: Any) -> dict[str, Any]:
    return {"spec": {"resourceUsedThresholdWithBE": {"enable": True, **fields}}}


# ---- the NodeSLO ---------------------------------------------------------------------------------

def test_both_satisfaction_percents_turn_it_on_with_koordinators_defaults_for_the_rest() -> None:
    policy = cpu_evict_policy(nodeslo(cpuEvictBESatisfactionLowerPercent=40, cpuEvictBESatisfactionUpperPercent=60))
    assert policy == CpuEvictPolicy(enabled=True, lower_percent=40, upper_percent=60, usage_threshold_percent=90)
    given = cpu_evict_policy(nodeslo(cpuEvictBESatisfactionLowerPercent=40, cpuEvictBESatisfactionUpperPercent=60,
                                     cpuEvictBEUsageThresholdPercent=80, cpuEvictTimeWindowSeconds=30,
                                     cpuEvictPolicy="evictByAllocatable"))
    assert (given.usage_threshold_percent, given.window_seconds, given.by_allocatable) == (80, 30, True)


@pytest.mark.parametrize(("fields", "problem"), [
    ({"cpuEvictBESatisfactionLowerPercent": 40}, "must both be set"),
    ({"cpuEvictBESatisfactionLowerPercent": 61, "cpuEvictBESatisfactionUpperPercent": 80}, "not in (0, 60]"),
    ({"cpuEvictBESatisfactionLowerPercent": 0, "cpuEvictBESatisfactionUpperPercent": 80}, "not in (0, 60]"),
    ({"cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 100}, "not in (0, 100)"),
    ({"cpuEvictBESatisfactionLowerPercent": 50, "cpuEvictBESatisfactionUpperPercent": 45}, "below the lower"),
])
def test_invalid_percents_turn_it_off_and_say_why(fields: dict[str, Any], problem: str) -> None:
    policy = cpu_evict_policy(nodeslo(**fields))
    assert not policy.enabled and problem in policy.problem


def test_without_the_percents_or_without_enable_it_is_off_silently() -> None:
    assert cpu_evict_policy(nodeslo()) == CpuEvictPolicy()
    assert cpu_evict_policy({"spec": {"resourceUsedThresholdWithBE": {
        "enable": False, "cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 60}}}) \
        == CpuEvictPolicy()


# ---- the arithmetic ------------------------------------------------------------------------------

def test_release_brings_satisfaction_back_to_the_upper_percent() -> None:
    # 10 cpus of batch requests, 3 cpus allowed: satisfaction 30 % <= 40 %; back to 60 %: 3 cpus of requests.
    assert release_by_satisfaction(BeCpu(usage=2900, request=10_000, limit=3000), POLICY) == 3000
    assert release_by_satisfaction(BeCpu(usage=2900, request=10_000, limit=4000), POLICY) == 2000  # 40 %: at it
    assert release_by_satisfaction(BeCpu(usage=2900, request=10_000, limit=4100), POLICY) == 0  # above the lower
    assert release_by_satisfaction(BeCpu(usage=0, request=0, limit=4000), POLICY) == 0


def test_usage_must_be_near_the_limit_unless_the_limit_is_under_a_cpu() -> None:
    assert usage_high_enough(BeCpu(2700, 10_000, 3000), 90)
    assert not usage_high_enough(BeCpu(2600, 10_000, 3000), 90)
    assert usage_high_enough(BeCpu(10, 10_000, 900), 90)
    assert not usage_high_enough(BeCpu(10, 10_000, 0), 90)


def test_order_is_lowest_priority_then_largest_usage_per_request() -> None:
    pods = [Candidate(namespace="b", name="a", uid="a", priority=5000, cpu_millis=500, cpu_request_millis=1000),
            Candidate(namespace="b", name="b", uid="b", priority=5000, cpu_millis=900, cpu_request_millis=1000),
            Candidate(namespace="b", name="c", uid="c", priority=3000, cpu_millis=100, cpu_request_millis=1000),
            Candidate(namespace="b", name="d", uid="d", priority=5000, cpu_millis=0, cpu_request_millis=0)]
    assert [p.name for p in cpu_eviction_order(pods)] == ["c", "b", "a", "d"]


# ---- rounds --------------------------------------------------------------------------------------

def evictor(clock: FakeClock, limit: int = 3000) -> CpuEvictor:
    cpu = CpuEvictor(clock, collect_interval=1.0, real_limit=lambda: limit, cool_down=20.0,
                     backoff=lambda: Backoff(5.0, 60.0, jitter=0.0))
    cpu.nodeslo_changed(nodeslo(cpuEvictBESatisfactionLowerPercent=40, cpuEvictBESatisfactionUpperPercent=60,
                                cpuEvictTimeWindowSeconds=10))
    return cpu


PODS = {f"u-{name}": PodInfo(uid=f"u-{name}", namespace="batch", name=name, priority="koord-batch", qos="BE",
                             cpu_request_millis=0, memory_request_bytes=0, evictable=True,
                              batch_cpu_request_millis=request)
        for name, request in (("big", 4000), ("mid", 3000), ("small", 3000))}
PODS["u-web"] = PodInfo(uid="u-web", namespace="web", name="web", priority="koord-prod", qos="LS",
                        cpu_request_millis=2000, memory_request_bytes=0, kube_qos="Burstable")


def sample(**cpu: int) -> Sample:
    return Sample(timestamp=1e9, node_cpu_millis=sum(cpu.values()), node_memory_bytes=0,
                  pods=tuple(PodSample(uid=f"u-{name}", cpu_millis=millis, memory_bytes=0, cgroup_path="") for name,
                             millis in cpu.items()))


def test_starved_best_effort_pods_are_asked_for_after_the_first_cool_down() -> None:
    clock = FakeClock(0.0)
    cpu = evictor(clock)
    busy = sample(big=1500, mid=800, small=600, web=1900)  # BE 2900m of a 3000m limit, 10 cpus requested
    for _ in range(19):  # the first 20 s: koordlet's cool time runs from the start
        clock.now += 1
        assert cpu.decide(busy, PODS) is None
    clock.now += 1
    decided = cpu.decide(busy, PODS)
    assert decided is not None
    assert decided.reason == "CPUSatisfaction"
    # 3000m of requests to release: "big" (4000m, 1500/4000 = 0.375 of its request used) alone covers it.
    assert [p.name for p in decided.pods] == ["big"]
    assert decided.details["release_millicores"] == 3000
    assert "30%" in decided.message
    clock.now += 19.9
    assert cpu.decide(busy, PODS) is None  # the cool-down after a round that asked

def test_a_short_history_is_not_enough() -> None:
    clock = FakeClock(0.0)
    cpu = evictor(clock)
    clock.now = 100.0  # long after the start's cool-down
    assert cpu.decide(sample(big=1500, mid=800, small=600), PODS) is None  # 1 sample of a 10 s window: under a third
    clock.now += 1
    assert cpu.decide(sample(big=1500, mid=800, small=600), PODS) is None
    clock.now += 1
    assert cpu.decide(sample(big=1500, mid=800, small=600), PODS) is None
    clock.now += 1
    assert cpu.decide(sample(big=1500, mid=800, small=600), PODS) is not None  # 4 samples: a third of 10 s


def test_pods_that_use_little_of_their_limit_are_not_starved_and_stay() -> None:
    clock = FakeClock(0.0)
    cpu = evictor(clock)
    for _ in range(30):
        clock.now += 1
        assert cpu.decide(sample(big=500, mid=300, small=200), PODS) is None  # 1000m of 3000m: under 90 %


def test_the_suppress_budget_is_the_limit_and_a_generous_one_evicts_nothing() -> None:
    clock = FakeClock(0.0)
    cpu = evictor(clock, limit=4500)  # 45 % of the 10 cpus requested: above the lower percent
    for _ in range(30):
        clock.now += 1
        assert cpu.decide(sample(big=2000, mid=1200, small=1000), PODS) is None


def test_with_evict_by_allocatable_the_nodes_batch_cpu_is_the_limit() -> None:
    clock = FakeClock(0.0)
    cpu = CpuEvictor(clock, collect_interval=1.0, real_limit=lambda: 10_000, batch_allocatable=lambda: 2000)
    cpu.nodeslo_changed(nodeslo(cpuEvictBESatisfactionLowerPercent=40, cpuEvictBESatisfactionUpperPercent=60,
                                cpuEvictPolicy="evictByAllocatable"))
    be = cpu.be_cpu(sample(big=1000, mid=900, small=100, web=5000), PODS)
    assert be == BeCpu(usage=2000.0, request=10_000.0, limit=2000.0)
    unknown = CpuEvictor(clock, collect_interval=1.0, real_limit=lambda: 10_000)
    unknown.policy = cpu.policy
    assert unknown.be_cpu(sample(big=1000), PODS) is None  # the Node not read yet: no limit, no round


def test_a_pods_batch_cpu_request_is_its_containers_requests_else_limits() -> None:
    from colocation.agent.classify import classify

    def container(requests: dict[str, str] | None, limits: dict[str, str] | None) -> dict[str, Any]:
        return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}

    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        container({"kubernetes.io/batch-cpu": "1500"}, {"kubernetes.io/batch-cpu": "2000"}),
        container(None, {"kubernetes.io/batch-cpu": "500"}),
        container({"cpu": "1"}, None)]}}
    assert classify(pod).batch_cpu_request_millis == 2000
