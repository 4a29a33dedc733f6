"""A sandbox's processes and the ports they listen on, read from /proc: for tests that kill it.

A process is named by its pid and its start time, so a pid the kernel hands out again later is not
taken for it; a zombie (dead, waiting to be reaped by whoever inherited it) counts as gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.timing import NotReached, eventually


@dataclass(frozen=True)
class Proc:
    pid: int
    start: str  # field 22 of /proc/PID/stat: when it started, in clock ticks since boot
    command: str

    def __str__(self) -> str:
        return f"{self.pid} ({self.command[:160]})"


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of `pid`, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": the comm may hold spaces
    return fields[0], fields[19]


def proc(pid: int) -> Proc | None:
    stat = _stat(pid)
    if stat is None:
        return None
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    return Proc(pid, stat[1], command)


def alive(process: Proc) -> bool:
    stat = _stat(process.pid)
    return stat is not None and stat[1] == process.start and stat[0] not in ("Z", "X")


def _children(pid: int) -> list[int]:
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):  # every thread's: a child belongs to the thread that forked it
            with contextlib.suppress(OSError):
                pids.extend(int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return pids


def descendants(pid: int) -> list[Proc]:
    """Every living process under `pid`: children, grandchildren, and so on."""
    found: list[Proc] = []
    pending = _children(pid)
    while pending:
        child = pending.pop()
        process = proc(child)
        if process is not None and alive(process):
            found.append(process)
            pending.extend(_children(child))
    return found


@dataclass(frozen=True)
class Listener:
    """A TCP port a process listens on, in this test's network namespace or in another (a pod's)."""

    owner: Proc
    family: socket.AddressFamily
    host: str
    port: int
    ours: bool  # in this test's network namespace, where it can try to bind the port

    def __str__(self) -> str:
        where = "" if self.ours else " in another network namespace"
        return f"{self.host}:{self.port}{where}, of {self.owner}"


def _address(hex_address: str, family: socket.AddressFamily) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc/net/tcp* print the address as 32-bit words in host byte order (little-endian here).
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, packed)


def listeners(processes: Sequence[Proc]) -> list[Listener]:
    """The TCP ports `processes` listen on (IPv4 and IPv6)."""
    ours = os.readlink("/proc/self/ns/net")
    found: list[Listener] = []
    for process in processes:
        try:
            inodes = {os.readlink(f"/proc/{process.pid}/fd/{fd}")[len("socket:["):-1]
                      for fd in os.listdir(f"/proc/{process.pid}/fd")
                      if os.readlink(f"/proc/{process.pid}/fd/{fd}").startswith("socket:[")}
            netns = os.readlink(f"/proc/{process.pid}/ns/net")
        except OSError:
            continue  # gone meanwhile
        for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{process.pid}/net/{table}").read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                        host, port = fields[1].split(":")
                        found.append(Listener(process, family, _address(host, family), int(port, 16),
                                              netns == ours))
    return found


def bindable(listener: Listener) -> bool:
    """Whether this test can listen where `listener` did (SO_REUSEADDR, as a server would: closed
    connections in TIME_WAIT do not count, a listening socket does). An address that no interface
    holds any more counts as free: nothing can listen on it."""
    with socket.socket(listener.family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listener.host, listener.port))
        except OSError as error:
            return error.errno == 99  # EADDRNOTAVAIL
    return True


def until_none(left: Callable[[], Sequence[object]], timeout: float, what: str) -> None:
    """`eventually` `left` returns nothing; the failure lists what it returned last."""
    remaining: Sequence[object] = ()

    def gone() -> bool:
        nonlocal remaining
        remaining = left()
        return not remaining

    try:
        eventually(gone, timeout, message=what)
    except NotReached as failed:
        raise NotReached(f"{failed}; left:\n" + "\n".join(map(str, remaining))) from None


def kill_survivors(processes: Sequence[Proc]) -> None:
    """SIGKILL whichever of `processes` (a killed sandbox's, recorded before) still live: a failed
    test leaves nothing running."""
    for process in processes:
        if alive(process):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def sandbox_process(state_dir: Path, args: Sequence[str],
                    timeout: float) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`colocation sandbox ARGS` in a session (and process group) of its own, as a user starts it:
    (the process, its kubeconfig) once it prints `ready: kubeconfig=`. Killed, if still there, after."""
    command = [sys.executable, "-m", "colocation", "sandbox", "--port", "0", "--state-dir", str(state_dir),
               "--log-format", "text", *args]
    log_path = state_dir / "sandbox.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, start_new_session=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        stdout = process.stdout
        assert stdout is not None
        os.set_blocking(stdout.fileno(), False)
        output = b""

        def ready() -> Path | None:
            nonlocal output
            output += stdout.read() or b""  # None: nothing new yet
            for line in output.decode(errors="replace").splitlines():
                if line.startswith("ready: kubeconfig="):
                    return Path(line.split("=", 1)[1].strip())
            assert process.poll() is None, f"the sandbox exited ({process.returncode}):\n{log_path.read_text()[-4000:]}"
            return None

        kubeconfig = eventually(ready, timeout, message="the sandbox ready")
        assert kubeconfig is not None
        yield process, kubeconfig
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
