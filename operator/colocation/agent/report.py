"""The reporter: decides when a NodeMetric report is due, and delivers it to the leader.

Every `report_interval` it takes the latest state (never a queue of old ones) and sends it when
- nothing was accepted yet (`initial`),
- the set of pods in the report changed (`pods-changed`),
- a usage (the node's or a pod's, cpu or memory) moved by more than `change_threshold` of its
  previous value (`usage-changed`); the previous value counts as at least 1 core or 1 GiB, so an
  idle pod going from 2m to 5m of cpu is not a 150 % move,
- `max_interval` passed since the last accepted report (`max-interval`), or
- the leader changed since the last accepted report (`leader-changed`): a new leader may have
  started empty, so it gets the full report at once, without waiting for the next check.

Delivery goes straight to the leader (endpoint and CA from the leader Lease), else through
kube-apiserver's aggregation layer, which routes to whichever replica is ready (the leader):
- a 503 from a standby means the Lease moved on: read it again and retry the new leader;
- a leader that cannot be reached (refused, timed out) or that cannot authenticate us (a
  kubeconfig with a client certificate has no token to show it) → kube-apiserver;
- any other refusal is final for this report.
A failed report is retried with exponential backoff and jitter, each time with the latest state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from colocation.agent.kubeapi import KubeApi
from colocation.agent.leader import Leader, LeaderLocator
from colocation.agent.metrics import AgentMetrics
from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.kube import permissions
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

_REPORT = permissions.declared(permissions.AGENT_API_CALLS, permissions.ApiCall(
    permissions.METRICS_GROUP, "nodemetrics", "update", None, subresource="status"))

# A move is judged against at least this much of each resource (see the module docstring).
CHANGE_FLOORS: Mapping[str, int] = {"cpu": 1000, "memory": 1 << 30}


@dataclass(frozen=True)
class Snapshot:
    """A report ready to send, and the figures the decision compares."""

    body: dict[str, Any]
    usages: Mapping[tuple[str, str], int]  # (subject: "" for the node or "ns/name", resource) -> value
    pods: frozenset[str]  # "ns/name" of every pod in the report

    @classmethod
    def of(cls, body: dict[str, Any]) -> Snapshot:
        status = body.get("status") or {}
        usages: dict[tuple[str, str], int] = {}
        node = ((status.get("nodeMetric") or {}).get("nodeUsage") or {}).get("resources") or {}
        _add(usages, "", node)
        pods = set()
        for pod in status.get("podsMetric") or ():
            key = f"{pod['namespace']}/{pod['name']}"
            pods.add(key)
            _add(usages, key, (pod.get("podUsage") or {}).get("resources") or {})
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
                   threshold: float) -> str | None:
    """Why `current` must be sent now, given the last accepted report; None when it need not."""
    if last is None:
        return "initial"
    if current.pods != last.pods:
        return "pods-changed"
    if moved(last.usages, current.usages, threshold):
        return "usage-changed"
    if since_last >= max_interval:
        return "max-interval"
    return None


@dataclass(frozen=True)
class ReportOptions:
    report_interval: float = 10.0
    change_threshold: float = 0.10
    max_interval: float = 60.0
    request_timeout: float = 5.0
    retry_initial: float = 1.0
    retry_maximum: float = 30.0


class ReportFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


# PUT `path` with `body` to the leader within `timeout`: (status, decoded body).
DirectPut = Callable[[Leader, str, bytes, float], Awaitable[tuple[int, Any]]]


def session_put(session: aiohttp.ClientSession, token: Callable[[], str]) -> DirectPut:
    """Direct reports over a shared aiohttp session, authenticated with the agent's bearer token."""

    async def put(leader: Leader, path: str, body: bytes, timeout: float) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if bearer := token():
            headers["Authorization"] = f"Bearer {bearer}"
        async with session.put(leader.endpoint + path, data=body, headers=headers, ssl=leader.ssl_context,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            raw = await response.read()
            try:
                return response.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return response.status, raw.decode(errors="replace")

    return put


def _http_reason(status: int) -> str:
    return "unavailable" if status == 503 else f"http-{status}"


def _message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body or "")[:200]


class Reporter:
    def __init__(self, node: str, kube: KubeApi, locator: LeaderLocator, direct: DirectPut,
                 snapshot: Callable[[], Snapshot | None], *, options: ReportOptions | None = None,
                 metrics: AgentMetrics | None = None, slots: asyncio.Semaphore | None = None,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.node = node
        self.kube = kube
        self.locator = locator
        self.direct = direct
        self.snapshot = snapshot
        self.options = options or ReportOptions()
        self.max_interval = self.options.max_interval  # the NodeSLO's reportIntervalSeconds may change it
        self.metrics = metrics or AgentMetrics()
        self.slots = slots
        self.path = f"/apis/{_REPORT.group}/v1alpha1/{_REPORT.resource}/{node}/{_REPORT.subresource}"
        self.last_sent: Snapshot | None = None
        self.last_sent_at: float | None = None  # monotonic
        self.delivered_to: str | None = None  # the leader identity the last accepted report reached
        self._clock = clock
        self._pending: str | None = None  # the trigger of a report that failed and is being retried
        self._backoff = Backoff(min(self.options.retry_initial, self.options.retry_maximum),
                                self.options.retry_maximum, jitter=0.5, rng=rng)
        self._wake = asyncio.Event()
        locator.subscribe(self._leader_changed)

    def age(self) -> float:
        """Seconds since the last accepted report; +inf before the first."""
        return math.inf if self.last_sent_at is None else self._clock() - self.last_sent_at

    def _leader_changed(self, leader: Leader | None) -> None:
        if leader is not None and leader.identity != self.delivered_to:
            self._wake.set()

    # ---- one check -------------------------------------------------------------------------------

    def due(self, snapshot: Snapshot) -> str | None:
        """The trigger for sending `snapshot` now, or None."""
        leader = self.locator.leader
        if self.last_sent is not None and leader is not None and leader.identity != self.delivered_to:
            return "leader-changed"  # even while retrying: the new leader needs it whatever the old reason
        if self._pending is not None:
            return self._pending
        since = math.inf if self.last_sent_at is None else self._clock() - self.last_sent_at
        return report_trigger(self.last_sent, snapshot, since_last=since, max_interval=self.max_interval,
                              threshold=self.options.change_threshold)

    async def check(self) -> float:
        """Send the latest state if it is due; return the seconds until the next check."""
        if not self.locator.read_once:
            await self.locator.refresh()
        snapshot = self.snapshot()
        if snapshot is None:
            return self.options.report_interval  # nothing collected yet
        trigger = self.due(snapshot)
        if trigger is None:
            return self.options.report_interval
        try:
            route, leader = await self.deliver(orjson.dumps(snapshot.body))
        except ReportFailed as failure:
            self._pending = trigger
            delay = self._backoff.next_delay()
            log.warning("report failed, retrying", extra={"node": self.node, "error": str(failure),
                                                          "trigger": trigger, "retry_in": round(delay, 2)})
            return delay
        self._pending = None
        self._backoff.reset()
        if self.last_sent is not None and leader is not None and leader != self.delivered_to:
            # The first full report a new leader gets is the re-send, even when a retry that
            # found the new leader on its way delivered it before the change was noticed.
            trigger = "leader-changed"
        self.last_sent, self.last_sent_at, self.delivered_to = snapshot, self._clock(), leader
        self.metrics.reports_sent.labels(route, trigger).inc()
        log.debug("report sent", extra={"node": self.node, "route": route, "trigger": trigger})
        return self.options.report_interval

    # ---- delivery --------------------------------------------------------------------------------

    async def deliver(self, body: bytes) -> tuple[str, str | None]:
        """PUT the report: to the leader if possible, else through kube-apiserver.

        Returns (route, identity of the leader it reached as far as known); raises ReportFailed.
        Each failed attempt on the way is counted by reason.
        """
        skip_direct = False
        for _ in range(3):  # leader, a new leader after a 503, kube-apiserver
            leader = self.locator.leader
            if leader is None or not leader.reachable or skip_direct:
                return await self._through_apiserver(body)
            try:
                status, answer = await self._limited(self.direct(leader, self.path, body,
                                                                 self.options.request_timeout))
            except TimeoutError:
                self._failed("leader-timeout")
            except (aiohttp.ClientError, OSError):
                self._failed("leader-unreachable")
            else:
                if 200 <= status < 300:
                    return "leader", leader.identity
                if status == 401:  # no token the leader accepts (a client certificate, say)
                    self._failed("leader-unauthorized")
                    skip_direct = True
                    continue
                if status != 503:
                    self._failed(_http_reason(status))
                    raise ReportFailed(_http_reason(status), _message(answer))
                self._failed("standby")
            # Unreachable, or a standby answered: the Lease may name someone else by now.
            await self.locator.refresh()
            if self.locator.leader == leader:
                skip_direct = True
        return await self._through_apiserver(body)

    async def _through_apiserver(self, body: bytes) -> tuple[str, str | None]:
        try:
            status, answer = await self._limited(self.kube.request("PUT", self.path, body=body,
                                                                   timeout=self.options.request_timeout))
        except TimeoutError as error:
            self._failed("timeout")
            raise ReportFailed("timeout", "no answer from kube-apiserver") from error
        except Exception as error:  # the connection failed
            self._failed("unreachable")
            raise ReportFailed("unreachable", str(error) or type(error).__name__) from error
        if 200 <= status < 300:
            leader = self.locator.leader
            return "apiserver", leader.identity if leader is not None else None
        self._failed(_http_reason(status))
        raise ReportFailed(_http_reason(status), _message(answer))

    async def _limited(self, request: Awaitable[tuple[int, Any]]) -> tuple[int, Any]:
        if self.slots is None:
            return await request
        async with self.slots:
            return await request

    def _failed(self, reason: str) -> None:
        self.metrics.reports_failed.labels(reason).inc()

    # ---- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            delay = await self.check()
            if not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
