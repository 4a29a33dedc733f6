"""Batch resources into cgroups on this machine: a real agent limits a real CPU burner in a batch pod.

The pod (in the sandbox API server, on a Node of the test's own) asks only for batch resources:
`kubernetes.io/batch-cpu: "500"` (Koordinator's unit is the milli-core: half a cpu) and
`kubernetes.io/batch-memory: 256Mi`, as limits. The test gives it a kubelet-like cgroupfs tree in
the scratch cgroup v1 subtrees of tests/e2e/test_agent_suppress.py (`kubepods/besteffort/
pod<uid>/<container id>`, the container id reported in the pod's status), runs a CPU burner in
the container's cgroup, and a real agent process must write quota 50000 of a 100000 µs period,
shares 512 and the memory limit on the pod's and the container's cgroups; the burner must then
use 0.5 cpu (within 15 %). Once the pod is deleted the agent puts back the kubelet's values
(unlimited) on the cgroups still there, and the burner speeds up again. Skipped, with the reason,
where the cgroup v1 hierarchies are not writable.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import yaml

from colocation_sandbox.launcher.port_claims import free_port
from tests.e2e.kube import Kube, create, ensure_crd, is_gone, pod_manifest
from tests.e2e.test_agent_suppress import (
    CONTROLLERS,
    REPO,
    TOLERANCE,
    Scratch,
    agent_process,
    exported_value,
    process_in,
    scratch,  # noqa: F401  (the fixture)
)
from tests.timing import eventually_async

CONTAINER_ID = uuid.uuid4().hex  # as a runtime names it
LIMIT = 0.5  # cpus: batch-cpu "500"
MEMORY_LIMIT = 256 << 20
V1_UNLIMITED_MEMORY = 0x7FFFFFFFFFFFF000


class BatchPodCgroups:
    def __init__(self, subtree: Scratch, uid: str) -> None:
        self.scratch = subtree
        self.pod = f"kubepods/besteffort/pod{uid}"
        self.container = f"{self.pod}/{CONTAINER_ID}"

    def make(self) -> None:
        for controller in CONTROLLERS:
            (self.scratch.controller(controller) / self.container).mkdir(parents=True, exist_ok=True)

    def read(self, controller: str, path: str, name: str) -> int:
        return int((self.scratch.controller(controller) / path / name).read_text())

    def values(self) -> list[tuple[int, int, int]]:
        """(quota, shares, memory limit) of the pod's cgroup and of its container's."""
        return [(self.read("cpu", path, "cpu.cfs_quota_us"), self.read("cpu", path, "cpu.shares"),
                 self.read("memory", path, "memory.limit_in_bytes")) for path in (self.pod, self.container)]

    def usage_ns(self) -> int:
        return self.read("cpuacct", self.pod, "cpuacct.usage")

    async def cpus_used(self, window: float = 2.0) -> float:
        before, at = self.usage_ns(), time.monotonic()
        await asyncio.sleep(window)  # a rate is measured over an interval
        used = (self.usage_ns() - before) / 1e9 / (time.monotonic() - at)
        print(f"batch pod used {used:.3f} cpus, cgroups {self.values()}")
        return used


@pytest.mark.sandbox_only(reason="the agent runs here, against cgroups of this machine")
async def test_batch_limits_reach_the_pods_cgroups_and_hold_a_real_burner(kube: Kube, kubeconfig: Path,
                                                                         scratch: Scratch) -> None:  # noqa: F811
    await ensure_crd(kube, yaml.safe_load((REPO / "crds/nodeslos.slo.colocation.dev.yaml").read_text()))
    node = f"batch-{uuid.uuid4().hex[:6]}"
    status, body = await kube.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
    assert status == 201, body
    pod_path = f"/api/v1/namespaces/default/pods/{node}-job"
    try:
        pod = await create(kube, "/api/v1/namespaces/default/pods", pod_manifest(
            f"{node}-job", node_name=node, containers=[{"name": "main", "image": "registry.k8s.io/pause:3.9",
                                                        "resources": {"limits": {
                                                            "kubernetes.io/batch-cpu": "500",
                                                            "kubernetes.io/batch-memory": "256Mi"}}}]))
        cgroups = BatchPodCgroups(scratch, pod["metadata"]["uid"])
        cgroups.make()
        # The kubelet's QoS class: BestEffort, cpu and memory being all it counts (the sandbox's
        # admission counts extended resources too and says Burstable).
        pod["status"] = {"phase": "Running", "qosClass": "BestEffort", "containerStatuses": [
            {"name": "main", "containerID": f"containerd://{CONTAINER_ID}", "ready": True, "restartCount": 0,
             "image": "registry.k8s.io/pause:3.9", "imageID": "", "state": {"running": {}}}]}
        status, body = await kube.request("PUT", f"{pod_path}/status", pod)
        assert status == 200, body
        unlimited = cgroups.values()
        assert [quota for quota, _, _ in unlimited] == [-1, -1]

        with process_in(scratch, cgroups.container, "while True: pass"):
            port = free_port()
            async with agent_process(kubeconfig, node, scratch, port, "--batch-cgroups-interval", "0.5"):
                async def limited() -> bool:
                    return cgroups.values() == [(50_000, 512, MEMORY_LIMIT)] * 2

                await eventually_async(limited, timeout=20)
                assert cgroups.read("cpu", cgroups.pod, "cpu.cfs_period_us") == 100_000

                async def held_to_half_a_cpu() -> float | None:
                    used = await cgroups.cpus_used()
                    return used if abs(used - LIMIT) <= TOLERANCE * LIMIT else None

                await eventually_async(held_to_half_a_cpu, timeout=20)
                assert await exported_value(port, "colocation_agent_batch_pods_managed") == 1

                status, body = await kube.request("DELETE", pod_path, params={"gracePeriodSeconds": "0"})
                assert status == 200, body

                async def undone() -> bool:
                    return cgroups.values() == [(-1, 2, V1_UNLIMITED_MEMORY)] * 2

                await eventually_async(undone, timeout=20)

                async def free_again() -> float | None:
                    used = await cgroups.cpus_used()
                    return used if used > LIMIT * (1 + TOLERANCE) else None  # above what the quota allowed

                await eventually_async(free_again, timeout=20)
                assert await exported_value(port, "colocation_agent_batch_pods_managed") == 0
    finally:
        if not await is_gone(kube, pod_path):
            await kube.request("DELETE", pod_path, params={"gracePeriodSeconds": "0"})
        await kube.request("DELETE", f"/api/v1/nodes/{node}")
