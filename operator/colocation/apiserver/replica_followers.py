"""The replicas that follow this leader, as each announced itself on its NodeMetric feed.

A standby's feed request carries `Colocation-Replica: IDENTITY https://IP:PORT`
(`kube.lease_record.REPLICA_HEADER`). The leader keeps each announcement while that feed is open
and publishes them on its Lease, so an agent that loses the leader asks the standbys directly who
leads now, instead of kube-apiserver. Only a caller allowed to follow the leader's feeds (the
operator's own ServiceAccount) is counted, and at most `MAX_REPLICAS` are kept: an announcement is
only a hint, since agents verify every replica's certificate against the leader's CA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from colocation.kube.lease_record import MAX_REPLICAS, parse_replica_header


class ReplicaFollowers:
    def __init__(self) -> None:
        self._open: dict[tuple[str, str], int] = {}  # (identity, endpoint) -> feeds open

    @contextlib.contextmanager
    def following(self, header: str) -> Iterator[None]:
        """Count the announcing replica while the block runs (its feed is open)."""
        replica = parse_replica_header(header)
        if replica is None or (replica not in self._open and len(self._open) >= MAX_REPLICAS):
            yield
            return
        self._open[replica] = self._open.get(replica, 0) + 1
        try:
            yield
        finally:
            left = self._open[replica] - 1
            if left:
                self._open[replica] = left
            else:
                del self._open[replica]

    def endpoints(self) -> dict[str, str]:
        """identity -> endpoint of every replica following now."""
        return {identity: endpoint for identity, endpoint in sorted(self._open)}
