"""Tentative placements: held until confirmed or for the hold, bounded, on the injected clock."""

from __future__ import annotations

import pytest

from colocation.loadaware.node_figures import AssignedPod
from colocation.loadaware.tentative_placements import TentativePlacements
from tests.clock import FakeClock


def placed(name: str) -> AssignedPod:
    return AssignedPod(namespace="default", name=name, estimate={"cpu": 850, "memory": 1024}, prod=True,
                       assigned_at=None)


def test_a_placement_counts_on_its_node_until_the_hold_passes() -> None:
    clock = FakeClock()
    placements = TentativePlacements(clock=clock, hold_seconds=30)
    placements.place("uid-1", node="a", pod=placed("p1"))
    assert placements.on_node("a") == (placed("p1"),)
    assert placements.on_node("b") == ()
    clock.advance(29.9)
    assert len(placements) == 1
    clock.advance(0.1)
    assert placements.on_node("a") == ()
    assert len(placements) == 0


def test_confirming_a_pod_drops_its_placement() -> None:
    placements = TentativePlacements(clock=FakeClock(), hold_seconds=30)
    placements.place("uid-1", node="a", pod=placed("p1"))
    placements.place("uid-2", node="a", pod=placed("p2"))
    placements.confirm("uid-1")
    placements.confirm("never-placed")
    assert placements.on_node("a") == (placed("p2"),)


def test_ranking_the_same_pod_again_moves_it_and_restarts_its_hold() -> None:
    clock = FakeClock()
    placements = TentativePlacements(clock=clock, hold_seconds=30)
    placements.place("uid-1", node="a", pod=placed("p1"))
    clock.advance(20)
    placements.place("uid-1", node="b", pod=placed("p1"))
    assert (placements.on_node("a"), placements.on_node("b")) == ((), (placed("p1"),))
    clock.advance(20)
    assert placements.on_node("b") == (placed("p1"),)


def test_the_oldest_placements_go_first_when_full() -> None:
    placements = TentativePlacements(clock=FakeClock(), hold_seconds=30, max_entries=2)
    for index in range(3):
        placements.place(f"uid-{index}", node="a", pod=placed(f"p{index}"))
    assert placements.on_node("a") == (placed("p1"), placed("p2"))
    assert placements.evicted == 1


def test_a_hold_of_zero_turns_placements_off() -> None:
    placements = TentativePlacements(clock=FakeClock(), hold_seconds=0)
    placements.place("uid-1", node="a", pod=placed("p1"))
    assert len(placements) == 0


def test_the_bound_must_hold_one_entry() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        TentativePlacements(clock=FakeClock(), hold_seconds=30, max_entries=0)
