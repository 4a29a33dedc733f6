"""The leader's sweep of silent nodes: from its own store, or through a store every replica writes."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CollectorRegistry

from colocation.nodemetrics.silent_node_expiry import expire_silent_nodes
from colocation.nodemetrics.storage_metrics import StorageMetrics
from tests.clock import FakeClock
from tests.timing import eventually_async
from tests.unit.nodemetrics.test_nodemetric_store import make_store, report


async def test_a_node_silent_for_the_ttl_is_dropped_by_the_store_or_removed_where_every_replica_writes() -> None:
    clock = FakeClock(100.0, wall=1_795_341_600.0)
    store = make_store(clock, ttl_seconds=600)
    for node in ("node-a", "node-b"):
        store.put(report(node), {})
    clock.advance(590)
    store.put(report("node-b", cpu="2"), {})
    clock.advance(20)  # node-a silent for 610 s, node-b for 20 s
    removed: list[str] = []

    async def remove(name: str) -> bool:
        removed.append(name)
        return True

    shared = StorageMetrics(CollectorRegistry())
    sweep = asyncio.create_task(expire_silent_nodes(store, shared, 0.01, remove=remove))
    await eventually_async(lambda: removed, message="the silent node removed")
    sweep.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sweep
    assert set(removed) == {"node-a"} and store.get("node-a") is not None  # the copy waits for the log's delete
    registry = CollectorRegistry()
    own = StorageMetrics(registry)
    sweep = asyncio.create_task(expire_silent_nodes(store, own, 0.01))
    await eventually_async(lambda: store.get("node-a") is None, message="the silent node dropped")
    sweep.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sweep
    assert store.get("node-b") is not None
    assert registry.get_sample_value("colocation_nodemetric_expired_total") == 1
