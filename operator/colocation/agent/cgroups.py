"""Pods and their counters from the kubepods cgroup hierarchy (cgroup v2, and v1).

Where the kubelet puts a pod depends on its cgroup driver and the pod's QoS class:

    systemd:   kubepods.slice/kubepods-pod<uid_>.slice                                (Guaranteed)
               kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice
               kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice
    cgroupfs:  kubepods/pod<uid>, kubepods/burstable/pod<uid>, kubepods/besteffort/pod<uid>

On cgroup v1 the same paths exist once per controller. A kubelet `--cgroup-root` nests the tree.
Pod memory comes from memory.stat's LRU lists, as koordlet reads it (why: docs/agent.md#collection).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from colocation.koordinator.slo_strategies import MemoryCollectPolicy

_READ_SIZE = 65536

QoSTier = Literal["guaranteed", "burstable", "besteffort"]

KUBEPODS_ROOTS = ("kubepods.slice", "kubepods", "kubelet.slice/kubelet-kubepods.slice", "kubelet/kubepods")
_POD_DIR = re.compile(r"(?:^|-)pod([0-9a-fA-F][0-9a-fA-F_-]*?)(?:\.slice)?$")
_TIER_DIR = re.compile(r"(?:^|-)(burstable|besteffort)(?:\.slice)?$")
_V1_CPU_CONTROLLERS = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


@dataclass(frozen=True)
class CgroupLayout:
    """Where the cpu and memory controllers' hierarchies are (the same directory under v2)."""

    version: Literal[1, 2]
    cpu_root: Path
    memory_root: Path


@dataclass(frozen=True)
class PodCgroup:
    uid: str
    path: str  # relative to the controller root, '/'-separated
    qos_tier: QoSTier


@dataclass(frozen=True)
class CgroupCounters:
    """One cgroup's readings; None where the file was missing or garbled."""

    cpu_usage_usec: int | None  # cumulative cpu time
    memory_bytes: int | None  # per the memory policy


def detect_layout(cgroup_root: Path) -> CgroupLayout | None:
    """cgroup v2 when the root has cgroup.controllers; v1 when it has cpuacct and memory
    hierarchies (hybrid systems count as v1: kubelet uses v1 there); None otherwise."""
    if (cgroup_root / "cgroup.controllers").is_file():
        return CgroupLayout(version=2, cpu_root=cgroup_root, memory_root=cgroup_root)
    for name in _V1_CPU_CONTROLLERS:
        if (cgroup_root / name).is_dir() and (cgroup_root / "memory").is_dir():
            return CgroupLayout(version=1, cpu_root=cgroup_root / name, memory_root=cgroup_root / "memory")
    return None


def pod_uid_from_dir(name: str) -> str | None:
    """The pod UID in a pod cgroup's directory name, with systemd's '_' turned back into '-'."""
    match = _POD_DIR.search(name)
    return match.group(1).replace("_", "-").lower() if match else None


def discover_pods(layout: CgroupLayout) -> tuple[dict[str, PodCgroup], int]:
    """Pod UID → its cgroup, and the number of directories that could not be listed."""
    pods: dict[str, PodCgroup] = {}
    errors = 0
    for root in KUBEPODS_ROOTS:
        top = layout.cpu_root / root
        if not top.is_dir():
            continue
        children, failed = _subdirectories(top)
        errors += failed
        for child in children:
            tier = _TIER_DIR.search(child)
            if tier is not None:
                grandchildren, failed = _subdirectories(top / child)
                errors += failed
                for grandchild in grandchildren:
                    _add_pod(pods, grandchild, f"{root}/{child}/{grandchild}",
                             tier=tier.group(1))  # type: ignore[arg-type]
            else:
                _add_pod(pods, child, f"{root}/{child}", tier="guaranteed")
    return pods, errors


def qos_tier_of_path(path: str) -> QoSTier:
    """The QoS tier a pod cgroup path (as discover_pods gives it) sits in."""
    parent = path.rstrip("/").rsplit("/", 2)
    tier = _TIER_DIR.search(parent[-2]) if len(parent) >= 2 else None
    return tier.group(1) if tier is not None else "guaranteed"  # type: ignore[return-value]


def tier_directories(controller_root: Path, tier: Literal["burstable", "besteffort"]) -> list[str]:
    """The directories of one QoS tier (relative to a controller's root), for every kubepods
    root that exists: the cgroupfs and systemd spellings, nested or not."""
    found = []
    for root in KUBEPODS_ROOTS:
        top = controller_root / root
        if not top.is_dir():
            continue
        children, _ = _subdirectories(top)
        for child in children:
            match = _TIER_DIR.search(child)
            if match is not None and match.group(1) == tier:
                found.append(f"{root}/{child}")
    return found


def subdirectories(path: Path) -> list[str]:
    """The names of a directory's subdirectories, sorted; none when it cannot be listed."""
    return _subdirectories(path)[0]


def _add_pod(pods: dict[str, PodCgroup], name: str, path: str, *, tier: QoSTier) -> None:
    uid = pod_uid_from_dir(name)
    if uid is not None:
        pods[uid] = PodCgroup(uid=uid, path=path, qos_tier=tier)


def _subdirectories(path: Path) -> tuple[list[str], int]:
    try:
        with os.scandir(path) as entries:
            return sorted(entry.name for entry in entries if entry.is_dir(follow_symlinks=False)), 0
    except OSError:
        return [], 1  # vanished between the check and the listing, or unreadable


def parse_flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines (cpu.stat, memory.stat); lines that are not that are ignored."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].isdigit():
            values[fields[0]] = int(fields[1])
    return values


def memory_usage(stat: Mapping[str, int], policy: MemoryCollectPolicy, version: Literal[1, 2]) -> int | None:
    """A cgroup's memory usage from its memory.stat, per nodeMemoryCollectPolicy.

    usageWithoutPageCache = anon (active + inactive) + unevictable; usageWithHotPageCache adds the
    active file list; usageWithPageCache adds both file lists. v1 has the hierarchical totals
    under `total_*`; v2's plain keys are hierarchical already.
    """
    prefix = "total_" if version == 1 else ""
    keys = ["inactive_anon", "active_anon", "unevictable"]
    if policy in ("usageWithHotPageCache", "usageWithPageCache"):
        keys.append("active_file")
    if policy == "usageWithPageCache":
        keys.append("inactive_file")
    try:
        return sum(stat[prefix + key] for key in keys)
    except KeyError:
        return None


def read_counters(layout: CgroupLayout, path: str, policy: MemoryCollectPolicy) -> CgroupCounters:
    """cpu (v2 cpu.stat usage_usec, v1 cpuacct.usage in ns) and memory of one cgroup."""
    cpu: int | None
    if layout.version == 2:
        cpu = parse_flat_keyed(read_file(layout.cpu_root / path / "cpu.stat") or "").get("usage_usec")
    else:
        text = (read_file(layout.cpu_root / path / "cpuacct.usage") or "").strip()
        cpu = int(text) // 1000 if text.isdigit() else None
    stat_text = read_file(layout.memory_root / path / "memory.stat")
    memory = None if stat_text is None else memory_usage(parse_flat_keyed(stat_text), policy, layout.version)
    return CgroupCounters(cpu_usage_usec=cpu, memory_bytes=memory)


def read_file(path: Path) -> str | None:
    """A small file of /proc or a cgroup, as text; None when it cannot be read.

    os.open and os.read: these files are a few bytes to a few KiB, and Path.read_text's buffered
    text layers cost more than the read itself at hundreds of files a second. Read until end of
    file: procfs and cgroup files may answer a read with less than asked (a record that does not
    fit waits for the next read) while more follows."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, _READ_SIZE):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)
