"""Replicas share the evaluation shards through a Lease each, against fake Leases and a fake clock."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from colocation.controllers.evaluation_shards import ranked_shards, shard_of
from colocation.kube.leaderelection import LeaderElector
from colocation.manager.shard_elections import ShardElections
from tests.unit.kube.test_leaderelection import FakeLeases, FakeTime

SHARDS = 4
NODES = [f"node-{index}" for index in range(200)]


class SharedTime(FakeTime):
    """Fake time for many sleepers at once: each sleep waits for the clock to reach its end, and
    `until` moves the clock to the earliest end whenever the loop has nothing else to run."""

    def __init__(self) -> None:
        super().__init__()
        self._order = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    async def sleep(self, delay: float) -> None:
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(delay, 0.0), next(self._order), wake))
        await wake

    async def until(self, condition: Callable[[], object], within: float = 120.0) -> None:
        deadline = self.now + within
        while True:
            for _ in range(50):  # what is ready runs first
                await asyncio.sleep(0)
            if condition():
                return
            while self._sleepers and self._sleepers[0][2].done():  # cancelled sleeps
                heapq.heappop(self._sleepers)
            if not self._sleepers or self._sleepers[0][0] > deadline:
                raise AssertionError(f"condition not reached within {within} s of fake time")
            when, _, wake = heapq.heappop(self._sleepers)
            self.to(max(when, self.now))
            wake.set_result(None)


class Replica:
    """One replica's shard elections, the Leases shared with the others through `leases`."""

    def __init__(self, identity: str, leases: dict[str, FakeLeases], time: SharedTime, ready: set[str],
                 stopped: set[str] | None = None) -> None:
        """`stopped`: the replicas whose pods are seen stopped (`holder_ended`)."""
        self.changes = 0

        def elector(api: Any, namespace: str, name: str, **options: Any) -> LeaderElector:
            store = leases.setdefault(name, FakeLeases(time))
            return LeaderElector(None, namespace, name, leases=store, clock=time.monotonic, wall=time.wall,
                                 sleep=time.sleep, **options)

        def changed() -> None:
            self.changes += 1

        self.elections = ShardElections(None, namespace="ns", identity=identity, shards=SHARDS,
                                        ready_replicas=lambda: ready, on_change=changed, lease_duration=15,
                                        renew_deadline=10, retry_period=2, elector_factory=elector,
                                        sleep=time.sleep, clock=time.monotonic,
                                        holder_ended=lambda record: record.holder_identity in (stopped or ()))

    def crash(self) -> None:
        """The process dies: its campaigns stop, its Leases are neither renewed nor released."""
        for task in self.elections._campaigns.values():
            task.cancel()


async def sharing(leases: dict[str, FakeLeases], time: SharedTime, ready: set[str],
                  stopped: set[str] | None = None) -> tuple[Replica, Replica]:
    """Replicas a and b, both Ready, once every shard is held by one of them."""
    a, b = Replica("a", leases, time, ready, stopped), Replica("b", leases, time, ready, stopped)
    await a.elections.rebalance()
    await b.elections.rebalance()
    await time.until(lambda: a.elections.held | b.elections.held == set(range(SHARDS)))
    return a, b


@pytest.fixture
def time() -> SharedTime:
    return SharedTime()


async def test_two_ready_replicas_share_every_shard_and_each_node_has_one_evaluator(time: SharedTime) -> None:
    leases: dict[str, FakeLeases] = {}
    ready = {"a", "b"}
    a, b = await sharing(leases, time, ready)
    assert a.elections.held == ranked_shards("a", ready, SHARDS)[0]
    assert b.elections.held == ranked_shards("b", ready, SHARDS)[0]
    assert a.elections.held and b.elections.held  # with 4 shards, these two names split them
    for node in NODES:
        owner, other = (a, b) if shard_of(node, SHARDS) in a.elections.held else (b, a)
        assert owner.elections.owns(node) and not other.elections.owns(node)
        assert owner.elections.write_budget_of(node)() > 0
        assert other.elections.write_budget_of(node)() == 0  # its writes for the node are fenced
    assert a.changes == len(a.elections.held) and b.changes == len(b.elections.held)
    await a.elections.stop()
    await b.elections.stop()


async def test_a_replica_that_stops_hands_its_shards_to_the_other_at_once(time: SharedTime) -> None:
    leases: dict[str, FakeLeases] = {}
    ready = {"a", "b"}
    a, b = await sharing(leases, time, ready)
    handed = b.elections.held
    ready.discard("b")  # b drains: it leaves the presence bucket, then releases its shards
    await b.elections.stop()
    assert b.elections.held == frozenset() and not any(b.elections.owns(node) for node in NODES)
    stopped_at = time.now
    await a.elections.rebalance()
    await time.until(lambda: a.elections.held == set(range(SHARDS)))
    assert time.now - stopped_at < 1  # released: no wait for the leases to expire (15 s)
    assert all(a.elections.owns(node) for node in NODES)
    assert a.changes == SHARDS and b.changes == 2 * len(handed)  # started, then handed over
    await a.elections.stop()


async def test_a_crashed_replicas_shards_are_taken_by_their_watcher_once_it_is_forgotten(time: SharedTime) -> None:
    """Each shard's watcher (its owner if the owner were gone): once the presence bucket forgets the dead
    one, it takes the shards whose Leases it saw expire at once, not a lease duration later."""
    leases: dict[str, FakeLeases] = {}
    ready = {"a", "b"}
    a, b = await sharing(leases, time, ready)
    started = time.now
    await time.until(lambda: time.now > started + 6)  # b renews its leases a few times
    orphaned = b.elections.held
    b.crash()
    crashed_at = time.now
    await time.until(lambda: time.now > crashed_at + 20)  # b's leases expired; it is still announced
    assert a.elections.held & orphaned == frozenset()  # a watcher never takes a shard of a replica ahead
    ready.discard("b")  # its announcement expired
    forgotten_at = time.now
    await a.elections.rebalance()
    await time.until(lambda: a.elections.held == set(range(SHARDS)))
    assert time.now - forgotten_at < 1  # the watcher had seen the expiry: no lease duration to wait
    assert all(a.elections.owns(node) for node in NODES)
    await a.elections.stop()


async def test_a_replica_that_is_not_ready_campaigns_for_no_shard(time: SharedTime) -> None:
    leases: dict[str, FakeLeases] = {}
    a = Replica("a", leases, time, {"b"})  # b is Ready, a not yet (its copy still catching up)
    await a.elections.rebalance()
    for _ in range(50):
        await asyncio.sleep(0)
    assert a.elections.held == frozenset() and leases == {}  # not even a Lease read



async def test_a_shard_taken_from_a_stopped_pod_is_kept_while_the_dead_replica_is_still_announced(
        time: SharedTime) -> None:
    leases: dict[str, FakeLeases] = {}
    ready, stopped = {"a", "b"}, set[str]()
    a, b = await sharing(leases, time, ready, stopped)
    orphaned = b.elections.held
    b.crash()
    stopped.add("b")  # its pod seen stopped: a's watchers take its shards at once
    crashed_at = time.now
    await time.until(lambda: a.elections.held == set(range(SHARDS)))
    assert time.now - crashed_at < 2
    for look in range(1, 6):  # b still announced for 15 s: a keeps its shards all the same
        await a.elections.rebalance()
        until = crashed_at + 3 * look
        await time.until(lambda: time.now > until)  # noqa: B023 (awaited at once)
        assert orphaned <= a.elections.held
    ready.discard("b")
    await a.elections.rebalance()
    assert a.elections.held == set(range(SHARDS))
    await a.elections.stop()


async def test_a_replica_that_joins_gets_its_shards_from_one_that_held_them_long(time: SharedTime) -> None:
    leases: dict[str, FakeLeases] = {}
    ready = {"a"}
    a = Replica("a", leases, time, ready)
    await a.elections.rebalance()
    await time.until(lambda: a.elections.held == set(range(SHARDS)))
    await time.until(lambda: time.now > 1060)  # held for long
    ready.add("b")
    b = Replica("b", leases, time, ready)
    await b.elections.rebalance()
    joined_at = time.now
    await a.elections.rebalance()  # hands b its shards
    await time.until(lambda: b.elections.held == ranked_shards("b", ready, SHARDS)[0])
    assert time.now - joined_at < 2 and a.elections.held == ranked_shards("a", ready, SHARDS)[0]
    await a.elections.stop()
    await b.elections.stop()
