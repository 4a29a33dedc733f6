"""A monotonic clock that stands still while what it times is not confirmed current.

A replica's copy of a shared log is confirmed current each time its reader finds itself caught
up (`confirm`). Between two confirmations less than `tolerance` apart the clock runs as the real
one does; past that, it stands still until the next confirmation, then runs on from where it
stopped. Time read from it never jumps: a node whose reports were all applied at once after an
outage shows no gap between them, and one that fell silent during it is silent only for the time
the clock ran. Pure: the real clock is a parameter.
"""

from __future__ import annotations

from colocation.apimachinery.clock import MonotonicClock


class ConfirmedClock:
    def __init__(self, monotonic: MonotonicClock, *, tolerance: float) -> None:
        if tolerance < 0:
            raise ValueError(f"tolerance must not be negative, got {tolerance}")
        self._monotonic = monotonic
        self.tolerance = tolerance
        self._confirmed = monotonic()  # counts from its creation
        self._stood = 0.0  # seconds it stood still up to the last confirmation

    def confirm(self, at: float) -> None:
        """What it times was current at `at` (a reading of the real clock, at most now)."""
        if at <= self._confirmed:
            return
        self._stood += max(0.0, at - self._confirmed - self.tolerance)
        self._confirmed = at

    def standing(self) -> float:
        """Seconds it has been standing still since the last confirmation (0 while it runs)."""
        return self._standing_at(self._monotonic())

    def __call__(self) -> float:
        now = self._monotonic()  # read once: two readings could make this one lower than the last
        return now - self._stood - self._standing_at(now)

    def _standing_at(self, now: float) -> float:
        return max(0.0, now - self._confirmed - self.tolerance)
