"""CPU burst on this machine's kernel: a real CPU burner in a scratch "LS pod", throttled by its limit.

The unit tests check the order of CPU burst's writes against a fake kernel; this one lets the real
one judge. In the scratch cgroup v1 subtrees of tests/e2e/test_agent_suppress.py the test gives the
LS pod a container cgroup with the quotas the kubelet writes for a limit of 0.1 cpu (10000 µs of a
100000 µs period, on the pod and the container: throttled even on a busy machine), runs a process
burning a cpu in it, and runs
CPU burst's rounds (colocation.agent.strategies.cpu_burst.cpu_burster, policy auto) on that tree: the kernel must take
every write (a cfs burst capped at the quota, a quota raised parents first), the container's quota
must grow from the throttling the kernel counts in its cpu.stat, and with the policy back to none
the kubelet's quotas and no burst must be back. The NodeSLO and the sample are given directly (the
wiring from the API is tests/unit/agent/test_runtime.py's): the node is idle as far as the share
pool goes, whatever this machine's load. Skipped, with the reason, where cgroup v1 hierarchies are
not writable, or the kernel has no cfs burst.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CgroupWriter
from colocation.agent.collector import Sample
from colocation.agent.strategies.batch_cgroups.batch_cgroups import ContainerResources, PodResources
from colocation.agent.strategies.cpu_burst.cpu_burst import BurstConfig, BurstPod, BurstStrategy
from colocation.agent.strategies.cpu_burst.cpu_burster import CpuBurster
from tests.e2e.test_agent_suppress import (
    CONTROLLERS,
    LS_POD,
    LS_UID,
    Scratch,
    process_in,
    scratch,  # noqa: F401  (the fixture)
)
from tests.timing import eventually_async

CONTAINER_ID = uuid.uuid4().hex
CONTAINER = f"{LS_POD}/{CONTAINER_ID}"
POD = BurstPod(PodResources(uid=LS_UID, namespace="web", name="front", qos="LS", kube_qos="Burstable", containers=(
    ContainerResources(name="main", container_id=CONTAINER_ID, cpu_request=100, cpu_limit=100),)))
AUTO = BurstStrategy(BurstConfig(policy="auto", cfs_quota_burst_percent=300))
LIMIT_QUOTA, CEILING = 10_000, 30_000
MAX_SHARES = 262_144  # cgroup v1's highest cpu.shares


def cpu_file(subtree: Scratch, path: str, name: str) -> int:
    return int((subtree.controller("cpu") / path / name).read_text().split()[0])


def favour(subtree: Scratch, path: str) -> None:
    """The highest cpu.shares from the scratch top down to `path`: however busy the machine (CI runs
    suites side by side on 2 cores), the burner gets its quota and is throttled every period."""
    directory = subtree.controller("cpu")
    for part in ("", *Path(path).parts):
        directory = directory / part
        (directory / "cpu.shares").write_text(str(MAX_SHARES))


def values(subtree: Scratch) -> list[tuple[int, int]]:
    """(quota, cfs burst) of the pod's cgroup and of its container's, as the kernel has them."""
    return [(cpu_file(subtree, path, "cpu.cfs_quota_us"), cpu_file(subtree, path, "cpu.cfs_burst_us"))
            for path in (LS_POD, CONTAINER)]


@pytest.mark.sandbox_only(reason="the rounds run here, against cgroups of this machine")
async def test_the_kernel_takes_cpu_bursts_writes_and_a_throttled_burner_gets_more_quota(
        scratch: Scratch) -> None:  # noqa: F811
    for controller in CONTROLLERS:
        (scratch.controller(controller) / CONTAINER).mkdir(exist_ok=True)
    if not (scratch.controller("cpu") / CONTAINER / "cpu.cfs_burst_us").exists():
        pytest.skip("this kernel has no cfs burst (cpu.cfs_burst_us, Linux 5.14 and later)")
    for path in (LS_POD, CONTAINER):  # what the kubelet writes for a limit of 0.1 cpu, parent first
        (scratch.controller("cpu") / path / "cpu.cfs_quota_us").write_text(str(LIMIT_QUOTA))
    favour(scratch, CONTAINER)
    metrics = AgentMetrics()
    writer = CgroupWriter(scratch.root, on_write=lambda resource, result:
                          metrics.cpu_burst_writes.labels(resource, result).inc())
    burster = CpuBurster(writer, metrics, node="node-a", cpus=lambda: 8, usage_root=scratch.root / "cpuacct")
    idle = Sample(timestamp=0.0, node_cpu_millis=0, node_memory_bytes=0)

    def failed() -> float:
        return sum(metrics.registry.get_sample_value("colocation_agent_cpu_burst_writes_total",
                                                     {"resource": resource, "result": "failed"}) or 0
                   for resource in ("cfs_quota", "cfs_burst"))

    with process_in(scratch, CONTAINER, "while True: pass"):
        burster.step(AUTO, {LS_UID: POD}, idle, infos={})
        assert values(scratch) == [(LIMIT_QUOTA, LIMIT_QUOTA)] * 2  # 1000 % of the limit, capped at the quota

        async def raised() -> list[tuple[int, int]] | None:
            burster.step(AUTO, {LS_UID: POD}, idle, infos={})  # a round, every 0.3 s: the agent's, sped up
            now = values(scratch)
            return now if now[1][0] >= 2 * LIMIT_QUOTA else None

        pod, container = await eventually_async(raised, timeout=20, interval=0.3)
        assert LIMIT_QUOTA < container[0] <= CEILING and container[1] == container[0]
        assert pod == container  # one container: the pod's quota and burst are its
        assert failed() == 0

        burster.step(BurstStrategy(), {LS_UID: POD}, idle, infos={})
        assert values(scratch) == [(LIMIT_QUOTA, 0)] * 2
        assert failed() == 0
