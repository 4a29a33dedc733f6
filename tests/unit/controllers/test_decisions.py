"""The controllers' pure decisions: Node writes, conditions, status writes, Events, merge patches."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from colocation.controllers.conditions import Condition, merge_conditions, status_needs_write, transitions
from colocation.controllers.disruption import DisruptionGuard
from colocation.controllers.events import Create, EventRecorder, ObjectRef, Patch
from colocation.controllers.health import NodeHealth
from colocation.controllers.nodestatus import Evaluation, evicting_condition, render_status, status_inputs
from colocation.controllers.nodewrite import batch_on_node, decide_node_write, node_status_patch, shown_batch
from colocation.controllers.writers import merge_patch
from tests.clock import FakeClock

CPU, MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
MID_CPU, MID_MEMORY = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"
NO_MID = {MID_CPU: 0, MID_MEMORY: 0}


def node(capacity: dict[str, str] | None = None, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    base = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": "n1"}, "status": {"capacity": {**base, **(capacity or {})},
                                                  "allocatable": {**base, **(allocatable or {})}}}


def offering(cpu: int, memory: int, mid: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    four = {CPU: str(cpu), MEMORY: str(memory), MID_CPU: str(mid[0]), MID_MEMORY: str(mid[1])}
    return node(four, four)


def decide(current: dict[str, Any], desired: dict[str, int] | None, last_write: float | None = 1000.0,
           now: float = 1100.0) -> tuple[bool, str]:
    """The decision for `desired` batch values (mid ones 0 unless given)."""
    if desired is not None:
        desired = {**NO_MID, **desired}
    decision = decide_node_write(batch_on_node(current), desired, last_write=last_write, now=now,
                                 diff_threshold=0.1, update_after=300.0)
    return decision.write, decision.reason


# ---- Node writes -----------------------------------------------------------------------------------

def test_batch_resources_are_read_from_the_node_as_integers() -> None:
    on_node = batch_on_node(offering(3500, 8 * 2**30))
    assert on_node.values == {CPU: 3500, MEMORY: 8589934592, **NO_MID}
    assert on_node.present and on_node.consistent
    assert batch_on_node(node()).values is None and not batch_on_node(node()).present


def test_appearing_and_disappearing_resources_are_always_written() -> None:
    assert decide(node(), {CPU: 1, MEMORY: 1}) == (True, "add")
    assert decide(offering(3500, 2**30), None) == (True, "remove")
    assert decide(node(), None) == (False, "absent")
    # Only one of the two on the Node: the other appears.
    assert decide(node({CPU: "3500"}, {CPU: "3500"}), {CPU: 3500, MEMORY: 2**30}) == (True, "add")


def test_changes_are_written_only_beyond_the_relative_threshold() -> None:
    current = offering(4000, 10_000)
    assert decide(current, {CPU: 4400, MEMORY: 10_000}) == (False, "withinThreshold")  # exactly 10 %: not more
    assert decide(current, {CPU: 4401, MEMORY: 10_000}) == (True, "change")
    assert decide(current, {CPU: 3599, MEMORY: 10_000}) == (True, "change")  # down counts as well
    assert decide(current, {CPU: 4000, MEMORY: 11_001}) == (True, "change")  # either resource
    assert decide(current, {CPU: 4000, MEMORY: 10_000}) == (False, "unchanged")


def test_from_zero_any_increase_is_a_change() -> None:
    assert decide(offering(0, 0), {CPU: 1, MEMORY: 0}) == (True, "change")


def test_a_small_difference_is_written_once_the_last_write_is_old() -> None:
    current = offering(4000, 10_000)
    small = {CPU: 4100, MEMORY: 10_000}
    assert decide(current, small, last_write=1000.0, now=1300.0) == (False, "withinThreshold")  # 300 s: not older
    assert decide(current, small, last_write=1000.0, now=1300.5) == (True, "refresh")
    assert decide(current, small, last_write=None) == (True, "refresh")  # never written by us (a new leader)
    # An equal value is never rewritten, however old.
    assert decide(current, {CPU: 4000, MEMORY: 10_000}, last_write=0.0, now=10**6) == (False, "unchanged")


def test_an_inconsistent_node_is_repaired() -> None:
    mid = {MID_CPU: "0", MID_MEMORY: "0"}
    skewed = node({CPU: "4000", MEMORY: "10000", **mid}, {CPU: "3000", MEMORY: "10000", **mid})
    assert decide(skewed, {CPU: 3000, MEMORY: 10_000}) == (True, "repair")
    half = node({CPU: "4000", MEMORY: "10000", **mid}, {CPU: "4000", MEMORY: "10000", **mid})
    half["status"]["capacity"][CPU] = "not-a-quantity"
    assert decide(half, {CPU: 4000, MEMORY: 10_000}) == (True, "repair")


def test_the_patch_names_only_the_batch_and_mid_keys_in_capacity_and_allocatable() -> None:
    four = {CPU: "3500", MEMORY: "8589934592", MID_CPU: "1200", MID_MEMORY: "1073741824"}
    assert node_status_patch({CPU: 3500, MEMORY: 8589934592, MID_CPU: 1200, MID_MEMORY: 2**30}) == {
        "status": {"capacity": four, "allocatable": four}}
    # Removal: merge-patch nulls delete the four keys from both lists, nothing else.
    gone = {CPU: None, MEMORY: None, MID_CPU: None, MID_MEMORY: None}
    assert node_status_patch(None) == {"status": {"capacity": gone, "allocatable": gone}}


def test_mid_resources_are_judged_like_batch_ones() -> None:
    current = offering(4000, 10_000, mid=(2000, 5_000))
    assert decide(current, {CPU: 4000, MEMORY: 10_000, MID_CPU: 2200, MID_MEMORY: 5_000}) == \
        (False, "withinThreshold")  # 10 %: not more
    assert decide(current, {CPU: 4000, MEMORY: 10_000, MID_CPU: 2201, MID_MEMORY: 5_000}) == (True, "change")
    assert decide(current, {CPU: 4000, MEMORY: 10_000, MID_CPU: 2000, MID_MEMORY: 4_499}) == (True, "change")
    # A Node written before mid resources existed (batch only) gets them added at once.
    batch_only = node({CPU: "4000", MEMORY: "10000"}, {CPU: "4000", MEMORY: "10000"})
    assert batch_on_node(batch_only).values is None and batch_on_node(batch_only).present
    assert decide(batch_only, {CPU: 4000, MEMORY: 10_000}) == (True, "add")
    # Removal takes mid resources away even when they are all that is left.
    mid_only = node({MID_CPU: "1"}, {MID_CPU: "1"})
    assert decide(mid_only, None) == (True, "remove")


# ---- conditions --------------------------------------------------------------------------------------

def test_transition_time_changes_only_when_the_status_flips() -> None:
    first = merge_conditions(None, [Condition(type="AgentReady", status=True, reason="AgentHeard", message="ok")], "T1")
    assert first == [{"type": "AgentReady", "status": "True", "reason": "AgentHeard", "message": "ok",
                      "lastTransitionTime": "T1"}]
    reworded = merge_conditions(first, [Condition(type="AgentReady", status=True, reason="AgentHeard",
                                                  message="still ok")], "T2")
    assert reworded[0]["lastTransitionTime"] == "T1" and reworded[0]["message"] == "still ok"
    flipped = merge_conditions(reworded, [Condition(type="AgentReady", status=False, reason="AgentSilent",
                                                    message="silent")], "T3")
    assert flipped[0]["lastTransitionTime"] == "T3" and flipped[0]["status"] == "False"
    assert transitions(reworded, flipped) == [("AgentReady", "False")]
    assert transitions(first, reworded) == []
    unknown = merge_conditions(flipped, [Condition(type="AgentReady", status=None, reason="StartupGrace", message="")],
                               "T4")
    assert unknown[0]["status"] == "Unknown" and unknown[0]["lastTransitionTime"] == "T4"


def test_timestamps_alone_never_cost_a_status_write() -> None:
    stored = {"healthy": True, "batchCPU": 10, "leaseRenewTime": "2026-01-01T00:00:00Z",
              "lastNodeUpdateTime": "2026-01-01T00:00:00Z"}
    renewed = {**stored, "leaseRenewTime": "2026-01-01T00:00:10Z", "metricUpdateTime": "2026-01-01T00:00:10Z",
               "lastNodeUpdateTime": "2026-01-01T00:05:00Z"}
    assert not status_needs_write(stored, renewed)
    assert status_needs_write(stored, {**renewed, "batchCPU": 11})
    assert status_needs_write(None, stored)


def test_the_status_shows_the_nodes_batch_values_by_the_nodes_own_threshold() -> None:
    stored = {"batchCPU": 5000, "batchMemory": 1000, "midCPU": 2000, "midMemory": 500}
    mid = {MID_CPU: 2000, MID_MEMORY: 500}
    assert shown_batch(stored, {CPU: 5400, MEMORY: 1090, MID_CPU: 2100, MID_MEMORY: 540}, 0.1) == {
        CPU: 5000, MEMORY: 1000, **mid}  # within 10 %
    assert shown_batch(stored, {CPU: 5600, MEMORY: 1000, **mid}, 0.1) == {CPU: 5600, MEMORY: 1000, **mid}  # beyond
    assert shown_batch(stored, {CPU: 5000, MEMORY: 1000, MID_CPU: 2300, MID_MEMORY: 500}, 0.1) == {
        CPU: 5000, MEMORY: 1000, MID_CPU: 2300, MID_MEMORY: 500}  # a mid move beyond counts too
    assert shown_batch(stored, None, 0.1) is None  # removed from the Node
    assert shown_batch({}, {CPU: 1, MEMORY: 2, **NO_MID}, 0.1) == {CPU: 1, MEMORY: 2, **NO_MID}  # appears
    # A status written before mid resources existed shows the Node's figures at once.
    assert shown_batch({"batchCPU": 1, "batchMemory": 2}, {CPU: 1, MEMORY: 2, **mid}, 0.1) == {
        CPU: 1, MEMORY: 2, **mid}
    zero = {"batchCPU": 0, "batchMemory": 0, "midCPU": 0, "midMemory": 0}
    assert shown_batch(zero, {CPU: 1, MEMORY: 0, **NO_MID}, 0.1) == {CPU: 1, MEMORY: 0, **NO_MID}


# ---- the NodeResource status ---------------------------------------------------------------------------

def health(healthy: bool = True, *, agent: bool = True, metrics: bool = True, judged: bool = True,
           reason: str = "AgentReady") -> NodeHealth:
    return NodeHealth(node="n1", healthy=healthy, agent_ready=agent, metrics_fresh=metrics, judged=judged,
                      unhealthy_since=None if healthy else 1.0, evict=False, reason=reason, message="details 12s ago")


def evaluation(h: NodeHealth, computed: dict[str, int] | None = None, reason: str = "",
               evicting: Condition | None = None, on_node: dict[str, int] | None = None) -> Evaluation:
    return Evaluation(health=h, computed=computed, no_computation_reason=reason,
                      evicting=evicting or Condition(type="Evicting", status=False, reason="NotDue",
                                                     message="no eviction"), grace_period=40.0, degrade_after=900.0,
                      metric_update_time="2026-01-01T00:00:00Z", lease_renew_time="2026-01-01T00:00:05Z",
                      last_node_update=None, generation=3, on_node=on_node)


def test_a_healthy_node_shows_what_the_node_offers_not_the_latest_figure() -> None:
    # The formula says 3600m now; the Node offers 3500m (the move is within the threshold).
    mid = {MID_CPU: 1250, MID_MEMORY: 512 * 2**20}
    status = render_status(evaluation(health(), {CPU: 3600, MEMORY: 2**30, **mid},
                                      on_node={CPU: 3500, MEMORY: 2**30, **mid}), None, "T1")
    assert status["batchCPU"] == 3500 and status["batchMemory"] == 2**30 and status["healthy"] is True
    assert status["midCPU"] == 1250 and status["midMemory"] == 512 * 2**20
    # The same figures for `kubectl get noderesources`, whose columns show fields as stored.
    assert status["display"] == {"batchCPU": "3.50", "batchMemory": "1.00Gi", "midCPU": "1.25", "midMemory": "512Mi"}
    assert status["message"] == "offering batch cpu 3500m and memory 1Gi, mid cpu 1250m and memory 512Mi"
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("AgentReady", "True", "AgentHeard"), ("MetricsFresh", "True", "MetricsReported"),
        ("ColocationReady", "True", "BatchResourcesOffered"), ("Evicting", "False", "NotDue")]
    assert status["observedGeneration"] == 3 and status["leaseRenewTime"] == "2026-01-01T00:00:05Z"


def test_an_unhealthy_node_says_why_with_no_age_in_the_status() -> None:
    silent = health(False, agent=False, reason="AgentSilent")
    status = render_status(evaluation(silent, {CPU: 3500, MEMORY: 2**30}), None, "T1")
    assert status["healthy"] is False
    assert "display" not in status and "batchCPU" not in status
    assert status["message"] == ("no report and no Lease renewal from the agent within the grace period 40s: "
                                 "batch resources removed")
    reasons = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert reasons["AgentReady"] == ("False", "AgentSilent")
    assert reasons["ColocationReady"] == ("False", "NodeUnhealthy")
    assert "batchCPU" not in status and "batchMemory" not in status  # removed from the Node
    # Rendered again a minute later, the formula's figure moved: the same status, so no write.
    assert render_status(evaluation(silent, {CPU: 3700, MEMORY: 2**30}), status, "T2") == status


def test_an_unhealthy_node_whose_removal_failed_shows_what_its_node_still_offers() -> None:
    silent = health(False, agent=False, reason="AgentSilent")
    status = render_status(evaluation(silent, None, on_node={CPU: 3500, MEMORY: 2**30, **NO_MID}), None, "T1")
    assert (status["batchCPU"], status["batchMemory"], status["healthy"]) == (3500, 2**30, False)
    assert status["message"].endswith("batch resources not yet removed from the Node: the write failed and is retried")
    colocation = next(c for c in status["conditions"] if c["type"] == "ColocationReady")
    assert (colocation["status"], colocation["reason"]) == ("False", "NodeUnhealthy")


def test_a_disabled_node_whose_removal_failed_says_they_are_still_on_the_node() -> None:
    status = render_status(evaluation(health(), None, "ColocationDisabled",
                                      on_node={CPU: 3500, MEMORY: 2**30, **NO_MID}), None, "T1")
    assert (status["batchCPU"], status["batchMemory"]) == (3500, 2**30)
    assert status["message"] == ("colocation is disabled for this node: no batch resources "
                                 "(not yet removed from the Node: the write failed and is retried)")


def test_batch_resources_not_yet_on_the_node_are_pending() -> None:
    status = render_status(evaluation(health(), {CPU: 3500, MEMORY: 2**30}), None, "T1")
    assert "batchCPU" not in status
    colocation = next(c for c in status["conditions"] if c["type"] == "ColocationReady")
    assert (colocation["status"], colocation["reason"]) == ("False", "BatchResourcesPending")
    assert status["message"] == "batch resources computed, not yet written to the Node"


def test_during_the_startup_grace_stored_health_conditions_stand() -> None:
    stored = render_status(evaluation(health(False, agent=False, reason="AgentSilent")), None, "T1")
    status = render_status(evaluation(health(judged=False, reason="StartupGrace"), None, "NoMetrics"), stored, "T2")
    agent = next(c for c in status["conditions"] if c["type"] == "AgentReady")
    assert (agent["status"], agent["reason"], agent["lastTransitionTime"]) == ("False", "AgentSilent", "T1")
    fresh = render_status(evaluation(health(judged=False, reason="StartupGrace")), None, "T3")
    assert next(c for c in fresh["conditions"] if c["type"] == "AgentReady")["status"] == "Unknown"


def test_the_evicting_condition_names_what_holds_evictions_back() -> None:
    common: dict[str, Any] = {"rate": 0.1, "timeout": 300.0}
    normal = DisruptionGuard().decide([("a", health())]).zones["a"]
    draining = evicting_condition(due=True, draining=True, waiting=False, zone=normal, **common)
    assert (draining.status, draining.reason) == (True, "EvictingPods")
    assert evicting_condition(due=False, draining=False, waiting=False, zone=normal, **common).reason == "NotDue"
    assert evicting_condition(due=True, draining=False, waiting=True, zone=normal, **common).reason == "RateLimited"
    assert evicting_condition(due=True, draining=False, waiting=False, zone=normal,
                              **{**common, "rate": 0.0}).reason == "EvictionsDisabled"


@pytest.mark.parametrize(("zones", "reason"), [
    ({"a": (3, 3)}, "FullDisruption"),  # every zone down
    ({"a": (4, 6), "b": (0, 3)}, "PartialDisruption"),  # a small zone partially disrupted
    ({"a": (40, 60), "b": (0, 3)}, "SecondaryRateLimited"),  # a large one: slowed
    ({"a": (3, 3), "b": (0, 3)}, "RateLimited"),  # one zone down, another healthy: the normal rate
])
def test_the_evicting_condition_of_a_waiting_node_names_its_zones_state(zones: dict[str, tuple[int, int]],
                                                                        reason: str) -> None:
    decision = DisruptionGuard().decide(
        (name, health(healthy=i >= unhealthy)) for name, (unhealthy, total) in zones.items() for i in range(total))
    condition = evicting_condition(due=True, draining=False, waiting=True, zone=decision.zones["a"], rate=0.1,
                                   timeout=300.0)
    assert (condition.status, condition.reason) == (False, reason)
    assert "zone 'a'" in condition.message


# ---- Events ----------------------------------------------------------------------------------------------

NODE_REF = ObjectRef(api_version="v1", kind="Node", name="n1", namespace="", uid="uid-1")


def test_a_repeated_event_counts_up_instead_of_piling_up() -> None:
    clock = FakeClock(1_700_000_000.0)
    recorder = EventRecorder(clock.wall, "operator-0", window=600.0)
    first = recorder.record(NODE_REF, "Warning", "ColocationAgentNotReady", message="silent")
    assert isinstance(first, Create)
    assert first.namespace == "default"  # cluster-scoped objects' events live in default
    body = first.body
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}
    assert (body["count"], body["type"], body["reportingComponent"], body["reportingInstance"]) == (
        1, "Warning", "colocation-operator", "operator-0")
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2023-11-14T22:13:20Z"

    clock.advance(30)
    again = recorder.record(NODE_REF, "Warning", "ColocationAgentNotReady", message="silent")
    assert isinstance(again, Patch)
    assert (again.name, again.body) == (body["metadata"]["name"], {"count": 2, "lastTimestamp": "2023-11-14T22:13:50Z"})

    other = recorder.record(NODE_REF, "Warning", "ColocationAgentNotReady", message="silent for longer")
    assert isinstance(other, Create) and other.body["metadata"]["name"] != body["metadata"]["name"]

    clock.advance(601)  # outside the window: a new Event
    assert isinstance(recorder.record(NODE_REF, "Warning", "ColocationAgentNotReady", message="silent"), Create)


def test_a_forgotten_series_starts_a_new_event() -> None:
    recorder = EventRecorder(lambda: 1.0, "op")
    recorder.record(NODE_REF, "Normal", "ColocationRecovered", message="back")
    repeat = recorder.record(NODE_REF, "Normal", "ColocationRecovered", message="back")
    assert isinstance(repeat, Patch)
    recorder.forget(repeat.key)
    assert isinstance(recorder.record(NODE_REF, "Normal", "ColocationRecovered", message="back"), Create)


def test_events_about_namespaced_objects_stay_in_their_namespace() -> None:
    recorder = EventRecorder(lambda: 1.0, "op")
    action = recorder.record(ObjectRef(api_version="v1", kind="ConfigMap", name="colocation-config",
                                       namespace="colocation-system"), "Warning", "InvalidConfiguration",
                             message="x" * 2000)
    assert isinstance(action, Create) and action.namespace == "colocation-system"
    assert len(action.body["message"]) == 1024


# ---- merge patches -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "patch"), [
    ({"a": 1, "b": 2}, {"a": 1, "b": 3}, {"b": 3}),
    ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
    ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}, {"a": {"y": None}}),
    ({"a": [1, 2]}, {"a": [1]}, {"a": [1]}),
    ({}, {"a": 1}, {"a": 1}),
])
def test_merge_patch_turns_the_old_document_into_the_new(old: Any, new: Any, patch: Any) -> None:
    assert merge_patch(old, new) == patch


def _status_variants() -> list[Evaluation]:
    """Evaluations that differ from one another in one field each, the health's message included."""
    base = evaluation(health(), {CPU: 3500, MEMORY: 2**30, **NO_MID}, on_node={CPU: 3500, MEMORY: 2**30, **NO_MID})
    healths = [health(False, agent=False, reason="AgentSilent"), health(False, agent=False, reason="AgentUnstable"),
               health(False, metrics=False, reason="MetricsStale"), health(judged=False, reason="StartupGrace"),
               dataclasses.replace(health(), message="details 14s ago", changed=True)]
    fields: dict[str, list[Any]] = {
        "health": healths, "computed": [None, {CPU: 3700, MEMORY: 2**30, **NO_MID}],
        "no_computation_reason": ["ColocationDisabled", "MetricsOutdated"],
        "evicting": [Condition(type="Evicting", status=True, reason="EvictingPods", message="evicting")],
        "grace_period": [60.0],
        "degrade_after": [600.0], "metric_update_time": [None, "2026-01-01T00:00:10Z"],
        "lease_renew_time": ["2026-01-01T00:00:15Z"], "last_node_update": ["2026-01-01T00:00:20Z"],
        "generation": [None, 4], "on_node": [None, {CPU: 3000, MEMORY: 2**30, **NO_MID}]}
    variants = [base]
    for name, values in fields.items():
        variants += [dataclasses.replace(base, **{name: value}) for value in values]
    return variants + [dataclasses.replace(variant, computed=None, no_computation_reason="NoMetrics")
                       for variant in variants]


def test_equal_status_inputs_render_equal_statuses_and_a_status_needing_no_write_needs_none_later() -> None:
    """What lets the controller skip rendering a node's status: `status_inputs` shows every
    difference that changes the rendering, and `now` never turns no write into one."""
    variants = _status_variants()
    stored_options = [None, *(render_status(variant, None, "T0") for variant in variants[:8])]
    for stored in stored_options:
        rendered = [render_status(variant, stored, "T1") for variant in variants]
        for first, first_rendered in zip(variants, rendered, strict=True):
            for second, second_rendered in zip(variants, rendered, strict=True):
                if status_inputs(first) == status_inputs(second):
                    assert first_rendered == second_rendered
            if not status_needs_write(stored, first_rendered):
                assert not status_needs_write(stored, render_status(first, stored, "T2"))
