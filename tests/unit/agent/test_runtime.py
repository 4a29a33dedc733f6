"""NodeAgent's enforcement wiring: the NodeSLO from its watch drives the suppressor, on the latest
sample; the pod watch feeds batch cgroups, whose quotas give way to CPU suppress by cfsQuota."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CgroupWriter
from colocation.agent.collector import PodSample, Sample
from colocation.agent.enforcement import NodeEnforcement
from colocation.agent.leader_locator import LeaderLocator
from colocation.agent.peak_predictor import PredictorOptions
from colocation.agent.runtime import NodeAgent, NodeAgentOptions, track_agents
from colocation.agent.strategies.batch_cgroups.batch_cgroup_reconciler import (
    BatchCgroupReconciler,
    BatchCgroupsEnforcer,
)
from colocation.agent.strategies.cpu_burst.cpu_burster import CpuBurstEnforcer, CpuBurster
from colocation.agent.strategies.cpu_suppress.cpu_suppress import BestEffortLimit
from colocation.agent.strategies.cpu_suppress.cpu_suppressor import CpuSuppressEnforcer, CpuSuppressor
from colocation.agent.strategies.strategy import NodeStrategy
from colocation.apimachinery.quantity import byte_value, cpu_millis
from tests.clock import FakeClock
from tests.unit.agent.strategies.batch_cgroups import test_batch_cgroup_reconciler as batch
from tests.unit.agent.strategies.cpu_burst import test_cpu_burster as burst
from tests.unit.agent.strategies.cpu_suppress.test_cpu_suppressor import TREES, build, sample

TREE = TREES["v1-cgroupfs"]
NODESLO = {"metadata": {"name": "node-a"},
           "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}}


class NoKube:
    """The agent's API client, never called by these tests (no stage runs)."""

    def transport(self) -> Any:
        return None

    def bearer_token(self) -> str:
        return ""

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError(f"unexpected {method} {path}")


class FixedCollector:
    def sample(self, now: float) -> Sample:
        return sample()


def agent_on(root: Path, *, batch_cgroups: bool = False, cpu_burst: bool = False) -> NodeAgent:
    metrics, limit = AgentMetrics(), BestEffortLimit()
    suppressor = CpuSuppressor(CgroupWriter(root), metrics, node="node-a", cpus=lambda: 8)
    strategies: list[NodeStrategy] = [CpuSuppressEnforcer(suppressor, interval=1.0, limit=limit)]
    if batch_cgroups:
        reconciler = BatchCgroupReconciler(CgroupWriter(root), metrics, node="node-a")
        strategies.append(BatchCgroupsEnforcer(reconciler, interval=5.0, limit=limit))
    if cpu_burst:
        burster = CpuBurster(CgroupWriter(root), metrics, node="node-a", cpus=lambda: 8)
        strategies.append(CpuBurstEnforcer(burster, interval=1.0))

    async def no_put(*args: Any, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError("no report expected")

    return NodeAgent("node-a", NoKube(), FixedCollector(), locator=LeaderLocator(NoKube()), direct=no_put,
                     metrics=metrics, enforcement=NodeEnforcement("node-a", strategies))


def once(agent: NodeAgent, name: str) -> None:
    """One round of the agent's strategy `name`."""
    strategy = agent.enforcement.find(name)
    assert strategy is not None
    agent.run_once(strategy)


async def test_suppression_waits_for_the_nodeslo_then_follows_it(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    build(root, TREE)
    agent = agent_on(root)
    agent.collect_once()
    once(agent, "cpu-suppress")
    assert TREE.quota(root) == "-1"  # NodeSLO not listed yet: a restarting agent must not undo anything

    await agent._nodeslo_sync([NODESLO], "1")
    once(agent, "cpu-suppress")
    assert TREE.quota(root) == "220000"

    await agent._nodeslo_event("DELETED", NODESLO)
    once(agent, "cpu-suppress")
    assert TREE.quota(root) == "-1"


async def test_a_stale_sample_neither_tightens_nor_loosens(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    build(root, TREE)
    agent = agent_on(root)
    await agent._nodeslo_sync([NODESLO], "1")
    once(agent, "cpu-suppress")  # no sample yet
    assert TREE.quota(root) == "-1"
    agent.collect_once()
    assert agent.last_sample_at is not None
    agent.last_sample_at -= 60  # collection stalled a minute ago
    once(agent, "cpu-suppress")
    assert TREE.quota(root) == "-1"


BATCH_POD = {
    "metadata": {"uid": batch.BATCH_UID, "namespace": "jobs", "name": "job-1"},
    "spec": {"nodeName": "node-a", "containers": [{"name": "main", "resources": {
        "requests": {"kubernetes.io/batch-cpu": "500"},
        "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}}]},
    "status": {"phase": "Running", "containerStatuses": [{"name": "main", "containerID": "containerd://c0ffee"}]}}


async def test_batch_cgroups_follow_the_pod_watch_once_the_nodeslo_is_listed(tmp_path: Path) -> None:
    tree = batch.TREES["v1-cgroupfs"]
    root = tmp_path / "cgroup"
    batch.build(root, tree)
    agent = agent_on(root, batch_cgroups=True)
    await agent.pods.on_sync([BATCH_POD], "1")
    once(agent, "batch-cgroups")
    assert tree.values(root) == [batch.KUBELET[1]] * 2  # NodeSLO not listed yet: it may unset the quotas

    await agent._nodeslo_sync([], "1")
    once(agent, "batch-cgroups")
    assert tree.values(root) == batch.BATCH[1]

    await agent._nodeslo_event("ADDED", NODESLO)  # CPU suppress by the tier's quota: pods' quotas unset
    once(agent, "batch-cgroups")
    assert [quota for quota, _, _ in tree.values(root)] == ["-1", "-1"]

    await agent.pods.on_event("DELETED", BATCH_POD)
    once(agent, "batch-cgroups")
    assert tree.values(root) == [batch.KUBELET[1]] * 2


async def test_pods_are_kept_for_batch_cgroups_only_when_the_agent_writes_them(tmp_path: Path) -> None:
    agent = agent_on(tmp_path)
    await agent.pods.on_sync([BATCH_POD], "1")
    assert agent.pods.kept("batch-cgroups") == {}
    assert batch.BATCH_UID in agent.pods.by_uid


LS_POD = {
    "metadata": {"uid": burst.LS_UID, "namespace": "web", "name": "front"},
    "spec": {"nodeName": "node-a", "containers": [
        {"name": name, "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": limit}}}
        for name, limit in (("main", "1"), ("side", "500m"))]},
    "status": {"phase": "Running", "containerStatuses": [
        {"name": "main", "containerID": f"containerd://{burst.MAIN}"},
        {"name": "side", "containerID": f"containerd://{burst.SIDE}"}]}}
BURST_NODESLO = {"metadata": {"name": "node-a"}, "spec": {"cpuBurstStrategy": {"policy": "cpuBurstOnly"}}}


async def test_cpu_burst_follows_the_pod_watch_and_the_nodeslo_once_listed(tmp_path: Path) -> None:
    tree = burst.TREES["v2-systemd"]
    root = tmp_path / "cgroup"
    burst.build(root, tree)
    agent = agent_on(root, cpu_burst=True)
    await agent.pods.on_sync([LS_POD], "1")
    once(agent, "cpu-burst")
    assert tree.values(root) == burst.KUBELET  # NodeSLO not listed yet

    await agent._nodeslo_sync([BURST_NODESLO], "1")
    once(agent, "cpu-burst")
    assert tree.values(root) == [(150_000, 150_000), (100_000, 100_000), (50_000, 50_000)]

    await agent.pods.on_event("DELETED", LS_POD)
    once(agent, "cpu-burst")
    assert tree.values(root) == burst.KUBELET


async def test_pods_are_kept_for_cpu_burst_only_when_the_agent_writes_them(tmp_path: Path) -> None:
    await (without := agent_on(tmp_path)).pods.on_sync([LS_POD], "1")
    await (with_burst := agent_on(tmp_path, cpu_burst=True)).pods.on_sync([LS_POD, BATCH_POD], "1")
    assert without.pods.kept("cpu-burst") == {}
    assert list(with_burst.pods.kept("cpu-burst")) == [burst.LS_UID]  # the BE pod never bursts


PROD_POD = {
    "metadata": {"uid": "u-web", "namespace": "shop", "name": "web"},
    "spec": {"nodeName": "node-a", "containers": [{"name": "main", "resources": {
        "requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}}]},
    "status": {"phase": "Running"}}


class ClockedCollector:
    """The web pod using 1 cpu and 2Gi, at the agent's wall clock."""

    def sample(self, now: float) -> Sample:
        return Sample(timestamp=now, node_cpu_millis=1500, node_memory_bytes=3 * 2**30, pods=(
            PodSample(uid="u-web", cpu_millis=1000, memory_bytes=2 * 2**30, cgroup_path="kubepods/podu-web"),))


async def test_reports_say_what_prod_pods_leave_once_past_their_cold_start() -> None:
    clock = FakeClock(1.8e9)

    async def no_put(*args: Any, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError("no report expected")

    agent = NodeAgent("node-a", NoKube(), ClockedCollector(), locator=LeaderLocator(NoKube()), direct=no_put,
                      metrics=AgentMetrics(), wall=clock.wall,
                      options=NodeAgentOptions(prediction=PredictorOptions(cold_start=60.0)))
    await agent.pods.on_sync([PROD_POD], "1")
    for _ in range(30):
        agent.collect_once()
        clock.advance(1)
    snapshot = agent.snapshot()
    assert snapshot is not None
    # Within its cold start, the pod's whole request is its peak: nothing to reclaim yet.
    assert snapshot.body["status"]["prodReclaimableMetric"] == {"resource": {"resources": {"cpu": "0", "memory": "0"}}}
    for _ in range(60):
        agent.collect_once()
        clock.advance(1)
    snapshot = agent.snapshot()
    assert snapshot is not None
    resources = snapshot.body["status"]["prodReclaimableMetric"]["resource"]["resources"]
    # 4 cpus requested, 1 used: about 4 - 1.1 (the peak plus 10 %), rounded by the histogram's buckets.
    assert 2800 <= cpu_millis(resources["cpu"]) <= 2900
    assert 5 * 2**30 < byte_value(resources["memory"]) < int(5.8 * 2**30)
    # The same figure on the agent's /metrics.
    track_agents(agent.metrics, [agent])
    exported = agent.metrics.registry.get_sample_value("colocation_agent_prod_reclaimable", {"resource": "cpu"})
    assert exported == cpu_millis(resources["cpu"]) / 1000
