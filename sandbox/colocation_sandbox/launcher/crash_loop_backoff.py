"""The kubelet's CrashLoopBackOff, for every process a sandbox keeps running. Pure, on an injected clock.

As the kubelet's `flowcontrol.Backoff`: the first restart at once, then after `initial`, twice as
long after each further exit, never longer than `maximum` (a maximum under `initial` is the
first delay too), without jitter. All is forgotten once the process ran longer than
`reset_after` before it exited. `child_processes.Supervisor` and `controlplane.kubelet` both
restart by this object.

The defaults: docs/development.md#the-sandbox
"""

from __future__ import annotations

import time
from typing import Final

from colocation.apimachinery.clock import MonotonicClock

INITIAL_SECONDS: Final = 10.0
MAXIMUM_SECONDS: Final = 300.0
RESET_AFTER_SECONDS: Final = 600.0


class CrashLoopBackOff:
    """One container's restart delays: call `started` when its process starts, `exited` when it ends."""

    def __init__(self, clock: MonotonicClock = time.monotonic, *, initial: float = INITIAL_SECONDS,
                 maximum: float = MAXIMUM_SECONDS, reset_after: float = RESET_AFTER_SECONDS) -> None:
        if initial <= 0 or maximum <= 0 or reset_after <= 0:
            raise ValueError(f"initial, maximum and reset_after must be positive, got {initial}, {maximum}, "
                             f"{reset_after}")
        self._clock = clock
        self.initial = min(initial, maximum)
        self.maximum = maximum
        self.reset_after = reset_after
        self._started_at: float | None = None
        self._next: float | None = None  # the wait after the next exit; None: no entry, restart at once

    def started(self) -> None:
        """The container's process started now."""
        self._started_at = self._clock()

    def exited(self) -> float:
        """The container's process exited now: the seconds to wait before starting it again."""
        now = self._clock()
        if self._started_at is not None and now - self._started_at > self.reset_after:
            self._next = None  # it ran long enough to count as healthy: the back-off starts over
        self._started_at = None
        if self._next is None:
            self._next = self.initial
            return 0.0
        delay = self._next
        self._next = min(delay * 2.0, self.maximum)
        return delay
