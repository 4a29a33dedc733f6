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


def test_the_bound_on_a_clients_version_is_the_clocks_and_cannot_be_walked_forward() -> None:
    clock = ResourceVersionClock(lambda: NOW, future_tolerance_seconds=300)
    accepted = NOW_RV + 290_000_000
    clock.check_reachable(accepted)
    clock.observe(accepted)  # even if a caller records it...
    with pytest.raises(ApiError) as caught:  # ...the next 290 s step is refused: the bound did not move
        clock.check_reachable(accepted + 290_000_000)
    assert (caught.value.code, caught.value.reason) == (504, "Timeout")
    assert caught.value.details["retryAfterSeconds"] == 1
