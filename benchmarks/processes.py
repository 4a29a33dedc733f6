"""Servers under test as real subprocesses: start, wait for their ready line, measure, stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import benchmarks
import colocation
import colocation_sandbox

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def python_path() -> str:
    """PYTHONPATH for children: wherever this process found colocation, the sandbox and benchmarks."""
    roots = [str(Path(colocation.__file__).resolve().parents[1]),
             str(Path(colocation_sandbox.__file__).resolve().parents[1]),
             str(Path(benchmarks.__file__).resolve().parents[1])]
    inherited = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(dict.fromkeys([*roots, *filter(None, inherited.split(os.pathsep))]))


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """Resident memory (VmRSS) or its peak (VmHWM) of a process, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError(f"no {field} for process {pid}")


def served_connections(pid: int) -> int:
    """Established TCP connections a process accepted (its end on a port it listens on), from
    /proc/PID/fd and /proc/PID/net/tcp{,6}."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                sockets.add(target[len("socket:["):-1])
    listening: set[str] = set()
    established: list[str] = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        for line in path.read_text().splitlines()[1:] if path.exists() else ():
            fields = line.split()
            if fields[9] not in sockets:
                continue
            port = fields[1].rsplit(":", 1)[1]
            if fields[3] == _TCP_LISTEN:
                listening.add(port)
            elif fields[3] == _TCP_ESTABLISHED:
                established.append(port)
    return sum(1 for port in established if port in listening)


_TCP_ESTABLISHED, _TCP_LISTEN = "01", "0A"  # the st column of /proc/net/tcp


def descendants(pid: int) -> set[int]:
    """The processes under `pid` (children, theirs, ...), from the parent of each in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = stat.read_text()
            parent = int(raw[raw.rindex(")") + 2:].split()[1])  # ppid, after the state field
            children.setdefault(parent, []).append(int(stat.parent.name))
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def command_line(pid: int) -> list[str]:
    """A process's arguments, from /proc/PID/cmdline (empty for an exited child not yet reaped)."""
    return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/PID/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14 and 15)


@dataclass
class ServerProcess:
    """A child process that printed `ready: KEY=VALUE ...` once it serves."""

    process: asyncio.subprocess.Process
    ready: dict[str, str]
    log_path: Path
    drain: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def peak_rss(self) -> int:
        return rss_bytes(self.pid, "VmHWM")

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    async def stop(self, timeout: float = 15.0) -> None:
        if self.process.returncode is None:
            await self._terminate(timeout)
        if self.drain is not None:
            await self.drain

    async def _terminate(self, timeout: float) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


async def start(args: list[str], log_path: Path, *, timeout: float = 60.0) -> ServerProcess:
    """Run `python ARGS…`, wait for its `ready:` line on stdout; its stderr goes to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *args, stdout=asyncio.subprocess.PIPE, stderr=log,
            env={**os.environ, "PYTHONPATH": python_path()})
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(_ready_line(process.stdout), timeout)
    except (TimeoutError, EOFError):
        if process.returncode is None:
            process.kill()
        await process.wait()
        raise RuntimeError(f"{' '.join(args)} did not become ready; see {log_path}:\n{_tail(log_path)}") from None
    except asyncio.CancelledError:  # the run was interrupted while the server was starting: stop it
        await ServerProcess(process, {}, log_path).stop(timeout=60.0)
        raise
    ready = dict(part.split("=", 1) for part in line.split()[1:])
    server = ServerProcess(process, ready, log_path)
    # Keep reading stdout so a chatty child never blocks on a full pipe.
    server.drain = asyncio.create_task(_drain(process.stdout))
    return server


def _tail(path: Path, limit: int = 2000) -> str:
    return path.read_text(errors="replace")[-limit:]


async def _ready_line(stream: asyncio.StreamReader) -> str:
    while True:
        raw = await stream.readline()
        if not raw:
            raise EOFError
        line = raw.decode().strip()
        if line.startswith("ready:"):
            return line


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass
