"""With evaluation shards, a replica reconciles and evicts only the nodes of the shards it holds,
each node's writes fenced by its shard's Lease, while every node's health feeds the zones' guard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from colocation.controllers.evaluation_shards import shard_of
from colocation.controllers.eviction import EvictionPlanner
from colocation.controllers.writers import active_fence
from tests.unit.controllers.test_reconciler import Harness, RecordingApi, healthy_pass, in_zone, pod

SHARDS = 4


class FakeShards:
    """The shard elections as the controllers read them: these shards held, a budget each."""

    count = SHARDS

    def __init__(self, held: set[int]) -> None:
        self.held = frozenset(held)
        self.budgets: dict[int, Callable[[], float]] = {shard: (lambda: 15.0) for shard in range(SHARDS)}

    def owns(self, node: str) -> bool:
        return shard_of(node, SHARDS) in self.held

    def write_budget_of(self, node: str) -> Callable[[], float]:
        return self.budgets[shard_of(node, SHARDS)]


class FenceRecordingApi(RecordingApi):
    """Remembers, for each Node write, the fence it was sent under."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.fences: dict[str, Callable[[], float] | None] = {}

    async def patch_node_status(self, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        self.fences[name] = active_fence()
        return await super().patch_node_status(name, patch)


def sharded(nodes: list[str], held: set[int], **settings: Any) -> tuple[Harness, FakeShards, FenceRecordingApi]:
    h = Harness(nodes, **settings)
    api = FenceRecordingApi(h.state)
    h.api = h.reconciler.writer = api  # type: ignore[assignment]
    shards = FakeShards(held)
    h.reconciler.shards = shards
    return h, shards, api


def names_in(shard: int, count: int, prefix: str = "node") -> list[str]:
    found = (f"{prefix}-{index}" for index in range(10_000))
    return [name for name in found if shard_of(name, SHARDS) == shard][:count]


async def test_only_the_held_shards_nodes_are_written_each_under_its_shards_fence() -> None:
    mine, theirs = names_in(1, 3) + names_in(2, 3), names_in(0, 3) + names_in(3, 3)
    h, shards, api = sharded(mine + theirs, {1, 2})
    await healthy_pass(h, *mine, *theirs)
    written = {name for call, name in h.api.calls}
    assert written == set(mine)  # NodeResources created, Nodes and statuses written: the held shards' only
    assert all(h.offered(name)[0] == "5500" for name in mine)
    assert all(h.offered(name) == (None, None) for name in theirs)  # left to the replicas holding them
    assert all(api.fences[name] is shards.budgets[shard_of(name, SHARDS)] for name in mine)

    shards.held = frozenset({0, 1, 2, 3})  # the other replica stopped: its shards came here
    h.renew(*mine, *theirs)
    for name in theirs:
        h.report(name)
    await h.evaluate()
    assert all(h.offered(name)[0] == "5500" for name in theirs)


async def test_the_zone_guard_counts_the_nodes_of_every_shard() -> None:
    """A zone where most nodes are silent is partially disrupted whichever replica evaluates them:
    the one node this replica holds is not evicted although it alone looks like a small failure."""
    mine, theirs = names_in(0, 1, "a"), names_in(1, 3, "a")
    healthy = names_in(2, 1, "a")
    h, _, _ = sharded(mine + theirs + healthy, {0})
    in_zone(h, "a", *mine, *theirs, *healthy)
    await h.state.pod_event("ADDED", pod("batch", mine[0], "koord-batch"))
    await healthy_pass(h, *mine, *theirs, *healthy)
    for _ in range(35):  # 4 of 5 silent past the grace period and the eviction timeout
        h.renew(*healthy)
        h.advance(10)
    await h.evaluate()
    assert h.api.evicted == []
    assert h.condition(mine[0], "Evicting") == ("False", "PartialDisruption")


async def test_a_replica_evicts_at_its_held_shards_share_of_the_zones_rate() -> None:
    """Two of four shards held: half the zone's rate, so the replicas together keep to the rate."""
    silent = names_in(0, 1, "s") + names_in(1, 1, "s")
    healthy = [name for shard in range(SHARDS) for name in names_in(shard, 3, "h")]
    h, _, _ = sharded(silent + healthy, {0, 1}, eviction_rate=0.1)
    h.reconciler.planner = EvictionPlanner(h.monotonic, rate=0.1)  # on the fake clock
    for name in silent:
        await h.state.pod_event("ADDED", pod(f"batch-{name}", name, "koord-batch"))
    await healthy_pass(h, *silent, *healthy)
    for _ in range(35):
        h.renew(*healthy)
        h.advance(10)
    await h.evaluate()
    assert len(h.api.evicted) == 1  # the bucket's one token
    for _ in range(3):  # 15 s: a whole replica's rate (0.1/s) would have a token again
        h.renew(*healthy)
        h.advance(5)
        await h.evaluate()
    assert len(h.api.evicted) == 1
    h.renew(*healthy)
    h.advance(6)  # 21 s: at 0.05/s, the next token
    await h.evaluate()
    assert len(h.api.evicted) == 2
