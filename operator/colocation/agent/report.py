"""The reporter: decides when a NodeMetric report is due, and delivers it to the leader.

Every `report_interval` it takes the latest state and sends it when nothing was accepted yet,
the pod set changed, a usage moved by more than `change_threshold` (of at least 1 core or
1 GiB), `max_interval` passed, or `heartbeat_interval` passed since the last accepted report was
sent; and at once when the leader changes. Delivery (colocation.agent.delivery) goes straight to
the leader, else through kube-apiserver. A failed report is retried with backoff and jitter,
each time with the latest state; while the replicas can be asked directly, at most every
`replica_retry_maximum`; when the leader itself names a time (it waits to renew its Lease), then.

The triggers, and why: docs/agent.md#reporting-and-the-heartbeat
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.delivery import Delivery, DeliveryFailed, run_checks
from colocation.agent.leader_locator import Leader
from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.kube import permissions
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

# A leader's answer sooner than this did not hold the report (see Reporter.check).
QUICK_ANSWER = 0.5
# A report sent this long after its state was taken takes the state again.
STILL_CURRENT = 0.5

_REPORT = permissions.declared(permissions.AGENT_API_CALLS, permissions.ApiCall(
    group=permissions.METRICS_GROUP, resource="nodemetrics", verb="update", namespace=None, subresource="status"))

# A move is judged against at least this much of each resource (see the module docstring).
CHANGE_FLOORS: Mapping[str, int] = {"cpu": 1000, "memory": 1 << 30}
RECENT = "recent:"  # the subject prefix of short-window figures ("ns/name" never starts so: one slash)


@dataclass(frozen=True)
class Snapshot:
    """A report ready to send, and the figures the decision compares."""

    body: dict[str, Any]
    # (subject, resource) -> value; subject "" for the node, "ns/name" for a pod, and RECENT before
    # either for its recentUsage
    usages: Mapping[tuple[str, str], int]
    pods: frozenset[str]  # "ns/name" of every pod in the report

    @classmethod
    def of(cls, body: dict[str, Any]) -> Snapshot:
        status = body.get("status") or {}
        usages: dict[tuple[str, str], int] = {}
        node_metric = status.get("nodeMetric") or {}
        _add(usages, "", (node_metric.get("nodeUsage") or {}).get("resources") or {})
        _add(usages, RECENT, (node_metric.get("recentUsage") or {}).get("resources") or {})
        pods = set()
        for pod in status.get("podsMetric") or ():
            key = f"{pod['namespace']}/{pod['name']}"
            pods.add(key)
            _add(usages, key, (pod.get("podUsage") or {}).get("resources") or {})
            _add(usages, RECENT + key, (pod.get("recentUsage") or {}).get("resources") or {})
        return cls(body, usages, frozenset(pods))


def _add(usages: dict[tuple[str, str], int], subject: str, resources: Mapping[str, Any]) -> None:
    if "cpu" in resources:
        usages[(subject, "cpu")] = cpu_millis(resources["cpu"])
    if "memory" in resources:
        usages[(subject, "memory")] = byte_value(resources["memory"])


def moved(before: Mapping[tuple[str, str], int], after: Mapping[tuple[str, str], int], threshold: float) -> bool:
    """Whether any usage present in both moved by more than `threshold` (relative, with floors)."""
    for key, value in after.items():
        old = before.get(key)
        if old is None:
            continue  # a new pod: the pod set changed, which is judged on its own
        if abs(value - old) > threshold * max(abs(old), CHANGE_FLOORS.get(key[1], 1)):
            return True
    return False


def report_trigger(last: Snapshot | None, current: Snapshot, *, since_last: float, max_interval: float,
                   threshold: float, heartbeat_due: bool = False) -> str | None:
    """Why `current` must be sent now, given the last accepted report; None when it need not."""
    if last is None:
        return "initial"
    if current.pods != last.pods:
        return "pods-changed"
    if moved(last.usages, current.usages, threshold):
        return "usage-changed"
    if since_last >= max_interval:
        return "max-interval"
    if heartbeat_due:
        return "heartbeat"
    return None


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    report_interval: float = 10.0
    change_threshold: float = 0.10
    max_interval: float = 60.0
    heartbeat_interval: float = 10.0  # 0: reports are no heartbeat (the Lease is)
    request_timeout: float = 5.0
    retry_initial: float = 1.0
    retry_maximum: float = 30.0
    # While the replicas can be asked without kube-apiserver (colocation.agent.delivery), a report
    # that found no leader is tried again this often at most: a new leader hears from every agent
    # within about this long of taking over, even after a long outage.
    replica_retry_maximum: float = 2.0


class Reporter:
    def __init__(self, node: str, delivery: Delivery, snapshot: Callable[[], Snapshot | None], *,
                 options: ReportOptions | None = None, metrics: AgentMetrics | None = None,
                 on_accepted: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.node = node
        self.delivery = delivery
        self.locator = delivery.locator
        self.snapshot = snapshot
        self.options = options or ReportOptions()
        self.max_interval = self.options.max_interval  # the NodeSLO's reportIntervalSeconds may change it
        self.metrics = metrics or AgentMetrics()
        self.path = f"/apis/{_REPORT.group}/v1alpha1/{_REPORT.resource}/{node}/{_REPORT.subresource}"
        self.last_sent: Snapshot | None = None
        self.last_sent_at: float | None = None  # monotonic
        self.delivered_to: str | None = None  # the leader identity the last accepted report reached
        self.heartbeat_due_at = -math.inf  # monotonic: when the next report is due as a heartbeat
        self._on_accepted = on_accepted
        self._clock = clock
        # Jitter only shortens the heartbeat period, as the Lease renewals' does.
        self._heartbeat_period = Backoff(self.options.heartbeat_interval or 1.0, self.options.heartbeat_interval
                                         or 1.0, factor=1.0, jitter=0.04, rng=rng)
        self._pending: str | None = None  # the trigger of a report that failed and is being retried
        self._prompt_retry = False  # the last failure was retried as the leader said, and came back quickly
        self._backoff = Backoff(min(self.options.retry_initial, self.options.retry_maximum),
                                self.options.retry_maximum, jitter=0.5, rng=rng)
        self._replica_backoff = Backoff(min(self.options.retry_initial, self.options.replica_retry_maximum),
                                        self.options.replica_retry_maximum, jitter=0.5, rng=rng)
        self._wake = asyncio.Event()
        self.locator.subscribe(self._leader_changed)

    def age(self) -> float:
        """Seconds since the last accepted report; +inf before the first."""
        return math.inf if self.last_sent_at is None else self._clock() - self.last_sent_at

    def _leader_changed(self, leader: Leader | None) -> None:
        if self._new_to(leader):
            self._wake.set()

    def _new_to(self, leader: Leader | None) -> bool:
        """Whether `leader` leads now and has not had our report: a new leader needs one at once.
        Not where every replica takes reports: they share one store, and a failover would
        otherwise send every node's report at the same moment."""
        return leader is not None and not leader.reports_anywhere and leader.identity != self.delivered_to

    # ---- one check -------------------------------------------------------------------------------

    def due(self, snapshot: Snapshot) -> str | None:
        """The trigger for sending `snapshot` now, or None."""
        if self.last_sent is not None and self._new_to(self.locator.leader):
            return "leader-changed"  # even while retrying: the new leader needs it whatever the old reason
        if self._pending is not None:
            return self._pending
        now = self._clock()
        since = math.inf if self.last_sent_at is None else now - self.last_sent_at
        return report_trigger(self.last_sent, snapshot, since_last=since, max_interval=self.max_interval,
                              threshold=self.options.change_threshold,
                              heartbeat_due=bool(self.options.heartbeat_interval) and now >= self.heartbeat_due_at)

    def _next_check(self) -> float:
        """Seconds until the next check: the report interval, or sooner when the heartbeat falls due."""
        if not self.options.heartbeat_interval:
            return self.options.report_interval
        return max(0.0, min(self.options.report_interval, self.heartbeat_due_at - self._clock()))

    async def check(self) -> float:
        """Send the latest state if it is due; return the seconds until the next check."""
        if not self.locator.read_once:
            await self.locator.refresh()
        snapshot = self.snapshot()
        if snapshot is None:
            return self.options.report_interval  # nothing collected yet
        trigger = self.due(snapshot)
        if trigger is None:
            return self._next_check()
        started = self._clock()
        sent, taken_at = [snapshot], [started]

        def body() -> bytes:  # made when sent: after a wait for a slot, with the figures of then
            if self._clock() - taken_at[0] > STILL_CURRENT:
                sent[0], taken_at[0] = self.snapshot() or sent[0], self._clock()
            return orjson.dumps(sent[0].body)

        try:
            route, leader = await self.delivery.put(self.path, body, self._failed, any_replica=True)
        except DeliveryFailed as failure:
            self._pending = trigger
            if failure.retry_after is not None and not self._prompt_retry:
                # The leader itself, waiting to renew its Lease, said when (at once when it leads
                # again). Two quick answers in a row fall back to the backoff: no busy loop.
                delay = min(failure.retry_after, self.options.replica_retry_maximum)
                self._prompt_retry = self._clock() - started < QUICK_ANSWER
            else:
                self._prompt_retry = False
                delay = self._backoff.next_delay()
                if failure.transient and self.delivery.replicas_known:
                    delay = min(delay, self._replica_backoff.next_delay())
            log.warning("report failed, retrying", extra={"node": self.node, "error": str(failure),
                                                          "trigger": trigger, "retry_in": round(delay, 2)})
            return delay
        self._pending = None
        self._prompt_retry = False
        self._backoff.reset()
        self._replica_backoff.reset()
        current = self.locator.leader
        if self.last_sent is not None and leader is not None and leader != self.delivered_to \
                and (current is None or not current.reports_anywhere):
            # The first full report a new leader gets is the re-send, even when a retry that
            # found the new leader on its way delivered it before the change was noticed.
            trigger = "leader-changed"
        self.last_sent, self.last_sent_at, self.delivered_to = sent[0], self._clock(), leader
        self.heartbeat_due_at = started + self._heartbeat_period.next_delay()
        if self._on_accepted is not None:
            self._on_accepted()
        self.metrics.reports_sent.labels(route, trigger).inc()
        log.debug("report sent", extra={"node": self.node, "route": route, "trigger": trigger})
        return self._next_check()

    def _failed(self, reason: str) -> None:
        self.metrics.reports_failed.labels(reason).inc()

    # ---- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        await run_checks(self.check, self._wake)
