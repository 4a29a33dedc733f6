"""CPU burst's arithmetic as vectors: the NodeSLO's strategy, the pods that may burst, the share
pool, the token bucket and the values of one pod's cgroups."""

from __future__ import annotations

import json
from typing import Any

import pytest

from colocation.agent.strategies.cpu_burst.cpu_burst import (
    BurstConfig,
    BurstLimiter,
    BurstStrategy,
    ContainerReading,
    NodeState,
    Operation,
    PoolPod,
    burst_pod,
    burst_strategy,
    by_node,
    cfs_burst_us,
    next_quota,
    plan_pod,
    share_pool_state,
)

AUTO = BurstConfig(policy="auto")


# ---- the NodeSLO ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("block", "expected"), [
    (None, BurstStrategy()),
    ({}, BurstStrategy()),
    ({"policy": "auto"}, BurstStrategy(BurstConfig(policy="auto", cpu_burst_percent=1000, cfs_quota_burst_percent=300,
                                                   cfs_quota_burst_period_seconds=-1), 50)),
    ({"policy": "cpuBurstOnly", "cpuBurstPercent": 200, "cfsQuotaBurstPercent": 150,
      "cfsQuotaBurstPeriodSeconds": 60, "sharePoolThresholdPercent": 70},
     BurstStrategy(BurstConfig(policy="cpuBurstOnly", cpu_burst_percent=200, cfs_quota_burst_percent=150,
                               cfs_quota_burst_period_seconds=60), 70)),
    # out of Koordinator's bounds, or of the wrong type: that field's default
    ({"policy": "always", "cpuBurstPercent": 0, "cfsQuotaBurstPercent": 99, "cfsQuotaBurstPeriodSeconds": -2,
      "sharePoolThresholdPercent": 101}, BurstStrategy()),
    ({"policy": "cfsQuotaBurstOnly", "cpuBurstPercent": "300", "sharePoolThresholdPercent": True},
     BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly"))),
])
def test_the_strategy_is_read_from_the_nodeslo_with_koordinators_defaults(block: Any, expected: BurstStrategy) -> None:
    nodeslo = {"spec": {} if block is None else {"cpuBurstStrategy": block}}
    assert burst_strategy(nodeslo) == expected


def test_no_nodeslo_means_no_burst() -> None:
    assert burst_strategy(None).config.policy == "none"
    assert not BurstConfig().cfs_burst and not BurstConfig().quota_burst


@pytest.mark.parametrize(("policy", "cfs", "quota"), [
    ("none", False, False), ("cpuBurstOnly", True, False), ("cfsQuotaBurstOnly", False, True), ("auto", True, True)])
def test_each_policy_turns_on_its_kinds_of_burst(policy: Any, cfs: bool, quota: bool) -> None:
    assert (BurstConfig(policy=policy).cfs_burst, BurstConfig(policy=policy).quota_burst) == (cfs, quota)


# ---- which pods ----------------------------------------------------------------------------------

def pod(qos: str | None = "LS", *, cpu_limits: tuple[str | None, ...] = ("1",), annotation: Any = None,
        kube: str = "Burstable") -> dict[str, Any]:
    labels = {} if qos is None else {"koordinator.sh/qosClass": qos}
    annotations = {} if annotation is None else {
        "koordinator.sh/cpuBurst": annotation if isinstance(annotation, str) else json.dumps(annotation)}
    containers = [{"name": f"c{index}", "resources": {"limits": {"cpu": limit}} if limit else {}}
                  for index, limit in enumerate(cpu_limits)]
    return {"metadata": {"uid": "u-1", "namespace": "web", "name": "front", "labels": labels,
                         "annotations": annotations},
            "spec": {"containers": containers},
            "status": {"qosClass": kube, "containerStatuses": [
                {"name": f"c{index}", "containerID": f"containerd://id{index}"} for index in range(len(cpu_limits))]}}


@pytest.mark.parametrize(("qos", "kube", "bursts"), [
    ("LS", "Burstable", True), ("SYSTEM", "Burstable", True), (None, "Burstable", True),
    ("LSR", "Guaranteed", False), ("LSE", "Guaranteed", False), ("BE", "Burstable", False),
    (None, "Guaranteed", False),  # unlabelled Guaranteed is LSR to the agent
])
def test_only_ls_pods_burst(qos: str | None, kube: str, bursts: bool) -> None:
    assert (burst_pod(pod(qos, kube=kube)) is not None) == bursts


def test_a_pod_without_a_cpu_limit_never_bursts() -> None:
    assert burst_pod(pod(cpu_limits=(None,))) is None
    found = burst_pod(pod(cpu_limits=(None, "500m")))
    assert found is not None
    assert [(c.name, c.container_id, c.cpu_limit) for c in found.resources.containers] == [
        ("c0", "id0", None), ("c1", "id1", 500)]


@pytest.mark.parametrize(("annotation", "expected"), [
    (None, BurstConfig(policy="none")),
    ({"policy": "auto", "cpuBurstPercent": 300}, BurstConfig(policy="auto", cpu_burst_percent=300)),
    ({"cfsQuotaBurstPeriodSeconds": 10, "cpuBurstPercent": -5},
     BurstConfig(policy="none", cfs_quota_burst_period_seconds=10)),
    ("{not json", BurstConfig(policy="none")),
    ("[1, 2]", BurstConfig(policy="none")),
])
def test_a_pods_annotation_overrides_the_nodes_configuration(annotation: Any, expected: BurstConfig) -> None:
    found = burst_pod(pod(annotation=annotation))
    assert found is not None and found.config(BurstConfig()) == expected


# ---- the share pool ------------------------------------------------------------------------------

@pytest.mark.parametrize(("node_usage", "expected"), [
    (None, "unknown"),
    (2200, "idle"),  # the pool: 8000 - 2000 (LSR's request) = 6000; used: 2200 - 500 (LSR) - 1000 (BE) = 700
    (4200, "cooling"),  # 2700 / 6000 = 45 %: 90 % of the threshold
    (4500, "overload"),  # 3000 / 6000 = 50 %
])
def test_share_pool_state_leaves_out_lsr_and_be(node_usage: int | None, expected: NodeState) -> None:
    pods = [PoolPod("LSR", 2000, 500), PoolPod("BE", 0, 1000), PoolPod("LS", 1000, None)]
    assert share_pool_state(50, 8000, node_usage, pods=pods) == expected


@pytest.mark.parametrize(("used", "expected"), [
    (2699, "idle"), (2700, "cooling"), (2999, "cooling"), (3000, "overload"), (6000, "overload")])
def test_share_pool_thresholds(used: int, expected: NodeState) -> None:
    # a 6-cpu pool at a 50 % threshold: overload from 3000, cooling from 90 % of that (2700)
    assert share_pool_state(50, 6000, used, pods=[]) == expected


def test_an_empty_share_pool_is_overloaded() -> None:
    assert share_pool_state(50, 4000, 0, pods=[PoolPod("LSE", 4000, 0)]) == "overload"


# ---- the operation and the quota -----------------------------------------------------------------

@pytest.mark.parametrize(("state", "operation", "expected"), [
    ("overload", "scale-up", "scale-down"), ("overload", "remain", "scale-down"), ("overload", "reset", "reset"),
    ("cooling", "scale-up", "remain"), ("unknown", "scale-up", "remain"), ("cooling", "scale-down", "scale-down"),
    ("idle", "scale-up", "scale-up"), ("idle", "remain", "remain"),
])
def test_the_node_state_overrides_the_containers_wish(state: NodeState, operation: Operation,
                                                      expected: Operation) -> None:
    assert by_node(state, operation) == expected


@pytest.mark.parametrize(("operation", "current", "expected"), [
    ("scale-up", 100_000, 120_000), ("scale-up", 280_000, 300_000),  # capped at 300 %
    ("scale-down", 200_000, 160_000), ("scale-down", 110_000, 100_000),  # never below the limit
    ("reset", 250_000, 100_000), ("remain", 150_000, 150_000),
    ("remain", -1, 100_000),  # unlimited by someone else: back within bounds
])
def test_next_quota(operation: Operation, current: int, expected: int) -> None:
    assert next_quota(operation, current, 100_000, ceiling=300_000) == expected


@pytest.mark.parametrize(("config", "limit", "quota", "expected"), [
    (AUTO, 1000, 1_000_000, 1_000_000),  # 1 cpu x 1000 % of 100 ms
    (AUTO, 1000, 120_000, 120_000),  # capped at the quota: the kernel refuses more
    (BurstConfig(policy="cpuBurstOnly", cpu_burst_percent=50), 2000, 200_000, 100_000),
    (BurstConfig(policy="cfsQuotaBurstOnly"), 1000, 100_000, 0),
    (BurstConfig(policy="none"), 1000, 100_000, 0),
    (AUTO, 500, -1, 500_000),
])
def test_cfs_burst_is_the_limit_times_the_percent(config: BurstConfig, limit: int, quota: int, expected: int) -> None:
    assert cfs_burst_us(config, limit, quota) == expected


def reading(quota: int = 100_000, *, throttled: bool | None = True, allowed: bool = True, name: str = "c0",
            limit: int = 1000, period: int = 100_000) -> ContainerReading:
    return ContainerReading(name=name, limit_millis=limit, quota_us=quota, period_us=period, throttled=throttled,
                            allowed=allowed)


def test_a_throttled_container_of_an_idle_node_scales_up_and_the_pod_with_it() -> None:
    plan = plan_pod(AUTO, "idle", [reading(), reading(name="c1", throttled=False)], kubelet_pod_quota_us=200_000)
    assert [(c.name, c.quota_us, c.burst_us, c.operation) for c in plan.containers] == [
        ("c0", 120_000, 120_000, "scale-up"), ("c1", 100_000, 100_000, "remain")]
    assert (plan.quota_us, plan.burst_us) == (220_000, 220_000)
    assert plan.quota_bursting and plan.cfs_bursting


def test_an_overloaded_node_scales_down_to_the_limit_at_most() -> None:
    plan = plan_pod(AUTO, "overload", [reading(150_000, throttled=True)], kubelet_pod_quota_us=100_000)
    assert (plan.containers[0].quota_us, plan.quota_us) == (120_000, 120_000)
    plan = plan_pod(AUTO, "overload", [reading(110_000)], kubelet_pod_quota_us=100_000)
    assert (plan.containers[0].quota_us, plan.quota_us) == (100_000, 100_000)
    assert not plan.quota_bursting


def test_an_empty_token_bucket_scales_down_even_when_throttled() -> None:
    plan = plan_pod(AUTO, "idle", [reading(200_000, allowed=False)], kubelet_pod_quota_us=100_000)
    assert plan.containers[0].operation == "scale-down" and plan.containers[0].quota_us == 160_000


def test_without_quota_burst_the_quota_goes_back_to_the_limit() -> None:
    plan = plan_pod(BurstConfig(policy="cpuBurstOnly"), "idle", [reading(250_000)], kubelet_pod_quota_us=100_000)
    assert (plan.containers[0].quota_us, plan.containers[0].burst_us, plan.quota_us) == (100_000, 100_000, 100_000)


def test_policy_none_is_the_undo() -> None:
    plan = plan_pod(BurstConfig(), "idle", [reading(250_000), reading(100_000, name="c1")],
                    kubelet_pod_quota_us=200_000)
    assert [(c.quota_us, c.burst_us) for c in plan.containers] == [(100_000, 0), (100_000, 0)]
    assert (plan.quota_us, plan.burst_us) == (200_000, 0)
    assert not plan.quota_bursting and not plan.cfs_bursting


def test_a_pod_the_kubelet_gave_no_quota_keeps_none() -> None:
    plan = plan_pod(AUTO, "idle", [reading()], kubelet_pod_quota_us=-1)
    assert plan.quota_us == -1 and plan.burst_us == 120_000


def test_unknown_throttling_remains() -> None:
    assert plan_pod(AUTO, "idle", [reading(130_000, throttled=None)],
                    kubelet_pod_quota_us=-1).containers[0].quota_us == 130_000


def test_the_quota_follows_the_cgroups_period() -> None:
    plan = plan_pod(AUTO, "idle", [reading(50_000, period=50_000)], kubelet_pod_quota_us=-1)
    assert (plan.containers[0].base_quota_us, plan.containers[0].quota_us) == (50_000, 60_000)


def test_the_kubelets_pod_quota_needs_every_container_limited_and_counts_the_overhead() -> None:
    limited = burst_pod(pod(cpu_limits=("1", "500m")))
    partly = burst_pod(pod(cpu_limits=("1", None)))
    assert limited is not None and partly is not None
    assert limited.kubelet_quota_us(100_000) == 150_000
    assert partly.kubelet_quota_us(100_000) == -1
    with_overhead = pod(cpu_limits=("1", "500m"))
    with_overhead["spec"]["overhead"] = {"cpu": "250m"}
    kata = burst_pod(with_overhead)
    assert kata is not None and kata.kubelet_quota_us(100_000) == 175_000


# ---- the token bucket ----------------------------------------------------------------------------

def test_the_token_bucket_spends_above_the_limit_and_saves_below_60_percent() -> None:
    limiter = BurstLimiter.start(10, 300, now=0.0, fill=0.25)  # capacity 10 x 200 = 2000, starts at 500
    assert limiter.tokens == 500
    assert limiter.allow(1.0, 300) and limiter.tokens == 300  # 1 s at 300 %: 200 spent
    assert limiter.allow(3.0, 200) and limiter.tokens == 100  # 2 s at 200 %
    assert limiter.allow(4.5, 80) and limiter.tokens == 100  # 60-100 %: neither spent nor saved (1 whole s)
    assert not limiter.allow(5.5, 250) and limiter.tokens == -50  # empty: no more burst
    assert limiter.allow(7.5, 0) and limiter.tokens == 150  # 2 s idle: 100 a second saved
    limiter.allow(1000.0, 0)
    assert limiter.tokens == 2000  # at most its capacity
    limiter.allow(2000.0, 10_000)
    assert limiter.tokens == -2000  # at least minus it


def test_an_idle_token_bucket_expires_after_two_periods() -> None:
    limiter = BurstLimiter.start(10, 300, now=0.0, fill=0.0)
    assert not limiter.expired(20.0) and limiter.expired(20.5)
