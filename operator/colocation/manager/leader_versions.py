"""What a standby's consistent read waits for: the resourceVersion of whoever leads now.

The followed leader is asked first (`LeaderFollower.leader_version`). When it cannot be asked
(dead, cut off, or a failover under way), the Lease, read fresh from kube-apiserver, decides:
- it names another holder than the one followed: that holder is asked directly;
- it names this replica: it leads now, and its store is what the leader serves (None: no wait);
- it names nobody or the leader followed: no replica accepted anything newer, except that each
  standby may have missed the last events the dead leader sent. So the read waits, polling the
  Lease, for a new holder to appear (a restarted pod frees the lease within about a second) and
  then asks it; only if none appears within `new_leader_wait` is the copy served as it is (None):
  a read's resourceVersion could then trail another replica's by those last events, which is
  the price of answering at all while the lease runs out.
The Lease reads are shared: every read waiting at the same moment uses the same one.
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
