"""Polling a condition until it holds: the one poll loop of the benchmarks and the tests.

It lives here, not under tests/, because the benchmarks must not import the tests: the tests may
import the benchmarks (tests/unit/benchmarks does), so tests/timing.py binds it to the tests'
deadline policy (every deadline times TIME_FACTOR) and the benchmarks use it as it is (their
deadlines are what they measure against).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
DEFAULT_INTERVAL = 0.05


class NotReached(TimeoutError, AssertionError):
    """A polled condition did not hold within its deadline. A TimeoutError, as the benchmarks
    handle a deadline; an AssertionError, as a test's failed check reads."""


def _not_reached(message: str, timeout: float, last: object) -> NotReached:
    return NotReached(f"{message}: not within {timeout:g} s (last: {last!r})")


def eventually(predicate: Callable[[], T | None], timeout: float = DEFAULT_TIMEOUT, *,
               interval: float = DEFAULT_INTERVAL, message: str = "condition") -> T:
    """Call `predicate` until it returns something truthy, and return that. It is called at least
    once, and again `interval` seconds after each falsy answer (0: at once, for a predicate that
    takes its own time); NotReached, naming `message` and the last answer, once `timeout` seconds
    have passed."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise _not_reached(message, timeout, result)
        if interval > 0:
            time.sleep(interval)  # polling a condition, with the deadline above


@overload
async def eventually_async(predicate: Callable[[], Awaitable[T | None]], timeout: float = ..., *,
                           interval: float = ..., message: str = ...) -> T: ...


@overload
async def eventually_async(predicate: Callable[[], T | None], timeout: float = ..., *,
                           interval: float = ..., message: str = ...) -> T: ...


async def eventually_async(predicate: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT, *,
                           interval: float = DEFAULT_INTERVAL, message: str = "condition") -> Any:
    """`eventually` in a running event loop, which runs between the calls: `predicate` may be a
    coroutine function or a plain one (a condition on what other tasks do)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise _not_reached(message, timeout, result)
        await asyncio.sleep(interval)  # polling a condition, with the deadline above
