"""Which keys `colocation cleanup` removes, and when a leader's Lease makes it refuse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from colocation.apimachinery.clock import format_micro_time
from colocation.manager.cleanup_rules import CLOCK_SKEW_ALLOWANCE, is_done, leader_hold, node_cleanup_patch, retriable

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)
KEYS = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory", "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory")


def node(capacity: dict[str, str], allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1"},
            "status": {"capacity": capacity, "allocatable": capacity if allocatable is None else allocatable}}


def lease(holder: str, renewed_ago: float | None, duration: int = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": duration}
    if renewed_ago is not None:
        spec["renewTime"] = format_micro_time(NOW - timedelta(seconds=renewed_ago))
    return {"metadata": {"name": "colocation-operator"}, "spec": spec}


def test_a_node_with_any_of_the_four_keys_loses_all_four_in_both_lists_and_nothing_else() -> None:
    patch = node_cleanup_patch(node({"cpu": "8", "kubernetes.io/batch-cpu": "3500"}))
    assert patch == {"status": {"capacity": dict.fromkeys(KEYS), "allocatable": dict.fromkeys(KEYS)}}
    # Only in allocatable (a half-written or hand-edited Node), or only a mid key: the same patch.
    assert node_cleanup_patch(node({"cpu": "8"}, {"cpu": "8", "kubernetes.io/mid-memory": "1Gi"})) == patch


def test_a_node_without_them_is_left_alone() -> None:
    assert node_cleanup_patch(node({"cpu": "8", "memory": "32Gi", "example.com/gpu": "1"})) is None
    assert node_cleanup_patch({"metadata": {"name": "new"}}) is None  # no status yet


@pytest.mark.parametrize(("renewed_ago", "held"), [
    (0.0, True),
    (14.0, True),
    (15.0 + CLOCK_SKEW_ALLOWANCE - 0.5, True),  # within the skew allowance: maybe still alive
    (15.0 + CLOCK_SKEW_ALLOWANCE + 0.5, False),  # a lease duration and the allowance without renewal
    (-30.0, True),  # the leader's clock runs ahead of ours: alive
])
def test_a_holder_leads_until_its_lease_has_not_been_renewed_for_a_lease_duration(renewed_ago: float,
                                                                                   held: bool) -> None:
    hold = leader_hold(lease("op-1_abc", renewed_ago), NOW)
    assert (hold is not None) == held
    if hold is not None:
        assert hold.holder == "op-1_abc"
        assert str(hold).startswith("operator op-1_abc leads (Lease renewed")
        assert "stop the operator first" in str(hold)


def test_a_released_or_missing_lease_lets_cleanup_run() -> None:
    assert leader_hold(None, NOW) is None
    assert leader_hold(lease("", 0.0, duration=1), NOW) is None  # what a stopping leader writes


def test_a_holder_without_a_renew_time_is_taken_as_alive() -> None:
    hold = leader_hold(lease("op-1_abc", None), NOW)
    assert hold is not None and "no renewTime" in str(hold)


def test_what_is_retried_and_what_is_done() -> None:
    assert [s for s in (0, 200, 404, 409, 403, 429, 500, 503) if retriable(s)] == [0, 429, 500, 503]
    assert [s for s in (200, 201, 404, 403, 409, 500) if is_done(s)] == [200, 201, 404]
