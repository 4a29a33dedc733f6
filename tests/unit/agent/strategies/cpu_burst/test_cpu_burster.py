"""CPU burst on cgroup trees written by the tests: v1 and v2, cgroupfs and systemd drivers.

Each tree holds, in the burstable tier, an LS pod as the kubelet leaves it: container `main`
(limit 1 cpu, quota 100000 µs) and `side` (limit 500m, 50000 µs), the pod's quota their sum
(150000 µs), no burst anywhere; and a second LS pod the burster is never given (no CPU limit, or
not LS: colocation.agent.strategies.cpu_burst.cpu_burst decides that), whose files must never change. A fake kernel
check runs after every write: a cgroup's burst may not exceed its quota, nor (v1) a container's
quota its pod's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from colocation.agent import cgroups
from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CgroupWriter
from colocation.agent.classify import PodInfo
from colocation.agent.collector import PodSample, Sample
from colocation.agent.node_events import NodeEvents
from colocation.agent.strategies.batch_cgroups.batch_cgroups import ContainerResources, PodResources
from colocation.agent.strategies.cpu_burst.cpu_burst import BurstConfig, BurstPod, BurstStrategy
from colocation.agent.strategies.cpu_burst.cpu_burster import EVENT_INTERVAL, REREAD_INTERVAL, CpuBurster
from colocation.kube.backoff import Backoff
from tests.clock import FakeClock
from tests.unit.agent.strategies.batch_cgroups.test_batch_cgroup_reconciler import make_root
from tests.unit.agent.strategies.cpu_suppress.test_cpu_suppressor import FakeKube

LS_UID, OTHER_UID, MAIN, SIDE = "aaaa-1111", "bbbb-2222", "c0ffee", "decaf0"
POD = BurstPod(PodResources(uid=LS_UID, namespace="web", name="front", qos="LS", kube_qos="Burstable", containers=(
    ContainerResources(name="main", container_id=MAIN, cpu_request=500, cpu_limit=1000),
    ContainerResources(name="side", container_id=SIDE, cpu_request=500, cpu_limit=500))))
INFOS = {LS_UID: PodInfo(uid=LS_UID, namespace="web", name="front", priority="koord-prod", qos="LS",
                         cpu_request_millis=1000, memory_request_bytes=0, kube_qos="Burstable"),
         OTHER_UID: PodInfo(uid=OTHER_UID, namespace="web", name="other", priority="koord-prod", qos="LS",
                            cpu_request_millis=0, memory_request_bytes=0, kube_qos="Burstable")}
AUTO, OFF = BurstStrategy(BurstConfig(policy="auto")), BurstStrategy()
IDLE, BUSY = 1000, 7000  # node usage on 8 cpus: 12 % and 87 % of the share pool (threshold 50 %)


@dataclass(frozen=True)
class Tree:
    version: int
    cpu: str  # the burstable tier in the cpu (and v1 cpuacct) hierarchy
    systemd: bool

    def pod_dir(self, uid: str) -> str:
        return f"kubepods-burstable-pod{uid.replace('-', '_')}.slice" if self.systemd else f"pod{uid}"

    def container_dir(self, container_id: str) -> str:
        return f"cri-containerd-{container_id}.scope" if self.systemd else container_id

    def cgroups(self, root: Path, uid: str = LS_UID) -> list[Path]:
        """The pod's cgroup, `main`'s, `side`'s."""
        pod = root / self.cpu / self.pod_dir(uid)
        return [pod, pod / self.container_dir(MAIN), pod / self.container_dir(SIDE)]

    def quota_file(self, directory: Path) -> Path:
        return directory / ("cpu.max" if self.version == 2 else "cpu.cfs_quota_us")

    def burst_file(self, directory: Path) -> Path:
        return directory / ("cpu.max.burst" if self.version == 2 else "cpu.cfs_burst_us")

    def quota(self, directory: Path) -> int:
        text = self.quota_file(directory).read_text().split()[0]
        return -1 if text == "max" else int(text)

    def values(self, root: Path, uid: str = LS_UID) -> list[tuple[int, int]]:
        """(quota, burst) of the pod, main and side."""
        return [(self.quota(path), int(self.burst_file(path).read_text())) for path in self.cgroups(root, uid)]

    def throttle(self, root: Path, used_usec: int = 0) -> None:
        """`main` was throttled (again), after using `used_usec` more cpu time."""
        stat = self.cgroups(root)[1] / "cpu.stat"
        fields = {key: int(value) for key, value in (line.split() for line in stat.read_text().splitlines())}
        fields["nr_throttled"] += 1
        if self.version == 2:
            fields["usage_usec"] += used_usec
        else:
            usage = self.cgroups(root)[1] / "cpuacct.usage"
            usage.write_text(f"{int(usage.read_text()) + used_usec * 1000}\n")
        stat.write_text("".join(f"{key} {value}\n" for key, value in fields.items()))


TREES = {
    "v1-cgroupfs": Tree(1, "cpu,cpuacct/kubepods/burstable", systemd=False),
    "v1-systemd": Tree(1, "cpu,cpuacct/kubepods.slice/kubepods-burstable.slice", systemd=True),
    "v2-cgroupfs": Tree(2, "kubepods/burstable", systemd=False),
    "v2-systemd": Tree(2, "kubepods.slice/kubepods-burstable.slice", systemd=True),
}
KUBELET = [(150_000, 0), (100_000, 0), (50_000, 0)]


def build(root: Path, tree: Tree) -> None:
    make_root(root, tree.version)
    for uid in (LS_UID, OTHER_UID):
        for path, quota in zip(tree.cgroups(root, uid), (150_000, 100_000, 50_000), strict=True):
            path.mkdir(parents=True, exist_ok=True)
            if tree.version == 2:
                (path / "cpu.max").write_text(f"{quota} 100000\n")
                (path / "cpu.stat").write_text("usage_usec 0\nnr_periods 0\nnr_throttled 0\n")
            else:
                (path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
                (path / "cpu.cfs_period_us").write_text("100000\n")
                (path / "cpu.stat").write_text("nr_periods 0\nnr_throttled 0\n")
                (path / "cpuacct.usage").write_text("0\n")
            tree.burst_file(path).write_text("0\n")


class Harness:
    def __init__(self, root: Path, tree: Tree, *, dry_run: bool = False, kernel_checks: bool = True) -> None:
        self.root, self.tree = root, tree
        self.metrics = AgentMetrics()
        self.kube = FakeKube()
        self.clock = FakeClock(1000.0)
        self.events = NodeEvents(self.kube, "node-a", wall=lambda: 1.7e9,  # type: ignore[arg-type]
                                 backoff=lambda: Backoff(jitter=0.0))
        self.writer = CgroupWriter(root, dry_run=dry_run, on_write=lambda resource, result:
                                   self.metrics.cpu_burst_writes.labels(resource, result).inc())
        self.burster = CpuBurster(self.writer, self.metrics, node="node-a", cpus=lambda: 8,
                                  usage_root=root / "cpu,cpuacct", clock=self.clock, fill=lambda: 0.0,
                                  events=self.events)
        self.kernel_checks = 0
        for name in ("write_cfs_quota", "write_cfs_burst"):
            if kernel_checks:
                setattr(self.writer, name, self._checked(getattr(self.writer, name)))

    def _checked(self, write: Callable[..., Any]) -> Callable[..., Any]:
        def checked(*args: Any) -> Any:
            outcome = write(*args)
            values = self.tree.values(self.root)
            for quota, burst in values:
                assert quota < 0 or burst <= quota, f"the kernel refuses burst {burst} over quota {quota}"
            if self.tree.version == 1 and values[0][0] > 0:
                assert all(quota <= values[0][0] for quota, _ in values[1:]), "v1: a child over its parent"
            self.kernel_checks += 1
            return outcome
        return checked

    def step(self, strategy: BurstStrategy = AUTO, node: int = IDLE, pods: dict[str, BurstPod] | None = None) -> None:
        sample = Sample(timestamp=0.0, node_cpu_millis=node, node_memory_bytes=0,
                        pods=(PodSample(uid=LS_UID, cpu_millis=800, memory_bytes=0,
                                        cgroup_path="kubepods/burstable/pod" + LS_UID),))
        self.burster.step(strategy, {LS_UID: POD} if pods is None else pods, sample, infos=INFOS)
        self.clock.now += 1.0

    def writes(self, result: str) -> float:
        return sum(self.metrics.registry.get_sample_value("colocation_agent_cpu_burst_writes_total",
                                                          {"resource": resource, "result": result}) or 0
                   for resource in ("cfs_quota", "cfs_burst"))

    def bursting(self, kind: str) -> float | None:
        return self.metrics.registry.get_sample_value("colocation_agent_cpu_burst_pods", {"kind": kind})

    async def reasons(self) -> list[str]:
        await self.events.drain(1.0)
        return [body["reason"] for body in self.kube.posted]


@pytest.fixture(params=sorted(TREES))
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Tree:
    chosen = TREES[request.param]
    build(tmp_path / "cgroup", chosen)
    return chosen


@pytest.fixture
def harness(tree: Tree, tmp_path: Path) -> Harness:
    return Harness(tmp_path / "cgroup", tree)


def test_nothing_is_written_while_the_policy_is_none(tree: Tree, harness: Harness) -> None:
    harness.step(OFF)
    harness.tree.throttle(harness.root)
    harness.step(OFF)
    assert tree.values(harness.root) == KUBELET
    assert harness.writes("ok") == 0


async def test_cfs_burst_is_set_at_once_capped_by_each_quota(tree: Tree, harness: Harness) -> None:
    harness.step(BurstStrategy(BurstConfig(policy="cpuBurstOnly")))
    # 1000 % of each limit is more than its quota: the quota is the most the kernel takes
    assert tree.values(harness.root) == [(150_000, 150_000), (100_000, 100_000), (50_000, 50_000)]
    assert tree.values(harness.root, OTHER_UID) == KUBELET
    assert harness.bursting("cfs-burst") == 1 and harness.bursting("quota-burst") == 0
    harness.step(BurstStrategy(BurstConfig(policy="cpuBurstOnly")))
    assert harness.writes("ok") == 3  # nothing changed: nothing written
    assert await harness.reasons() == ["CPUBurstApplied"]


async def test_a_throttled_container_gets_more_quota_up_to_the_ceiling(tree: Tree, harness: Harness) -> None:
    harness.step(BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly")))  # the first reading: throttling not known yet
    assert tree.values(harness.root) == KUBELET
    quotas = []
    for _ in range(8):
        tree.throttle(harness.root)
        harness.step(BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly")))
        quotas.append(tree.values(harness.root)[1][0])
    assert quotas == [120_000, 144_000, 172_800, 207_360, 248_832, 298_598, 300_000, 300_000]
    assert tree.values(harness.root)[0] == (350_000, 0)  # the pod: side's 50000 and main's 300000
    assert tree.values(harness.root)[2] == (50_000, 0)  # side was never throttled
    assert harness.bursting("quota-burst") == 1
    harness.step(BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly")))  # not throttled since: stays
    assert tree.values(harness.root)[1][0] == 300_000
    assert await harness.reasons() == ["CFSQuotaBurstStarted"]
    assert harness.kernel_checks > 0


def test_an_overloaded_node_takes_the_quota_back_to_the_limit(tree: Tree, harness: Harness) -> None:
    harness.step()
    for _ in range(3):
        tree.throttle(harness.root)
        harness.step()
    assert tree.values(harness.root)[1] == (172_800, 172_800)
    harness.step(node=BUSY)
    assert tree.values(harness.root)[1] == (138_240, 138_240)  # shrinks: burst first, then the quota
    for _ in range(3):
        tree.throttle(harness.root)
        harness.step(node=BUSY)  # throttled or not
    assert tree.values(harness.root) == [(150_000, 150_000), (100_000, 100_000), (50_000, 50_000)]
    assert harness.bursting("quota-burst") == 0


def test_a_cooling_or_unmeasured_node_grows_no_quota(tree: Tree, harness: Harness) -> None:
    harness.step()
    tree.throttle(harness.root)
    harness.step(node=3700)  # (3700 - 0) / 8000 = 46 %: within 90 % of the threshold
    tree.throttle(harness.root)
    harness.burster.step(AUTO, {LS_UID: POD}, None, infos=INFOS)  # no fresh sample
    assert tree.values(harness.root)[1][0] == 100_000


def test_an_empty_token_bucket_stops_the_burst(tree: Tree, harness: Harness) -> None:
    strategy = BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly", cfs_quota_burst_period_seconds=0))
    harness.step(strategy)
    tree.throttle(harness.root)
    harness.step(strategy)
    assert tree.values(harness.root)[1][0] == 100_000  # a bucket of 0 s never allows any


def test_the_token_bucket_follows_the_containers_usage(tree: Tree, harness: Harness) -> None:
    # 10 s at up to 300 %: 2000 tokens at most; this bucket starts empty (fill 0)
    strategy = BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly", cfs_quota_burst_period_seconds=10))
    harness.step(strategy)
    tree.throttle(harness.root, used_usec=0)  # idle for a second: 100 tokens saved
    harness.step(strategy)
    assert tree.values(harness.root)[1][0] == 120_000
    tree.throttle(harness.root, used_usec=3_000_000)  # 3 cpus for a second, 300 % of its limit: 200 spent
    harness.step(strategy)
    assert tree.values(harness.root)[1][0] == 100_000  # throttled, but out of tokens: back down


def test_a_value_written_by_someone_else_is_put_back_at_the_next_reread(tree: Tree, harness: Harness) -> None:
    strategy = BurstStrategy(BurstConfig(policy="cpuBurstOnly"))
    harness.step(strategy)  # t = 0: the files read
    main = tree.cgroups(harness.root)[1]
    tree.burst_file(main).write_text("0\n")
    tree.quota_file(main).write_text("70000 100000\n" if tree.version == 2 else "70000\n")
    for _ in range(int(REREAD_INTERVAL) - 1):  # rounds at 1 .. 4 s take the values as last written
        harness.step(strategy)
    assert tree.values(harness.root)[1] == (70_000, 0)
    harness.step(strategy)  # at 5 s the files are read again
    assert tree.values(harness.root)[1] == (100_000, 100_000)


def test_a_round_between_rereads_reads_only_cpu_stat(tree: Tree, harness: Harness,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    harness.step()  # auto: quota burst reads cpu.stat; the first round also reads quotas and bursts
    read: list[str] = []
    real = cgroups.read_file

    def counted(path: Path) -> str | None:
        read.append(path.name)
        return real(path)

    monkeypatch.setattr(cgroups, "read_file", counted)
    harness.step()
    assert sorted(read) == ["cpu.stat", "cpu.stat"]  # the pod's two containers with a limit
    read.clear()
    harness.clock.now += REREAD_INTERVAL
    harness.step()
    assert {"cpu.stat", tree.burst_file(harness.root).name} <= set(read) and len(read) > 2


async def test_turning_burst_off_restores_the_kubelets_values_once(tree: Tree, harness: Harness) -> None:
    harness.step()
    tree.throttle(harness.root)
    harness.step()
    harness.step(OFF)
    assert tree.values(harness.root) == KUBELET
    assert harness.bursting("cfs-burst") == 0 and harness.bursting("quota-burst") == 0
    writes = harness.writes("ok")
    harness.step(OFF)
    assert harness.writes("ok") == writes
    assert await harness.reasons() == ["CPUBurstApplied", "CFSQuotaBurstStarted"]


def test_a_pod_gone_from_the_watch_is_undone_and_so_is_everything_at_exit(tree: Tree, harness: Harness) -> None:
    harness.step()
    harness.step(pods={})
    assert tree.values(harness.root) == KUBELET
    harness.step()
    harness.burster.restore()
    assert tree.values(harness.root) == KUBELET


def test_what_a_previous_agent_left_is_undone_when_a_pod_is_first_seen(tree: Tree, harness: Harness) -> None:
    harness.step(OFF, pods={})  # the pod watch has not listed it yet
    main = tree.cgroups(harness.root)[1]
    tree.burst_file(main).write_text("100000\n")
    harness.step(OFF)
    assert tree.values(harness.root) == KUBELET
    assert harness.writes("ok") == 1
    tree.burst_file(main).write_text("100000\n")  # burst off: from now on, not the agent's to put back
    harness.step(OFF)
    assert harness.writes("ok") == 1


def test_a_pods_annotation_turns_burst_on_under_a_node_policy_none(tree: Tree, harness: Harness) -> None:
    annotated = BurstPod(POD.resources, {"policy": "cpuBurstOnly", "cpuBurstPercent": 50})
    harness.step(OFF, pods={LS_UID: annotated})
    assert tree.values(harness.root) == [(150_000, 75_000), (100_000, 50_000), (50_000, 25_000)]


async def test_dry_run_counts_what_it_would_write_and_writes_nothing(tree: Tree, tmp_path: Path) -> None:
    harness = Harness(tmp_path / "cgroup", tree, dry_run=True)
    harness.step()
    harness.burster.restore()
    assert tree.values(harness.root) == KUBELET
    assert harness.writes("ok") == 0 and harness.writes("dry-run") == 3
    assert await harness.reasons() == []


def test_a_kernel_without_cfs_burst_still_gets_quota_burst(tree: Tree, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness(tmp_path / "cgroup", tree, kernel_checks=False)
    for path in tree.cgroups(harness.root):
        tree.burst_file(path).unlink()
    with caplog.at_level(logging.WARNING):
        harness.burster.step(AUTO, {LS_UID: POD}, None, infos=INFOS)
        tree.throttle(harness.root)
        harness.clock.now += 1
        harness.burster.step(AUTO, {LS_UID: POD}, Sample(timestamp=0.0, node_cpu_millis=IDLE, node_memory_bytes=0),
                             infos=INFOS)
    assert tree.quota(tree.cgroups(harness.root)[1]) == 120_000
    assert not any(tree.burst_file(path).exists() for path in tree.cgroups(harness.root))
    assert caplog.records == []


def test_a_failing_write_is_counted_each_time_and_logged_once(tree: Tree, harness: Harness,
                                                              caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pod_burst = tree.burst_file(tree.cgroups(harness.root)[0])
    pod_burst.unlink()
    pod_burst.mkdir()  # not writable as a file (read as 0, not as "no cfs burst here")
    read = harness.writer.read_cfs_burst
    monkeypatch.setattr(harness.writer, "read_cfs_burst",
                        lambda directory: 0 if tree.burst_file(directory).is_dir() else read(directory))
    monkeypatch.setattr(harness.writer, "write_cfs_burst",  # without the kernel check, which reads the files
                        CgroupWriter.write_cfs_burst.__get__(harness.writer))
    with caplog.at_level(logging.WARNING):
        harness.burster.step(BurstStrategy(BurstConfig(policy="cpuBurstOnly")), {LS_UID: POD}, None, infos=INFOS)
        harness.burster.step(BurstStrategy(BurstConfig(policy="cpuBurstOnly")), {LS_UID: POD}, None, infos=INFOS)
    assert harness.writes("failed") == 2
    assert [record.message for record in caplog.records] == ["cannot write cpu burst"]
    assert [int(tree.burst_file(path).read_text()) for path in tree.cgroups(harness.root)[1:]] == [
        100_000, 50_000]  # the rest is written all the same


async def test_quota_burst_events_are_rate_limited_per_pod(tree: Tree, harness: Harness) -> None:
    harness.step(BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly")))
    for node in (IDLE, BUSY, IDLE):  # up, back down to the limit, up again
        tree.throttle(harness.root)
        harness.step(BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly")), node=node)
    assert await harness.reasons() == ["CFSQuotaBurstStarted"]
    harness.step(BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly")), node=BUSY)
    harness.clock.now += EVENT_INTERVAL
    tree.throttle(harness.root)
    harness.step(BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly")))
    assert await harness.reasons() == ["CFSQuotaBurstStarted", "CFSQuotaBurstStarted"]


def test_a_pod_not_started_yet_is_left_alone(tmp_path: Path) -> None:
    tree = TREES["v2-cgroupfs"]
    root = tmp_path / "cgroup"
    make_root(root, 2)
    (root / tree.cpu).mkdir(parents=True)
    harness = Harness(root, tree)
    harness.burster.step(AUTO, {LS_UID: POD}, None, infos=INFOS)
    assert harness.writes("ok") == 0 and harness.writes("failed") == 0


def test_quotas_tighten_from_the_containers_up_and_loosen_from_the_pod_down(tree: Tree, harness: Harness) -> None:
    single = BurstPod(PodResources(uid=LS_UID, namespace="web", name="front", qos="LS", kube_qos="Burstable",
                                   containers=(POD.resources.containers[0],)))
    strategy = BurstStrategy(BurstConfig(policy="cfsQuotaBurstOnly"))
    harness.step(strategy, pods={LS_UID: single})
    tree.throttle(harness.root)
    harness.step(strategy, pods={LS_UID: single})
    assert [values[0] for values in tree.values(harness.root)[:2]] == [120_000, 120_000]
    harness.step(strategy, node=BUSY, pods={LS_UID: single})  # the fake kernel checks each write's order
    assert [values[0] for values in tree.values(harness.root)[:2]] == [100_000, 100_000]
