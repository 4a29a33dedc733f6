"""The resourceVersions of NodeMetrics: a counter seeded by the wall clock, shared with the leader.

Each change takes `max(current + 1, wall-clock microseconds)`, so versions keep growing across
restarts and failovers with nothing persisted; a standby observes the leader's versions and,
once promoted, continues above them. Only writes move the counter, never reads. Every version
between `current` and the wall clock names the state at `current`; a version beyond the wall
clock is reached only as time passes.

Why: docs/architecture.md#the-nodemetric-store
"""

from __future__ import annotations

from colocation.apimachinery.clock import WallClock
from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.report_schema import GROUP, RESOURCE

MICROSECONDS = 1_000_000


def seconds_until_reached(resource_version: int, current: int, wall_now: float) -> float:
    """How long until a store at `current` reaches `resource_version` by the clock: 0 if it has."""
    reached = max(current, int(wall_now * MICROSECONDS))
    return max(0, resource_version - reached) / MICROSECONDS


def too_large(resource_version: int, current: int) -> ApiError:
    """kube-apiserver's answer to a resourceVersion its watch cache does not reach in time."""
    return ApiError(504, "Timeout", f"Timeout: Too large resource version: {resource_version}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                     "retryAfterSeconds": 1, "group": GROUP, "kind": RESOURCE})


class ResourceVersionClock:
    def __init__(self, wall: WallClock) -> None:
        self._wall = wall
        self.current = self._wall_now()  # a new store begins now
        self._highest_known = 0  # the highest resourceVersion issued, replicated or observed

    def _wall_now(self) -> int:
        return int(self._wall() * MICROSECONDS)

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

    def check_reached(self, resource_version: int) -> None:
        """ApiError 504 for a client's resourceVersion this store has not reached: beyond its last
        change and beyond the wall clock (a reader waits for the clock first, `consistent_reads`).
        Checked, never observed: a version that moved the counter would let reads walk it forward,
        and a write after it could otherwise come out below it on a clock that stepped back."""
        if seconds_until_reached(resource_version, self.current, self._wall()) > 0:
            raise too_large(resource_version, self.current)


class LogPositions(ResourceVersionClock):
    """resourceVersions that are positions in a shared, totally ordered log (the NATS stream's
    sequence, colocation.jetstream): every replica applies the same writes at the same positions,
    so they all serve the same versions. Only applying a write moves `current`; this store issues
    none of its own (`next` refuses). A version beyond `current` is not reached yet (504)."""

    def __init__(self) -> None:
        super().__init__(lambda: 0.0)
        self.current = 0

    def next(self) -> int:
        raise RuntimeError("a store on a shared log takes its resourceVersions from the log")

    def check_reached(self, resource_version: int) -> None:
        if resource_version > self.current:
            raise too_large(resource_version, self.current)
