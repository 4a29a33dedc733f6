"""The node the agent-cost benchmark's agent measures: 110 pods, a fake /proc and a cgroup v2 tree.

Everything is under a temporary directory (`--proc-root`, `--cgroup-root`), so the agent's
enforcement writes real files without touching this machine. The tree is what a kubelet with the
cgroupfs driver makes (`kubepods/burstable/pod<uid>/<container>`, `kubepods/besteffort/...`), with
the files the agent reads (cpu.stat, memory.stat, memory.current) and writes (cpu.max, cpu.weight,
memory.max, cpuset.cpus). `advance()` moves the counters as if each pod used its cpu in real
time; it never rewrites a file the agent writes.

The load is chosen so that every strategy works every round without acting on the pods: node
usage a quarter of its cpus and 40 % of its memory (no memory eviction), best-effort pods using
well under the cpus CPU suppress leaves them (no cpu eviction), so the steady state lasts.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GI = 2**30
MI = 2**20
CPUS = 8
MEMORY = 32 * GI
SYSTEM_MILLIS = 300  # what the node uses outside pods
# Each pod's cpu. CPU suppress then leaves BE pods 65 % of 8 cpus less the rest (740m): about 4.46 cpus,
# 5 in the cpuset, even when a rate the agent measures is off by half (the fake counters move in
# steps, and this machine may delay the steps): a flip would rewrite 131 cpusets on noise alone.
LS_MILLIS, BE_MILLIS = 10, 20
LS_MEMORY, BE_MEMORY = 160 * MI, 48 * MI
BATCH_CPU, BATCH_MEMORY = "50", "128Mi"  # each BE pod's request and limit (Koordinator: milli-cpus)
SCRAPE_ANNOTATIONS = ("colocation.dev/scrape", "colocation.dev/port", "colocation.dev/path")


@dataclass(frozen=True)
class NodePod:
    """A workload pod of the node: its name, QoS (LS or BE) and whether its metrics are scraped."""

    name: str
    qos: str
    scraped: bool
    container_id: str

    @property
    def millis(self) -> int:
        return LS_MILLIS if self.qos == "LS" else BE_MILLIS

    @property
    def memory(self) -> int:
        return LS_MEMORY if self.qos == "LS" else BE_MEMORY


def node_pods(count: int, *, best_effort_share: float = 0.6, scraped: int = 20) -> list[NodePod]:
    """`count` pods: the first `best_effort_share` of them BE, the rest LS, `scraped` LS pods scraped."""
    best_effort = round(count * best_effort_share)
    pods = []
    for index in range(count):
        qos = "BE" if index < best_effort else "LS"
        pods.append(NodePod(f"{qos.lower()}-{index:03d}", qos, qos == "LS" and index - best_effort < scraped,
                            uuid.uuid4().hex))
    return pods


def pod_manifest(pod: NodePod, node: str, scrape_port: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
    if pod.qos == "BE":
        amount = {"kubernetes.io/batch-cpu": BATCH_CPU, "kubernetes.io/batch-memory": BATCH_MEMORY}
        container["resources"] = {"requests": amount, "limits": amount}
        labels = {"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-batch"}
    else:
        container["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1"}}
        labels = {"koordinator.sh/qosClass": "LS", "koordinator.sh/priority-class": "koord-prod"}
    annotations = dict(zip(SCRAPE_ANNOTATIONS, ("true", str(scrape_port), "/metrics"), strict=True)) \
        if pod.scraped else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "labels": {"app": pod.name, **labels}, "annotations": annotations},
            "spec": {"nodeName": node, "containers": [container]}}


def running_status(pod: NodePod) -> dict[str, Any]:
    """The status a kubelet would report; BE pods (batch resources only) are BestEffort to the kubelet."""
    return {"phase": "Running", "podIP": "127.0.0.1", "qosClass": "BestEffort" if pod.qos == "BE" else "Burstable",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "main", "containerID": f"containerd://{pod.container_id}", "ready": True,
                                   "restartCount": 0, "image": "registry.k8s.io/pause:3.9", "imageID": "",
                                   "state": {"running": {}}}]}


def _write(path: Path, text: str) -> None:
    path.write_text(text)


class FakeHost:
    """/proc and a cgroup v2 tree under `root`, for `pods` (uid → pod) on a node of CPUS cpus."""

    def __init__(self, root: Path, pods: dict[str, NodePod]) -> None:
        self.proc = root / "proc"
        self.cgroup = root / "cgroup"
        self.pods = dict(pods)
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.paths = {uid: self._pod_path(uid, pod) for uid, pod in self.pods.items()}
        self.proc.mkdir(parents=True)
        self.cgroup.mkdir(parents=True)
        _write(self.cgroup / "cgroup.controllers", "cpuset cpu io memory pids\n")
        for tier in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            self._limits(self.cgroup / tier)
        for uid, path in self.paths.items():
            # The kubelet's quota for an LS pod's 1-cpu limit, on the pod and its container.
            quota = "100000 100000\n" if self.pods[uid].qos == "LS" else "max 100000\n"
            self._limits(self.cgroup / path, quota)
            self._limits(self.cgroup / path / self.pods[uid].container_id, quota)
        vm = self.proc / "sys" / "vm"  # what system settings write
        vm.mkdir(parents=True)
        _write(vm / "min_free_kbytes", "67584\n")
        _write(vm / "watermark_scale_factor", "10\n")
        self._memory()
        self.advance(0.0)

    @staticmethod
    def _pod_path(uid: str, pod: NodePod) -> str:
        return f"kubepods/{'besteffort' if pod.qos == 'BE' else 'burstable'}/pod{uid}"

    @staticmethod
    def _limits(directory: Path, cpu_max: str = "max 100000\n") -> None:
        """The files the kubelet leaves as it found them: its quota (none by default), default
        weight, no memory limit, all cpus."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in (("cpu.max", cpu_max), ("cpu.max.burst", "0\n"), ("cpu.weight", "100\n"),
                           ("memory.max", "max\n"),
                           ("cpuset.cpus", "\n"), ("cpuset.cpus.effective", f"0-{CPUS - 1}\n")):
            _write(directory / name, text)

    def _memory(self) -> None:
        """Memory stays put: the node at 40 %, each pod at its own size (memory.stat's LRU lists)."""
        used = int(MEMORY * 0.4)
        _write(self.proc / "meminfo", f"MemTotal: {MEMORY // 1024} kB\nMemFree: {(MEMORY - used) // 2048} kB\n"
                                      f"MemAvailable: {(MEMORY - used) // 1024} kB\nBuffers: 1024 kB\n"
                                      f"Inactive(file): {GI // 1024} kB\nHugePages_Total: 0\n")
        for uid, path in self.paths.items():
            anon = self.pods[uid].memory
            _write(self.cgroup / path / "memory.stat",
                   f"anon {anon}\nfile {8 * MI}\ninactive_anon {anon // 3}\nactive_anon {anon - anon // 3}\n"
                   f"inactive_file {4 * MI}\nactive_file {4 * MI}\nunevictable 0\n")
            _write(self.cgroup / path / "memory.current", f"{anon + 9 * MI}\n")

    def advance(self, elapsed: float) -> None:
        """CPU counters as after `elapsed` seconds of the pods' (and the system's) steady use."""
        node_millis = SYSTEM_MILLIS + sum(pod.millis for pod in self.pods.values())
        busy = 1000 + int(elapsed * node_millis / 1000 * self.ticks)
        idle = 99999 + int(elapsed * CPUS * self.ticks) - busy
        lines = [f"cpu  {busy - 40} 10 10 {max(idle, 0)} 777 10 10 0 0 0"]
        lines += [f"cpu{n} 1 1 1 1 1 1 1 1 0 0" for n in range(CPUS)]
        _write(self.proc / "stat", "\n".join([*lines, "intr 1", "ctxt 1", "btime 1700000000", "processes 1"]) + "\n")
        for uid, path in self.paths.items():
            _write(self.cgroup / path / "cpu.stat",
                   f"usage_usec {1 + int(elapsed * self.pods[uid].millis * 1000)}\nuser_usec 1\nsystem_usec 1\n")

    def written(self) -> dict[str, int]:
        """How many of the agent's files hold something other than the kubelet's value, per file name."""
        defaults = {"cpu.max": "max 100000", "cpu.max.burst": "0", "cpu.weight": "100", "memory.max": "max",
                    "cpuset.cpus": ""}
        counts = dict.fromkeys(defaults, 0)
        directories = [(self.cgroup / "kubepods" / tier, "max 100000") for tier in ("burstable", "besteffort")]
        for uid, path in self.paths.items():
            quota = "100000 100000" if self.pods[uid].qos == "LS" else "max 100000"
            directories += [(self.cgroup / path, quota), (self.cgroup / path / self.pods[uid].container_id, quota)]
        for directory, quota in directories:
            for name, default in {**defaults, "cpu.max": quota}.items():
                if (directory / name).read_text().strip() != default:
                    counts[name] += 1
        return counts
