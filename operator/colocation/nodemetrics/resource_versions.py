"""The resourceVersions of NodeMetrics: a counter seeded by the wall clock, shared with the leader.

Each change takes `max(current + 1, wall-clock microseconds)`, so versions keep growing across
restarts and failovers without anything persisted; a standby observes the leader's versions, so
after a promotion it continues above them (docs/architecture.md, "The NodeMetric store").
"""

from __future__ import annotations

from colocation.apimachinery.clock import WallClock
from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.report_schema import GROUP, RESOURCE


class ResourceVersionClock:
    def __init__(self, wall: WallClock, *, future_tolerance_seconds: float) -> None:
        self._wall = wall
        self._future_tolerance = int(future_tolerance_seconds * 1_000_000)
        self.current = self._wall_now()  # a new store begins now
        self._highest_known = 0  # the highest resourceVersion issued, replicated or observed

    def _wall_now(self) -> int:
        return int(self._wall() * 1_000_000)

    def next(self) -> int:
        """The resourceVersion of a new change."""
        self.current = max(self.current + 1, self._wall_now())
        self._highest_known = self.current
        return self.current

    def observe(self, resource_version: int) -> None:
        """Never issue a resourceVersion at or below this one (e.g. the leader's, seen by a standby)."""
        self.current = max(self.current, resource_version)
        self._highest_known = max(self._highest_known, resource_version)

    @property
    def untouched(self) -> bool:
        """Nothing was issued, replicated or observed yet: the history may be taken over."""
        return self._highest_known == 0

    def restart_at(self, resource_version: int) -> None:
        """Carry on from a replicated list's version (see NodeMetricStore.replace_all)."""
        self.current = resource_version

    def check_reachable(self, resource_version: int) -> None:
        """ApiError 504 for a client's resourceVersion too far ahead of this store and of the clock,
        as the watch cache answers one it does not reach in time ("Too large resource version")."""
        limit = max(self.current, self._wall_now()) + self._future_tolerance
        if resource_version > limit:
            raise ApiError(504, "Timeout", f"Timeout: Too large resource version: {resource_version}, "
                           f"current: {self.current}",
                           {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                            "retryAfterSeconds": 1, "group": GROUP, "kind": RESOURCE})
