"""During a failover a standby's consistent read waits for the new leader, not for nothing."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from colocation.kube.leader_connection import LeaderAddress
from colocation.kube.leaderelection import LEADER_CA_ANNOTATION, LEADER_ENDPOINT_ANNOTATION, LeaderElectionRecord
from colocation.manager.leader_versions import LeaderVersions

DEAD = LeaderAddress("op-0_dead", "https://10.0.0.1:8443", b"CA")


class Follower:
    def __init__(self) -> None:
        self.following: LeaderAddress | None = DEAD
        self.asked: list[str] = []

    async def leader_version(self) -> int | None:
        return None  # the followed leader refuses connections

    async def version_at(self, address: LeaderAddress) -> int | None:
        self.asked.append(address.identity)
        return 42


def held_by(holder: str) -> LeaderElectionRecord:
    annotations = {LEADER_ENDPOINT_ANNOTATION: "https://10.0.0.2:8443",
                   LEADER_CA_ANNOTATION: base64.b64encode(b"CA").decode()} if holder else {}
    return LeaderElectionRecord(holder_identity=holder, lease_duration_seconds=15, annotations=annotations)


def versions(follower: Follower, records: list[LeaderElectionRecord], wait: float) -> tuple[LeaderVersions, list[int]]:
    reads: list[int] = []

    async def current_record() -> LeaderElectionRecord:
        reads.append(1)
        return records[min(len(reads), len(records)) - 1]

    target: Any = follower
    return LeaderVersions(target, current_record, "op-1_me", new_leader_wait=wait), reads


async def test_a_read_waits_for_the_new_holder_while_the_lease_names_the_dead_leader_then_asks_it() -> None:
    follower = Follower()
    leader_versions, reads = versions(follower, [held_by("op-0_dead"), held_by(""), held_by("op-2_new")], wait=5.0)
    assert await leader_versions() == 42
    assert follower.asked == ["op-2_new"] and len(reads) == 3


async def test_with_no_new_holder_in_time_the_copy_is_served() -> None:
    follower = Follower()
    leader_versions, reads = versions(follower, [held_by("op-0_dead")], wait=0.25)
    assert await leader_versions() is None
    assert follower.asked == [] and len(reads) >= 2  # it kept looking until the wait ran out


async def test_a_read_is_served_at_once_when_this_replica_takes_the_lease() -> None:
    """Promoted while the read waited: its own store is the leader's; it does not wait the rest out."""
    follower = Follower()
    leader_versions, reads = versions(follower, [held_by("op-0_dead"), held_by("op-1_me")], wait=30.0)
    assert await asyncio.wait_for(leader_versions(), timeout=5) is None
    assert follower.asked == [] and len(reads) == 2
