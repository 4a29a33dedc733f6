"""The agent's cgroup writes: files of the best-effort tier, of batch pods and of bursting pods.

It finds the best-effort tier as the collector finds pods (colocation.agent.cgroups), and reads
and writes the cpu quota, period, shares or weight, burst, cpuset and memory limit in the
spelling of cgroup v1 or v2. Every write first reads the file and writes only a different
value, so nothing is written while nothing changes, and a value someone else wrote is put back
on the next round. With `dry_run` nothing is written; each write that would have happened is
counted as `dry-run`.

The files each strategy writes: docs/agent.md#strategies
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from colocation.agent import cgroups
from colocation.agent.cpuset import format_cpuset, parse_cpuset
from colocation.agent.strategies.batch_cgroups.batch_cgroups import shares_to_weight
from colocation.agent.strategies.cpu_suppress.cpu_suppress import UNLIMITED_QUOTA

log = logging.getLogger(__name__)

WriteResult = Literal["ok", "failed", "dry-run"]
_V1_CPU_CONTROLLERS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
DEFAULT_CFS_PERIOD_US = 100_000
_V1_UNLIMITED_MEMORY = 0x7FFFFFFFFFFFF000  # what v1 shows for -1: the largest page-aligned int64


@dataclass(frozen=True)
class CfsQuota:
    quota_us: int  # -1: unlimited
    period_us: int


@dataclass(frozen=True, kw_only=True)
class WriteOutcome:
    path: Path
    value: str
    result: WriteResult
    error: str = ""


class CgroupWriter:
    """Reads and writes the best-effort tier under `cgroup_root` (v1 or v2, either driver).

    `on_write(resource, result)` is told of every write attempted (resource: cfs_quota, cpuset,
    cpu_shares, memory_limit, cfs_burst).
    """

    def __init__(self, cgroup_root: Path, *, dry_run: bool = False,
                 on_write: Callable[[str, WriteResult], None] = lambda resource, result: None) -> None:
        self.cgroup_root = Path(cgroup_root)
        self.dry_run = dry_run
        self.on_write = on_write
        self.last_failure: WriteOutcome | None = None
        self._unified: bool | None = None

    # ---- where ------------------------------------------------------------------------------------

    @property
    def unified(self) -> bool:
        # Asked before every read and write: the version is looked up once it is known (a mount
        # does not change version under a running agent), not with a stat(2) each time.
        if self._unified is None and self.cgroup_root.is_dir():
            self._unified = os.path.isfile(os.path.join(self.cgroup_root, "cgroup.controllers"))
        return bool(self._unified)

    def cpu_root(self) -> Path | None:
        if self.unified:
            return self.cgroup_root
        return next((self.cgroup_root / name for name in _V1_CPU_CONTROLLERS if (self.cgroup_root / name).is_dir()),
                    None)

    def cpuset_root(self) -> Path | None:
        if self.unified:
            return self.cgroup_root
        root = self.cgroup_root / "cpuset"
        return root if root.is_dir() else None

    def memory_root(self) -> Path | None:
        if self.unified:
            return self.cgroup_root
        root = self.cgroup_root / "memory"
        return root if root.is_dir() else None

    @staticmethod
    def _tier(root: Path | None) -> Path | None:
        if root is None:
            return None
        found = cgroups.tier_directories(root, "besteffort")
        return root / found[0] if found else None

    def besteffort_cpu_dir(self) -> Path | None:
        return self._tier(self.cpu_root())

    def besteffort_cpuset_dirs(self) -> list[Path]:
        """The tier, its pods and their containers, parents before children (cpuset order)."""
        tier = self._tier(self.cpuset_root())
        if tier is None:
            return []
        paths = [tier]
        for pod in cgroups.subdirectories(tier):
            paths.append(tier / pod)
            paths.extend(tier / pod / container for container in cgroups.subdirectories(tier / pod))
        return paths

    # ---- CFS quota --------------------------------------------------------------------------------

    def read_cfs_quota(self, directory: Path) -> CfsQuota | None:
        if self.unified:
            fields = (cgroups.read_file(directory / "cpu.max") or "").split()
            if len(fields) != 2 or not fields[1].isdigit():
                return None
            quota = UNLIMITED_QUOTA if fields[0] == "max" else _int(fields[0])
            return None if quota is None else CfsQuota(quota, int(fields[1]))
        quota = _int(cgroups.read_file(directory / "cpu.cfs_quota_us"))
        period = _int(cgroups.read_file(directory / "cpu.cfs_period_us"))
        return None if quota is None or period is None else CfsQuota(quota, period)

    def write_cfs_quota(self, directory: Path, quota_us: int, period_us: int, *,
                        current: CfsQuota | None = None) -> WriteOutcome | None:
        """Set the quota (-1: unlimited); None when the file already says so. `current`: what the
        caller just read from it (then not read again)."""
        current = current or self.read_cfs_quota(directory)
        if current is not None and current.quota_us == quota_us and (current.quota_us < 0 or
                                                                     current.period_us == period_us):
            return None
        if self.unified:
            return self._write("cfs_quota", directory / "cpu.max",
                               f"{'max' if quota_us < 0 else quota_us} {period_us}")
        return self._write("cfs_quota", directory / "cpu.cfs_quota_us", str(quota_us))

    # ---- CFS burst (colocation.agent.strategies.cpu_burst.cpu_burster) ----------------------------------

    def read_cfs_burst(self, directory: Path) -> int | None:
        """v1 cpu.cfs_burst_us, v2 cpu.max.burst (µs); None where the kernel has none (before 5.14)."""
        return _int(cgroups.read_file(directory / ("cpu.max.burst" if self.unified else "cpu.cfs_burst_us")))

    def write_cfs_burst(self, directory: Path, burst_us: int) -> WriteOutcome | None:
        """Set the burst; None when the file already says so, or is not there."""
        current = self.read_cfs_burst(directory)
        if current is None or current == burst_us:
            return None
        return self._write("cfs_burst", directory / ("cpu.max.burst" if self.unified else "cpu.cfs_burst_us"),
                           str(burst_us))

    def read_cpu_stat(self, directory: Path) -> dict[str, int]:
        """cpu.stat of the cpu controller: nr_periods, nr_throttled (and v2's usage_usec)."""
        return cgroups.parse_flat_keyed(cgroups.read_file(directory / "cpu.stat") or "")

    # ---- cpu shares and memory limits --------------------------------------------------------------

    def read_cpu_shares(self, directory: Path) -> int | None:
        """v1: cpu.shares; v2: cpu.weight (in its own units)."""
        return _int(cgroups.read_file(directory / ("cpu.weight" if self.unified else "cpu.shares")))

    def write_cpu_shares(self, directory: Path, shares: int) -> WriteOutcome | None:
        """Set the shares (v2: the weight they map to); None when the file already says so."""
        value = shares_to_weight(shares) if self.unified else shares
        if self.read_cpu_shares(directory) == value:
            return None
        return self._write("cpu_shares", directory / ("cpu.weight" if self.unified else "cpu.shares"), str(value))

    def read_memory_limit(self, directory: Path) -> int | None:
        """Bytes, or -1 for unlimited."""
        text = (cgroups.read_file(directory / ("memory.max" if self.unified else "memory.limit_in_bytes"))
                or "").strip()
        if self.unified and text == "max":
            return -1
        value = _int(text)
        return -1 if value is not None and value >= _V1_UNLIMITED_MEMORY else value

    def write_memory_limit(self, directory: Path, limit_bytes: int) -> WriteOutcome | None:
        """Set the limit (-1: unlimited); None when the file already says so."""
        limit_bytes = max(limit_bytes, -1)
        if self.read_memory_limit(directory) == limit_bytes:
            return None
        if self.unified:
            return self._write("memory_limit", directory / "memory.max", "max" if limit_bytes < 0 else str(limit_bytes))
        return self._write("memory_limit", directory / "memory.limit_in_bytes", str(limit_bytes))

    # ---- cpusets ----------------------------------------------------------------------------------

    def read_cpuset(self, directory: Path) -> frozenset[int] | None:
        """The cpus a cgroup may run on (v2: the effective set when none is configured)."""
        text = cgroups.read_file(directory / "cpuset.cpus")
        if self.unified and text is not None and not text.strip():
            text = cgroups.read_file(directory / "cpuset.cpus.effective")
        return None if text is None else parse_cpuset(text)

    def pool(self, directories: Sequence[Path] | None = None) -> frozenset[int] | None:
        """All the cpus best-effort pods may have: those of the tier's parent (kubepods), which
        the kubelet set (its reserved cpus excluded). `directories`: the tier's, when just listed."""
        dirs = self.besteffort_cpuset_dirs() if directories is None else directories
        return self.read_cpuset(dirs[0].parent) if dirs else None

    def set_cpusets(self, directories: Sequence[Path], cpus: frozenset[int]) -> list[WriteOutcome]:
        """Give each directory (parents first) exactly `cpus`, reading each file once: those that
        lack some of them grow first, from the parents down, then the rest shrink from the children
        up (a child's cpus must stay within its parent's)."""
        found: dict[Path, tuple[frozenset[int] | None, bool]] = {}
        for directory in directories:
            text = cgroups.read_file(directory / "cpuset.cpus")
            explicit = bool((text or "").strip())  # v2: an empty file inherits the parent's
            if self.unified and text is not None and not explicit:
                text = cgroups.read_file(directory / "cpuset.cpus.effective")
            found[directory] = (None if text is None else parse_cpuset(text), explicit)
        outcomes = []
        for directory in directories:
            current, _ = found[directory]
            if current is not None and cpus <= current:
                continue
            target = (current or frozenset()) | cpus
            outcome = self._write("cpuset", directory / "cpuset.cpus", format_cpuset(target))
            outcomes.append(outcome)
            if outcome.result == "ok":
                found[directory] = (target, True)
        for directory in reversed(directories):
            current, explicit = found[directory]
            if current == cpus and explicit:
                continue
            outcomes.append(self._write("cpuset", directory / "cpuset.cpus", format_cpuset(cpus)))
        return outcomes

    # ---- the write ----------------------------------------------------------------------------------

    def _write(self, resource: str, path: Path, value: str) -> WriteOutcome:
        if self.dry_run:
            outcome = WriteOutcome(path=path, value=value, result="dry-run")
        else:
            try:
                with open(path, "w") as file:  # one write(2): cgroup files take a value per write
                    file.write(value)
                outcome = WriteOutcome(path=path, value=value, result="ok")
            except OSError as error:
                outcome = WriteOutcome(path=path, value=value, result="failed", error=error.strerror or str(error))
                self.last_failure = outcome
        self.on_write(resource, outcome.result)
        log.debug("cgroup write", extra={"path": str(path), "value": value, "result": outcome.result})
        return outcome


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    try:
        return int(text)
    except ValueError:
        return None
