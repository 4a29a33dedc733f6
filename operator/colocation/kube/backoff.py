"""Exponential backoff with jitter: the delay before every retry in the project.

The nominal delay starts at `initial` and is multiplied by `factor` after every attempt, up to
`maximum`. The delay returned is drawn uniformly from `[nominal * (1 - jitter), nominal]`:
`jitter=1.0` is full jitter, `0.5` equal jitter, `0.0` none (deterministic). Jitter only ever
shortens the delay, so `maximum` is a true upper bound that a caller with a deadline (a leader
renewing its Lease) can rely on, and clients that failed together do not retry in step.
"""

from __future__ import annotations

import random


class Backoff:
    def __init__(
        self,
        initial: float = 0.2,
        maximum: float = 10.0,
        factor: float = 2.0,
        *,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"backoff needs 0 < initial <= maximum, got initial={initial}, maximum={maximum}")
        if factor < 1:
            raise ValueError(f"backoff factor must be at least 1, got {factor}")
        if not 0 <= jitter <= 1:
            raise ValueError(f"backoff jitter must be within [0, 1], got {jitter}")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()
        self._nominal = initial

    @property
    def nominal(self) -> float:
        """The un-jittered delay the next call to `next_delay()` is drawn below."""
        return self._nominal

    def next_delay(self) -> float:
        """The delay before the next attempt; each call makes the following one longer."""
        nominal = self._nominal
        self._nominal = min(self.maximum, nominal * self.factor)
        return nominal * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        """Start again from `initial`: call after a success."""
        self._nominal = self.initial
