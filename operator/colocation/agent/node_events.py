"""Kubernetes Events about the agent's Node, posted in the background.

Enforcement reports what it does as core/v1 Events on the Node (namespace `default`, where the
kubelet puts node events), so `kubectl describe node` shows when suppression started and
stopped. Events are rare (a strategy starting or stopping, not every round): the queue is small
and bounded, an Event that does not fit is dropped and counted, and each is retried a few times
with backoff and jitter, every request under a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from colocation.agent.kubeapi import KubeApi
from colocation.apimachinery.clock import format_time
from colocation.kube import permissions
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

EVENT_NAMESPACE = "default"
REPORTING_COMPONENT = "colocation-agent"
_EVENTS = permissions.declared(permissions.AGENT_API_CALLS,
                               permissions.ApiCall(group="", resource="events", verb="create",
                                                   namespace=EVENT_NAMESPACE))
_ATTEMPTS = 4


@dataclass(frozen=True)
class NodeEvent:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def event_body(node: str, event: NodeEvent, at: float, *, instance: str) -> dict[str, Any]:
    stamp = format_time(at)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{node[:200]}.{uuid.uuid4().hex[:16]}", "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": event.reason, "message": event.message[:1024], "type": event.type,
        "count": 1, "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": REPORTING_COMPONENT, "host": node},
        "reportingComponent": REPORTING_COMPONENT, "reportingInstance": instance,
    }


class NodeEvents:
    """`post()` queues an Event (never blocks); `run()` sends them."""

    def __init__(self, kube: KubeApi, node: str, *, wall: Callable[[], float], timeout: float = 5.0,
                 capacity: int = 16, on_result: Callable[[str], None] = lambda result: None,
                 backoff: Callable[[], Backoff] = lambda: Backoff(initial=1.0, maximum=10.0, jitter=0.5)) -> None:
        self.kube = kube
        self.node = node
        self.timeout = timeout
        self.on_result = on_result
        self._wall = wall
        self._backoff = backoff
        self._queue: asyncio.Queue[NodeEvent] = asyncio.Queue(maxsize=capacity)

    def post(self, event: NodeEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.on_result("dropped")

    async def run(self) -> None:
        while True:
            await self.send(await self._queue.get())

    async def drain(self, deadline: float) -> None:
        """Send what is queued within `deadline` seconds (at exit)."""
        try:
            async with asyncio.timeout(deadline):
                while not self._queue.empty():
                    await self.send(self._queue.get_nowait(), attempts=1)
        except TimeoutError:
            pass

    async def send(self, event: NodeEvent, attempts: int = _ATTEMPTS) -> bool:
        body = event_body(self.node, event, self._wall(), instance=f"{REPORTING_COMPONENT}-{self.node}")
        path = f"/api/v1/namespaces/{_EVENTS.namespace}/events"
        backoff = self._backoff()
        for attempt in range(attempts):
            try:
                status, answer = await self.kube.request("POST", path, body=body, timeout=self.timeout)
            except (OSError, TimeoutError, aiohttp.ClientError) as error:
                status, answer = 0, str(error) or type(error).__name__
            if status in (200, 201):
                self.on_result("ok")
                return True
            if attempt + 1 < attempts and (status == 0 or status == 429 or status >= 500):
                await asyncio.sleep(backoff.next_delay())
                continue
            break
        log.warning("cannot post node event", extra={"node": self.node, "reason": event.reason,
                                                     "status": status, "answer": str(answer)[:200]})
        self.on_result("failed")
        return False
