"""Evaluation shards: every node in one shard, every shard preferred by one Ready replica."""

from __future__ import annotations

from collections import Counter

import pytest

from colocation.controllers.evaluation_shards import check_shard_count, ranked_shards, shard_assignment, shard_of
from colocation.kube.permissions import MAX_EVALUATION_SHARDS

NODES = [f"node-{index}" for index in range(2000)]
REPLICAS = [f"colocation-operator-{index}_{index:032x}" for index in range(5)]


def test_nodes_spread_evenly_over_the_shards_and_keep_their_shard() -> None:
    counts = Counter(shard_of(node, 8) for node in NODES)
    assert set(counts) == set(range(8))
    assert max(counts.values()) < 1.25 * len(NODES) / 8  # no shard takes much more than its share
    assert [shard_of(node, 8) for node in NODES] == [shard_of(node, 8) for node in NODES]


def preferred_shards(identity: str, ready: list[str], shards: int) -> frozenset[int]:
    return ranked_shards(identity, ready, shards)[0]


@pytest.mark.parametrize("replicas", [1, 2, 3, 5])
def test_every_shard_has_one_owner_and_one_watcher_among_the_ready_replicas(replicas: int) -> None:
    ready = REPLICAS[:replicas]
    ranks = {identity: ranked_shards(identity, ready, 16) for identity in ready}
    assert Counter(shard for first, _ in ranks.values() for shard in first) == Counter(range(16))
    seconds = Counter(shard for _, second in ranks.values() for shard in second)
    assert seconds == (Counter(range(16)) if replicas > 1 else Counter())
    assert all(not first & second for first, second in ranks.values())


def test_a_shards_watcher_is_its_owner_once_the_owner_is_gone() -> None:
    ready = REPLICAS[:4]
    for identity in ready:
        for shard in ranked_shards(identity, ready, 16)[0]:
            (watcher,) = [other for other in ready if shard in ranked_shards(other, ready, 16)[1]]
            assert shard in preferred_shards(watcher, [r for r in ready if r != identity], 16)


@pytest.mark.parametrize(("replicas", "shards"), [(2, 4), (3, 16), (5, 16), (8, 16), (20, 16)])
def test_every_ready_replica_gets_its_share_of_the_shards(replicas: int, shards: int) -> None:
    """Plain rendezvous hashing gave one of two replicas all 4 shards one time in 8 (an e2e run
    found it): the assignment caps each replica at its share, rounded up."""
    for run in range(50):  # identities are new for every process
        ready = [f"colocation-operator-{index}_{run:08x}{index}" for index in range(replicas)]
        held = Counter(shard_assignment(ready, shards).values())
        assert sum(held.values()) == shards
        assert max(held.values()) == -(-shards // replicas)
        assert min(held.get(identity, 0) for identity in ready) == shards // replicas


def test_every_replica_computes_the_same_assignment_whatever_the_order_it_lists_them_in() -> None:
    assert shard_assignment(REPLICAS, 16) == shard_assignment(list(reversed(REPLICAS)), 16)


def test_a_replica_that_joins_leaves_most_shards_where_they_were() -> None:
    before, after = shard_assignment(REPLICAS[:4], 16), shard_assignment(REPLICAS[:5], 16)
    moved = {shard for shard in range(16) if before[shard] != after[shard]}
    assert {shard for shard in moved if after[shard] == REPLICAS[4]} == {
        shard for shard, owner in after.items() if owner == REPLICAS[4]}  # the newcomer's share came over
    assert len(moved) <= 16 // 2  # not a reshuffle of everything


def test_a_replica_counts_itself_even_before_it_sees_its_own_announcement() -> None:
    assert preferred_shards(REPLICAS[0], [], 4) == frozenset(range(4))


@pytest.mark.parametrize("count", [0, MAX_EVALUATION_SHARDS + 1])
def test_a_shard_count_beyond_the_leases_rbac_names_is_refused(count: int) -> None:
    with pytest.raises(ValueError, match="1 to 16"):
        check_shard_count(count)
