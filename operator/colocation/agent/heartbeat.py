"""The agent's heartbeat: its accepted reports, and Lease NODE in colocation-node-lease as the fallback.

The reporter calls `heard` when the leader accepts a report. The Lease is renewed at start and
every `registration_interval` while reports are accepted, and every heartbeat interval once
none was accepted for `fallback_after`. Without a report source (`reports=None`) the Lease is
renewed every interval, as the kubelet renews its own. A heartbeat (an accepted report or a
renewal) is late when it lands more than the interval plus a tenth after the one before;
`age()` and `overdue()` feed the self-check metrics.

Why, and how the Lease is written: docs/agent.md#reporting-and-the-heartbeat
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.kubeapi import KubeApi
from colocation.apimachinery.clock import format_micro_time, wall_time
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation.kube.informer import describe_error

log = logging.getLogger(__name__)

for _verb in ("get", "create", "update"):
    permissions.declared(permissions.AGENT_API_CALLS, permissions.ApiCall(
        group="coordination.k8s.io", resource="leases", verb=_verb, namespace=permissions.NODE_LEASE_NAMESPACE))
permissions.declared(permissions.AGENT_API_CALLS,
                     permissions.ApiCall(group="", resource="nodes", verb="get", namespace=None))

DEFAULT_LEASE_DURATION = 40
DEFAULT_REGISTRATION_INTERVAL = 600.0
# No report accepted for this many heartbeat intervals: the Lease carries the heartbeat instead.
FALLBACK_AFTER_INTERVALS = 1.5
# The kubelet renews at a quarter of the duration: three renewals may fail before the lease expires.
RENEW_FRACTION = 0.25
# A renewal is late when it comes more than this fraction of the interval after it was due.
LATE_GRACE_FRACTION = 0.1
_ATTEMPTS_PER_RENEWAL = 3


class HeartbeatError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class NodeHeartbeat:
    def __init__(self, kube: KubeApi, node_name: str, *, namespace: str = permissions.NODE_LEASE_NAMESPACE,
                 lease_duration_seconds: int = DEFAULT_LEASE_DURATION, renew_interval: float | None = None,
                 registration_interval: float = DEFAULT_REGISTRATION_INTERVAL,
                 reports: Callable[[], float] | None = None, fallback_after: float | None = None,
                 metrics: AgentMetrics | None = None, slots: asyncio.Semaphore | None = None,
                 wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, rng: random.Random | None = None) -> None:
        self.kube = kube
        self.node_name = node_name
        self.namespace = namespace
        self.lease_duration_seconds = lease_duration_seconds
        self.renew_interval = renew_interval or lease_duration_seconds * RENEW_FRACTION
        if not 0 < self.renew_interval < lease_duration_seconds:
            raise ValueError(f"the renew interval ({self.renew_interval}s) must be shorter than the lease "
                             f"duration ({lease_duration_seconds}s)")
        if registration_interval < self.renew_interval:
            raise ValueError(f"the registration interval ({registration_interval}s) must not be shorter than the "
                             f"heartbeat interval ({self.renew_interval}s)")
        self.registration_interval = registration_interval
        self.reports = reports  # seconds since the leader last accepted a report; None: the Lease is the heartbeat
        self.fallback_after = fallback_after or FALLBACK_AFTER_INTERVALS * self.renew_interval
        # Every request ends before the next renewal is due.
        self.timeout = min(5.0, 0.8 * self.renew_interval)
        self.metrics = metrics or AgentMetrics()
        self.slots = slots
        self.lease: dict[str, Any] | None = None  # as last read or written
        self.node_uid: str = ""
        self.renewed_at: float | None = None  # monotonic, last success
        self.renew_time: float | None = None  # monotonic, when the renewTime in the Lease was stamped
        self.heard_at: float | None = None  # monotonic, the last heartbeat: renewTime stamped, or report accepted
        self.started_at: float | None = None  # monotonic, when run() began
        self._stamped: float = 0.0  # monotonic, the last renewTime written into a request
        self._duration = lease_duration_seconds  # leaseDurationSeconds of the renewal being made
        self.renewed_for = ""  # the reason of the last successful renewal of this process
        # A heartbeat (or the wait for one) is late past this many seconds since the last.
        self.late_after = self.renew_interval * (1 + LATE_GRACE_FRACTION)
        self._wall, self._clock, self._sleep = wall, clock, sleep
        # The kubelet jitters its period by 4 %; jitter only shortens it.
        self._period = Backoff(self.renew_interval, self.renew_interval, factor=1.0, jitter=0.04, rng=rng)
        self._errors = Backoff(min(0.2, self.renew_interval), self.renew_interval, jitter=0.5, rng=rng)
        self._lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    # ---- one renewal -----------------------------------------------------------------------------

    async def renew(self) -> None:
        """Create or renew the Lease once (conflicts and deletions handled); raise HeartbeatError."""
        started = self._clock()
        error: HeartbeatError | None = None
        for _ in range(_ATTEMPTS_PER_RENEWAL):
            try:
                await self._attempt()
            except HeartbeatError as failure:
                error = failure
                self.metrics.lease_renew_failures.labels(failure.reason).inc()
                if failure.reason in ("conflict", "not-found"):
                    continue  # the cache was dropped: read (or create) and write again at once
                raise
            renewed_at = self._clock()
            self._count_late(renewed_at)
            self.renewed_at, self.renew_time = renewed_at, self._stamped
            self.heard_at = max(self.heard_at or self._stamped, self._stamped)
            self.metrics.lease_renew.observe(renewed_at - started)
            return
        assert error is not None
        raise error

    async def _attempt(self) -> None:
        if self.lease is None:
            status, body = await self._call("GET", f"{self._lease_path}/{self.node_name}")
            if status == 404:
                await self._create()
                return
            self.lease = self._expect(status, body, "reading")
        await self._ensure_owner()
        assert self.lease is not None
        lease = self.lease
        status, body = await self._call("PUT", f"{self._lease_path}/{self.node_name}", lambda: self._renewed(lease))
        if status in (404, 409):
            self.lease = None
            raise HeartbeatError("conflict" if status == 409 else "not-found", _message(body))
        self.lease = self._expect(status, body, "renewing")

    async def _create(self) -> None:
        await self._ensure_owner()
        status, body = await self._call("POST", self._lease_path, lambda: self._renewed(self._new_lease()))
        if status == 409:  # created meanwhile (a restarted agent racing its predecessor): read it next
            raise HeartbeatError("conflict", _message(body))
        self.lease = self._expect(status, body, "creating")

    async def _ensure_owner(self) -> None:
        if self.node_uid:
            return
        if self.lease is not None and (self.lease.get("metadata") or {}).get("ownerReferences"):
            return
        status, body = await self._call("GET", f"/api/v1/nodes/{self.node_name}")
        if status == 200 and isinstance(body, dict):
            self.node_uid = str((body.get("metadata") or {}).get("uid") or "")
        elif status != 404:  # a missing Node is not an error: the reference is added once it exists
            log.info("cannot read the Node for the Lease's owner reference",
                     extra={"node": self.node_name, "status": status})

    def _new_lease(self) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": self.namespace}, "spec": {}}

    def _renewed(self, base: dict[str, Any]) -> dict[str, Any]:
        lease = copy.deepcopy(base)
        metadata = lease.setdefault("metadata", {})
        metadata.pop("managedFields", None)
        if self.node_uid and not metadata.get("ownerReferences"):
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node_name,
                                            "uid": self.node_uid}]
        spec = lease.setdefault("spec", {})
        self._stamped = self._clock()
        spec.update(holderIdentity=self.node_name, leaseDurationSeconds=self._duration,
                    renewTime=format_micro_time(wall_time(self._wall())))
        return lease

    async def _call(self, method: str, path: str, body: Callable[[], Any] | None = None) -> tuple[int, Any]:
        """The request, its body made once it has a slot; HeartbeatError if it got no answer."""
        try:
            async with self.slots or contextlib.nullcontext():
                return await self.kube.request(method, path, body=body() if body else None, timeout=self.timeout)
        except TimeoutError as error:
            raise HeartbeatError("timeout", f"{method} {path}: no answer within {self.timeout:.1f}s") from error
        except Exception as error:  # the connection failed: the next attempt opens a new one
            raise HeartbeatError("connection", f"{method} {path}: {describe_error(error)}") from error

    @staticmethod
    def _expect(status: int, body: Any, what: str) -> dict[str, Any]:
        if 200 <= status < 300 and isinstance(body, dict):
            return body
        reason = "unavailable" if status in (429, 500, 502, 503, 504) else f"http-{status}"
        raise HeartbeatError(reason, f"{what} the Lease: {_message(body)}")

    # ---- the loop --------------------------------------------------------------------------------

    def heard(self) -> None:
        """The leader accepted a report just now: the heartbeat of this interval."""
        now = self._clock()
        self._count_late(now)
        self.heard_at = now

    def _count_late(self, landed: float) -> None:
        since = self.heard_at if self.heard_at is not None else self.started_at
        if since is not None and landed - since > self.late_after:
            self.metrics.heartbeats_late.inc()

    def age(self) -> float:
        """How old the last heartbeat is (since the loop started, before the first; 0 before that)."""
        since = self.heard_at if self.heard_at is not None else self.started_at
        return 0.0 if since is None else self._clock() - since

    def overdue(self) -> bool:
        """The heartbeat is late now: none landed within the interval (and its grace)."""
        return self.age() > self.late_after

    def renewal_due(self) -> str | None:
        """Why the Lease must be renewed now ("heartbeat", "registration", "fallback"), or None."""
        if self.reports is None:
            return "heartbeat"
        if self.renew_time is None:
            return "registration"  # this process has not registered yet
        # Before the first report, silence counts from the start: the first report takes a few samples.
        since_start = self._clock() - self.started_at if self.started_at is not None else 0.0
        if min(self.reports(), since_start) > self.fallback_after:
            return "fallback"
        if self._clock() - self.renew_time >= self.registration_interval - self.renew_interval:
            return "registration"  # the tick before the interval runs out
        if self.renewed_for != "registration":
            return "registration"  # reports flow again: the Lease's short fallback duration would soon run out
        return None

    async def run(self) -> None:
        self.started_at = self._clock()
        while True:
            attempt = self._clock()
            delay = self._period.next_delay()
            reason = self.renewal_due()
            if reason is not None:
                self._duration = self.lease_duration_seconds + (
                    int(self.registration_interval) if reason == "registration" else 0)
                try:
                    await self.renew()
                    self._errors.reset()
                    self.renewed_for = reason
                    self.metrics.lease_renewals.labels(reason).inc()
                except HeartbeatError as error:
                    delay = self._errors.next_delay()
                    log.warning("node lease renewal failed", extra={"node": self.node_name, "error": str(error),
                                                                    "reason": reason, "retry_in": round(delay, 2)})
                    await self._sleep(delay)
                    continue
            # A fixed rate: one period after this tick started, however long the renewal took.
            delay = attempt + delay - self._clock()
            if delay > 0:
                await self._sleep(delay)


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or "unexpected answer")
    return str(body or "no body")[:200]
