"""The exit process: the node token buckets (per zone) and the choice of pods."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.controllers.eviction import EvictionPlanner, evictable
from colocation.kube.backoff import Backoff
from tests.clock import FakeClock

START = 5000.0


def pod(name: str, *, node: str = "node-a", labels: dict[str, str] | None = None, priority: int | None = None,
        requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        phase: str = "Running", **metadata: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "main", "image": "busybox",
                                                              "resources": resources}]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "jobs", "uid": f"uid-{name}", "labels": labels or {},
                         **metadata},
            "spec": spec, "status": {"phase": phase}}


def batch(name: str, node: str = "node-a", **kwargs: Any) -> dict[str, Any]:
    return pod(name, node=node, labels={"koordinator.sh/priority-class": "koord-batch"}, **kwargs)


# --- Choosing pods ---------------------------------------------------------------------------------

def test_only_batch_and_free_pods_are_evicted() -> None:
    pods = [
        pod("label-batch", labels={"koordinator.sh/priority-class": "koord-batch"}),
        pod("label-free", labels={"koordinator.sh/priority-class": "koord-free"}),
        pod("label-prod", labels={"koordinator.sh/priority-class": "koord-prod"}),
        pod("label-mid", labels={"koordinator.sh/priority-class": "koord-mid"}),
        pod("band-batch", priority=5500, requests={"cpu": "1"}),
        pod("band-free", priority=3000, requests={"cpu": "1"}),
        pod("band-prod", priority=9999),
        pod("band-mid", priority=7000),
        pod("best-effort"),  # no priority, no requests: BE → batch
        pod("burstable", requests={"cpu": "100m"}),  # LS → prod
        pod("guaranteed", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}),
        pod("system-qos", labels={"koordinator.sh/qosClass": "SYSTEM"}),
        pod("be-qos-label", labels={"koordinator.sh/qosClass": "BE"}, requests={"cpu": "1"}),
    ]
    planner = EvictionPlanner(FakeClock(START))

    plan = planner.plan({"node-a": pods})

    assert sorted(e.name for e in plan.evictions) == [
        "band-batch", "band-free", "be-qos-label", "best-effort", "label-batch", "label-free"]
    assert {e.priority for e in plan.evictions} == {"koord-batch", "koord-free"}
    first = next(e for e in plan.evictions if e.name == "label-batch")
    assert (first.node, first.namespace, first.uid) == ("node-a", "jobs", "uid-label-batch")


def test_terminating_terminated_and_mirror_pods_are_skipped() -> None:
    assert evictable(batch("running"))
    assert evictable(batch("pending", phase="Pending"))
    assert not evictable(batch("terminating", deletionTimestamp="2026-11-22T10:00:00Z"))
    assert not evictable(batch("succeeded", phase="Succeeded"))
    assert not evictable(batch("failed", phase="Failed"))
    assert not evictable(batch("static", annotations={"kubernetes.io/config.mirror": "abc"}))

    plan = EvictionPlanner(FakeClock(START)).plan({"node-a": [
        batch("running"), batch("terminating", deletionTimestamp="2026-11-22T10:00:00Z"), batch("failed",
                                                                                               phase="Failed")]})
    assert [e.name for e in plan.evictions] == ["running"]


# --- Rate limiting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("start", [START, 6.4])  # at 6.4, (16.4 - 6.4) * 0.1 rounds below 1.0
def test_two_nodes_due_at_once_are_drained_ten_seconds_apart(start: float) -> None:
    clock = FakeClock(start)
    planner = EvictionPlanner(clock)
    due = {"node-a": [batch("a1", "node-a"), batch("a2", "node-a")], "node-b": [batch("b1", "node-b")]}

    plan = planner.plan(due)
    assert [e.name for e in plan.evictions] == ["a1", "a2"]
    assert (plan.started, plan.draining, plan.waiting) == (("node-a",), ("node-a",), ("node-b",))
    assert plan.next_plan_at == start + 10

    clock.now = start + 9.999
    plan = planner.plan(due)
    assert plan.evictions == () and plan.waiting == ("node-b",)

    clock.now = start + 10
    plan = planner.plan(due)
    assert [e.name for e in plan.evictions] == ["b1"]
    assert (plan.started, plan.draining, plan.waiting) == (("node-b",), ("node-a", "node-b"), ())


def test_a_draining_node_needs_no_new_token_for_pods_that_appear_later() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock)
    planner.plan({"node-a": [batch("a1")]})
    clock.now = START + 1
    plan = planner.plan({"node-a": [batch("a1", deletionTimestamp="2026-11-22T10:00:00Z"), batch("a2")],
                         "node-b": [batch("b1", "node-b")]})
    assert [e.name for e in plan.evictions] == ["a2"]
    assert plan.waiting == ("node-b",)


def test_a_node_no_longer_due_is_released_and_queues_again_later() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock)
    assert planner.plan({"node-a": [batch("a1")]}).draining == ("node-a",)
    clock.now = START + 2
    assert planner.plan({}).draining == ()  # recovered (or the guard stopped evictions)

    clock.now = START + 5
    plan = planner.plan({"node-a": [batch("a1")]})
    assert plan.evictions == () and plan.waiting == ("node-a",)
    clock.now = START + 10
    assert [e.name for e in planner.plan({"node-a": [batch("a1")]}).evictions] == ["a1"]


def test_burst_and_rate_are_configurable() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock, rate=1.0, burst=2)
    due = {f"node-{c}": [batch(c, f"node-{c}")] for c in "abcd"}
    assert planner.plan(due).draining == ("node-a", "node-b")
    clock.now = START + 1
    assert planner.plan(due).draining == ("node-a", "node-b", "node-c")

    disabled = EvictionPlanner(clock, rate=0)
    plan = disabled.plan(due)
    assert plan.evictions == () and plan.next_plan_at is None


# --- Retries ---------------------------------------------------------------------------------------

def test_a_pod_already_offered_is_not_offered_again_before_the_retry_interval() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock, retry_interval=30.0)
    due = {"node-a": [batch("a1")]}
    assert len(planner.plan(due).evictions) == 1

    clock.now = START + 29
    plan = planner.plan(due)  # the informer has not seen the eviction land yet
    assert plan.evictions == () and plan.next_plan_at == START + 30
    clock.now = START + 30
    assert len(planner.plan(due).evictions) == 1


def test_a_deferred_eviction_backs_off_exponentially() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock, backoff=lambda: Backoff(initial=5.0, maximum=60.0, jitter=0.0))
    due = {"node-a": [batch("a1")]}
    (eviction,) = planner.plan(due).evictions

    assert planner.deferred(eviction) == 5.0  # 429: the PodDisruptionBudget allows no disruption now
    clock.now = START + 4.9
    assert planner.plan(due).evictions == ()
    clock.now = START + 5
    (eviction,) = planner.plan(due).evictions

    assert planner.deferred(eviction) == 10.0
    clock.now = START + 14.9
    assert planner.plan(due).evictions == ()
    clock.now = START + 15
    assert len(planner.plan(due).evictions) == 1


def test_a_pod_gone_and_back_starts_with_a_fresh_backoff() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock, backoff=lambda: Backoff(initial=5.0, maximum=60.0, jitter=0.0))
    (eviction,) = planner.plan({"node-a": [batch("a1")]}).evictions
    planner.deferred(eviction)
    planner.plan({"node-a": []})  # the pod left by other means

    assert planner.deferred(eviction) == 5.0
