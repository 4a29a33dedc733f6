"""System settings and PSI, end to end: a real agent process follows its NodeSLO's systemStrategy.

The agent runs with --system-settings on a /proc tree of the test's own (never this machine's
kernel settings): MemTotal 64 GiB, vm.min_free_kbytes 67584, vm.watermark_scale_factor 10 and
a /proc/pressure/cpu. Once the NodeSLO (in the API server, for a Node of the test's own) asks for
minFreeKbytesFactor 100 and watermarkScaleFactor 150, the agent must write 671088 and 150, post a
SystemSettingsApplied Event on the Node, put back a value someone else writes, export PSI on its
/metrics, and at SIGTERM (--restore-on-exit) write back the values it found.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from colocation_sandbox.launcher.port_claims import free_port
from tests.e2e.kube import TIME_FACTOR, Kube, ensure_crd
from tests.e2e.test_agent_suppress import NODESLOS, REPO, exported_value, node_event_reasons
from tests.timing import eventually_async

MEMORY_KIB = 64 << 20
FOUND = (67584, 10)  # what the kernel had: min_free_kbytes, watermark_scale_factor
WANTED = (671_088, 150)


def proc_tree(root: Path) -> Path:
    vm = root / "sys" / "vm"
    vm.mkdir(parents=True)
    (vm / "min_free_kbytes").write_text(f"{FOUND[0]}\n")
    (vm / "watermark_scale_factor").write_text(f"{FOUND[1]}\n")
    (root / "meminfo").write_text(f"MemTotal: {MEMORY_KIB} kB\nMemFree: {MEMORY_KIB // 2} kB\n"
                                  f"MemAvailable: {MEMORY_KIB // 2} kB\n")
    (root / "stat").write_text("cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\n")
    (root / "pressure").mkdir()
    (root / "pressure" / "cpu").write_text("some avg10=12.50 avg60=3.00 avg300=0.75 total=2500000\n")
    return vm


def settings(vm: Path) -> tuple[int, int]:
    return int((vm / "min_free_kbytes").read_text()), int((vm / "watermark_scale_factor").read_text())


async def test_a_real_agent_writes_restores_and_defends_the_nodeslos_system_settings(
        kube: Kube, kubeconfig: Path, tmp_path: Path) -> None:
    await ensure_crd(kube, yaml.safe_load((REPO / "crds/nodeslos.slo.colocation.dev.yaml").read_text()))
    vm = proc_tree(tmp_path / "proc")
    node = f"sysctl-{uuid.uuid4().hex[:6]}"
    status, body = await kube.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
    assert status == 201, body
    slo: dict[str, Any] = {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": "NodeSLO", "metadata": {"name": node},
                           "spec": {"systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}}}
    status, body = await kube.request("POST", NODESLOS, slo)
    assert status == 201, body
    port = free_port()
    agent = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "colocation", "agent", "--kubeconfig", str(kubeconfig), "--node-name", node,
        "--proc-root", str(tmp_path / "proc"), "--cgroup-root", str(tmp_path / "no-cgroups"),
        "--system-settings", "--system-settings-interval", "0.5", "--restore-on-exit",
        "--cpu-suppress-interval", "0", "--batch-cgroups-interval", "0", "--memory-evict-interval", "0",
        "--cpu-evict-interval", "0", "--scrape-interval", "0", "--metrics-port", str(port),
        "--metrics-bind-address", "127.0.0.1", "--leader-poll-interval", "5", "--log-format", "text",
        "--log-level", "warning", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async def applied() -> bool:
            return settings(vm) == WANTED

        await eventually_async(applied, timeout=20)

        async def told() -> bool:
            return "SystemSettingsApplied" in await node_event_reasons(kube, node)

        await eventually_async(told, timeout=10)
        (vm / "watermark_scale_factor").write_text("20\n")  # an administrator's sysctl -w
        await eventually_async(applied, timeout=10)

        async def psi_exported() -> float | None:
            return await exported_value(port, "colocation_agent_psi_stall_ratio")

        assert await eventually_async(psi_exported, timeout=10) == 0.125  # cpu some avg10, the first series
        agent.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(agent.wait(), 15 * TIME_FACTOR) == 0
        assert settings(vm) == FOUND
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
        await kube.request("DELETE", f"{NODESLOS}/{node}")
        await kube.request("DELETE", f"/api/v1/nodes/{node}")
