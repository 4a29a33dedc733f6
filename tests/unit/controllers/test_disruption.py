"""The mass-failure guard per zone: each zone's state and eviction rate, and what the planner makes of them."""

from __future__ import annotations

import pytest

from colocation.controllers.disruption import (
    FULL_DISRUPTION,
    HELD_ALL_ZONES_DOWN,
    HELD_PARTIAL_DISRUPTION,
    HELD_STARTUP,
    NORMAL,
    PARTIAL_DISRUPTION,
    DisruptionGuard,
    GuardDecision,
    zone_of,
)
from colocation.controllers.eviction import EvictionPlanner
from colocation.controllers.health import NodeHealth, NodeHealthTracker
from tests.clock import FakeClock
from tests.unit.controllers.test_eviction import START, batch


def health(node: str, healthy: bool, judged: bool = True) -> NodeHealth:
    return NodeHealth(node=node, healthy=healthy, agent_ready=healthy, metrics_fresh=True, judged=judged,
                      unhealthy_since=None if healthy else START, evict=not healthy,
                      reason="AgentReady" if healthy else "AgentSilent", message="")


def zone(name: str, unhealthy: int, total: int) -> list[tuple[str, NodeHealth]]:
    return [(name, health(f"{name}-{i}", healthy=i >= unhealthy)) for i in range(total)]


def decide(*zones: list[tuple[str, NodeHealth]], guard: DisruptionGuard | None = None) -> GuardDecision:
    return (guard or DisruptionGuard()).decide([entry for z in zones for entry in z])


# --- Zone states -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("unhealthy", "total", "state"), [
    (0, 5, NORMAL),
    (1, 1, FULL_DISRUPTION),  # every node of the zone, however small
    (3, 3, FULL_DISRUPTION),
    (2, 3, NORMAL),  # 67 %, but not more than 2 nodes
    (3, 5, PARTIAL_DISRUPTION),  # 60 % and 3 nodes
    (3, 6, NORMAL),  # 3 nodes, but 50 %
    (11, 20, NORMAL),  # exactly 55 %: not *more* than 55 %
    (12, 20, PARTIAL_DISRUPTION),
    (56, 100, PARTIAL_DISRUPTION),
])
def test_a_zones_state_follows_the_share_and_count_of_its_unhealthy_nodes(unhealthy: int, total: int,
                                                                          state: str) -> None:
    decision = decide(zone("a", unhealthy, total), zone("b", 0, 3))
    assert decision.zones["a"].state == state
    assert (decision.zones["a"].unhealthy, decision.zones["a"].nodes) == (unhealthy, total)
    assert decision.zones["b"].state == NORMAL


def test_the_thresholds_are_configurable() -> None:
    assert DisruptionGuard(min_unhealthy=1).zone_state(3, 2) == PARTIAL_DISRUPTION
    assert DisruptionGuard(unhealthy_zone_threshold=0.7).zone_state(5, 3) == NORMAL
    with pytest.raises(ValueError):
        DisruptionGuard(unhealthy_zone_threshold=1.5)
    with pytest.raises(ValueError):
        DisruptionGuard(secondary_eviction_rate=-1)


# --- Rates -----------------------------------------------------------------------------------------

def test_a_healthy_zone_evicts_at_the_normal_rate() -> None:
    decision = decide(zone("a", 1, 5), zone("b", 0, 5))
    assert decision.rates == {"a": 0.1, "b": 0.1}
    assert decision.zones["a"].held is None


def test_a_large_partially_disrupted_zone_slows_to_the_secondary_rate() -> None:
    decision = decide(zone("big", 40, 60), zone("b", 0, 5))  # 60 nodes > 50
    big = decision.zones["big"]
    assert (big.state, big.rate, big.held) == (PARTIAL_DISRUPTION, 0.01, None)
    assert "--secondary-eviction-rate" in big.message
    assert decision.zones["b"].rate == 0.1


def test_a_small_partially_disrupted_zone_stops() -> None:
    decision = decide(zone("small", 4, 6), zone("big", 40, 50))  # 50 nodes is not *more* than 50: small too
    assert decision.zones["small"].rate == 0 and decision.zones["big"].rate == 0
    assert decision.zones["small"].held == HELD_PARTIAL_DISRUPTION
    assert DisruptionGuard(large_cluster_size_threshold=5).decide(zone("small", 4, 6)).rates == {"small": 0.01}
    # a large zone stops too when there is no secondary rate
    assert DisruptionGuard(secondary_eviction_rate=0).decide(zone("big", 40, 60)).zones["big"].held == \
        HELD_PARTIAL_DISRUPTION


def test_a_fully_down_zone_is_evicted_at_the_normal_rate_while_another_zone_is_healthy() -> None:
    decision = decide(zone("down", 3, 3), zone("up", 0, 3))
    down = decision.zones["down"]
    assert (down.state, down.rate, down.held) == (FULL_DISRUPTION, 0.1, None)
    assert not decision.all_down


def test_a_fully_down_zone_is_evicted_while_another_is_only_partially_disrupted() -> None:
    decision = decide(zone("down", 3, 3), zone("partial", 3, 5))
    assert decision.rates == {"down": 0.1, "partial": 0.0}


@pytest.mark.parametrize("zones", [
    [zone("", 1, 1)],  # a single node, no zone labels
    [zone("", 4, 4)],
    [zone("a", 3, 3), zone("b", 2, 2)],
])
def test_nothing_is_evicted_when_every_zone_is_down(zones: list[list[tuple[str, NodeHealth]]]) -> None:
    decision = decide(*zones)
    assert decision.all_down and not decision.allowed
    assert all(z.rate == 0 and z.held == HELD_ALL_ZONES_DOWN for z in decision.zones.values())


def test_nothing_is_evicted_during_the_startup_grace() -> None:
    decision = DisruptionGuard().decide([*zone("a", 1, 10), ("b", health("node-new", True, judged=False))])
    assert not decision.allowed and decision.startup and not decision.all_down
    assert {z.held for z in decision.zones.values()} == {HELD_STARTUP}


# --- Zone keys -------------------------------------------------------------------------------------

def test_a_nodes_zone_comes_from_its_topology_labels() -> None:
    def node(**labels: str) -> dict[str, object]:
        return {"metadata": {"name": "n", "labels": labels}}

    assert zone_of(node(**{"topology.kubernetes.io/zone": "eu-1a"})) == "eu-1a"
    assert zone_of(node(**{"topology.kubernetes.io/zone": "1a", "topology.kubernetes.io/region": "eu"})) == "eu/1a"
    assert zone_of(node(**{"failure-domain.beta.kubernetes.io/zone": "old"})) == "old"
    assert zone_of(node()) == zone_of({"metadata": {"name": "n"}}) == ""


# --- With the planner ------------------------------------------------------------------------------

def test_each_zone_has_its_own_token_bucket() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock)
    due = {node: [batch(f"{node}-job", node)] for node in ("a-1", "a-2", "b-1")}
    zones = {"a-1": "a", "a-2": "a", "b-1": "b"}

    plan = planner.plan(due, zones=zones, rates={"a": 0.1, "b": 0.1})
    assert plan.draining == ("a-1", "b-1") and plan.waiting == ("a-2",)  # one token in each zone

    clock.now = START + 10
    assert planner.plan(due, zones=zones, rates={"a": 0.1, "b": 0.1}).draining == ("a-1", "a-2", "b-1")


def test_a_slowed_zone_admits_a_node_every_hundred_seconds() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock)
    due = {f"n-{i}": [batch(f"job-{i}", f"n-{i}")] for i in range(3)}
    zones = dict.fromkeys(due, "big")

    plan = planner.plan(due, zones=zones, rates={"big": 0.01})
    assert plan.draining == ("n-0",) and plan.waiting == ("n-1", "n-2")
    clock.now = START + 99
    assert planner.plan(due, zones=zones, rates={"big": 0.01}).draining == ("n-0",)
    clock.now = START + 100
    assert planner.plan(due, zones=zones, rates={"big": 0.01}).draining == ("n-0", "n-1")


def test_a_stopped_zone_releases_its_nodes_and_resumes_with_an_empty_bucket() -> None:
    clock = FakeClock(START)
    planner = EvictionPlanner(clock)
    due = {"a-1": [batch("job", "a-1")]}
    zones = {"a-1": "a"}
    assert planner.plan(due, zones=zones, rates={"a": 0.1}).draining == ("a-1",)

    clock.now = START + 30
    stopped = planner.plan(due, zones=zones, rates={"a": 0.0})
    assert (stopped.evictions, stopped.draining, stopped.waiting, stopped.next_plan_at) == ((), (), (), None)

    clock.now = START + 60
    resumed = planner.plan(due, zones=zones, rates={"a": 0.1})
    assert resumed.waiting == ("a-1",) and resumed.next_plan_at == START + 70
    clock.now = START + 70
    assert [e.name for e in planner.plan(due, zones=zones, rates={"a": 0.1}).evictions] == ["job"]


def test_every_agent_going_silent_together_evicts_nothing() -> None:
    clock = FakeClock(START)
    tracker = NodeHealthTracker(clock)
    zones = {f"node-{i}": "a" if i < 2 else "b" for i in range(4)}
    for second in range(0, 101, 10):
        clock.now = START + second
        for node in zones:
            tracker.observe_lease(node, f"2026-11-22T10:00:{second:02d}.000000Z")
            tracker.observe_metric(node, update_time=f"2026-11-22T10:00:{second:02d}Z")
    clock.now = START + 1000  # every node silent for 900 s: long past the eviction timeout

    healths = tracker.evaluate_all()
    assert all(h.evict for h in healths)
    decision = DisruptionGuard().decide((zones[h.node], h) for h in healths)
    assert decision.all_down

    due = {h.node: [batch("job", node=h.node)] for h in healths}
    assert EvictionPlanner(clock).plan(due, zones=zones, rates=decision.rates).evictions == ()
