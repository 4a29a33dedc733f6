"""A standby's reads without a resourceVersion wait for its copy to hold what the leader had."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.consistent_reads import ConsistentReadMetrics, ConsistentReads


class Copy:
    def __init__(self, applied: int, leader: int | None) -> None:
        self.applied, self.leader, self.leading = applied, leader, False
        self.asked = 0

    async def leader_version(self) -> int | None:
        self.asked += 1
        return self.leader


def barrier(copy: Copy, timeout: float = 5.0) -> tuple[ConsistentReads, ConsistentReadMetrics]:
    metrics = ConsistentReadMetrics(CollectorRegistry())
    return ConsistentReads(lambda: copy.leading, copy.leader_version, lambda: copy.applied, metrics,
                           timeout=timeout), metrics


def outcome(metrics: ConsistentReadMetrics, name: str) -> float:
    return metrics.reads.labels(name)._value.get()


async def test_a_read_waits_until_the_copy_has_applied_the_leaders_version() -> None:
    copy = Copy(applied=100, leader=105)
    reads, metrics = barrier(copy)
    read = asyncio.create_task(reads.wait())
    await asyncio.sleep(0)  # let it ask the leader and start waiting
    copy.applied = 104
    await reads.advanced()
    await asyncio.sleep(0)
    assert not read.done()
    copy.applied = 105
    await reads.advanced()
    await asyncio.wait_for(read, 5)
    assert outcome(metrics, "current") == 1


async def test_the_leader_reads_its_own_store_without_asking_anyone() -> None:
    copy = Copy(applied=100, leader=200)
    copy.leading = True
    reads, metrics = barrier(copy)
    await asyncio.wait_for(reads.wait(), 5)
    assert copy.asked == 0 and outcome(metrics, "current") == 0


async def test_without_a_leader_to_ask_the_copy_is_served_as_it_is() -> None:
    copy = Copy(applied=100, leader=None)  # no replica can hold newer data (the Lease names no other holder)
    reads, metrics = barrier(copy, timeout=0.05)
    await asyncio.wait_for(reads.wait(), 5)
    assert outcome(metrics, "no-leader") == 1


async def test_a_copy_that_stays_behind_a_known_leader_is_not_served() -> None:
    copy = Copy(applied=100, leader=200)
    reads, metrics = barrier(copy, timeout=0.05)
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(reads.wait(), 5)
    assert refused.value.code == 503 and refused.value.details == {"retryAfterSeconds": 1}
    assert "100" in refused.value.message and "200" in refused.value.message
    assert outcome(metrics, "lagging") == 1


async def test_a_standby_that_cannot_tell_in_time_does_not_serve_the_read() -> None:
    copy = Copy(applied=100, leader=None)

    async def never() -> int | None:
        await asyncio.Event().wait()  # the Lease read hangs
        return None

    metrics = ConsistentReadMetrics(CollectorRegistry())
    reads = ConsistentReads(lambda: copy.leading, never, lambda: copy.applied, metrics, timeout=0.05)
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(reads.wait(), 5)
    assert refused.value.code == 503 and outcome(metrics, "unknown") == 1
