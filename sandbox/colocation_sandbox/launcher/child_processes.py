"""What every launcher does with its children: tokens, starting, restarting, stopping, listing.

Operator replicas and node agents of the builtin sandbox, and the control-plane processes and
pods of the real one, all come and go through these. Every child is started here (`start_logged`,
or `run` for a command waited for) with PR_SET_PDEATHSIG=SIGKILL, so it ends with the sandbox,
however the sandbox ends; a program that would lose that signal at exec is refused
(`exec_keeps_death_signal`). The sandbox's own stop is SIGTERM, then SIGKILL after a grace
period (`terminate`).

Why: docs/development.md#the-sandbox
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from colocation_sandbox.launcher.crash_loop_backoff import CrashLoopBackOff

# A week: longer than a sandbox is meant to run, so no child has to renew the token it started with.
TOKEN_SECONDS = 7 * 24 * 3600
STOP_GRACE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1
# Looked up here, in the sandbox: the forked child only calls it (no dlopen between fork and exec).
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent: int) -> Callable[[], None]:
    """The preexec_fn of every child of process `parent` (the sandbox): SIGKILL the child once the
    thread that forked it exits, the sandbox's death included (Linux prctl PR_SET_PDEATHSIG)."""

    def in_child() -> None:
        if _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        if os.getppid() != parent:  # the sandbox died between fork and prctl: no signal will come
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


def exec_keeps_death_signal(program: str) -> bool:
    """Whether exec'ing `program` keeps PR_SET_PDEATHSIG: the kernel clears it when the exec changes
    the process's credentials (set-user-ID or set-group-ID to someone else, file capabilities for
    anyone but root, who has every capability already)."""
    path = shutil.which(program)
    if path is None:
        return True  # nothing to exec: the start fails anyway
    mode = os.stat(path)
    if mode.st_mode & stat.S_ISUID and mode.st_uid != os.geteuid():
        return False
    if mode.st_mode & stat.S_ISGID and mode.st_gid != os.getegid():
        return False
    if os.geteuid() != 0:
        try:
            os.getxattr(path, "security.capability")
        except OSError:
            return True
        return False
    return True


def _programs(command: Sequence[str]) -> list[str]:
    """The programs `command` execs, one after the other in the same process."""
    if len(command) > 4 and Path(command[0]).name == "ip" and list(command[1:3]) == ["netns", "exec"]:
        return [command[0], command[4]]  # ip netns exec NAME PROGRAM...: PROGRAM replaces ip
    return [command[0]] if command else []


def _child_options(command: Sequence[str], options: dict[str, Any]) -> dict[str, Any]:
    """`options` for starting `command` as a child that dies with this process."""
    if "preexec_fn" in options:
        raise TypeError("a sandbox child's preexec_fn is die_with_parent; it takes no other")
    for program in _programs(command):
        if not exec_keeps_death_signal(program):
            raise RuntimeError(f"{program} is set-user-ID, set-group-ID or has file capabilities: exec'ing it "
                               "would clear PR_SET_PDEATHSIG, so it could outlive the sandbox")
    return {**options, "preexec_fn": die_with_parent(os.getpid())}


def run(command: Sequence[str], *, timeout: float, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `command` (kubectl, ip) to its end as a child that dies with the sandbox: its output
    captured as text, its exit status for the caller to check. The calling thread forks and waits,
    so the child cannot outlive the thread PR_SET_PDEATHSIG watches."""
    return subprocess.run(command, input=input, capture_output=True, text=True, timeout=timeout, check=False,
                          **_child_options(command, {}))


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
    """Start `command` as a child that dies with the sandbox (`die_with_parent`), with its output
    appended to `log_path` and `env` added to ours. Every long-lived child starts here."""
    options = _child_options(command, options)
    with open(log_path, "ab") as log_file:  # noqa: ASYNC230  (opening a local log file is instant)
        return await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=log_file, stderr=log_file,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env}, **options)


@dataclass(kw_only=True)
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
                 *, on_restart: Callable[[ChildProcess], None],
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
            self._on_restart(child)

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await terminate((child.process for child in self._children), STOP_GRACE_SECONDS, self._stop_signals)
