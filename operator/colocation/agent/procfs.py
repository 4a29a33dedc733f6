"""The node's own counters from procfs: cpu time (/proc/stat), memory (/proc/meminfo), PSI.

Parsers are pure functions of the file's text; readers take the proc root so that a fixture
tree or a host mount (`/host/proc`) work like `/proc`. Readers return None when a file is
missing or garbled: the collector counts that and carries on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from colocation.agent.cgroups import read_file
from colocation.agent.cpuset import Processor, parse_cpuinfo
from colocation.koordinator.slo_strategies import MemoryCollectPolicy

PSI_RESOURCES = ("cpu", "memory", "io")


@dataclass(frozen=True, kw_only=True)
class PressureStat:
    """One line of /proc/pressure/<resource>: the share of time (percent) tasks stalled."""

    avg10: float
    avg60: float
    avg300: float
    total_usec: int  # cumulative stall time


@dataclass(frozen=True)
class Pressure:
    """PSI of one resource; `full` is None where the kernel has no such line (cpu before 5.13)."""

    some: PressureStat
    full: PressureStat | None = None


@dataclass(frozen=True)
class CpuTimes:
    """Aggregate cpu time of the node, in clock ticks (USER_HZ), and its number of cpus."""

    busy_ticks: int  # user + nice + system + irq + softirq, as koordlet counts it
    cpus: int


@dataclass(frozen=True, kw_only=True)
class MemInfo:
    """The /proc/meminfo fields the memory policies need, in bytes."""

    total: int
    free: int
    available: int
    inactive_file: int


def parse_stat(text: str) -> CpuTimes | None:
    """The `cpu` line of /proc/stat. iowait, idle and steal are not busy time; guest time is
    already inside user and nice, so it is not added again."""
    busy: int | None = None
    cpus = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "cpu":
            try:
                user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[1:8])
            except ValueError:
                return None  # fewer than seven numbers, or not numbers: a kernel we do not know
            busy = user + nice + system + irq + softirq
        elif fields[0].startswith("cpu") and fields[0][3:].isdigit():
            cpus += 1
    if busy is None or busy < 0:
        return None
    return CpuTimes(busy_ticks=busy, cpus=max(cpus, 1))


def parse_meminfo(text: str) -> MemInfo | None:
    """MemTotal, MemFree, MemAvailable and Inactive(file); values are in kB in the file."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            scale = 1024 if len(fields) > 1 and fields[1] == "kB" else 1
            values[key.strip()] = int(fields[0]) * scale
    try:
        total, free = values["MemTotal"], values["MemFree"]
    except KeyError:
        return None
    # MemAvailable exists since Linux 3.14; before that, free is the honest lower bound.
    available = values.get("MemAvailable", free)
    return MemInfo(total=total, free=free, available=available, inactive_file=values.get("Inactive(file)", 0))


def node_memory_usage(meminfo: MemInfo, policy: MemoryCollectPolicy) -> int:
    """Node memory usage under a Koordinator nodeMemoryCollectPolicy.

    - usageWithoutPageCache: MemTotal - MemAvailable (reclaimable cache is not usage);
    - usageWithPageCache: MemTotal - MemFree (all page cache counts);
    - usageWithHotPageCache: MemTotal - MemFree - Inactive(file). koordlet subtracts the cold
      pages that kidled finds; without kidled, the kernel's inactive file list is its estimate
      of cold page cache.
    """
    if policy == "usageWithPageCache":
        used = meminfo.total - meminfo.free
    elif policy == "usageWithHotPageCache":
        used = meminfo.total - meminfo.free - meminfo.inactive_file
    else:
        used = meminfo.total - meminfo.available
    return min(max(used, 0), meminfo.total)


def parse_pressure(text: str) -> Pressure | None:
    """One /proc/pressure file: a `some` line and, except for cpu on old kernels, a `full` line."""
    lines: dict[str, PressureStat] = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        fields = dict(pair.partition("=")[::2] for pair in pairs)
        try:
            lines[kind] = PressureStat(avg10=float(fields["avg10"]), avg60=float(fields["avg60"]),
                                       avg300=float(fields["avg300"]), total_usec=int(fields["total"]))
        except (KeyError, ValueError):
            return None
    if "some" not in lines:
        return None
    return Pressure(some=lines["some"], full=lines.get("full"))


def read_cpu_times(proc_root: Path) -> CpuTimes | None:
    text = read_file(proc_root / "stat")
    return None if text is None else parse_stat(text)


def read_meminfo(proc_root: Path) -> MemInfo | None:
    text = read_file(proc_root / "meminfo")
    return None if text is None else parse_meminfo(text)


def read_pressure(proc_root: Path) -> tuple[MappingProxyType[str, Pressure], int]:
    """PSI per resource, and how many files existed but could not be parsed.

    A kernel without PSI (or booted with psi=0) has no files, or files that fail to read with
    EOPNOTSUPP: that is "no PSI", not an error.
    """
    found: dict[str, Pressure] = {}
    garbled = 0
    for resource in PSI_RESOURCES:
        text = read_file(proc_root / "pressure" / resource)
        if text is None:
            continue
        pressure = parse_pressure(text)
        if pressure is None:
            garbled += 1
        else:
            found[resource] = pressure
    return MappingProxyType(found), garbled


def read_cpu_topology(proc_root: Path) -> tuple[Processor, ...]:
    """The node's processors from /proc/cpuinfo; none when it cannot be read."""
    text = read_file(proc_root / "cpuinfo")
    return () if text is None else parse_cpuinfo(text)
