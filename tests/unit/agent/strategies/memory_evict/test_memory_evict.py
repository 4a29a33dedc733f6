"""Memory eviction's decisions: the NodeSLO's keys, which pods at fixed usages, and the rate limit."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.agent.classify import classify
from colocation.agent.strategies.eviction_followup import Candidate
from colocation.agent.strategies.memory_evict.memory_evict import (
    MemoryEvictor,
    MemoryEvictPolicy,
    memory_evict_policy,
    memory_eviction_order,
    memory_to_release,
)
from colocation.kube.backoff import Backoff
from tests.clock import FakeClock

GI = 2**30
ON = MemoryEvictPolicy(enabled=True, threshold_percent=70, lower_percent=68)


def nodeslo(**fields: Any) -> dict[str, Any]:
    return {"spec": {"resourceUsedThresholdWithBE": fields}}


# ---- the NodeSLO ---------------------------------------------------------------------------------

def test_koordinator_defaults_threshold_70_and_lower_two_below() -> None:
    policy = memory_evict_policy(nodeslo(enable=True))
    assert (policy.enabled, policy.threshold_percent, policy.lower_percent) == (True, 70, 68)
    assert memory_evict_policy(nodeslo(enable=True, memoryEvictThresholdPercent=80)).lower_percent == 78
    given = memory_evict_policy(nodeslo(enable=True, memoryEvictThresholdPercent=80, memoryEvictLowerPercent=60))
    assert (given.threshold_percent, given.lower_percent) == (80, 60)


@pytest.mark.parametrize("slo", [None, {}, {"spec": {}}, nodeslo(), nodeslo(enable=False), nodeslo(enable="true")])
def test_eviction_is_off_unless_the_nodeslo_enables_it(slo: dict[str, Any] | None) -> None:
    assert not memory_evict_policy(slo).enabled
    assert memory_evict_policy(slo).problem == ""


@pytest.mark.parametrize(("fields", "problem"), [
    ({"memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 70}, "not below"),
    ({"memoryEvictThresholdPercent": 60, "memoryEvictLowerPercent": 65}, "not below"),
    ({"memoryEvictThresholdPercent": -1}, "negative"),
])
def test_a_lower_percent_not_below_the_threshold_turns_eviction_off_and_says_why(
        fields: dict[str, Any], problem: str) -> None:
    policy = memory_evict_policy(nodeslo(enable=True, **fields))
    assert not policy.enabled
    assert problem in policy.problem


# ---- how much, and which pods ----------------------------------------------------------------------

def test_release_starts_at_the_threshold_in_whole_percents() -> None:
    assert memory_to_release(ON, 100 * GI, 69 * GI + GI // 2) is None  # 69.5 % is 69 %
    assert memory_to_release(ON, 100 * GI, 70 * GI) == 2 * GI  # 70 % - 68 %
    assert memory_to_release(ON, 100 * GI, 90 * GI) == 22 * GI
    assert memory_to_release(MemoryEvictPolicy(), 100 * GI, 99 * GI) is None


def pod(name: str, priority: int, memory: int) -> Candidate:
    return Candidate(namespace="batch", name=name, uid=f"uid-{name}", priority=priority, memory_bytes=memory)


def test_order_is_lowest_priority_then_largest_usage_then_unmeasured_by_name_descending() -> None:
    pods = [pod("a", 5000, 1 * GI), pod("b", 3000, 1 * GI), pod("c", 5000, 4 * GI), pod("d", 5000, 0),
            pod("e", 5000, 0), pod("f", 3000, 2 * GI)]
    assert [p.name for p in memory_eviction_order(pods)] == ["f", "b", "c", "a", "e", "d"]


def test_a_round_takes_pods_in_order_until_their_usage_covers_the_release() -> None:
    evictor = MemoryEvictor(lambda: 0.0)
    pods = [pod("free-small", 3000, 1 * GI), pod("batch-big", 5000, 6 * GI), pod("batch-mid", 5000, 3 * GI),
            pod("batch-small", 5000, 1 * GI)]
    # 10 GiB node at 85 %: release 17 % - down to 68 % - = 1.7 GiB: the free pod (1 GiB), then the largest batch one.
    decided = evictor.round(ON, 10 * GI, int(8.5 * GI), candidates=pods)
    assert decided is not None
    assert [p.name for p in decided.pods] == ["free-small", "batch-big"]
    assert (decided.reason, decided.details["usage_percent"], decided.details["release_bytes"],
            decided.details["pending_bytes"]) == ("MemoryPressure", 85, 10 * GI * 17 // 100, 0)
    assert "85%" in decided.message and "70%" in decided.message


def test_under_the_threshold_nothing_is_asked() -> None:
    evictor = MemoryEvictor(lambda: 0.0)
    assert evictor.round(ON, 10 * GI, int(6.99 * GI), candidates=[pod("a", 5000, GI)]) is None


def test_only_labelled_best_effort_pods_of_low_priority_are_candidates() -> None:
    def info(labels: dict[str, str], priority: int | None = None) -> bool:
        spec: dict[str, Any] = {"containers": [{"name": "c"}]}
        if priority is not None:
            spec["priority"] = priority
        return classify({"metadata": {"name": "p", "uid": "u", "labels": labels}, "spec": spec}).evictable

    assert info({"koordinator.sh/qosClass": "BE"})
    assert info({"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-free"})
    assert not info({})  # Kubernetes BestEffort without the label: koordlet does not take it either
    assert not info({"koordinator.sh/qosClass": "LS"})
    assert not info({"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-prod"})
    assert not info({"koordinator.sh/qosClass": "BE"}, priority=7500)  # mid band
    assert classify({"metadata": {"name": "p"}, "spec": {"priority": 5100}}).priority_value == 5100


# ---- rate limit and follow-up ------------------------------------------------------------------------

def no_jitter() -> Backoff:
    return Backoff(initial=5.0, maximum=60.0, factor=2.0, jitter=0.0)


def test_no_round_within_the_cool_down_after_one_that_asked() -> None:
    clock = FakeClock(100.0)
    evictor = MemoryEvictor(clock, cool_down=4.0, backoff=no_jitter)
    pods = [pod("a", 5000, 2 * GI), pod("b", 5000, GI), pod("c", 5000, GI // 2)]
    first = evictor.round(ON, 10 * GI, int(7.5 * GI), candidates=pods)  # release 0.7 GiB: "a"
    assert first is not None and [p.name for p in first.pods] == ["a"]
    clock.now += 3.9
    assert evictor.round(ON, 10 * GI, 9 * GI, candidates=pods) is None
    clock.now += 0.2
    decided = evictor.round(ON, 10 * GI, 9 * GI, candidates=pods)  # release 2.2 GiB, 2 of them already leaving with "a"
    assert decided is not None and [p.name for p in decided.pods] == ["b"]
    assert decided.details["pending_bytes"] == 2 * GI


def test_pods_asked_for_count_as_being_released_until_they_are_gone_or_the_wait_is_over() -> None:
    clock = FakeClock(100.0)
    evictor = MemoryEvictor(clock, cool_down=1.0, pending_seconds=30.0, backoff=no_jitter)
    pods = [pod("a", 5000, 2 * GI), pod("b", 5000, GI)]
    first = evictor.round(ON, 10 * GI, int(7.5 * GI), candidates=pods)  # release 7 % = 0.7 GiB: "a" covers it
    assert first is not None and [p.name for p in first.pods] == ["a"]
    evictor.follow_up.answered("uid-a", "evicted")
    clock.now += 2
    assert evictor.round(ON, 10 * GI, int(7.5 * GI), candidates=pods) is None  # "a" is still leaving: nothing more
    clock.now += 30
    again = evictor.round(ON, 10 * GI, int(7.5 * GI), candidates=pods)  # "a" never left: ask again
    assert again is not None and [p.name for p in again.pods] == ["a"]


def test_a_deferred_pod_is_held_back_with_backoff_and_the_next_one_is_taken() -> None:
    clock = FakeClock(100.0)
    evictor = MemoryEvictor(clock, cool_down=1.0, backoff=no_jitter)
    pods = [pod("guarded", 3000, 2 * GI), pod("other", 5000, GI)]
    first = evictor.round(ON, 10 * GI, int(7.5 * GI), candidates=pods)
    assert first is not None and [p.name for p in first.pods] == ["guarded"]
    assert evictor.follow_up.answered("uid-guarded", "deferred") == 5.0
    clock.now += 1.5
    second = evictor.round(ON, 10 * GI, int(7.5 * GI), candidates=pods)
    assert second is not None and [p.name for p in second.pods] == ["other"]
    assert evictor.follow_up.answered("uid-other", "deferred", retry_after=20.0) == 20.0  # the leader's hint is a floor
    clock.now += 4.0  # 5.5 s after the refusal of "guarded"
    third = evictor.round(ON, 10 * GI, int(7.5 * GI), candidates=pods)
    assert third is not None and [p.name for p in third.pods] == ["guarded"]
    assert evictor.follow_up.answered("uid-guarded", "deferred") == 10.0  # refused again: the hold doubles


def test_a_request_that_did_not_get_through_frees_its_pods_for_a_later_round() -> None:
    clock = FakeClock(100.0)
    evictor = MemoryEvictor(clock, cool_down=1.0, backoff=no_jitter)
    pods = [pod("a", 5000, 2 * GI)]
    assert evictor.round(ON, 10 * GI, 8 * GI, candidates=pods) is not None
    evictor.follow_up.unanswered(["uid-a"])
    clock.now += 1.0
    assert evictor.round(ON, 10 * GI, 8 * GI, candidates=pods) is not None


def test_without_capacity_or_fresh_usage_nothing_is_decided() -> None:
    evictor = MemoryEvictor(lambda: 0.0)
    assert evictor.round(ON, None, 9 * GI, candidates=[pod("a", 5000, GI)]) is None
    assert evictor.round(ON, 10 * GI, None, candidates=[pod("a", 5000, GI)]) is None
