"""What one collection produces (`Sample`), the `Collector` protocol, and the real collector.

`RealCollector` reads the node's counters under `proc_root` and the pods' under `cgroup_root`,
so the same code measures a host (`/proc`, `/sys/fs/cgroup`), a container with host mounts, or a
fixture tree in a test.

Rates come from counter deltas between two calls, timed on the injected monotonic clock. A first
reading, or a counter that went backwards, reports cpu 0 with `cpu_measured=False` and becomes
the new base. Rates are capped at the node's cpu count.

Why: docs/agent.md#collection
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from colocation.agent import cgroups, procfs
from colocation.agent.host_applications import HostApplication, resolve_cgroup_path
from colocation.agent.procfs import Pressure, PressureStat
from colocation.koordinator.collect_policy import DEFAULT_MEMORY_POLICY
from colocation.koordinator.slo_strategies import MemoryCollectPolicy

__all__ = [
    "Collector", "HostApplication", "HostApplicationSample", "PodSample", "Pressure", "PressureStat",
    "RealCollector", "Sample",
]


@dataclass(frozen=True, kw_only=True)
class PodSample:
    """One pod's usage in one sample. The real collector knows pods only by UID (from the cgroup
    name); namespace and name are filled by collectors that know them (the synthetic one)."""

    uid: str
    cpu_millis: int
    memory_bytes: int
    cgroup_path: str  # relative to the cgroup root (v2) or to each controller's hierarchy (v1)
    namespace: str | None = None
    name: str | None = None
    cpu_measured: bool = True  # False on the pod's first reading or after its counter reset


@dataclass(frozen=True, kw_only=True)
class HostApplicationSample:
    name: str
    cpu_millis: int
    memory_bytes: int
    cgroup_path: str  # as measured, relative to the controller root
    priority: str | None = None  # as the NodeSLO gives them: None when unset
    qos: str | None = None
    cpu_measured: bool = True


def _no_psi() -> Mapping[str, Pressure]:
    return MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class Sample:
    """Everything one collection saw. Immutable: the aggregator and the reporter share it."""

    timestamp: float  # wall seconds since the epoch
    node_cpu_millis: int  # average over the interval since the previous sample
    node_memory_bytes: int  # per the memory policy in force when sampled
    pods: tuple[PodSample, ...] = ()
    host_applications: tuple[HostApplicationSample, ...] = ()
    # "cpu" / "memory" / "io" → Pressure; empty when the kernel has no PSI (read-only mapping).
    psi: Mapping[str, Pressure] = field(default_factory=_no_psi)
    node_cpu_measured: bool = True  # False on the first sample and after a counter reset
    node_memory_measured: bool = True  # False when /proc/meminfo could not be read
    read_errors: int = 0  # values skipped in this sample because a file was missing or garbled

    def pod_uids(self) -> frozenset[str]:
        return frozenset(pod.uid for pod in self.pods)


class Collector(Protocol):
    """Produces one `Sample` per call; never raises for unreadable data (it counts it instead)."""

    def sample(self, now: float) -> Sample: ...


class RealCollector:
    """Measures this machine: node counters under `proc_root`, pods under `cgroup_root`.

    `memory_policy` and `host_applications` may be reassigned between samples (the NodeSLO's
    metricCollectPolicy changes). `read_errors_total` counts every value skipped since start.
    """

    def __init__(
        self,
        proc_root: Path | str = "/proc",
        cgroup_root: Path | str = "/sys/fs/cgroup",
        *,
        memory_policy: MemoryCollectPolicy = DEFAULT_MEMORY_POLICY,
        host_applications: Sequence[HostApplication] = (),
        clock: Callable[[], float] = time.monotonic,
        clock_ticks_per_second: int | None = None,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.cgroup_root = Path(cgroup_root)
        self.memory_policy: MemoryCollectPolicy = memory_policy
        self.host_applications: tuple[HostApplication, ...] = tuple(host_applications)
        self.read_errors_total = 0
        self.samples_total = 0
        self._clock = clock
        self._ticks = clock_ticks_per_second or os.sysconf("SC_CLK_TCK")
        self._cpus = os.cpu_count() or 1  # refined from /proc/stat at every sample
        self._node_previous: tuple[int, float] | None = None
        self._previous: dict[tuple[str, str], tuple[int, float]] = {}  # cgroup → (usage_usec, at)

    def sample(self, now: float) -> Sample:
        at = self._clock()
        errors = 0
        node_cpu, cpu_measured = 0, False
        times = procfs.read_cpu_times(self.proc_root)
        if times is None:
            errors += 1
        else:
            self._cpus = times.cpus
            node_cpu, cpu_measured = self._node_rate(times.busy_ticks, at)
        node_memory, memory_measured = 0, False
        meminfo = procfs.read_meminfo(self.proc_root)
        if meminfo is None:
            errors += 1
        else:
            node_memory, memory_measured = procfs.node_memory_usage(meminfo, self.memory_policy), True
        psi, garbled = procfs.read_pressure(self.proc_root)
        errors += garbled

        pods: list[PodSample] = []
        apps: list[HostApplicationSample] = []
        seen: set[tuple[str, str]] = set()
        layout = cgroups.detect_layout(self.cgroup_root)
        if layout is not None:
            found, failed = cgroups.discover_pods(layout)
            errors += failed
            for uid, pod in sorted(found.items()):
                reading = self._cgroup_rate(layout, ("pod", uid), pod.path, at=at, seen=seen)
                if reading is None:
                    errors += 1
                    continue
                cpu, memory, measured = reading
                pods.append(PodSample(uid=uid, cpu_millis=cpu, memory_bytes=memory, cgroup_path=pod.path,
                                      cpu_measured=measured))
            for app in self.host_applications:
                path = resolve_cgroup_path(app, layout.cpu_root)
                reading = None if path is None else self._cgroup_rate(layout, ("app", app.name), path, at=at, seen=seen)
                if path is None or reading is None:
                    errors += 1
                    continue
                cpu, memory, measured = reading
                apps.append(HostApplicationSample(name=app.name, cpu_millis=cpu, memory_bytes=memory,
                                                  cgroup_path=path, priority=app.priority, qos=app.qos,
                                                  cpu_measured=measured))
        elif self.host_applications:
            errors += len(self.host_applications)
        # Forget cgroups that are gone, so a churning node does not grow this map forever.
        self._previous = {key: value for key, value in self._previous.items() if key in seen}

        self.samples_total += 1
        self.read_errors_total += errors
        return Sample(timestamp=now, node_cpu_millis=node_cpu, node_memory_bytes=node_memory, pods=tuple(pods),
                      host_applications=tuple(apps), psi=psi, node_cpu_measured=cpu_measured,
                      node_memory_measured=memory_measured, read_errors=errors)

    @property
    def cpu_count(self) -> int:
        """The node's cpus, as /proc/stat listed them at the last sample."""
        return self._cpus

    def _node_rate(self, busy_ticks: int, at: float) -> tuple[int, bool]:
        previous, self._node_previous = self._node_previous, (busy_ticks, at)
        if previous is None:
            return 0, False
        seconds = busy_ticks / self._ticks - previous[0] / self._ticks
        return self._rate(seconds, at - previous[1])

    def _cgroup_rate(self, layout: cgroups.CgroupLayout, key: tuple[str, str], path: str, *, at: float,
                     seen: set[tuple[str, str]]) -> tuple[int, int, bool] | None:
        """(cpu millis, memory bytes, cpu measured), or None when a counter could not be read."""
        seen.add(key)  # still there, even if unreadable this time: keep its previous reading
        counters = cgroups.read_counters(layout, path, self.memory_policy)
        if counters.cpu_usage_usec is None or counters.memory_bytes is None:
            return None  # the next rate then spans the gap, and is still right
        previous = self._previous.get(key)
        self._previous[key] = (counters.cpu_usage_usec, at)
        if previous is None:
            return 0, counters.memory_bytes, False
        cpu, measured = self._rate((counters.cpu_usage_usec - previous[0]) / 1e6, at - previous[1])
        return cpu, counters.memory_bytes, measured

    def _rate(self, cpu_seconds: float, elapsed: float) -> tuple[int, bool]:
        """Milli-cpus used over `elapsed` seconds; (0, False) when the counter went backwards or
        no time passed, capped at the machine's cpus (a counter cannot honestly go faster)."""
        if cpu_seconds < 0 or elapsed <= 0:
            return 0, False
        return min(round(cpu_seconds / elapsed * 1000), self._cpus * 1000), True
