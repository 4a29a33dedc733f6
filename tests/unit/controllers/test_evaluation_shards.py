"""Evaluation shards: every node in one shard, every shard preferred by one Ready replica."""

from __future__ import annotations

from collections import Counter

import pytest

from colocation.controllers.evaluation_shards import check_shard_count, ranked_shards, shard_of
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
def test_every_shard_is_ranked_first_by_one_ready_replica_and_second_by_another(replicas: int) -> None:
    ready = REPLICAS[:replicas]
    ranks = {identity: ranked_shards(identity, ready, 16) for identity in ready}
    assert Counter(shard for first, _ in ranks.values() for shard in first) == Counter(range(16))
    seconds = Counter(shard for _, second in ranks.values() for shard in second)
    assert seconds == (Counter(range(16)) if replicas > 1 else Counter())
    assert all(not first & second for first, second in ranks.values())


def test_the_replica_ranked_second_is_the_one_that_ranks_first_once_the_first_is_gone() -> None:
    ready = REPLICAS[:4]
    for identity in ready:
        for shard in ranked_shards(identity, ready, 16)[0]:
            (watcher,) = [other for other in ready if shard in ranked_shards(other, ready, 16)[1]]
            assert shard in preferred_shards(watcher, [r for r in ready if r != identity], 16)


def test_a_replica_that_joins_takes_shards_only_from_the_others_and_leaves_the_rest_in_place() -> None:
    before = {identity: preferred_shards(identity, REPLICAS[:3], 16) for identity in REPLICAS[:3]}
    after = {identity: preferred_shards(identity, REPLICAS[:4], 16) for identity in REPLICAS[:4]}
    assert after[REPLICAS[3]]  # the newcomer gets some
    for identity in REPLICAS[:3]:
        assert after[identity] <= before[identity]  # nobody gains; what moved went to the newcomer
        assert before[identity] - after[identity] <= after[REPLICAS[3]]


def test_a_replica_counts_itself_even_before_it_sees_its_own_announcement() -> None:
    assert preferred_shards(REPLICAS[0], [], 4) == frozenset(range(4))


@pytest.mark.parametrize("count", [0, MAX_EVALUATION_SHARDS + 1])
def test_a_shard_count_beyond_the_leases_rbac_names_is_refused(count: int) -> None:
    with pytest.raises(ValueError, match="1 to 16"):
        check_shard_count(count)
