"""The clock node health runs on with --store nats: it stands still while the copy is not confirmed."""

from __future__ import annotations

import pytest

from colocation.apimachinery.confirmed_clock import ConfirmedClock
from tests.clock import FakeClock


def test_it_runs_with_the_real_clock_while_confirmations_come_within_the_tolerance() -> None:
    real = FakeClock()
    clock = ConfirmedClock(real, tolerance=3.0)
    start = clock()
    for _ in range(10):
        real.advance(2.5)
        clock.confirm(real.now - 1.0)  # a confirmation of a second ago, as a reader's fetch sent then
    assert clock() - start == 25.0 and clock.standing() == 0.0


def test_it_stands_still_past_the_tolerance_and_runs_on_from_there_without_a_jump() -> None:
    real = FakeClock()
    clock = ConfirmedClock(real, tolerance=3.0)
    clock.confirm(real.now)
    before = clock()
    real.advance(60)  # no confirmation: cut off
    assert clock() == before + 3.0 and clock.standing() == 57.0
    clock.confirm(real.now)  # caught up
    assert clock() == before + 3.0 and clock.standing() == 0.0
    real.advance(1)
    assert clock() == before + 4.0


def test_readings_never_go_back_whatever_the_confirmations() -> None:
    real = FakeClock()
    clock = ConfirmedClock(real, tolerance=1.0)
    readings = [clock()]
    for step, late in [(0.5, 0.2), (5.0, 4.0), (0.1, 0.0), (7.0, 0.5), (2.0, 2.0), (0.0, 0.0)]:
        real.advance(step)
        readings.append(clock())
        clock.confirm(real.now - late)
        clock.confirm(real.now - late - 1.0)  # an older one, late: changes nothing
        readings.append(clock())
    assert readings == sorted(readings)


def test_a_negative_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        ConfirmedClock(FakeClock(), tolerance=-1.0)
