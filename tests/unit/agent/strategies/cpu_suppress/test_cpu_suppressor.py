"""CPU suppress on cgroup trees written by the tests: v1 and v2, cgroupfs and systemd drivers.

Each tree has the best-effort tier with one pod and one container, an unlimited quota and the
full cpuset 0-7 (an 8-cpu node). The usage is the worked example of test_cpu_suppress: BE pods
may use 2200m, a quota of 220000 µs per 100 ms, or 3 cpus.
"""

from __future__ import annotations

import asyncio
import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from colocation.agent import cgroup_writer
from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CgroupWriter
from colocation.agent.classify import PodInfo
from colocation.agent.collector import PodSample, Sample
from colocation.agent.cpuset import Processor
from colocation.agent.node_events import NodeEvents
from colocation.agent.strategies.cpu_suppress.cpu_suppress import SuppressPolicy
from colocation.agent.strategies.cpu_suppress.cpu_suppressor import CpuSuppressor
from colocation.agent.strategies.node_reservation import NodeReservation
from colocation.kube.backoff import Backoff

LS_UID, BE_UID = "11111111-1", "22222222-2"
PODS = {LS_UID: PodInfo(uid=LS_UID, namespace="default", name="ls", priority="koord-prod", qos="LS",
                        cpu_request_millis=0, memory_request_bytes=0, kube_qos="Burstable"),
        BE_UID: PodInfo(uid=BE_UID, namespace="default", name="be", priority="koord-batch", qos="BE",
                        cpu_request_millis=0, memory_request_bytes=0, kube_qos="BestEffort")}
QUOTA = SuppressPolicy(enabled=True, threshold_percent=65, policy="cfsQuota")
CPUSET = SuppressPolicy(enabled=True, threshold_percent=65, policy="cpuset")
OFF = SuppressPolicy(enabled=False)


@dataclass(frozen=True)
class Tree:
    """Where a layout keeps the files (relative to the cgroup root)."""

    version: int
    cpu: str  # the best-effort tier in the cpu hierarchy
    cpuset: str  # ... and in the cpuset hierarchy
    pod: str  # the pod's directory name

    def quota_file(self, root: Path) -> Path:
        return root / self.cpu / ("cpu.max" if self.version == 2 else "cpu.cfs_quota_us")

    def quota(self, root: Path) -> str:
        return self.quota_file(root).read_text().strip()

    def cpusets(self, root: Path) -> list[str]:
        tier = root / self.cpuset
        return [(path / "cpuset.cpus").read_text().strip() for path in (tier, tier / self.pod, tier / self.pod / "c1")]


TREES = {
    "v1-cgroupfs": Tree(1, "cpu/kubepods/besteffort", "cpuset/kubepods/besteffort", "pod" + BE_UID),
    "v1-systemd": Tree(1, "cpu,cpuacct/kubepods.slice/kubepods-besteffort.slice",
                       "cpuset/kubepods.slice/kubepods-besteffort.slice", "kubepods-besteffort-pod22222222_2.slice"),
    "v2-cgroupfs": Tree(2, "kubepods/besteffort", "kubepods/besteffort", "pod" + BE_UID),
    "v2-systemd": Tree(2, "kubepods.slice/kubepods-besteffort.slice", "kubepods.slice/kubepods-besteffort.slice",
                       "kubepods-besteffort-pod22222222_2.slice"),
}


def build(root: Path, tree: Tree) -> None:
    if tree.version == 2:
        root.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    cpu = root / tree.cpu
    cpu.mkdir(parents=True, exist_ok=True)
    if tree.version == 2:
        (cpu / "cpu.max").write_text("max 100000\n")
    else:
        (cpu / "cpu.cfs_quota_us").write_text("-1\n")
        (cpu / "cpu.cfs_period_us").write_text("100000\n")
    tier = root / tree.cpuset
    (tier / tree.pod / "c1").mkdir(parents=True, exist_ok=True)
    for directory in (tier.parent, tier, tier / tree.pod, tier / tree.pod / "c1"):
        (directory / "cpuset.cpus").write_text("0-7\n")


class FakeKube:
    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        self.posted.append(body)
        return 201, body


def sample(node: int = 4500) -> Sample:
    return Sample(timestamp=0.0, node_cpu_millis=node, node_memory_bytes=0, pods=(
        PodSample(uid=LS_UID, cpu_millis=2000, memory_bytes=0, cgroup_path="kubepods/burstable/pod" + LS_UID),
        PodSample(uid=BE_UID, cpu_millis=1500, memory_bytes=0, cgroup_path="kubepods/besteffort/pod" + BE_UID)))


class Harness:
    def __init__(self, root: Path, *, dry_run: bool = False) -> None:
        self.metrics = AgentMetrics()
        self.kube = FakeKube()
        self.events = NodeEvents(self.kube, "node-a", wall=lambda: 1.7e9,  # type: ignore[arg-type]
                                 backoff=lambda: Backoff(jitter=0.0))
        writer = CgroupWriter(root, dry_run=dry_run,
                              on_write=lambda resource, result: self.metrics.cgroup_writes.labels(resource,
                                                                                                  result).inc())
        topology = [Processor(cpu=cpu, core=cpu, socket=0) for cpu in range(8)]
        self.suppressor = CpuSuppressor(writer, self.metrics, node="node-a", cpus=lambda: 8,
                                        topology=lambda: topology, events=self.events)

    def step(self, policy: SuppressPolicy, node: int = 4500) -> None:
        self.suppressor.step(policy, sample(node), PODS)

    def writes(self, result: str) -> float:
        return sum(self.metrics.registry.get_sample_value("colocation_agent_cgroup_writes_total",
                                                          {"resource": resource, "result": result}) or 0
                   for resource in ("cfs_quota", "cpuset"))

    async def reasons(self) -> list[str]:
        await self.events.drain(1.0)
        return [body["reason"] for body in self.kube.posted]


@pytest.fixture(params=sorted(TREES))
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Tree:
    chosen = TREES[request.param]
    build(tmp_path / "cgroup", chosen)
    return chosen


def quota_text(tree: Tree, quota: int) -> str:
    if tree.version == 2:
        return f"{'max' if quota < 0 else quota} 100000"
    return str(quota)


async def test_quota_policy_writes_the_budget_on_the_tier_and_restores_it(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.step(QUOTA)
    assert tree.quota(root) == quota_text(tree, 220_000)
    assert tree.cpusets(root) == ["0-7"] * 3  # the other policy's files are left as they were
    assert harness.metrics.registry.get_sample_value("colocation_agent_cpu_suppress_millicores") == 2200

    harness.step(QUOTA, node=4520)  # +20m: under 1 % of the node, not written
    assert tree.quota(root) == quota_text(tree, 220_000)
    assert harness.writes("ok") == 1

    harness.step(OFF)
    assert tree.quota(root) == quota_text(tree, -1)
    assert harness.metrics.registry.get_sample_value("colocation_agent_cpu_suppress_millicores") == -1
    assert await harness.reasons() == ["CPUSuppressStarted", "CPUSuppressStopped"]
    assert harness.kube.posted[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}


async def test_a_value_written_by_someone_else_is_put_back(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.step(QUOTA)
    tree.quota_file(root).write_text(quota_text(tree, -1))
    harness.step(QUOTA)
    assert tree.quota(root) == quota_text(tree, 220_000)
    assert await harness.reasons() == ["CPUSuppressStarted"]  # one suppression, not two


async def test_cpuset_policy_shrinks_tier_pods_and_containers(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.step(CPUSET)
    assert tree.cpusets(root) == ["0-2"] * 3
    assert tree.quota(root) == quota_text(tree, -1)
    # A pod created since gets the full cpuset from the kubelet: the next round narrows it too.
    (root / tree.cpuset / tree.pod / "c1" / "cpuset.cpus").write_text("0-7")
    harness.step(CPUSET)
    assert tree.cpusets(root) == ["0-2"] * 3
    harness.step(OFF)
    assert tree.cpusets(root) == ["0-7"] * 3


async def test_switching_policy_undoes_the_other_one(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root)
    harness.step(CPUSET)
    harness.step(QUOTA)
    assert tree.cpusets(root) == ["0-7"] * 3
    assert tree.quota(root) == quota_text(tree, 220_000)


async def test_dry_run_computes_and_exports_but_writes_nothing(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    harness = Harness(root, dry_run=True)
    harness.step(QUOTA)
    harness.step(CPUSET)
    harness.step(OFF)
    assert tree.quota(root) == quota_text(tree, -1)
    assert tree.cpusets(root) == ["0-7"] * 3
    assert harness.writes("ok") == 0 and harness.writes("dry-run") > 0
    assert await harness.reasons() == []  # no Event: nothing happened on the node


async def test_disabled_suppression_on_an_untouched_node_writes_nothing(tree: Tree, tmp_path: Path) -> None:
    harness = Harness(tmp_path / "cgroup")
    harness.step(OFF)
    harness.step(OFF)
    assert harness.writes("ok") == harness.writes("dry-run") == harness.writes("failed") == 0


def test_a_read_only_mount_counts_failures_and_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tree = TREES["v1-cgroupfs"]
    root = tmp_path / "cgroup"
    build(root, tree)

    def read_only(path: Path, mode: str = "r") -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(cgroup_writer, "open", read_only, raising=False)  # the default install's mount
    harness = Harness(root)
    harness.step(QUOTA)
    harness.step(QUOTA)
    assert harness.writes("failed") == 2  # one per round
    assert [r.message for r in caplog.records if r.levelname == "WARNING"] == ["cpu suppress cannot act"]
    assert harness.suppressor.in_force is None
    assert harness.metrics.registry.get_sample_value("colocation_agent_cpu_suppress_millicores") == -1


def test_nothing_to_suppress_without_a_best_effort_tier(tmp_path: Path) -> None:
    (tmp_path / "cgroup" / "cpu").mkdir(parents=True)
    harness = Harness(tmp_path / "cgroup")
    harness.step(QUOTA)
    assert harness.suppressor.in_force is None
    assert harness.writes("ok") == 0


class NodeKube:
    """Answers GET Node with a kubelet reservation of 1 cpu, after `failures` failed attempts."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.gets = 0
        self.answered = asyncio.Event()

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        assert (method, path) == ("GET", "/api/v1/nodes/node-a")
        self.gets += 1
        if self.gets <= self.failures:
            raise TimeoutError()
        self.answered.set()
        return 200, {"status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "7"}}}


async def test_the_node_reservation_lowers_the_quota(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    build(root, TREES["v2-systemd"])
    harness = Harness(root)
    reservation = NodeReservation(NodeKube(), "node-a", timeout=1.0)  # type: ignore[arg-type]
    assert await reservation.read()
    harness.suppressor.reservation = reservation
    # 3600m on the node, 3500m in pods: 100m measured system usage, but 1000m reserved counts.
    # (Without the reservation: 5200 - 2000 - 100 = 3100m.)
    harness.step(QUOTA, node=3600)
    assert TREES["v2-systemd"].quota(root) == "220000 100000"


async def test_the_node_is_read_only_while_suppression_is_wanted_and_retried_on_failure() -> None:
    kube = NodeKube(failures=1)
    reservation = NodeReservation(kube, "node-a", timeout=1.0, refresh=3600, poll=0.01)  # type: ignore[arg-type]
    wanted, polls, polled = False, 0, asyncio.Event()

    def want() -> bool:
        nonlocal polls
        polls += 1
        if polls >= 3:
            polled.set()
        return wanted

    task = asyncio.create_task(reservation.run(want))
    try:
        await asyncio.wait_for(polled.wait(), timeout=10)  # several polls while unwanted...
        assert kube.gets == 0  # ...and no read
        wanted = True
        await asyncio.wait_for(kube.answered.wait(), timeout=10)  # the failure's backoff is at most 1 s
        assert (kube.gets, reservation.cpu_millis) == (2, 1000)
    finally:
        task.cancel()
