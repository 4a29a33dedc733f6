"""Evaluation shards (`--evaluation-shards N`): which nodes a replica evaluates, and which shards it asks for. Pure.

A node belongs to one of N shards by a hash of its name (`shard_of`). A Lease per shard
(`kube.permissions.SHARD_LEASE_NAMES`) says which replica evaluates its nodes. Every replica
computes the same assignment from the replicas it knows to be Ready (`shard_assignment`):
rendezvous hashing with a bounded load, so each replica gets N/R shards, rounded up or down
(plain rendezvous hashing gave one of two replicas all 4 shards one time in 8). A replica asks for
the shards assigned to it, and watches those it would get if their owner were gone, to take them
as soon as their Lease expires (`ranked_shards`). Two replicas that briefly disagree on who is
Ready both ask; the Lease lets one of them evaluate.

Why: docs/architecture.md#evaluation-shards
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Protocol

from colocation.apimachinery.rendezvous import rendezvous_rank
from colocation.kube.permissions import MAX_EVALUATION_SHARDS, SHARD_LEASE_NAMES


def shard_of(node: str, shards: int) -> int:
    """The shard a node belongs to, the same on every replica and across restarts."""
    return int.from_bytes(hashlib.blake2b(node.encode(), digest_size=8).digest(), "big") % shards


def shard_lease_name(shard: int) -> str:
    return SHARD_LEASE_NAMES[shard]


def check_shard_count(shards: int) -> None:
    if not 1 <= shards <= MAX_EVALUATION_SHARDS:
        raise ValueError(f"the evaluation shards must number 1 to {MAX_EVALUATION_SHARDS}, got {shards}")


def shard_assignment(replicas: Iterable[str], shards: int) -> dict[int, str]:
    """Shard -> the replica that evaluates it. The (shard, replica) pairs are taken from the highest
    rendezvous weight down, each shard by the first replica that still has room: every replica
    gets shards // replicas, and the first to reach that may take one more while some are left
    over. The same on every replica that knows the same replicas."""
    members = sorted(set(replicas))
    if not members:
        return {}
    base, extra = divmod(shards, len(members))
    load = dict.fromkeys(members, 0)
    assignment: dict[int, str] = {}
    pairs = sorted(((rendezvous_rank(shard_lease_name(shard), member), shard, member)
                    for shard in range(shards) for member in members), reverse=True)
    for _, shard, member in pairs:
        if shard in assignment or load[member] > base or (load[member] == base and not extra):
            continue
        if load[member] == base:
            extra -= 1
        load[member] += 1
        assignment[shard] = member
    return assignment


def ranked_shards(identity: str, replicas: Iterable[str], shards: int) -> tuple[frozenset[int], frozenset[int]]:
    """(The shards assigned to `identity` among `replicas`, those it would get if their owner were
    gone); it counts itself whether listed or not."""
    members = {*replicas, identity}
    assignment = shard_assignment(members, shards)
    without = {owner: shard_assignment(members - {owner}, shards) for owner in set(assignment.values())}
    return (frozenset(shard for shard, owner in assignment.items() if owner == identity),
            frozenset(shard for shard, owner in assignment.items()
                      if owner != identity and without[owner].get(shard) == identity))


class ShardView(Protocol):
    """What the controllers read of this replica's shard elections (`manager.shard_elections`)."""

    count: int

    @property
    def held(self) -> frozenset[int]: ...

    def owns(self, node: str) -> bool: ...

    def write_budget_of(self, node: str) -> Callable[[], float]: ...
