"""CPU suppress on this machine: a real agent throttles a real CPU burner in a scratch "BE pod" cgroup.

The test builds its own kubelet-like tree (cgroupfs driver) in a scratch subtree of each cgroup v1
hierarchy it needs (cpu, cpuacct, memory), `/sys/fs/cgroup/<controller>/colocation-e2e-XXXX/
kubepods/{besteffort,burstable}/pod<uid>`, and gives the agent a cgroup root made of symlinks to
those scratch directories, so that the agent reads and writes only them. One process burns a cpu
in the BE pod; an idle one sits in the LS pod. The NodeSLO (in the sandbox API server) enables
suppression by cfsQuota with a 10 % threshold and a 10 % floor: on this machine's 2 cpus the
budget, 200m less whatever else runs, is never over the floor, so the quota is a steady 200m
whatever the machine's other load; the burner must then use that quota (within 15 %), and its
usage must rise again when the NodeSLO turns suppression off. Scratch cgroups are removed
whatever happens. Skipped, with the reason, where the cgroup v1 hierarchies are not writable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from colocation_sandbox.launcher.port_claims import free_port
from tests.e2e.kube import TIME_FACTOR, Kube, ensure_crd, scrape_samples
from tests.timing import eventually_async

REPO = Path(__file__).resolve().parents[2]
CGROUP = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "memory")
NODESLOS = "/apis/slo.colocation.dev/v1alpha1/nodeslos"
BE_UID, LS_UID = str(uuid.uuid4()), str(uuid.uuid4())
BE_POD, LS_POD = f"kubepods/besteffort/pod{BE_UID}", f"kubepods/burstable/pod{LS_UID}"
FLOOR_PERCENT = 10  # of 2 cpus: 200m, well under a cpu even on a busy machine
TOLERANCE = 0.15


@dataclass(frozen=True)
class Scratch:
    name: str
    root: Path  # the agent's --cgroup-root: symlinks to the scratch subtrees

    def controller(self, name: str) -> Path:
        return CGROUP / name / self.name

    def quota(self) -> tuple[int, int]:
        tier = self.controller("cpu") / "kubepods/besteffort"
        return int((tier / "cpu.cfs_quota_us").read_text()), int((tier / "cpu.cfs_period_us").read_text())

    def be_usage_ns(self) -> int:
        return int((self.controller("cpuacct") / BE_POD / "cpuacct.usage").read_text())


def _remove_tree(top: Path) -> None:
    for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            directory.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Scratch]:
    if (CGROUP / "cgroup.controllers").is_file():
        pytest.skip("this machine mounts cgroup v2: this test drives v1 hierarchies (v2 is covered by "
                    "tests/unit/agent/test_cpu_suppressor.py)")
    name = f"colocation-e2e-{uuid.uuid4().hex[:8]}"
    made: list[Path] = []
    try:
        for controller in CONTROLLERS:
            top = CGROUP / controller / name
            if top.resolve() in made:
                continue  # co-mounted hierarchies (cpu,cpuacct) seen through two names
            try:
                for pod in (BE_POD, LS_POD):
                    (top / pod).mkdir(parents=True, exist_ok=True)
            except OSError as error:
                pytest.skip(f"cannot create scratch cgroups under {CGROUP / controller} ({error.strerror}): "
                            "needs cgroup v1 hierarchies writable by this user (root)")
            made.append(top.resolve())
        root = tmp_path / "cgroup-root"
        root.mkdir()
        for controller in CONTROLLERS:
            (root / controller).symlink_to(CGROUP / controller / name)
        yield Scratch(name, root)
    finally:
        for top in made:
            _remove_tree(top)


@contextlib.contextmanager
def process_in(scratch: Scratch, pod: str, program: str) -> Iterator[int]:
    """A process that joins `pod` in every hierarchy before it starts `program`; killed at exit."""
    procs = [str(scratch.controller(controller) / pod / "cgroup.procs") for controller in CONTROLLERS]
    script = 'for f in "$@"; do echo $$ > "$f" || exit 1; done; exec "$PYTHON" -c "$PROGRAM"'
    process = subprocess.Popen(["sh", "-c", script, "sh", *procs],
                               env={**os.environ, "PYTHON": sys.executable, "PROGRAM": program})
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait(timeout=30)


@contextlib.asynccontextmanager
async def agent_process(kubeconfig: Path, node: str, scratch: Scratch, metrics_port: int,
                        *extra_args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "colocation", "agent", "--kubeconfig", str(kubeconfig), "--node-name", node,
        "--cgroup-root", str(scratch.root), "--collect-interval", "0.5", "--cpu-suppress-interval", "0.5",
        "--restore-on-exit", "--scrape-interval", "0", "--metrics-port", str(metrics_port),
        "--metrics-bind-address", "127.0.0.1", "--leader-poll-interval", "5",
        "--report-interval", "5", "--log-format", "text", "--log-level", "warning", *extra_args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def cpu_of_be(scratch: Scratch, window: float = 2.0) -> float:
    """The BE pod's cpus over `window` seconds (a rate needs an interval to be measured over)."""
    before, at = scratch.be_usage_ns(), time.monotonic()
    await asyncio.sleep(window)
    used = (scratch.be_usage_ns() - before) / 1e9 / (time.monotonic() - at)
    print(f"BE pod used {used:.3f} cpus, quota {scratch.quota()}")
    return used


def nodeslo(node: str, enable: bool) -> dict[str, Any]:
    return {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": "NodeSLO", "metadata": {"name": node},
            "spec": {"resourceUsedThresholdWithBE": {
                "enable": enable, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 10,
                "cpuSuppressMinPercent": FLOOR_PERCENT}}}


async def set_suppression(kube: Kube, node: str, enable: bool) -> None:
    status, body = await kube.request("PATCH", f"{NODESLOS}/{node}",
                                      {"spec": {"resourceUsedThresholdWithBE": {"enable": enable}}},
                                      content_type="application/merge-patch+json")
    assert status == 200, body


async def exported_millicores(port: int) -> float | None:
    return await exported_value(port, "colocation_agent_cpu_suppress_millicores")


async def exported_value(port: int, name: str) -> float | None:
    """The first sample named `name` on the agent's /metrics."""
    return next((sample.value for sample in await scrape_samples(f"http://127.0.0.1:{port}/metrics")
                 if sample.name == name), None)


async def node_event_reasons(kube: Kube, node: str) -> list[str]:
    status, body = await kube.request("GET", "/api/v1/namespaces/default/events")
    assert status == 200, body
    return sorted(event["reason"] for event in body["items"] if event["involvedObject"].get("name") == node)


@pytest.mark.sandbox_only(reason="the agent runs here, against cgroups of this machine")
async def test_cpu_suppress_holds_a_real_burner_to_the_quota_it_writes(kube: Kube, kubeconfig: Path,
                                                                      scratch: Scratch) -> None:
    crd = yaml.safe_load((REPO / "crds/nodeslos.slo.colocation.dev.yaml").read_text())
    await ensure_crd(kube, crd)
    node = f"suppress-{uuid.uuid4().hex[:6]}"
    status, body = await kube.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
    assert status == 201, body
    status, body = await kube.request("POST", NODESLOS, nodeslo(node, enable=False))
    assert status == 201, body
    try:
        with process_in(scratch, LS_POD, "import time; time.sleep(3600)"), \
                process_in(scratch, BE_POD, "while True: pass"):
            port = free_port()
            async with agent_process(kubeconfig, node, scratch, port) as agent:
                async def burning() -> bool:
                    return scratch.be_usage_ns() > 0

                await eventually_async(burning, timeout=10)
                unsuppressed = await cpu_of_be(scratch)
                assert scratch.quota()[0] == -1

                await set_suppression(kube, node, True)
                floor = 2 * FLOOR_PERCENT / 100

                async def held_to_quota() -> tuple[float, float] | None:
                    quota, period = scratch.quota()
                    if quota < 0:
                        return None
                    used = await cpu_of_be(scratch)
                    if scratch.quota() != (quota, period):
                        return None  # changed while measured: measure again
                    allowed = quota / period
                    return (used, allowed) if abs(used - allowed) <= TOLERANCE * allowed else None

                used, allowed = await eventually_async(held_to_quota, timeout=20)
                assert allowed == pytest.approx(floor), (used, allowed)  # the floor: what this test set up
                assert unsuppressed > allowed * (1 + TOLERANCE), (unsuppressed, used, allowed)
                assert await exported_millicores(port) == allowed * 1000

                await set_suppression(kube, node, False)

                async def free_again() -> float | None:
                    if scratch.quota()[0] != -1:
                        return None
                    used = await cpu_of_be(scratch)
                    return used if used > allowed * (1 + 2 * TOLERANCE) else None

                await eventually_async(free_again, timeout=20)
                assert await exported_millicores(port) == -1
                async def told() -> bool:
                    return {"CPUSuppressStarted", "CPUSuppressStopped"} <= set(await node_event_reasons(kube, node))

                await eventually_async(told, timeout=10)

                # Suppressed again, then the agent stops: --restore-on-exit leaves no quota behind.
                await set_suppression(kube, node, True)
                async def suppressed() -> bool:
                    return scratch.quota()[0] > 0

                await eventually_async(suppressed, timeout=20)
                agent.terminate()
                assert await asyncio.wait_for(agent.wait(), timeout=30 * TIME_FACTOR) == 0
                assert scratch.quota()[0] == -1
    finally:
        await kube.request("DELETE", f"{NODESLOS}/{node}")
        await kube.request("DELETE", f"/api/v1/nodes/{node}")

