"""What every launcher does with its children: tokens, starting, restarting, stopping, listing.

Operator replicas and node agents of the builtin sandbox, and the control-plane processes and
pods of the real one, all come and go through these.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from colocation.sandbox.launcher.crash_loop_backoff import CrashLoopBackOff

# A week: longer than a sandbox is meant to run, so no child has to renew the token it started with.
TOKEN_SECONDS = 7 * 24 * 3600
STOP_GRACE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec: SIGTERM it when the launcher dies, however it dies (even SIGKILL),
    so no etcd or kube-apiserver outlives the run that started it (Linux prctl PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# For a child whose whole sandbox stops, so nothing routes to it any more: SIGTERM then SIGINT, an
# operator replica's "stop at once" (it releases the Lease but skips its --shutdown-delay drain).
STOP_AT_ONCE = (signal.SIGTERM, signal.SIGINT)


async def terminate(processes: Iterable[asyncio.subprocess.Process | None], grace: float,
                    signals: Sequence[signal.Signals] = (signal.SIGTERM,)) -> None:
    """Send `signals` (SIGTERM) to every running process, then SIGKILL whatever is still there after
    `grace` seconds."""
    running = [p for p in processes if p is not None and p.returncode is None]
    for process in running:
        for signum in signals:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
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


async def start_logged(command: Sequence[str], log_path: str | Path, env: Mapping[str, str],
                       **options: Any) -> asyncio.subprocess.Process:
    """Start `command` with its output appended to `log_path` and `env` added to ours."""
    with open(log_path, "ab") as log_file:  # noqa: ASYNC230  (opening a local log file is instant)
        return await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=log_file, stderr=log_file,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env}, **options)


@dataclass
class ChildProcess:
    """A process kept running: how it starts, and what has become of it."""

    command: list[str]
    env: dict[str, str]
    log: str
    pid: int = 0
    restarts: int = 0
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)


class Supervisor:
    """Starts children and starts each again whenever it exits, after the kubelet's back-off
    (`CrashLoopBackOff`, one per child, from `backoff`); stops them all together."""

    def __init__(self, what: str, logger: logging.Logger, backoff: Callable[[], CrashLoopBackOff],
                 on_restart: Callable[[], None],
                 on_exit: Callable[[ChildProcess], None] = lambda child: None,
                 stop_signals: Sequence[signal.Signals] = (signal.SIGTERM,)) -> None:
        self._what = what
        self._stop_signals = stop_signals
        self._on_exit = on_exit
        self._log = logger
        self._backoff = backoff
        self._on_restart = on_restart
        self._children: list[ChildProcess] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    async def start(self, child: ChildProcess, **fields: Any) -> None:
        """Start `child` and keep it running; `fields` tell it apart in the log."""
        crash_loop = self._backoff()
        await self._spawn(child, crash_loop, fields)
        self._children.append(child)
        self._tasks.append(asyncio.create_task(self._supervise(child, crash_loop, fields)))

    async def _spawn(self, child: ChildProcess, crash_loop: CrashLoopBackOff, fields: dict[str, Any]) -> None:
        child.process = await start_logged(child.command, child.log, child.env)
        crash_loop.started()
        child.pid = child.process.pid
        self._log.info(f"{self._what} started", extra={**fields, "pid": child.pid})

    async def _supervise(self, child: ChildProcess, crash_loop: CrashLoopBackOff, fields: dict[str, Any]) -> None:
        while True:
            assert child.process is not None
            code = await child.process.wait()
            if self._stopping:
                return
            self._on_exit(child)
            delay = crash_loop.exited()
            self._log.warning(f"{self._what} exited; restarting",
                              extra={**fields, "code": code, "restart_in": round(delay, 2)})
            await asyncio.sleep(delay)  # CrashLoopBackOff
            child.restarts += 1
            await self._spawn(child, crash_loop, fields)
            self._on_restart()

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await terminate((child.process for child in self._children), STOP_GRACE_SECONDS, self._stop_signals)
