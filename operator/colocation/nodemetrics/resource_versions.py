"""The resourceVersions of NodeMetrics: a counter seeded by the wall clock, shared with the leader.

Each change takes `max(current + 1, wall-clock microseconds)`, so versions keep growing across
restarts and failovers without anything persisted; a standby observes the leader's versions, so
after a promotion it continues above them (docs/architecture.md, "The NodeMetric store").
"""

from __future__ import annotations

from colocation.apimachinery.clock import WallClock
from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.report_schema import GROUP, RESOURCE

_MAX_RESOURCE_VERSION = 2**63 - 1


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

    def parse(self, text: str) -> int:
        """A client's resourceVersion; ApiError 400 if malformed, 504 if too far in the future."""
        if not text.isascii() or not text.isdigit() or int(text) > _MAX_RESOURCE_VERSION:
            raise ApiError.bad_request(f'invalid resource version: "{text}"')
        value = int(text)
        limit = max(self.current, self._wall_now()) + self._future_tolerance
        if value > limit:
            raise ApiError(504, "Timeout", f"Timeout: Too large resource version: {value}, current: {self.current}",
                           {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                            "retryAfterSeconds": 1, "group": GROUP, "kind": RESOURCE})
        return value
