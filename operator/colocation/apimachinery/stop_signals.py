"""SIGTERM and SIGINT as a request to stop, handled in the running event loop: the one way the
operator, the agent, the sandbox and the benchmarks' runs register for them.

The action runs as a callback of the loop (asyncio's add_signal_handler), not inside the signal
handler, so it may set an asyncio.Event or cancel a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install_stop_signal_handlers(action: Callable[[], object]) -> None:
    """From now on, SIGTERM and SIGINT call `action` from the running loop, until the loop closes or
    another handler takes their place (install again to take it back). Call it from inside the loop."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, action)


@contextlib.contextmanager
def on_stop_signals(action: Callable[[], object] | None = None) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT call `action` from the running loop; without one they cancel
    the task that entered, so that what it started is stopped (its `finally`), never orphaned. The
    loop's handlers go on the way out. Call it from inside a running task."""
    if action is None:
        task = asyncio.current_task()
        assert task is not None, "on_stop_signals() without an action needs a running task to cancel"
        action = task.cancel
    install_stop_signal_handlers(action)
    try:
        yield
    finally:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
