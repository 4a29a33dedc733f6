"""The one factor every test deadline and tight interval is scaled by, and the one way a test waits
for a condition (benchmarks.polling's loop, with the deadline scaled by it).

COLOCATION_E2E_TIME_FACTOR (default 3): a loaded 2-core machine must not fail a test that waits
on a condition, and speed targets are the benchmarks' business.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from benchmarks import polling
from benchmarks.polling import NotReached as NotReached  # what a wait that ran out raises (re-exported)

TIME_FACTOR = float(os.environ.get("COLOCATION_E2E_TIME_FACTOR", "3"))

T = TypeVar("T")


def eventually(predicate: Callable[[], T | None], timeout: float = polling.DEFAULT_TIMEOUT, *,
               interval: float = polling.DEFAULT_INTERVAL, message: str = "condition") -> T:
    """Call `predicate` until it returns something truthy, and return that; NotReached (an
    AssertionError naming `message` and the last answer) after `timeout` seconds times TIME_FACTOR."""
    return polling.eventually(predicate, timeout * TIME_FACTOR, interval=interval, message=message)


@overload
async def eventually_async(predicate: Callable[[], Awaitable[T | None]], timeout: float = ..., *,
                           interval: float = ..., message: str = ...) -> T: ...


@overload
async def eventually_async(predicate: Callable[[], T | None], timeout: float = ..., *,
                           interval: float = ..., message: str = ...) -> T: ...


async def eventually_async(predicate: Callable[[], Any], timeout: float = polling.DEFAULT_TIMEOUT, *,
                           interval: float = polling.DEFAULT_INTERVAL, message: str = "condition") -> Any:
    """`eventually` in a running event loop: `predicate` may be a coroutine function or a plain one."""
    return await polling.eventually_async(predicate, timeout * TIME_FACTOR, interval=interval, message=message)
