"""Evaluation shards (`--evaluation-shards N`): which nodes a replica evaluates, and which shards it asks for. Pure.

A node belongs to one of N shards by a hash of its name (`shard_of`). A Lease per shard
(`kube.permissions.SHARD_LEASE_NAMES`) says which replica evaluates its nodes. Each replica asks
for the shards it ranks first among the replicas it knows to be Ready, and watches those it ranks
second, to take them as soon as their Lease expires (`ranked_shards`, rendezvous hashing): the
shards spread evenly, and a replica that comes or goes moves only the shards it ranks first. Two
replicas that briefly disagree on who is Ready both ask; the Lease lets one of them evaluate.

Why: docs/architecture.md#evaluation-shards
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Protocol

from colocation.apimachinery.rendezvous import rendezvous_order
from colocation.kube.permissions import MAX_EVALUATION_SHARDS, SHARD_LEASE_NAMES


def shard_of(node: str, shards: int) -> int:
    """The shard a node belongs to, the same on every replica and across restarts."""
    return int.from_bytes(hashlib.blake2b(node.encode(), digest_size=8).digest(), "big") % shards


def shard_lease_name(shard: int) -> str:
    return SHARD_LEASE_NAMES[shard]


def check_shard_count(shards: int) -> None:
    if not 1 <= shards <= MAX_EVALUATION_SHARDS:
        raise ValueError(f"the evaluation shards must number 1 to {MAX_EVALUATION_SHARDS}, got {shards}")


def ranked_shards(identity: str, replicas: Iterable[str], shards: int) -> tuple[frozenset[int], frozenset[int]]:
    """(The shards `identity` ranks first among `replicas`, those it ranks second); it counts
    itself whether listed or not."""
    members = {*replicas, identity}
    orders = {shard: rendezvous_order(shard_lease_name(shard), members)[:2] for shard in range(shards)}
    return (frozenset(shard for shard, order in orders.items() if order[0] == identity),
            frozenset(shard for shard, order in orders.items() if order[1:] == [identity]))


class ShardView(Protocol):
    """What the controllers read of this replica's shard elections (`manager.shard_elections`)."""

    count: int

    @property
    def held(self) -> frozenset[int]: ...

    def owns(self, node: str) -> bool: ...

    def write_budget_of(self, node: str) -> Callable[[], float]: ...
