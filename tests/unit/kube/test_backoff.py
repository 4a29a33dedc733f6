"""Retry delays: exponential growth to a hard maximum, jitter that only shortens, reset after success."""

from __future__ import annotations

import random

import pytest

from colocation.kube.backoff import Backoff


def test_without_jitter_delays_double_up_to_the_maximum() -> None:
    backoff = Backoff(initial=0.2, maximum=1.0, factor=2.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(6)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_reset_starts_again_from_the_initial_delay() -> None:
    backoff = Backoff(initial=0.5, maximum=8.0, jitter=0.0)
    for _ in range(4):
        backoff.next_delay()
    backoff.reset()
    assert [backoff.next_delay(), backoff.next_delay()] == pytest.approx([0.5, 1.0])


def test_jitter_spreads_delays_below_the_nominal_one_and_never_above_the_maximum() -> None:
    rng = random.Random(4)
    delays = []
    for _ in range(200):
        backoff = Backoff(initial=1.0, maximum=4.0, factor=2.0, jitter=0.2, rng=rng)
        delays.append([backoff.next_delay() for _ in range(4)])  # nominal 1, 2, 4, 4
    for nominal, column in zip((1.0, 2.0, 4.0, 4.0), zip(*delays, strict=True), strict=True):
        assert all(0.8 * nominal <= d <= nominal for d in column)
        # Clients that failed together must not retry together: the draws really spread out.
        assert max(column) - min(column) > 0.15 * nominal


def test_full_jitter_draws_anywhere_below_the_nominal_delay() -> None:
    backoff = Backoff(initial=10.0, maximum=10.0, jitter=1.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(500)]
    assert all(0.0 <= d <= 10.0 for d in delays)
    assert min(delays) < 1.0 and max(delays) > 9.0


def test_the_same_seed_gives_the_same_delays() -> None:
    first = Backoff(rng=random.Random(11))
    second = Backoff(rng=random.Random(11))
    assert [first.next_delay() for _ in range(8)] == [second.next_delay() for _ in range(8)]


@pytest.mark.parametrize("arguments", [
    {"initial": 0.0}, {"initial": 5.0, "maximum": 1.0}, {"factor": 0.5}, {"jitter": -0.1}, {"jitter": 1.5},
])
def test_nonsensical_settings_are_refused(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**arguments)  # type: ignore[arg-type]
