"""System settings on a /proc tree written by the tests: values applied, put back, restored, Events."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.enforcement import EnforcementOptions, node_enforcement
from colocation.agent.node_events import NodeEvents
from colocation.agent.strategies.batch_cgroups.batch_cgroups_strategy import BatchCgroupsOptions
from colocation.agent.strategies.cpu_evict.cpu_evict_strategy import CpuEvictOptions
from colocation.agent.strategies.cpu_suppress.cpu_suppress_strategy import CpuSuppressOptions
from colocation.agent.strategies.memory_evict.memory_evict_strategy import MemoryEvictOptions
from colocation.agent.strategies.system_settings.system_settings_reconciler import SysctlFiles, SystemSettingsReconciler
from colocation.agent.strategies.system_settings.system_settings_strategy import SystemSettingsOptions
from colocation.kube.backoff import Backoff
from tests.timing import eventually_async
from tests.unit.agent.strategies.cpu_suppress.test_cpu_suppressor import FakeKube  # records the Events posted

GiB = 1 << 30
MEMORY = 64 * GiB  # min_free_kbytes 671088 with the recommended factor 100
# The kernel's own values on such a node, as the tree starts.
KERNEL_MIN_FREE, KERNEL_WATERMARK = 67584, 10


def nodeslo(**strategy: Any) -> dict[str, Any]:
    return {"metadata": {"name": "node-a"}, "spec": {"systemStrategy": strategy}}


RECOMMENDED = nodeslo(minFreeKbytesFactor=100, watermarkScaleFactor=150, memcgReapBackGround=0)


def build(proc: Path) -> Path:
    vm = proc / "sys" / "vm"
    vm.mkdir(parents=True)
    (vm / "min_free_kbytes").write_text(f"{KERNEL_MIN_FREE}\n")
    (vm / "watermark_scale_factor").write_text(f"{KERNEL_WATERMARK}\n")
    (proc / "meminfo").write_text(f"MemTotal: {MEMORY // 1024} kB\nMemFree: 1000 kB\nMemAvailable: 2000 kB\n")
    return vm


def values(vm: Path) -> tuple[int, int]:
    return int((vm / "min_free_kbytes").read_text()), int((vm / "watermark_scale_factor").read_text())


class Harness:
    def __init__(self, proc: Path, *, dry_run: bool = False) -> None:
        self.metrics = AgentMetrics()
        self.kube = FakeKube()
        self.events = NodeEvents(self.kube, "node-a", wall=lambda: 1.7e9,  # type: ignore[arg-type]
                                 backoff=lambda: Backoff(jitter=0.0))
        self.reconciler = SystemSettingsReconciler(
            SysctlFiles(proc), node="node-a", dry_run=dry_run, events=self.events,
            on_write=lambda key, result: self.metrics.sysctl_writes.labels(key, result).inc())

    def step(self, slo: dict[str, Any] | None) -> None:
        self.reconciler.nodeslo_changed(slo)
        self.reconciler.step(MEMORY)

    def writes(self, result: str) -> float:
        return sum(self.metrics.registry.get_sample_value("colocation_agent_sysctl_writes_total",
                                                          {"key": key, "result": result}) or 0
                   for key in ("vm.min_free_kbytes", "vm.watermark_scale_factor"))

    async def events_posted(self) -> list[tuple[str, str]]:
        await self.events.drain(1.0)
        return [(body["reason"], body["message"]) for body in self.kube.posted]


async def test_values_are_applied_once_and_restored_when_the_nodeslo_drops_them(tmp_path: Path) -> None:
    vm = build(tmp_path)
    harness = Harness(tmp_path)
    harness.step(RECOMMENDED)
    assert values(vm) == (671_088, 150)
    harness.step(RECOMMENDED)  # nothing differs: nothing written
    assert harness.writes("ok") == 2
    harness.step(nodeslo(watermarkScaleFactor=150))  # minFreeKbytesFactor gone: its original is back
    assert values(vm) == (KERNEL_MIN_FREE, 150)
    harness.step(None)  # the NodeSLO deleted
    assert values(vm) == (KERNEL_MIN_FREE, KERNEL_WATERMARK)
    assert harness.writes("ok") == 4
    assert await harness.events_posted() == [
        ("SystemSettingsApplied", "vm.min_free_kbytes 67584 -> 671088, vm.watermark_scale_factor 10 -> 150"),
        ("SystemSettingsRestored", "vm.min_free_kbytes 67584"),
        ("SystemSettingsRestored", "vm.watermark_scale_factor 10")]


async def test_a_value_written_by_someone_else_is_put_back_and_the_original_kept(tmp_path: Path) -> None:
    vm = build(tmp_path)
    harness = Harness(tmp_path)
    harness.step(RECOMMENDED)
    (vm / "watermark_scale_factor").write_text("20\n")  # an administrator's sysctl -w
    harness.step(RECOMMENDED)
    assert values(vm) == (671_088, 150)
    harness.reconciler.restore()  # at exit: the values found before the agent, not the foreign one
    assert values(vm) == (KERNEL_MIN_FREE, KERNEL_WATERMARK)
    assert [reason for reason, _ in await harness.events_posted()] == ["SystemSettingsApplied",
                                                                       "SystemSettingsRestored"]


async def test_an_out_of_bounds_value_is_not_written_and_undoes_what_was(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    vm = build(tmp_path)
    harness = Harness(tmp_path)
    harness.step(RECOMMENDED)
    caplog.set_level("INFO", logger="colocation.agent.strategies.system_settings.system_settings_reconciler")
    harness.step(nodeslo(minFreeKbytesFactor=100, watermarkScaleFactor=5))
    harness.step(nodeslo(minFreeKbytesFactor=100, watermarkScaleFactor=5))
    assert values(vm) == (671_088, KERNEL_WATERMARK)
    skipped = [record for record in caplog.records if record.getMessage() == "system setting skipped"]
    assert len(skipped) == 1  # once, not every round
    assert skipped[0].__dict__["key"] == "vm.watermark_scale_factor"


async def test_dry_run_writes_nothing_posts_nothing_and_counts_what_it_would_write(tmp_path: Path) -> None:
    vm = build(tmp_path)
    harness = Harness(tmp_path, dry_run=True)
    harness.step(RECOMMENDED)
    harness.step(RECOMMENDED)
    harness.reconciler.restore()
    assert values(vm) == (KERNEL_MIN_FREE, KERNEL_WATERMARK)
    assert harness.writes("dry-run") == 4 and harness.writes("ok") == 0
    assert await harness.events_posted() == []


class ReadOnlyWatermark(SysctlFiles):
    """/proc/sys mounted read-only, as in a container without the privilege: here for one key."""

    def write(self, key: str, value: int) -> None:
        if key == "vm.watermark_scale_factor":
            raise OSError(errno.EROFS, "Read-only file system")
        super().write(key, value)


async def test_a_failing_write_is_counted_every_time_and_logged_once(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    vm = build(tmp_path)
    harness = Harness(tmp_path)
    harness.reconciler.files = ReadOnlyWatermark(tmp_path)
    harness.step(RECOMMENDED)
    harness.step(RECOMMENDED)
    assert values(vm) == (671_088, KERNEL_WATERMARK)
    assert harness.writes("failed") == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == ["cannot write system setting"]


async def test_the_loop_acts_only_once_ready(tmp_path: Path) -> None:
    vm = build(tmp_path)
    harness = Harness(tmp_path)
    harness.reconciler.interval = 0.001
    harness.reconciler.memory_total = lambda: MEMORY
    harness.reconciler.nodeslo_changed(RECOMMENDED)
    listed = False
    asked: list[bool] = []

    def ready() -> bool:
        asked.append(listed)
        return listed

    task = asyncio.create_task(harness.reconciler.run(ready))
    try:
        # Three rounds before the NodeSLO is listed: nothing written.
        await eventually_async(lambda: len(asked) >= 3, interval=0.01)
        assert values(vm) == (KERNEL_MIN_FREE, KERNEL_WATERMARK)
        listed = True
        await eventually_async(lambda: values(vm) == (671_088, 150), interval=0.01)
        assert harness.writes("ok") == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_agents_enforcement_runs_the_loop_and_restores_at_exit(tmp_path: Path) -> None:
    vm = build(tmp_path)
    enforcement = node_enforcement("node-a", tmp_path / "cgroup", tmp_path, options=EnforcementOptions(strategies=(
        CpuSuppressOptions(interval=0), BatchCgroupsOptions(interval=0), MemoryEvictOptions(interval=0),
        CpuEvictOptions(interval=0), SystemSettingsOptions(enabled=True, interval=0.01))),
        kube=FakeKube(), metrics=AgentMetrics(), cpus=lambda: 4, timeout=1.0)  # type: ignore[arg-type]
    assert enforcement.find("system-settings") is not None
    tasks = [asyncio.create_task(coroutine) for _, coroutine in enforcement.background()]
    try:
        enforcement.nodeslo_changed(RECOMMENDED, listed=True)
        await eventually_async(lambda: values(vm) == (671_088, 150), interval=0.01)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await enforcement.restore(1.0)
    assert values(vm) == (KERNEL_MIN_FREE, KERNEL_WATERMARK)


def test_the_agent_does_not_touch_the_kernel_unless_asked(tmp_path: Path) -> None:
    enforcement = node_enforcement("node-a", tmp_path, tmp_path, options=EnforcementOptions(),
                                   kube=FakeKube(),  # type: ignore[arg-type]
                                   metrics=AgentMetrics(), cpus=lambda: 4, timeout=1.0)
    assert enforcement.find("system-settings") is None
