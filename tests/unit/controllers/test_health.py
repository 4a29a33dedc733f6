"""The node health state machine, on a fake monotonic clock.

Expectations are those of the node lifecycle controller with Leases: a node is judged by when
the leader *observed* its renewTime change (default grace 40 s, eviction after 5 min), and
never before one grace period has passed since the leader took over.
"""

from __future__ import annotations

import pytest

from colocation.controllers.health import (
    REASON_AGENT_SILENT,
    REASON_AGENT_UNSTABLE,
    REASON_METRICS_STALE,
    REASON_READY,
    REASON_STARTUP,
    NodeHealthTracker,
)
from tests.clock import FakeClock

START = 1000.0  # monotonic clocks start anywhere; nothing may assume 0


class Agent:
    """Renews its Lease and reports metrics with its own (deliberately wrong) wall clock."""

    def __init__(self, tracker: NodeHealthTracker, node: str, skew: float = -3600.0) -> None:
        self.tracker = tracker
        self.node = node
        self.count = 0
        self.skew = skew

    def _stamp(self) -> str:
        # Far in the past on purpose: the value must never matter, only its change.
        self.count += 1
        return f"2020-01-01T00:{self.count // 60 % 60:02d}:{self.count % 60:02d}.000000Z"

    def renew(self) -> bool:
        return self.tracker.observe_lease(self.node, self._stamp(), holder=f"{self.node}-agent")

    def report(self) -> bool:
        return self.tracker.observe_metric(self.node, update_time=self._stamp())

    def heartbeat(self) -> None:
        self.renew()
        self.report()


def steady(clock: FakeClock, agents: list[Agent], until: float, every: float = 10.0) -> None:
    """Agents renewing and reporting every `every` seconds from now until `until` (inclusive)."""
    moment = clock.now
    while moment <= until:
        clock.to(moment)
        for agent in agents:
            agent.heartbeat()
        moment += every


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def tracker(clock: FakeClock) -> NodeHealthTracker:
    return NodeHealthTracker(clock)


def test_a_silent_node_is_unhealthy_exactly_after_the_grace_period_and_due_for_eviction_after_the_timeout(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)  # last heartbeat observed at START + 100

    clock.to(START + 140)
    health = tracker.evaluate("node-a")
    assert (health.healthy, health.agent_ready, health.reason, health.changed) == (True, True, REASON_READY, False)

    clock.to(START + 140.001)
    health = tracker.evaluate("node-a")
    assert (health.healthy, health.agent_ready, health.metrics_fresh) == (False, False, True)
    assert health.reason == REASON_AGENT_SILENT
    assert health.unhealthy_since == START + 140
    assert health.changed and not health.evict
    assert "40s" in health.message

    clock.to(START + 440)  # 300 s after becoming unhealthy: not *longer* than the timeout yet
    health = tracker.evaluate("node-a")
    assert not health.evict and not health.changed

    clock.to(START + 440.001)
    health = tracker.evaluate("node-a")
    assert health.evict and health.changed
    assert health.unhealthy_since == START + 140

    clock.to(START + 450)
    assert not tracker.evaluate("node-a").changed


def test_timing_does_not_depend_on_how_often_the_node_is_evaluated(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    clock.to(START + 1000)  # first look long after the node went silent

    health = tracker.evaluate("node-a")

    assert health.unhealthy_since == START + 140
    assert health.evict and health.changed


def test_a_returning_agent_is_trusted_again_on_its_second_renewal_in_a_row(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    clock.to(START + 200)
    assert not tracker.evaluate("node-a").healthy

    agent.heartbeat()  # back: one renewal after a 100 s silence
    health = tracker.evaluate("node-a")
    assert (health.healthy, health.agent_ready, health.reason) == (False, False, REASON_AGENT_UNSTABLE)
    assert health.unhealthy_since == START + 140 and not health.changed

    clock.to(START + 210)
    agent.heartbeat()
    health = tracker.evaluate("node-a")
    assert (health.healthy, health.agent_ready, health.reason) == (True, True, REASON_READY)
    assert health.unhealthy_since is None and health.changed and not health.evict


def test_without_hysteresis_one_fresh_renewal_restores_the_node(clock: FakeClock) -> None:
    tracker = NodeHealthTracker(clock, recovery_renewals=1)
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    clock.to(START + 500)
    assert tracker.evaluate("node-a").evict

    assert agent.renew()
    health = tracker.evaluate("node-a")
    assert health.healthy and health.changed and not health.evict


def test_a_flapping_lease_keeps_the_node_unhealthy_instead_of_flipping_it(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    # From now on every renewal is 5 s late: 45 s apart with a 40 s grace period.
    renewals = [START + 100 + 45 * k for k in range(1, 12)]
    transitions = []
    moment = START + 101.0
    while moment <= START + 600:
        clock.to(moment)
        if renewals and moment >= renewals[0]:
            renewals.pop(0)
            agent.heartbeat()
        health = tracker.evaluate("node-a")
        if health.changed:
            transitions.append((moment - START, health.healthy, health.evict))
        moment += 1.0

    # One transition to unhealthy at the first miss, one to eviction 300 s later; no flip back.
    assert transitions == [(141.0, False, False), (441.0, False, True)]
    assert tracker.evaluate("node-a").unhealthy_since == START + 140


def test_irregular_but_timely_renewals_keep_the_node_healthy(clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    agent.heartbeat()
    for gap in (10, 35, 2, 40, 39, 1, 40, 40):  # every gap within the grace period, even exactly 40 s
        clock.to(clock.now + gap)
        health = tracker.evaluate("node-a")  # the latest moment before the next renewal
        assert health.healthy and not health.changed
        agent.heartbeat()
    assert tracker.evaluate("node-a").judged


def test_rereading_the_same_renew_time_is_no_sign_of_life(clock: FakeClock, tracker: NodeHealthTracker) -> None:
    assert tracker.observe_lease("node-a", "2026-11-22T10:00:00.000000Z", holder="agent")
    tracker.observe_metric("node-a", update_time="2026-11-22T10:00:00Z")
    for seconds in range(10, 40, 10):  # informer relists and resyncs deliver the same Lease
        clock.to(START + seconds)
        assert not tracker.observe_lease("node-a", "2026-11-22T10:00:00.000000Z", holder="agent")

    clock.to(START + 40.5)
    assert not tracker.evaluate("node-a").agent_ready


def test_a_released_lease_is_no_renewal(clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    clock.to(START + 105)
    assert not tracker.observe_lease("node-a", "2026-11-22T10:00:00.000000Z", holder="")

    clock.to(START + 140.5)
    assert tracker.evaluate("node-a").reason == REASON_AGENT_SILENT


def test_after_a_restart_nobody_is_judged_during_the_startup_grace_even_with_an_ancient_lease(
        clock: FakeClock) -> None:
    tracker = NodeHealthTracker(clock)  # the new leader, at START
    # The informers' first list: Leases last renewed long ago (on the agents' clocks).
    tracker.observe_lease("dead", "2019-06-01T00:00:00.000000Z", holder="dead-agent")
    tracker.observe_metric("dead", update_time="2019-06-01T00:00:00Z")
    alive = Agent(tracker, "alive")
    tracker.track("no-lease-yet")

    moment = START
    while moment <= START + 40:
        clock.to(moment)
        alive.heartbeat()
        for health in tracker.evaluate_all():
            assert (health.healthy, health.judged, health.evict) == (True, False, False)
            assert health.reason == REASON_STARTUP
        moment += 5

    clock.to(START + 40.001)
    healths = {health.node: health for health in tracker.evaluate_all()}
    assert healths["alive"].healthy and healths["alive"].judged
    assert not healths["dead"].healthy and healths["dead"].unhealthy_since == START + 40
    assert healths["dead"].changed
    # Never seen renewing since we started watching: judged from then, like any other.
    assert not healths["no-lease-yet"].healthy
    assert "since the leader began watching" in healths["no-lease-yet"].message

    clock.to(START + 340.001)
    assert tracker.evaluate("dead").evict


def test_a_longer_startup_grace_counts_the_eviction_timeout_from_its_end(clock: FakeClock) -> None:
    tracker = NodeHealthTracker(clock, startup_grace=120.0)
    tracker.track("dead")

    clock.to(START + 120)
    assert not tracker.evaluate("dead").judged
    clock.to(START + 120.001)
    health = tracker.evaluate("dead")
    assert not health.healthy and health.unhealthy_since == START + 120
    clock.to(START + 420.001)
    assert tracker.evaluate("dead").evict


def test_becoming_leader_again_forgets_what_was_judged_before(clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    clock.to(START + 500)
    assert tracker.evaluate("node-a").evict

    tracker.became_leader()
    health = tracker.evaluate("node-a")
    # A new leadership starts from scratch: nothing to announce, nobody judged yet.
    assert not health.judged and health.healthy and not health.changed and not health.evict
    clock.to(START + 540.001)
    health = tracker.evaluate("node-a")
    assert not health.healthy and health.unhealthy_since == START + 540 and not health.evict


def test_a_node_that_appears_later_gets_a_full_grace_period(clock: FakeClock, tracker: NodeHealthTracker) -> None:
    clock.to(START + 1000)
    tracker.track("new")
    clock.to(START + 1040)
    assert tracker.evaluate("new").healthy
    clock.to(START + 1040.001)
    assert not tracker.evaluate("new").healthy


def test_stale_metrics_make_the_node_unhealthy_while_the_agent_stays_ready(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    agent.report()
    update_time = "2026-11-22T10:00:00Z"
    tracker.observe_metric("node-a", update_time=update_time)  # observed at START
    moment = START
    while moment <= START + 900:  # the Lease is renewed; the metric is re-served unchanged
        clock.to(moment)
        agent.renew()
        assert not tracker.observe_metric("node-a", update_time=update_time)
        moment += 10
    assert tracker.evaluate("node-a").metrics_fresh

    clock.to(START + 900.001)
    health = tracker.evaluate("node-a")
    assert (health.healthy, health.agent_ready, health.metrics_fresh) == (False, True, False)
    assert health.reason == REASON_METRICS_STALE
    assert health.unhealthy_since == START + 900
    assert "degradeTimeMinutes 15m" in health.message

    clock.to(START + 910)
    agent.renew()
    agent.report()  # a new report: fresh at once
    health = tracker.evaluate("node-a")
    assert health.healthy and health.changed


def test_a_node_failing_one_signal_after_the_other_is_one_continuous_unhealthy_period(clock: FakeClock) -> None:
    tracker = NodeHealthTracker(clock, degrade_after=120.0, eviction_timeout=150.0)
    agent = Agent(tracker, "node-a")
    agent.report()  # metric observed at START only: stale from START + 120
    for moment in [START + 10 * k for k in range(0, 16)]:  # Lease renewed until START + 150
        clock.to(moment)
        agent.renew()
    clock.to(START + 200)  # Lease expired since START + 190; the metric comes back now
    agent.report()
    clock.to(START + 300)  # evaluated for the first time now

    health = tracker.evaluate("node-a")
    assert (health.agent_ready, health.metrics_fresh) == (False, True)
    assert health.unhealthy_since == START + 120
    assert health.evict  # 180 s since START + 120


def test_a_forgotten_node_starts_over(clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    clock.to(START + 500)
    assert tracker.evaluate("node-a").evict

    tracker.forget("node-a")
    assert tracker.nodes() == ()
    tracker.track("node-a")  # a node of the same name registers again
    health = tracker.evaluate("node-a")
    assert health.healthy and not health.changed


def test_transitions_lists_only_the_nodes_that_changed(clock: FakeClock, tracker: NodeHealthTracker) -> None:
    steady_agent, silent_agent = Agent(tracker, "steady"), Agent(tracker, "silent")
    steady(clock, [steady_agent, silent_agent], until=START + 100)
    steady(clock, [steady_agent], until=START + 140)
    assert tracker.transitions() == ()

    clock.to(START + 141)
    steady_agent.heartbeat()
    assert [health.node for health in tracker.transitions()] == ["silent"]
    assert tracker.transitions() == ()


@pytest.mark.parametrize("options", [
    {"grace_period": 0}, {"eviction_timeout": -1}, {"degrade_after": 0}, {"recovery_renewals": 0},
    {"startup_grace": -1},
])
def test_nonsensical_thresholds_are_refused(clock: FakeClock, options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        NodeHealthTracker(clock, **options)  # type: ignore[arg-type]


def test_leaving_a_full_disruption_restarts_the_eviction_timers_of_unhealthy_nodes(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    first, second = Agent(tracker, "node-a"), Agent(tracker, "node-b")
    steady(clock, [first, second], until=START + 100)
    clock.to(START + 500)  # both silent for longer than grace period + eviction timeout
    assert all(health.evict for health in tracker.evaluate_all())
    first.heartbeat()  # one agent is back (not yet trusted), the other still silent

    tracker.restart_eviction_timers()
    restarted = {health.node: health for health in tracker.evaluate_all()}
    assert {node: (h.healthy, h.evict, h.unhealthy_since) for node, h in restarted.items()} == {
        "node-a": (False, False, START + 500), "node-b": (False, False, START + 500)}

    clock.to(START + 800.001)  # a full eviction timeout after the restart: due again
    assert tracker.evaluate("node-b").evict


# ---- the agent's reports are its heartbeat; the Lease is the fallback ---------------------------

def test_reports_alone_keep_the_agent_ready_and_their_silence_makes_it_unhealthy_after_the_grace_period(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    moment = START
    while moment <= START + 300:  # never a Lease renewal: only reports, every 10 s
        clock.to(moment)
        assert agent.report()
        assert tracker.evaluate("node-a").healthy
        moment += 10
    clock.to(START + 300 + 40)
    assert tracker.evaluate("node-a").healthy
    clock.to(START + 300 + 40.001)
    health = tracker.evaluate("node-a")
    assert (health.healthy, health.agent_ready, health.reason) == (False, False, REASON_AGENT_SILENT)
    assert "no report and no Lease renewal" in health.message


def test_lease_renewals_keep_an_agent_ready_whose_reports_do_not_arrive(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    moment = START + 110
    while moment <= START + 600:  # the leader no longer hears it; the agent falls back to its Lease
        clock.to(moment)
        agent.renew()
        health = tracker.evaluate("node-a")
        assert health.agent_ready and health.healthy
        moment += 10


def test_a_report_counts_from_when_the_store_took_it_in_not_from_when_it_was_evaluated(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    Agent(tracker, "node-a").report()
    clock.to(START + 30)
    # The evaluation 4 s after the report arrived reads it from the store.
    assert tracker.observe_metric("node-a", update_time="2026-11-23T00:00:00Z", seen_at=START + 26)
    clock.to(START + 66)
    assert tracker.evaluate("node-a").healthy
    clock.to(START + 66.001)
    health = tracker.evaluate("node-a")
    assert not health.healthy and health.unhealthy_since == START + 66


def test_a_report_and_a_renewal_moments_apart_do_not_make_a_returning_agent_trusted(
        clock: FakeClock, tracker: NodeHealthTracker) -> None:
    agent = Agent(tracker, "node-a")
    steady(clock, [agent], until=START + 100)
    clock.to(START + 200)
    agent.renew()
    clock.to(START + 200.5)
    agent.report()
    health = tracker.evaluate("node-a")
    assert (health.healthy, health.reason) == (False, REASON_AGENT_UNSTABLE)
    clock.to(START + 210)
    agent.report()
    assert tracker.evaluate("node-a").healthy


def test_a_node_silent_since_before_a_takeover_is_judged_one_grace_period_after_it(clock: FakeClock) -> None:
    tracker = NodeHealthTracker(clock)
    clock.to(START + 500)
    # As a standby this replica followed the leader's store: the node's last report came at START + 470.
    tracker.observe_metric("node-a", update_time="2026-11-23T00:00:00Z", seen_at=START + 470)
    tracker.became_leader()  # the takeover, at START + 500
    clock.to(START + 540)
    assert tracker.evaluate("node-a").healthy
    clock.to(START + 540.001)
    health = tracker.evaluate("node-a")
    assert not health.healthy and health.unhealthy_since == START + 540
