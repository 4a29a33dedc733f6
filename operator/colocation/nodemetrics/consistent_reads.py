"""Consistent reads on a standby: a get or list without a resourceVersion sees what the leader had.

Before such a read, a standby asks the leader its current resourceVersion (`leader_version`; the
Lease decides when the leader cannot be asked) and waits until its copy has applied that much
(`applied_version`: the replicated version, 0 before the first copy, never its own clock). A copy
that does not get there within `timeout`, or cannot tell, answers 503 with Retry-After. A read
naming a resourceVersion ahead waits for it: on a standby for the copy, on the leader for its
clock; past `timeout` it gets 504 "Too large resource version". A read never moves the store's
resourceVersion.

Why: docs/operator.md#consistency-across-replicas
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter

from colocation.apimachinery.clock import WallClock
from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.resource_versions import seconds_until_reached, too_large

log = logging.getLogger(__name__)


class ConsistentReadMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reads = Counter(
            "colocation_standby_consistent_reads_total",
            "Gets and lists without a resourceVersion on a standby, by outcome: current (its copy had what the "
            "leader had), no-leader (no replica can hold newer data: served from the copy), lagging (the copy did "
            "not reach the leader's resourceVersion in time), unknown (the leader's resourceVersion could not be "
            "learnt in time), unsynced (no leader to ask and nothing copied yet); the last three are answered 503 "
            "with Retry-After.",
            ["outcome"], registry=registry)
        self.too_large = Counter(
            "colocation_reads_too_large_resource_version_total",
            "Reads naming a resourceVersion this replica did not reach in time (answered 504 with Retry-After).",
            registry=registry)


async def reach_by_clock(resource_version: int, current: Callable[[], int], wall: WallClock,
                         *, timeout: float) -> None:
    """Return once a store that issues its own versions (the leader) has reached `resource_version`:
    at once if its clock has passed it, after waiting if it will within `timeout`; else 504."""
    wait = seconds_until_reached(resource_version, current(), wall())
    if wait > timeout:
        raise too_large(resource_version, current())
    if wait > 0:
        await asyncio.sleep(wait)  # only time brings the clock there


class ConsistentReads:
    """The barrier reads pass. On the leader (`leads()` true) it lets everything through but a
    resourceVersion its clock has not passed; on a standby it waits for its copy."""

    def __init__(self, leads: Callable[[], bool], leader_version: Callable[[], Awaitable[int | None]],
                 applied_version: Callable[[], int], *, metrics: ConsistentReadMetrics, timeout: float = 2.0,
                 wall: WallClock = time.time) -> None:
        self.leads = leads
        self.wall = wall
        self.leader_version = leader_version
        self.applied_version = applied_version
        self.metrics = metrics
        self.timeout = timeout
        self._advanced = asyncio.Condition()

    async def advanced(self) -> None:
        """The copy applied more of the leader's feed: wake the reads waiting for it."""
        async with self._advanced:
            self._advanced.notify_all()

    async def wait(self, resource_version: int = 0) -> None:
        """Return once a read may be served. Without a resourceVersion: at once on the leader, else
        when the copy is current or no leader can hold newer data; 503 (Retry-After) when the copy
        stays behind. With one: once this replica has reached it; 504 (Retry-After) when it does not."""
        if resource_version:
            try:
                await self._reach(resource_version)
            except ApiError:
                self.metrics.too_large.inc()
                raise
            return
        if self.leads():
            return
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                target = await self.leader_version()
        except (TimeoutError, OSError) as error:
            self.metrics.reads.labels("unknown").inc()
            raise ApiError.service_unavailable(
                f"this replica could not learn the leader's resourceVersion ({type(error).__name__}); retry",
                retry_after=1) from None
        if target is None:
            if not self.applied_version():
                # Nobody to copy from, and nothing copied yet: an empty list is not the cluster's.
                self.metrics.reads.labels("unsynced").inc()
                raise ApiError.service_unavailable(
                    "this replica has not copied the leader's NodeMetrics yet; retry", retry_after=1)
            self.metrics.reads.labels("no-leader").inc()
            return
        try:
            async with asyncio.timeout_at(deadline), self._advanced:
                await self._advanced.wait_for(lambda: self.applied_version() >= target)
        except TimeoutError:
            self.metrics.reads.labels("lagging").inc()
            applied = self.applied_version()
            log.info("refused a read: the copy is behind the leader", extra={"applied": applied, "leader": target})
            raise ApiError.service_unavailable(
                f"this replica's copy (resourceVersion {applied}) is behind the leader's ({target}); "
                f"retry", retry_after=1) from None
        self.metrics.reads.labels("current").inc()

    async def _reach(self, resource_version: int) -> None:
        if self.leads():
            await reach_by_clock(resource_version, self.applied_version, self.wall, timeout=self.timeout)
            return
        try:
            async with asyncio.timeout(self.timeout), self._advanced:
                await self._advanced.wait_for(lambda: self.applied_version() >= resource_version)
        except TimeoutError:
            raise too_large(resource_version, self.applied_version()) from None
