"""The Node as the strategies read it: the cpu it reserves, its memory capacity, its batch allocatable.

One reader per node (colocation.agent.strategies.strategy_host), read from the Node while a
strategy needs it (CPU suppress, memory or cpu eviction, NodeSLO permitting).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import aiohttp

from colocation.agent.kubeapi import KubeApi
from colocation.agent.strategies.cpu_suppress.cpu_suppress import (
    node_batch_cpu_allocatable,
    node_memory_capacity,
    node_reserved_cpu,
)
from colocation.kube import permissions
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

permissions.declared(permissions.AGENT_API_CALLS,
                     permissions.ApiCall(group="", resource="nodes", verb="get", namespace=None))


class NodeReservation:
    """The cpu its Node reserves for the system
    (colocation.agent.strategies.cpu_suppress.cpu_suppress.node_reserved_cpu), its memory capacity
    (memory eviction's 100 %) and its allocatable batch-cpu (cpu eviction's limit with
    evictByAllocatable), read from the Node while `wanted()` (a strategy needs them): at once, then
    every `refresh` seconds (with jitter); after a failure, again with backoff. Nothing is read
    while none does."""

    def __init__(self, kube: KubeApi, node: str, *, timeout: float, refresh: float = 300.0,
                 poll: float = 1.0, rng: random.Random | None = None) -> None:
        self.kube = kube
        self.node = node
        self.timeout = timeout
        self.refresh = refresh
        self.poll = poll
        self.cpu_millis = 0
        self.memory_capacity: int | None = None  # bytes; None until read (or not a quantity)
        self.batch_cpu_allocatable: int | None = None  # milli-cpus of kubernetes.io/batch-cpu; None until read
        self._rng = rng or random.Random()

    async def run(self, wanted: Callable[[], bool]) -> None:
        backoff = Backoff(initial=1.0, maximum=60.0, jitter=0.5, rng=self._rng)
        while True:
            if not wanted():
                await asyncio.sleep(self.poll)
                continue
            if await self.read():
                backoff.reset()
                await asyncio.sleep(self.refresh * (1 - 0.2 * self._rng.random()))
            else:
                await asyncio.sleep(backoff.next_delay())

    async def read(self) -> bool:
        try:
            status, body = await self.kube.request("GET", f"/api/v1/nodes/{self.node}",
                                                   timeout=self.timeout)
        except (OSError, TimeoutError, aiohttp.ClientError) as error:
            status, body = 0, str(error)
        if status == 200 and isinstance(body, dict):
            self.cpu_millis = node_reserved_cpu(body)
            self.memory_capacity = node_memory_capacity(body)
            self.batch_cpu_allocatable = node_batch_cpu_allocatable(body)
            return True
        log.info("cannot read the Node's reservation", extra={"node": self.node, "status": status})
        return False

