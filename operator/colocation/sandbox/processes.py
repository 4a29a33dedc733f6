"""Child processes of the sandbox (operator replicas, node agents): stopping them, listing them."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson


async def terminate(processes: Iterable[asyncio.subprocess.Process | None], grace: float) -> None:
    """SIGTERM every running process, then SIGKILL whatever is still there after `grace` seconds."""
    running = [p for p in processes if p is not None and p.returncode is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


def write_state(path: Path, entries: list[dict[str, Any]]) -> None:
    """Replace the state file in one step, so a reader never sees half of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(entries, option=orjson.OPT_INDENT_2))
    tmp.replace(path)
