"""The machine a benchmark ran on, as BENCHMARKS.md reports it."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    memory_bytes: int
    python: str
    kernel: str
    aiohttp: str
    commit: str
    date: str

    def describe(self) -> str:
        return (f"{self.cpu}, {self.cores} cores, {self.memory_bytes / 2**30:,.1f} GiB memory, "
                f"Linux {self.kernel}, Python {self.python}, aiohttp {self.aiohttp}, commit {self.commit}")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parents[1], check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5, cwd=Path(__file__).resolve().parents[1]).stdout.strip()
        return out + ("+changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def describe() -> Machine:
    return Machine(_cpu_model(), len(os.sched_getaffinity(0)), _memory(), platform.python_version(),
                   platform.release(), metadata.version("aiohttp"), _commit(),
                   dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))
