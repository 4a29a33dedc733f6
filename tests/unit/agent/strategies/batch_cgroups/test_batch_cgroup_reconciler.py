"""Batch cgroups on trees written by the tests: v1 and v2, cgroupfs and systemd drivers.

Each tree holds two BestEffort pods as the kubelet leaves them (unlimited, shares 2): a batch pod
with one container (batch-cpu 500 request and 1000 limit, batch-memory 1 GiB limit), and a
plain pod that names no batch resource, whose files the reconciler must never touch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from colocation.agent import cgroups
from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CgroupWriter
from colocation.agent.strategies.batch_cgroups.batch_cgroup_reconciler import (
    BatchCgroupReconciler,
    is_container_cgroup,
    pod_cgroup_path,
)
from colocation.agent.strategies.batch_cgroups.batch_cgroups import ContainerResources, PodResources

GiB = 1 << 30
BATCH_UID, PLAIN_UID, CONTAINER_ID = "aaaa-1111", "bbbb-2222", "c0ffee"
BATCH_POD = PodResources(uid=BATCH_UID, namespace="jobs", name="job-1", qos="BE", kube_qos="BestEffort", containers=(
    ContainerResources(name="main", container_id=CONTAINER_ID, batch_cpu_request=500, batch_cpu_limit=1000,
                       batch_memory_limit=GiB),))
V1_UNLIMITED_MEMORY = "9223372036854771712"


@dataclass(frozen=True)
class Tree:
    version: int
    cpu: str  # the best-effort tier in the cpu hierarchy
    memory: str  # ... and in the memory hierarchy
    systemd: bool

    def pod_dir(self, uid: str) -> str:
        if self.systemd:
            return f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice"
        return f"pod{uid}"

    def container_dir(self) -> str:
        return f"cri-containerd-{CONTAINER_ID}.scope" if self.systemd else CONTAINER_ID

    def cgroups(self, root: Path, hierarchy: str, uid: str = BATCH_UID) -> list[Path]:
        """The pod's cgroup and its container's."""
        pod = root / (self.cpu if hierarchy == "cpu" else self.memory) / self.pod_dir(uid)
        return [pod, pod / self.container_dir()]

    def values(self, root: Path, uid: str = BATCH_UID) -> list[tuple[str, str, str]]:
        """(quota, shares, memory limit) as the files say, for the pod and its container."""
        names = ("cpu.max", "cpu.weight", "memory.max") if self.version == 2 else \
            ("cpu.cfs_quota_us", "cpu.shares", "memory.limit_in_bytes")
        return [((cpu / names[0]).read_text().strip(), (cpu / names[1]).read_text().strip(),
                 _shown((memory / names[2]).read_text().strip()))
                for cpu, memory in zip(self.cgroups(root, "cpu", uid), self.cgroups(root, "memory", uid), strict=True)]


def _shown(memory_limit: str) -> str:
    """What v1 shows once -1 is written there (these files are plain files: they keep the -1)."""
    return V1_UNLIMITED_MEMORY if memory_limit == "-1" else memory_limit


TREES = {
    "v1-cgroupfs": Tree(1, "cpu,cpuacct/kubepods/besteffort", "memory/kubepods/besteffort", systemd=False),
    "v1-systemd": Tree(1, "cpu,cpuacct/kubepods.slice/kubepods-besteffort.slice",
                       "memory/kubepods.slice/kubepods-besteffort.slice", systemd=True),
    "v2-cgroupfs": Tree(2, "kubepods/besteffort", "kubepods/besteffort", systemd=False),
    "v2-systemd": Tree(2, "kubepods.slice/kubepods-besteffort.slice", "kubepods.slice/kubepods-besteffort.slice",
                       systemd=True),
}
# What the kubelet leaves, and what the batch pod's resources make of it, per version.
KUBELET = {1: ("-1", "2", V1_UNLIMITED_MEMORY), 2: ("max 100000", "1", "max")}
BATCH = {1: [("100000", "512", str(GiB))] * 2, 2: [("100000 100000", "20", str(GiB))] * 2}


def make_root(root: Path, version: int) -> None:
    """An empty cgroup root of that version (v1: the cpu and cpuacct hierarchy only)."""
    if version == 2:
        root.mkdir(parents=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    else:
        (root / "cpu,cpuacct").mkdir(parents=True)
        (root / "cpu").symlink_to("cpu,cpuacct")  # as v1 machines mount it


def build(root: Path, tree: Tree) -> None:
    make_root(root, tree.version)
    for uid in (BATCH_UID, PLAIN_UID):
        for cpu, memory in zip(tree.cgroups(root, "cpu", uid), tree.cgroups(root, "memory", uid), strict=True):
            cpu.mkdir(parents=True, exist_ok=True)
            memory.mkdir(parents=True, exist_ok=True)
            if tree.version == 2:
                (cpu / "cpu.max").write_text("max 100000\n")
                (cpu / "cpu.weight").write_text("1\n")
                (memory / "memory.max").write_text("max\n")
            else:
                (cpu / "cpu.cfs_quota_us").write_text("-1\n")
                (cpu / "cpu.cfs_period_us").write_text("100000\n")
                (cpu / "cpu.shares").write_text("2\n")
                (memory / "memory.limit_in_bytes").write_text(V1_UNLIMITED_MEMORY + "\n")


class Harness:
    def __init__(self, root: Path, *, dry_run: bool = False) -> None:
        self.metrics = AgentMetrics()
        writer = CgroupWriter(root, dry_run=dry_run, on_write=lambda resource, result:
                              self.metrics.batch_cgroup_writes.labels(resource, result).inc())
        self.reconciler = BatchCgroupReconciler(writer, self.metrics, node="node-a")

    def writes(self, result: str) -> float:
        return sum(self.metrics.registry.get_sample_value("colocation_agent_batch_cgroup_writes_total",
                                                          {"resource": resource, "result": result}) or 0
                   for resource in ("cfs_quota", "cpu_shares", "memory_limit"))

    def managed(self) -> float | None:
        return self.metrics.registry.get_sample_value("colocation_agent_batch_pods_managed")


@pytest.fixture(params=sorted(TREES))
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Tree:
    chosen = TREES[request.param]
    build(tmp_path / "cgroup", chosen)
    return chosen


def test_the_batch_pods_values_land_on_its_cgroup_and_its_containers_only(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    assert tree.values(root) == BATCH[tree.version]
    assert tree.values(root, PLAIN_UID) == [KUBELET[tree.version]] * 2
    assert harness.managed() == 1
    assert harness.writes("ok") == 6

    harness.reconciler.step({BATCH_UID: BATCH_POD})  # nothing changed: nothing written
    assert harness.writes("ok") == 6


def test_a_value_written_by_someone_else_is_put_back(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    container_cpu = tree.cgroups(root, "cpu")[1]
    (container_cpu / ("cpu.max" if tree.version == 2 else "cpu.cfs_quota_us")).write_text(KUBELET[tree.version][0])
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    assert tree.values(root) == BATCH[tree.version]


def test_undone_when_the_pod_no_longer_names_batch_resources(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    harness.reconciler.step({})  # the watch no longer lists it with batch resources (or at all)
    assert tree.values(root) == [KUBELET[tree.version]] * 2
    assert harness.managed() == 0
    writes = harness.writes("ok")
    harness.reconciler.step({})  # undone once, not every round
    assert harness.writes("ok") == writes


def test_restore_undoes_every_pod_written(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    harness.reconciler.restore()
    assert tree.values(root) == [KUBELET[tree.version]] * 2


def test_dry_run_counts_what_it_would_write_and_writes_nothing(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root, dry_run=True)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    harness.reconciler.restore()
    assert tree.values(root) == [KUBELET[tree.version]] * 2
    assert harness.writes("ok") == 0 and harness.writes("dry-run") == 6


def test_quota_unset_while_cpu_suppress_holds_the_tier(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    harness.reconciler.step({BATCH_UID: BATCH_POD}, unlimited_quota=True)
    assert [values[0] for values in tree.values(root)] == [KUBELET[tree.version][0]] * 2
    assert [values[1:] for values in tree.values(root)] == [values[1:] for values in BATCH[tree.version]]


def test_quotas_tighten_from_the_containers_up_and_loosen_from_the_pod_down(
        tree: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    order: list[str] = []
    write = harness.reconciler.writer.write_cfs_quota

    def recording(directory: Path, quota: int, period: int, **known: Any) -> object:
        order.append("pod" if directory.name == tree.pod_dir(BATCH_UID) else "container")
        return write(directory, quota, period, **known)

    monkeypatch.setattr(harness.reconciler.writer, "write_cfs_quota", recording)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    assert order == ["container", "pod"]  # v1 refuses a parent a smaller quota than its child's
    order.clear()
    harness.reconciler.step({})
    assert order == ["pod", "container"]


def test_a_failing_write_is_counted_each_time_and_logged_once(tree: Tree, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    memory = tree.cgroups(root, "memory")[0] / ("memory.max" if tree.version == 2 else "memory.limit_in_bytes")
    memory.unlink()
    memory.mkdir()  # neither readable nor writable as a file
    with caplog.at_level(logging.WARNING):
        harness.reconciler.step({BATCH_UID: BATCH_POD})
        harness.reconciler.step({BATCH_UID: BATCH_POD})
    assert harness.writes("failed") == 2
    assert [record.message for record in caplog.records] == ["cannot write batch cgroups"]
    memory.rmdir()
    memory.write_text(KUBELET[tree.version][2])
    assert tree.values(root) == [(*BATCH[tree.version][0][:2], KUBELET[tree.version][2]),
                                 BATCH[tree.version][1]]  # the rest is written all the same


def test_a_pod_not_started_yet_is_written_once_its_cgroup_appears(tmp_path: Path) -> None:
    tree = TREES["v1-cgroupfs"]
    root = tmp_path / "cgroup"
    (root / "cpu,cpuacct" / tree.cpu.partition("/")[2]).mkdir(parents=True)
    (root / "memory").mkdir()
    harness = Harness(root)
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    assert harness.writes("ok") == 0 and harness.writes("failed") == 0
    build(tmp_path / "later", tree)
    harness = Harness(tmp_path / "later")
    harness.reconciler.step({BATCH_UID: BATCH_POD})
    assert tree.values(tmp_path / "later") == BATCH[1]


@pytest.mark.parametrize(("root", "qos", "path"), [
    ("kubepods", "BestEffort", "besteffort/poda-b"),
    ("kubepods", "Guaranteed", "poda-b"),
    ("kubepods.slice", "Burstable", "kubepods-burstable.slice/kubepods-burstable-poda_b.slice"),
    ("kubepods.slice", "Guaranteed", "kubepods-poda_b.slice"),
    ("kubelet.slice/kubelet-kubepods.slice", "BestEffort",
     "kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-poda_b.slice"),
])
def test_pod_cgroup_path_follows_the_kubelets_naming(root: str, qos: str, path: str) -> None:
    assert pod_cgroup_path(root, qos, "a-b") == path  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "found"), [
    ("c0ffee", True), ("crio-c0ffee", True), ("cri-containerd-c0ffee.scope", True), ("docker-c0ffee.scope", True),
    ("crio-c0ffee.scope", True), ("crio-conmon-c0ffee.scope", False), ("c0ffee00", False),
    ("cri-containerd-beef.scope", False)])
def test_a_containers_cgroup_is_named_after_its_runtime_id(name: str, found: bool) -> None:
    assert is_container_cgroup(name, "c0ffee") is found


def test_a_round_reads_each_cpu_quota_once(tree: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    read: list[Path] = []
    real = cgroups.read_file

    def counted(path: Path) -> str | None:
        read.append(path)
        return real(path)

    monkeypatch.setattr(cgroups, "read_file", counted)
    harness.reconciler.step({BATCH_UID: BATCH_POD})  # writes every quota: each read once, to order them
    quota_file = "cpu.max" if tree.version == 2 else "cpu.cfs_quota_us"
    quotas = [path for path in read if path.name == quota_file]
    assert sorted(path.parent.name for path in quotas) == sorted(path.name for path in tree.cgroups(root, "cpu"))
    assert tree.values(root) == BATCH[tree.version]
