"""This replica's elections for the evaluation shards (`--evaluation-shards`, `--store nats`).

Every `period` it asks `controllers.evaluation_shards.ranked_shards` which shards are assigned to
it, and which it would get if their owner were gone, given the replicas Ready now (the presence
bucket). It campaigns for each shard assigned to it with a `LeaderElector` of its own, and watches
each of the others with one that may not take the Lease (`acquire_after` in the future) until the
shard is assigned to it: when the owner dies and the presence bucket forgets it (15 s at most),
the watcher has seen the Lease's last renewal and takes it as soon as it expires (or at once when
`holder_ended`, the holder's pod seen stopped; it then keeps it until the presence bucket would
have forgotten the holder). It hands over (releases) a shard it holds that is assigned to another,
so a replica that joins gets its share within a period or two. A shard whose election ends (its lease
lost) is campaigned for again after a backoff. The controllers read `owns` and `write_budget_of`
for each node: a node's writes are fenced by its shard's Lease.

Why: docs/architecture.md#evaluation-shards
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from colocation.controllers.evaluation_shards import check_shard_count, ranked_shards, shard_lease_name, shard_of
from colocation.jetstream.replica_presence import ANNOUNCE_INTERVAL, FORGET_AFTER
from colocation.kube.backoff import Backoff
from colocation.kube.leaderelection import LeaderElector
from colocation.kube.lease_record import LeaderElectionRecord

log = logging.getLogger(__name__)

REBALANCE_PERIOD = 2.0  # seconds between two looks at who is Ready
# A shard taken from a replica whose pod was seen stopped, while that replica is still announced:
# kept at least until the presence bucket would have forgotten it, not handed back to the dead.
KEEP_TAKEN_SECONDS = FORGET_AFTER + ANNOUNCE_INTERVAL


class ShardElections:
    def __init__(self, api: Any, *, namespace: str, identity: str, shards: int,
                 ready_replicas: Callable[[], Iterable[str]], on_change: Callable[[], None],
                 lease_duration: float, renew_deadline: float, retry_period: float,
                 holder_ended: Callable[[LeaderElectionRecord], bool] = lambda record: False,
                 period: float = REBALANCE_PERIOD,
                 elector_factory: Callable[..., LeaderElector] = LeaderElector,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        check_shard_count(shards)
        self.count = shards
        self.identity = identity
        self._api = api
        self._namespace = namespace
        self._ready_replicas = ready_replicas
        self._on_change = on_change
        self._timings = {"lease_duration": lease_duration, "renew_deadline": renew_deadline,
                         "retry_period": retry_period}
        self._holder_ended = holder_ended
        self._period = period
        self._elector_factory = elector_factory
        self._sleep = sleep
        self._clock = clock
        self._taken_at: dict[int, float] = {}  # when this replica last started evaluating each shard
        self._rng = rng or random.Random()
        self._electors: dict[int, LeaderElector] = {}
        self._campaigns: dict[int, asyncio.Task[None]] = {}
        self._first: frozenset[int] = frozenset()  # the shards this replica may take

    # ---- what the controllers read ---------------------------------------------------------------

    @property
    def held(self) -> frozenset[int]:
        """The shards this replica evaluates now (their Lease held and renewed in time)."""
        return frozenset(shard for shard, elector in self._electors.items() if elector.is_leader)

    def owns(self, node: str) -> bool:
        elector = self._electors.get(shard_of(node, self.count))
        return elector is not None and elector.is_leader

    def write_budget_of(self, node: str) -> Callable[[], float]:
        """The fence of a node's writes: its shard's elector's budget (0 unless this replica holds it)."""
        elector = self._electors.get(shard_of(node, self.count))
        return elector.write_budget if elector is not None else _nothing

    # ---- running ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Rebalance every period until cancelled; then `stop()` hands every shard over."""
        while True:
            await self.rebalance()
            await self._sleep(self._period * self._rng.uniform(0.8, 1.0))

    async def rebalance(self) -> None:
        ready = set(self._ready_replicas())
        first: frozenset[int] = frozenset()
        second: frozenset[int] = frozenset()
        just_taken: frozenset[int] = frozenset()
        # Not Ready (not caught up with the stream, or draining): evaluate nothing, and leave the
        # shards to the replicas that are.
        if self.identity in ready:
            first, second = ranked_shards(self.identity, ready, self.count)
            now = self._clock()
            # Assigned to another replica, but just taken from it: it may be dead, not forgotten yet.
            just_taken = frozenset(shard for shard in self.held - first
                                   if now - self._taken_at.get(shard, -math.inf) < KEEP_TAKEN_SECONDS)
        self._first = first
        unwatched = self._campaigns.keys() - first - second  # neither to evaluate nor to watch
        given = self.held - first  # held, but assigned to another replica now
        for shard in sorted((unwatched | given) - just_taken):
            await self._hand_over(shard)  # a watched one is watched again below
        for shard, elector in self._electors.items():
            if elector.acquire_after != (may := _may_take(shard in first)):
                elector.acquire_after = may
                elector.wake()  # a watcher that may take its shard now reads the Lease at once
        for shard in sorted((first | second) - self._campaigns.keys()):
            self._campaigns[shard] = asyncio.create_task(self._campaign(shard), name=f"shard {shard} election")

    async def stop(self) -> None:
        """Stop every campaign and release every shard held, so that others take them at once."""
        for shard in sorted(self._campaigns):
            await self._hand_over(shard)

    async def _campaign(self, shard: int) -> None:
        retry = Backoff(self._timings["retry_period"], 4 * self._timings["lease_duration"], jitter=0.5, rng=self._rng)
        while True:
            elector = self._elector_factory(
                self._api, self._namespace, shard_lease_name(shard), identity=self.identity,
                on_started_leading=self._started(shard),
                on_stopped_leading=self._changed(shard, "stopped evaluating"), holder_ended=self._holder_ended,
                acquire_after=_may_take(shard in self._first), **self._timings)
            self._electors[shard] = elector
            try:
                await elector.run()  # returns once the lease is lost
            except Exception:  # the election failed: campaign again after the backoff
                log.exception("evaluation shard election failed", extra={"shard": shard})
            await self._sleep(retry.next_delay())

    def _started(self, shard: int) -> Callable[[], None]:
        changed = self._changed(shard, "started evaluating")

        def started() -> None:
            self._taken_at[shard] = self._clock()
            changed()
        return started

    def _changed(self, shard: int, what: str) -> Callable[[], None]:
        def changed() -> None:
            log.info(f"evaluation shard: {what}", extra={"shard": shard, "lease": shard_lease_name(shard)})
            self._on_change()
        return changed

    async def _hand_over(self, shard: int) -> None:
        task = self._campaigns.pop(shard)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        elector = self._electors.pop(shard, None)
        if elector is not None:
            held = elector.is_leader
            if await elector.release() or held:  # release() calls no callback
                log.info("evaluation shard: handed over", extra={"shard": shard, "lease": shard_lease_name(shard)})
                self._on_change()


def _nothing() -> float:
    return 0.0


def _may_take(first: bool) -> float:
    """A campaign's `acquire_after`: at once for a shard assigned to this replica, else never (it watches)."""
    return -math.inf if first else math.inf
