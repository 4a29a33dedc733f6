"""The resourceVersion clock: only writes move it, and no read can raise the bound of the next one."""

from __future__ import annotations

import pytest

from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.resource_versions import ResourceVersionClock, seconds_until_reached

NOW = 1_800_000_000.0
NOW_RV = int(NOW * 1_000_000)


def test_a_version_the_clock_has_passed_is_reached_and_one_ahead_is_not_yet() -> None:
    assert seconds_until_reached(NOW_RV - 5, NOW_RV - 10, NOW) == 0
    assert seconds_until_reached(NOW_RV + 2_500_000, NOW_RV - 10, NOW) == 2.5
    assert seconds_until_reached(NOW_RV + 2_500_000, NOW_RV + 3_000_000, NOW) == 0  # the counter is past it


def test_a_version_beyond_the_last_change_and_the_clock_is_refused_and_moves_nothing() -> None:
    clock = ResourceVersionClock(lambda: NOW)
    clock.check_reached(NOW_RV)  # the clock has passed it: nothing was written since
    for ahead in (1, 290_000_000, 290_000_000):  # repeated: the bound does not move
        with pytest.raises(ApiError) as caught:
            clock.check_reached(NOW_RV + ahead)
        assert (caught.value.code, caught.value.reason) == (504, "Timeout")
        assert caught.value.details["retryAfterSeconds"] == 1
        assert clock.current == NOW_RV
    assert clock.next() == NOW_RV + 1
