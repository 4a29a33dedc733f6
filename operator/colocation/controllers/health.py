"""Node health: is a node's agent alive, and are its metrics fresh? Pure, on an injected clock.

AgentReady: a report arrived (`observe_metric`) or the agent's Lease was renewed
(`observe_lease`) within `grace_period`. MetricsFresh: a new `updateTime` was seen within
`degrade_after`. A node is healthy when both hold. Both are judged by when this replica saw the
change, on its monotonic clock, never by the values. An unhealthy node is healthy again after
`recovery_renewals` on-time heartbeats in a row. No node is judged during `startup_grace` after
`became_leader`. `NodeHealth.evict` turns true `eviction_timeout` after a node became unhealthy.

Why: docs/controllers.md#node-health
"""

from __future__ import annotations

import dataclasses
from typing import Final

from colocation.apimachinery.clock import MonotonicClock
from colocation.apimachinery.tables import human_duration

# Condition reasons (CamelCase, as Kubernetes condition reasons are).
REASON_READY: Final = "AgentReady"
REASON_STARTUP: Final = "StartupGrace"
REASON_AGENT_SILENT: Final = "AgentSilent"
REASON_AGENT_UNSTABLE: Final = "AgentUnstable"
REASON_METRICS_STALE: Final = "MetricsStale"

# Heartbeats closer together than this fraction of the grace period count once in a streak.
STREAK_SPACING: Final = 0.125


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeHealth:
    """One evaluation of one node.

    `changed` says whether `healthy`, `agent_ready`, `metrics_fresh` or `evict` differ from the
    previous evaluation of this node (a node never evaluated is taken to have been healthy): the
    controller posts an Event and counts a transition only then. `unhealthy_since` is on the
    tracker's monotonic clock.
    """

    node: str
    healthy: bool
    agent_ready: bool
    metrics_fresh: bool
    judged: bool  # False during the startup grace: everything is reported healthy then
    unhealthy_since: float | None
    evict: bool
    reason: str
    message: str
    changed: bool = False


@dataclasses.dataclass(slots=True, kw_only=True)
class _Record:
    """What the tracker knows about one node; all times on the tracker's clock."""

    # Both start as the moment we started watching (or became leader): silence is counted from then.
    alive_seen: float  # the last observed heartbeat (a report, or a Lease renewal)
    metric_seen: float  # the last observed new updateTime
    renew_time: str | None = None
    update_time: str | None = None
    ever_alive: bool = False
    metric_ever_seen: bool = False
    # Renewals in a row, each within a grace period of the previous one (capped). Watching starts
    # with a full streak: a node is trusted until it misses a renewal.
    streak: int = 0
    alive_down_since: float | None = None  # while the streak is too short to be trusted again
    streak_step: float = 0.0  # when the streak last grew
    unhealthy_since: float | None = None
    last_key: tuple[bool, bool, bool, bool] = (True, True, True, False)


class NodeHealthTracker:
    def __init__(
        self,
        clock: MonotonicClock,
        *,
        grace_period: float = 40.0,
        eviction_timeout: float = 300.0,
        degrade_after: float = 900.0,
        startup_grace: float | None = None,
        recovery_renewals: int = 2,
    ) -> None:
        if grace_period <= 0 or eviction_timeout < 0 or degrade_after <= 0:
            raise ValueError("grace_period and degrade_after must be positive, eviction_timeout not negative")
        if startup_grace is not None and startup_grace < 0:
            raise ValueError(f"startup_grace must not be negative, got {startup_grace}")
        if recovery_renewals < 1:
            raise ValueError(f"recovery_renewals must be at least 1, got {recovery_renewals}")
        self._clock = clock
        self.grace_period = grace_period
        self.eviction_timeout = eviction_timeout
        self.degrade_after = degrade_after
        self.startup_grace = grace_period if startup_grace is None else startup_grace
        self.recovery_renewals = recovery_renewals
        self._records: dict[str, _Record] = {}
        self._leader_since = clock()
        self.became_leader(self._leader_since)

    # --- inputs -------------------------------------------------------------------------------------

    def became_leader(self, now: float | None = None) -> None:
        """Start judging afresh: nothing observed before counts, the startup grace begins."""
        now = self._clock() if now is None else now
        self._leader_since = now
        for record in self._records.values():
            self._restart(record, now)

    def restart_eviction_timers(self, now: float | None = None) -> None:
        """Every node unhealthy now counts its eviction timeout from `now`.

        Called when the disruption of every zone ends (some zone is no longer fully disrupted), as
        kube-controller-manager's node lifecycle controller resets its nodes' probe times when it
        leaves that mode: nodes whose agents come back one by one must not lose their pods in the
        moments between the first and the last recovery.
        """
        now = self._clock() if now is None else now
        for record in self._records.values():
            if record.unhealthy_since is not None:
                record.unhealthy_since = now

    def track(self, node: str) -> None:
        """Start watching a node (it appeared); it has a grace period to show a renewal."""
        self._record(node, self._clock())

    def forget(self, node: str) -> None:
        """The node is gone: drop everything known about it."""
        self._records.pop(node, None)

    def observe_lease(self, node: str, renew_time: str | None, holder: str | None = None) -> bool:
        """Record the node's Lease as read; True if it is a renewal (renewTime changed)."""
        now = self._clock()
        record = self._record(node, now)
        if not renew_time or renew_time == record.renew_time:
            return False
        record.renew_time = renew_time
        if holder == "":
            return False  # released: the agent said goodbye, which is no sign of life
        self._heartbeat(record, at=now, now=now)
        return True

    def observe_metric(self, node: str, *, update_time: str | None, seen_at: float | None = None) -> bool:
        """Record the node's NodeMetric `status.updateTime`; True if it is new.

        A new report is also the agent's heartbeat. `seen_at` is when the store received it (our
        clock; default now): the evaluation that reads the store may come a few seconds later.
        """
        now = self._clock()
        record = self._record(node, now)
        if not update_time or update_time == record.update_time:
            return False
        at = now if seen_at is None else min(seen_at, now)
        self._settle(record, now)
        record.update_time = update_time
        record.metric_seen = max(record.metric_seen, at)
        record.metric_ever_seen = True
        self._heartbeat(record, at=at, now=now)
        return True

    def _heartbeat(self, record: _Record, *, at: float, now: float) -> None:
        """A sign of life observed at `at` (never before what is already known: see `_restart`)."""
        at = max(at, record.alive_seen)
        self._settle(record, now)
        _, down_since = self._alive_state(record, at)
        if at - record.alive_seen > self.grace_period:
            # A heartbeat after a gap longer than the grace period starts a new streak.
            record.alive_down_since = down_since
            record.streak = 1
            record.streak_step = at
        elif at - record.streak_step >= self.grace_period * STREAK_SPACING:
            # A report and a Lease renewal moments apart are one sign of life, not two in a row.
            record.streak = min(record.streak + 1, self.recovery_renewals)
            record.streak_step = at
        record.alive_seen = at
        record.ever_alive = True
        self._settle(record, now)

    # --- outputs ------------------------------------------------------------------------------------

    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(self._records))

    def in_startup_grace(self, now: float | None = None) -> bool:
        now = self._clock() if now is None else now
        return now - self._leader_since <= self.startup_grace

    def evaluate(self, node: str) -> NodeHealth:
        """The node's health now; also remembers it, so `changed` describes a transition."""
        now = self._clock()
        record = self._record(node, now)
        self._settle(record, now)
        health = self._judge(node, record, now)
        key = (health.healthy, health.agent_ready, health.metrics_fresh, health.evict)
        changed = key != record.last_key
        record.last_key = key
        return dataclasses.replace(health, changed=True) if changed else health  # judged with changed=False

    def evaluate_all(self) -> tuple[NodeHealth, ...]:
        """Every tracked node, by name: what the periodic timer and the eviction guard need."""
        return tuple(self.evaluate(node) for node in self.nodes())

    def transitions(self) -> tuple[NodeHealth, ...]:
        """Evaluate every node and return only those whose state changed since the last evaluation."""
        return tuple(health for health in self.evaluate_all() if health.changed)

    # --- the state machine --------------------------------------------------------------------------

    def _record(self, node: str, now: float) -> _Record:
        record = self._records.get(node)
        if record is None:
            record = self._records[node] = _Record(alive_seen=now, metric_seen=now)
            self._restart(record, now)
        return record

    def _restart(self, record: _Record, now: float) -> None:
        # The strings are kept: seeing the same renewTime again after this is still no renewal.
        record.alive_seen = record.metric_seen = now
        record.ever_alive = record.metric_ever_seen = False
        record.streak = self.recovery_renewals
        record.alive_down_since = record.unhealthy_since = None
        record.streak_step = now
        record.last_key = (True, True, True, False)

    def _judging_from(self) -> float:
        return self._leader_since + self.startup_grace

    def _alive_state(self, record: _Record, now: float) -> tuple[bool, float | None]:
        """(ready, unhealthy since) of the Lease signal, before the startup clamp."""
        if record.streak >= self.recovery_renewals:
            deadline = record.alive_seen + self.grace_period
            return (True, None) if now <= deadline else (False, deadline)
        return False, record.alive_down_since

    def _metric_state(self, record: _Record, now: float) -> tuple[bool, float | None]:
        deadline = record.metric_seen + self.degrade_after
        return (True, None) if now <= deadline else (False, deadline)

    def _causes(self, record: _Record, now: float) -> tuple[bool, bool, float | None]:
        """(agent ready, metrics fresh, earliest moment a failing signal started failing)."""
        if self.in_startup_grace(now):
            return True, True, None
        lease_ready, lease_since = self._alive_state(record, now)
        metrics_fresh, metric_since = self._metric_state(record, now)
        starts = [since for since in (lease_since, metric_since) if since is not None]
        since = max(min(starts), self._judging_from()) if starts else None
        return lease_ready, metrics_fresh, since

    def _settle(self, record: _Record, now: float) -> None:
        """Carry the node's unhealthy period up to `now`.

        A signal recovers only when an observation arrives, and observations settle before and
        after they apply, so a period in which one signal recovered while the other had already
        failed is seen as one continuous unhealthy period, however rarely `evaluate` is called.
        """
        lease_ready, metrics_fresh, since = self._causes(record, now)
        if lease_ready and metrics_fresh:
            record.unhealthy_since = None
        elif record.unhealthy_since is None:
            record.unhealthy_since = since

    def _judge(self, node: str, record: _Record, now: float) -> NodeHealth:
        if self.in_startup_grace(now):
            left = self._judging_from() - now
            return NodeHealth(node=node, healthy=True, agent_ready=True, metrics_fresh=True, judged=False,
                              unhealthy_since=None, evict=False, reason=REASON_STARTUP,
                              message=f"became leader recently: nodes are judged in {human_duration(left)}")
        agent_ready, _ = self._alive_state(record, now)
        metrics_fresh, _ = self._metric_state(record, now)
        problems: list[str] = []
        reason = REASON_READY
        if not agent_ready:
            if record.streak < self.recovery_renewals and now - record.alive_seen <= self.grace_period:
                reason = REASON_AGENT_UNSTABLE
                problems.append(
                    f"the agent is heard again but not yet steadily: waiting for {self.recovery_renewals} "
                    f"reports or Lease renewals less than {human_duration(self.grace_period)} apart")
            else:
                reason = REASON_AGENT_SILENT
                problems.append(self._silence("no report and no Lease renewal from the agent", record.ever_alive,
                                              now - record.alive_seen, limit=self.grace_period,
                                              limit_name="grace period"))
        if not metrics_fresh:
            reason = REASON_METRICS_STALE if agent_ready else reason
            problems.append(self._silence("no new NodeMetric report", record.metric_ever_seen,
                                          now - record.metric_seen, limit=self.degrade_after,
                                          limit_name="degradeTimeMinutes"))
        if not problems:
            return NodeHealth(node=node, healthy=True, agent_ready=True, metrics_fresh=True, judged=True,
                              unhealthy_since=None, evict=False, reason=REASON_READY,
                              message=f"agent heard {human_duration(now - record.alive_seen)} ago, "
                                      f"metrics reported {human_duration(now - record.metric_seen)} ago")
        since = record.unhealthy_since
        if since is None:  # cannot happen after _settle; kept total for the type checker
            since = now
        unhealthy_for = now - since
        evict = unhealthy_for > self.eviction_timeout
        if evict:
            problems.append(f"unhealthy for {human_duration(unhealthy_for)}, longer than the eviction timeout "
                            f"{human_duration(self.eviction_timeout)}: batch and free pods are to be evicted")
        return NodeHealth(node=node, healthy=False, agent_ready=agent_ready, metrics_fresh=metrics_fresh, judged=True,
                          unhealthy_since=since, evict=evict, reason=reason, message="; ".join(problems))

    @staticmethod
    def _silence(what: str, ever: bool, age: float, *, limit: float, limit_name: str) -> str:
        during = (f"for {human_duration(age)}" if ever
                  else f"in the {human_duration(age)} since the leader began watching")
        return f"{what} {during} ({limit_name} {human_duration(limit)})"
