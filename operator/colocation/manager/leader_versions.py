"""What a standby's consistent read waits for: the resourceVersion of whoever leads now.

The followed leader is asked first. When it cannot be asked, a fresh read of the Lease decides:
another holder is asked directly; this replica as holder means no wait (None); no holder, or the
leader followed, means polling the Lease for up to `new_leader_wait` for a new holder to ask,
then None (the copy is served as it is). Reads waiting at the same moment share one Lease read.

Why: docs/operator.md#consistency-across-replicas
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from colocation.kube.leader_connection import LeaderAddress
from colocation.kube.leaderelection import LeaderElectionRecord
from colocation.nodemetrics.standby_follower import LeaderFollower

LEASE_POLL = 0.1  # seconds between reads of the Lease while a read waits for a new leader
NEW_LEADER_WAIT = 1.5  # seconds a read waits for a new leader before its copy is served as it is


class LeaderVersions:
    def __init__(self, follower: LeaderFollower, current_record: Callable[[], Awaitable[LeaderElectionRecord | None]],
                 identity: str, *, new_leader_wait: float = NEW_LEADER_WAIT) -> None:
        self.follower = follower
        self.current_record = current_record
        self.identity = identity
        self.new_leader_wait = new_leader_wait
        self._lease_read: asyncio.Task[LeaderElectionRecord | None] | None = None

    async def __call__(self) -> int | None:
        version = await self.follower.leader_version()
        if version is not None:
            return version
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.new_leader_wait
        while True:
            record = await self._shared_lease_read()
            holder = record.holder_identity if record is not None else ""
            if holder == self.identity:
                return None  # this replica took the lease: nothing newer than its own store exists
            following = self.follower.following
            if holder and (following is None or holder != following.identity):
                address = LeaderAddress.from_record(record) if record else None
                return None if address is None else await self.follower.version_at(address)
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(LEASE_POLL)  # polling the Lease for the new holder, within the read's deadline

    async def _shared_lease_read(self) -> LeaderElectionRecord | None:
        """One Lease read in flight at a time; the reads waiting meanwhile share its answer."""
        if self._lease_read is None or self._lease_read.done():
            self._lease_read = asyncio.ensure_future(self.current_record())
        return await asyncio.shield(self._lease_read)
