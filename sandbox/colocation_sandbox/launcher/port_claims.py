"""Ports for children to listen on, picked so that nothing takes one before the child binds it.

Binding port 0 and closing the socket hands out a port from the kernel's ephemeral range, and
the next socket anywhere on the machine that binds port 0 or connects out may get that same port
before the child binds it. An e2e run's etcd failed so ("bind: address already in use"), with the
other suite starting sandboxes beside it. So a port handed out here:
- lies outside the kernel's ephemeral range (`ip_local_port_range`), which the kernel gives to
  nobody unasked;
- has a claim file, created exclusively, so no other process of ours (another suite, another
  sandbox) hands it out again within CLAIM_SECONDS;
- binds at the moment it is picked, so nothing listens on it.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
# Below this, ports of services installed on the machine are likelier; the bind check would catch
# one that listens, but not one that starts later.
LOWEST_PORT = 10000
HIGHEST_PORT = 65535
# Longer than any child takes to start and bind; a sandbox's children keep their ports bound.
CLAIM_SECONDS = 600.0
PICK_ATTEMPTS = 512


def default_claims_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"colocation-port-claims-{os.getuid()}"


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    try:
        low, high = (int(word) for word in path.read_text().split())
    except (OSError, ValueError):
        return LINUX_DEFAULT_EPHEMERAL_RANGE
    return low, high


def pickable_ports(ephemeral: tuple[int, int]) -> list[range]:
    """The ports from LOWEST_PORT up that the kernel does not hand out by itself."""
    low, high = ephemeral
    spans = [range(LOWEST_PORT, min(low, HIGHEST_PORT + 1)), range(max(high + 1, LOWEST_PORT), HIGHEST_PORT + 1)]
    return [span for span in spans if len(span) > 0]


def claim(claims_dir: Path, port: int, now: float) -> bool:
    """Create `port`'s claim file in `claims_dir`; False while another claim on it is younger than
    CLAIM_SECONDS."""
    path = claims_dir / str(port)
    with contextlib.suppress(FileNotFoundError):
        if now - path.stat().st_mtime < CLAIM_SECONDS:
            return False
        path.unlink()  # a stale claim: its child has bound the port long ago, or never will
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False  # another picker claimed it first
    return True


def binds(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", *, claims_dir: Path | None = None,
              ephemeral: tuple[int, int] | None = None, clock: Callable[[], float] = time.time,
              rng: random.Random | None = None) -> int:
    """A port on `host` that nothing listens on, that the kernel will not hand out, and that no
    other caller of this function gets for CLAIM_SECONDS."""
    claims = claims_dir or default_claims_dir()
    claims.mkdir(mode=0o700, parents=True, exist_ok=True)
    spans = pickable_ports(ephemeral or ephemeral_range())
    pick = rng or random.SystemRandom()
    if spans:
        weights = [len(span) for span in spans]
        for _ in range(PICK_ATTEMPTS):
            port = pick.choice(pick.choices(spans, weights)[0])
            if binds(host, port) and claim(claims, port, clock()):
                return port
    # The ephemeral range covers every port from LOWEST_PORT up (or all were taken): the kernel's
    # pick, still claimed so that no caller here gets it twice.
    for _ in range(PICK_ATTEMPTS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if claim(claims, port, clock()):
            return port
    raise RuntimeError(f"no free port on {host}: every one tried is in use or claimed in {claims}")
