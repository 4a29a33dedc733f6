"""The controllers' loop on a standby and on promotion: formulas computed ahead, nothing evaluated
before the Lease, the first evaluation at once, the agents' writes held for it (boundedly); node
health judged as of the NodeMetric copy's last confirmed moment."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from colocation.apimachinery.confirmed_clock import ConfirmedClock
from colocation.controllers import leader_task
from colocation.controllers.leader_task import Controllers
from colocation.controllers.settings import ControllerSettings
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from tests.clock import FakeClock
from tests.unit.controllers.test_reconciler_shards import FakeShards

WAIT = 10.0


def controllers() -> Controllers:
    # No API calls happen here: the configuration read and the evaluation are replaced below.
    return Controllers(object(),  # type: ignore[arg-type]
                       NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic), ControllerSettings(),
                       namespace="colocation-system", identity="operator-0", registry=CollectorRegistry())


@contextlib.asynccontextmanager
async def running_loop(c: Controllers, monkeypatch: pytest.MonkeyPatch, *, prepare: Callable[[], Awaitable[None]],
                       evaluate: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """`c`'s loop with its configuration read at once, every pod listed, and these passes."""

    async def loaded() -> None:
        c.config.loaded = True

    monkeypatch.setattr(c, "_load_config", loaded)
    monkeypatch.setattr(c.resources, "prepare", prepare)
    monkeypatch.setattr(c, "_evaluate", evaluate)
    c.state.pods_synced.set()
    loop = asyncio.create_task(c._loop())
    try:
        yield
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop


async def test_a_standby_prepares_and_evaluates_only_once_promoted_and_writes_wait_for_that(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = controllers()
    prepared, evaluations = asyncio.Event(), asyncio.Event()
    evaluating = asyncio.Event()
    finish = asyncio.Event()

    async def prepare() -> None:
        prepared.set()

    async def evaluate() -> None:
        evaluating.set()
        await finish.wait()
        evaluations.set()

    async with running_loop(c, monkeypatch, prepare=prepare, evaluate=evaluate):
        await asyncio.wait_for(prepared.wait(), WAIT)
        assert not evaluating.is_set() and c.metrics.warm._value.get() == 1
        c.promote()
        await asyncio.wait_for(evaluating.wait(), WAIT)
        held = asyncio.create_task(c.first_evaluation_done())
        await asyncio.sleep(0)
        assert not held.done()  # an agent's write waits while the first evaluation runs...
        finish.set()
        await asyncio.wait_for(held, WAIT)  # ...and goes on once it has finished
        assert evaluations.is_set()
        await asyncio.wait_for(c.first_evaluation_done(), WAIT)  # later writes do not wait


async def test_writes_wait_for_a_first_evaluation_no_longer_than_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader_task, "FIRST_EVALUATION_HOLD", WAIT)
    c = controllers()
    await asyncio.wait_for(c.first_evaluation_done(), WAIT / 2)  # not warm yet: nothing to wait for
    monkeypatch.setattr(leader_task, "FIRST_EVALUATION_HOLD", 0.2)
    c._warm = True  # warm, and its first evaluation never comes: the hold runs out
    started = time.monotonic()
    await asyncio.wait_for(c.first_evaluation_done(), WAIT)
    assert time.monotonic() - started >= 0.2


async def test_a_demoted_leader_judges_no_node_until_promoted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    c = controllers()
    evaluations, prepares_since_demotion, demoted = [0], [0], [False]
    prepared_twice_since_demotion, evaluated_again = asyncio.Event(), asyncio.Event()

    async def prepare() -> None:
        if demoted[0]:
            prepares_since_demotion[0] += 1
            if prepares_since_demotion[0] >= 2:
                prepared_twice_since_demotion.set()

    async def evaluate() -> None:
        evaluations[0] += 1
        if evaluations[0] > 1:
            evaluated_again.set()

    async with running_loop(c, monkeypatch, prepare=prepare, evaluate=evaluate):
        c.promote()
        await asyncio.wait_for(c.first_evaluation_done(), WAIT)
        assert evaluations[0] == 1
        demoted[0] = True
        c.demote()  # the Lease could not be renewed: back to preparing, judging nothing
        await asyncio.wait_for(prepared_twice_since_demotion.wait(), WAIT)  # a whole pass apart
        assert evaluations[0] == 1
        held = asyncio.create_task(c.first_evaluation_done())
        c.promote()  # renewed: every node judged at once, and writes wait for it again
        await asyncio.wait_for(evaluated_again.wait(), WAIT)
        await asyncio.wait_for(held, WAIT)


async def test_a_replica_holding_a_shard_evaluates_and_leaves_nodeslos_and_deleted_nodes_to_the_leader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    shards = FakeShards(set())
    c = Controllers(object(),  # type: ignore[arg-type]
                    NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic), ControllerSettings(),
                    namespace="colocation-system", identity="operator-1", registry=CollectorRegistry(),
                    shards=shards)
    evaluated, prepared = asyncio.Event(), asyncio.Event()
    leader_work: list[str] = []

    async def evaluate_nodes() -> None:
        evaluated.set()

    async def prepare() -> None:
        prepared.set()

    async def record(name: str) -> None:
        leader_work.append(name)

    monkeypatch.setattr(c.resources, "evaluate", evaluate_nodes)
    monkeypatch.setattr(c.resources, "remove", record)
    monkeypatch.setattr(c.nodeslos, "remove", record)
    monkeypatch.setattr(c.nodeslos, "reconcile", record)
    monkeypatch.setattr(c.nodeslos, "pending", lambda: ["nodeslo-due"])
    async with running_loop(c, monkeypatch, prepare=prepare, evaluate=c._evaluate):
        await asyncio.wait_for(prepared.wait(), WAIT)
        c.state.deleted_nodes = {"deleted"}
        shards.held = frozenset({1})
        c.shards_changed()  # took a shard, without the leader Lease
        await asyncio.wait_for(evaluated.wait(), WAIT)
        assert leader_work == [] and c.state.deleted_nodes == set()

        shards.held = frozenset()
        prepared.clear()
        c.shards_changed()  # handed it over: back to preparing
        await asyncio.wait_for(prepared.wait(), WAIT)

        evaluated.clear()
        c.promote()
        await asyncio.wait_for(evaluated.wait(), WAIT)
        assert leader_work == ["nodeslo-due"]


def test_a_replica_whose_nodemetric_copy_is_cut_off_judges_no_node_silent_and_runs_on_after_it() -> None:
    real, registry = FakeClock(), CollectorRegistry()
    copy_clock = ConfirmedClock(real, tolerance=3.0)  # JetStreamNodeMetrics.copy_clock
    c = Controllers(object(),  # type: ignore[arg-type]
                    NodeMetricStore(clock_wall=real.wall, clock_monotonic=real.monotonic),
                    ControllerSettings(node_grace_period=10.0), namespace="colocation-system",
                    identity="operator-0", registry=registry, copy_clock=copy_clock)
    c.tracker.track("node-a")
    c.tracker.track("node-b")
    second = 0

    def reports(*nodes: str) -> None:  # every 2 s, applied and confirmed at once: the copy keeps up
        nonlocal second
        for _ in range(10):
            real.advance(2)
            second += 2
            copy_clock.confirm(real.now)
            for node in nodes:
                c.tracker.observe_metric(node, update_time=f"2026-11-29T00:{second // 60:02}:{second % 60:02}Z",
                                         seen_at=real.now)

    reports("node-a", "node-b")  # past the startup grace
    assert c.tracker.evaluate("node-a").healthy and c.tracker.evaluate("node-b").healthy
    real.advance(100)  # cut off: no report reaches the copy, which is not confirmed either
    assert c.tracker.evaluate("node-a").healthy and c.tracker.evaluate("node-b").healthy
    assert registry.get_sample_value("colocation_node_health_held_seconds") == 97
    copy_clock.confirm(real.now)  # caught up: node-a's last report applied now, node-b's agent silent
    c.tracker.observe_metric("node-a", update_time="2026-11-29T00:03:00Z", seen_at=real.now)
    assert c.tracker.evaluate("node-a").healthy  # no gap between its reports: no new streak
    assert registry.get_sample_value("colocation_node_health_held_seconds") == 0
    reports("node-a")  # node-b silent for a grace period of the copy's time
    assert c.tracker.evaluate("node-a").healthy and not c.tracker.evaluate("node-b").healthy
