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
    return ConsistentReads(lambda: copy.leading, copy.leader_version, lambda: copy.applied, metrics=metrics,
                           timeout=timeout), metrics


def outcome(metrics: ConsistentReadMetrics, name: str) -> float:
    return float(metrics.reads.labels(name)._value.get())


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


async def test_a_copy_that_holds_nothing_yet_is_not_served_when_no_leader_can_be_asked() -> None:
    copy = Copy(applied=0, leader=None)  # a replica just started, the leader gone
    reads, metrics = barrier(copy, timeout=0.05)
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(reads.wait(), 5)
    assert refused.value.code == 503 and refused.value.details == {"retryAfterSeconds": 1}
    assert outcome(metrics, "unsynced") == 1 and outcome(metrics, "no-leader") == 0


async def test_a_copy_that_holds_nothing_yet_waits_for_a_known_leaders_data() -> None:
    copy = Copy(applied=0, leader=105)
    reads, metrics = barrier(copy, timeout=0.05)
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(reads.wait(), 5)
    assert refused.value.code == 503 and outcome(metrics, "lagging") == 1


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
    reads = ConsistentReads(lambda: copy.leading, never, lambda: copy.applied, metrics=metrics, timeout=0.05)
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(reads.wait(), 5)
    assert refused.value.code == 503 and outcome(metrics, "unknown") == 1


NOW = 1_800_000_000.0
NOW_RV = int(NOW * 1_000_000)


def named_barrier(copy: Copy, timeout: float = 5.0) -> tuple[ConsistentReads, ConsistentReadMetrics]:
    metrics = ConsistentReadMetrics(CollectorRegistry())
    return ConsistentReads(lambda: copy.leading, copy.leader_version, lambda: copy.applied, metrics=metrics,
                           timeout=timeout, wall=lambda: NOW), metrics


async def test_a_read_at_a_version_ahead_of_a_standbys_copy_waits_for_the_copy_to_reach_it() -> None:
    copy = Copy(applied=NOW_RV - 10, leader=None)
    reads, _ = named_barrier(copy)
    read = asyncio.create_task(reads.wait(NOW_RV - 5))
    await asyncio.sleep(0)
    copy.applied = NOW_RV - 6
    await reads.advanced()
    await asyncio.sleep(0)
    assert not read.done()
    copy.applied = NOW_RV - 5
    await reads.advanced()
    await asyncio.wait_for(read, 5)
    assert copy.asked == 0  # the version named is the target: nobody needs asking


async def test_a_standby_that_does_not_reach_the_version_in_time_answers_too_large() -> None:
    copy = Copy(applied=NOW_RV - 10, leader=None)
    reads, metrics = named_barrier(copy, timeout=0.05)
    with pytest.raises(ApiError) as caught:
        await asyncio.wait_for(reads.wait(NOW_RV - 5), 5)
    assert (caught.value.code, caught.value.reason, caught.value.details["retryAfterSeconds"]) == (504, "Timeout", 1)
    assert caught.value.message == f"Timeout: Too large resource version: {NOW_RV - 5}, current: {NOW_RV - 10}"
    assert metrics.too_large._value.get() == 1
    assert copy.applied == NOW_RV - 10


async def test_the_leader_has_reached_every_version_its_clock_has_passed() -> None:
    # A client of the previous leader saw a version this store's counter is below: nothing was
    # written here since, and the next write takes the clock, above it.
    copy = Copy(applied=NOW_RV - 30_000_000, leader=None)
    copy.leading = True
    reads, _ = named_barrier(copy, timeout=0.05)
    await asyncio.wait_for(reads.wait(NOW_RV - 1), 5)
    with pytest.raises(ApiError) as caught:  # one the clock has not reached, and will not in time
        await asyncio.wait_for(reads.wait(NOW_RV + 60_000_000), 5)
    assert caught.value.code == 504 and copy.applied == NOW_RV - 30_000_000
