"""What `colocation cleanup` removes and when it may run. Pure: the clock is passed in.

A Node is patched only if it offers any batch or mid resource, with the patch the leader sends
when colocation is off (`controllers.nodewrite.node_status_patch(None)`): the four keys set to
null in `capacity` and `allocatable`, nothing else touched. An operator leads while the leader
Lease names a holder whose `renewTime` is less than `leaseDurationSeconds` plus
`CLOCK_SKEW_ALLOWANCE` ago (the `renewTime` is the leader's clock, `now` is ours).

Why cleanup waits for the leader: docs/install.md#uninstall
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from colocation.controllers.nodewrite import batch_on_node, node_status_patch
from colocation.kube.leaderelection import LeaderElectionRecord

# Seconds added to the lease duration before a holder's Lease counts as abandoned, for the clock
# skew between the leader's machine and ours.
CLOCK_SKEW_ALLOWANCE: Final = 5.0

# Statuses worth another attempt: no answer (0: timeout, connection), throttled, server trouble.
RETRIABLE: Final = frozenset({0, 429, 500, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class LeaderHold:
    """An operator replica holds the leader Lease and renewed it recently: cleanup must wait."""

    holder: str
    renewed_ago: float  # seconds, by our clock against the Lease's renewTime
    lease_duration: float

    def __str__(self) -> str:
        renewed = "no renewTime" if math.isnan(self.renewed_ago) else f"renewed {self.renewed_ago:.0f}s ago"
        return (f"operator {self.holder} leads (Lease {renewed}, lease duration {self.lease_duration:.0f}s): "
                f"stop the operator first, it would write the resources back")


def leader_hold(lease: Mapping[str, Any] | None, now: datetime) -> LeaderHold | None:
    """Who holds the leader Lease `lease` (None: it does not exist) at wall time `now`, or None if nobody."""
    if lease is None:
        return None
    record = LeaderElectionRecord.from_lease(lease)
    if not record.holder_identity:
        return None  # released: the leader stopped gracefully
    if record.renew_time is None:
        # A holder without a readable renewTime cannot be judged by time: assume it is alive.
        return LeaderHold(record.holder_identity, float("nan"), float(record.lease_duration_seconds))
    ago = (now - record.renew_time).total_seconds()
    if ago > record.lease_duration_seconds + CLOCK_SKEW_ALLOWANCE:
        return None
    return LeaderHold(record.holder_identity, ago, float(record.lease_duration_seconds))


def node_cleanup_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The status patch that strips `node` of its batch and mid resources; None if it has none."""
    return node_status_patch(None) if batch_on_node(node).present else None


def retriable(status: int) -> bool:
    return status in RETRIABLE


def is_done(status: int) -> bool:
    """A write that needs no retry: it succeeded, or its object is already gone."""
    return 200 <= status < 300 or status == 404
