"""The one fake clock of the tests: a monotonic reading and a wall reading that only the test moves.

The code under test takes its clocks as callables: pass the clock itself or `clock.monotonic` for
`time.monotonic`, `clock.wall` for `time.time`, `clock.utc` for a `datetime` in UTC.
"""

from __future__ import annotations

import datetime as dt


class FakeClock:
    """`now` is the monotonic reading, `wall_now` the wall reading (by default, where `now` starts).

    `advance(seconds)` and `to(moment)` move both together, as time passing does. Setting `now` or
    `wall_now` moves that clock alone: a test of a wall clock stepped back, or of one clock that
    the code must not read for the other. With `tick`, each monotonic reading first moves both
    clocks that far: every interval the code measures lasts `tick`.
    """

    def __init__(self, now: float = 1000.0, *, wall: float | None = None, tick: float = 0.0) -> None:
        self.now = now
        self.wall_now = now if wall is None else wall
        self.tick = tick

    def monotonic(self) -> float:
        if self.tick:
            self.advance(self.tick)
        return self.now

    __call__ = monotonic

    def wall(self) -> float:
        return self.wall_now

    def utc(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.wall_now, dt.UTC)

    def advance(self, seconds: float) -> None:
        """Both clocks `seconds` on (never back)."""
        assert seconds >= 0, "a monotonic clock never goes back"
        self.now += seconds
        self.wall_now += seconds

    def to(self, moment: float) -> None:
        """The monotonic reading exactly `moment` (never back); the wall clock moves as far."""
        assert moment >= self.now, "a monotonic clock never goes back"
        self.wall_now += moment - self.now
        self.now = moment
