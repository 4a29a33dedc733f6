"""System settings, the loop: NodeSLO `systemStrategy` written to /proc/sys/vm under --proc-root.

Only with `--system-settings`. Each round writes the wanted values
(`system_settings.desired_settings`) where the file differs, keeping each key's original the
first time it sees it; a key the NodeSLO no longer gives gets its original back. At exit with
`--restore-on-exit` every original goes back. Originals live in memory only. In dry run nothing
is written and no Event posted. Writes are counted by key and result; an Event on the Node says
when values are applied and restored; a failing read or write is logged once per run.

Why a flag and not the NodeSLO: docs/agent.md#system-settings
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from colocation.agent import procfs
from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.kubeapi import KubeApi
from colocation.agent.node_events import NodeEvent, NodeEvents
from colocation.agent.strategies.strategy import NodeStrategy, Round
from colocation.agent.strategies.system_settings.system_settings import desired_settings

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_SETTINGS_INTERVAL = 10.0


class SysctlFiles:
    """The files of /proc/sys under `proc_root`, by dotted key ("vm.min_free_kbytes")."""

    def __init__(self, proc_root: Path) -> None:
        self.proc_root = proc_root

    def path(self, key: str) -> Path:
        return self.proc_root.joinpath("sys", *key.split("."))

    def read(self, key: str) -> int:
        """The file's value; OSError or ValueError when it cannot be read as one integer."""
        return int(self.path(key).read_text().strip())

    def write(self, key: str, value: int) -> None:
        self.path(key).write_text(f"{value}\n")


class SystemSettingsReconciler:
    def __init__(self, files: SysctlFiles, *, node: str, dry_run: bool = False,
                 on_write: Callable[[str, str], None] = lambda key, result: None,
                 events: NodeEvents | None = None, interval: float = DEFAULT_SYSTEM_SETTINGS_INTERVAL,
                 memory_total: Callable[[], int | None] = lambda: None) -> None:
        self.files = files
        self.interval = interval
        self.memory_total = memory_total
        self.node = node
        self.dry_run = dry_run
        self.on_write = on_write
        self.events = events
        self.strategy: Mapping[str, Any] | None = None
        self.originals: dict[str, int] = {}  # what each key said before the agent first wrote it
        self.in_force: dict[str, int] = {}  # what the agent last wrote (with dry_run: would have)
        self._skipped: Mapping[str, str] = {}
        self._failing: set[str] = set()

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:
        spec = (nodeslo or {}).get("spec")
        strategy = spec.get("systemStrategy") if isinstance(spec, Mapping) else None
        self.strategy = strategy if isinstance(strategy, Mapping) else None

    def step(self, memory_total_bytes: int | None) -> None:
        """One round, with the node's total memory (None: unknown)."""
        desired = desired_settings(self.strategy, memory_total_bytes)
        for key, why in desired.skipped.items():
            if self._skipped.get(key) != why:
                log.info("system setting skipped", extra={"node": self.node, "key": key, "reason": why})
        self._skipped = desired.skipped
        applied: dict[str, tuple[int, int]] = {}
        for key, value in sorted(desired.values.items()):
            current = self._read(key)
            if current is None:
                continue
            self.originals.setdefault(key, current)
            if current == value:
                self.in_force[key] = value
                continue
            if self.dry_run and self.in_force.get(key) == value:
                self.on_write(key, "dry-run")  # counted every round, as the cgroup writes are
                continue
            foreign = self.in_force.get(key) == value
            if self._write(key, value):
                self.in_force[key] = value
                if foreign:
                    log.info("system setting put back", extra={"node": self.node, "key": key, "value": value,
                                                               "found": current})
                else:
                    applied[key] = (current, value)
        if applied:
            log.info("system settings applied", extra={
                "node": self.node, "dry_run": self.dry_run,
                "settings": {key: {"from": old, "to": new} for key, (old, new) in applied.items()}})
            self._event("SystemSettingsApplied", ", ".join(f"{key} {old} -> {new}"
                                                           for key, (old, new) in applied.items()))
        self._restore([key for key in self.originals if key not in desired.values])

    def restore(self) -> None:
        """Write every original back (the NodeSLO deleted, or at exit with --restore-on-exit)."""
        self._restore(list(self.originals))

    async def restore_and_tell(self, timeout: float) -> None:
        self.restore()
        if self.events is not None:
            await self.events.drain(timeout)

    async def run(self, ready: Callable[[], bool]) -> None:
        """A round every `interval` seconds once `ready()` (the NodeSLO listed)."""
        while True:
            if ready():
                try:
                    self.step(self.memory_total())
                except Exception:  # a bug in one round must not end the loop
                    log.exception("system settings round failed", extra={"node": self.node})
            await asyncio.sleep(self.interval)

    def _restore(self, keys: list[str]) -> None:
        restored: dict[str, int] = {}
        for key in keys:
            original = self.originals[key]
            current = self._read(key)
            if current is None:
                continue  # tried again next round
            if current != original:
                if not self._write(key, original):
                    continue
                restored[key] = original
            del self.originals[key]
            self.in_force.pop(key, None)
        if restored:
            log.info("system settings restored", extra={"node": self.node, "dry_run": self.dry_run,
                                                        "settings": restored})
            self._event("SystemSettingsRestored", ", ".join(f"{key} {value}" for key, value in restored.items()))

    def _read(self, key: str) -> int | None:
        try:
            return self.files.read(key)
        except (OSError, ValueError) as error:
            self._failed(key, "cannot read system setting", error)
            return None

    def _write(self, key: str, value: int) -> bool:
        if self.dry_run:
            self.on_write(key, "dry-run")
            return True
        try:
            self.files.write(key, value)
        except OSError as error:
            self.on_write(key, "failed")
            self._failed(key, "cannot write system setting", error)
            return False
        self.on_write(key, "ok")
        self._failing.discard(key)
        return True

    def _failed(self, key: str, message: str, error: Exception) -> None:
        if key not in self._failing:  # once per run of failures, not every round
            log.warning(message, extra={"node": self.node, "key": key, "path": str(self.files.path(key)),
                                        "error": str(error) or type(error).__name__})
            self._failing.add(key)

    def _event(self, reason: str, message: str) -> None:
        if self.events is not None and not self.dry_run:  # an Event says a write happened
            self.events.post(NodeEvent("Normal", reason, message))


class SystemSettingsEnforcer(NodeStrategy):
    """System settings on a node: its own loop (a round every its interval once the NodeSLO is
    listed, on no sample), every original written back at exit."""

    name = "system-settings"
    interval = None
    failure = "system settings round failed"

    def __init__(self, reconciler: SystemSettingsReconciler) -> None:
        self.reconciler = reconciler

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:
        self.reconciler.nodeslo_changed(nodeslo)

    def run_once(self, round: Round) -> None:
        self.reconciler.step(self.reconciler.memory_total())

    def background(self, ready: Callable[[], bool]) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        events = self.reconciler.events
        return [("system-settings", self.reconciler.run(ready)),
                *([] if events is None else [("system-settings-events", events.run())])]

    async def restore(self, timeout: float) -> None:
        await self.reconciler.restore_and_tell(timeout)


def node_memory_total(proc_root: Path) -> int | None:
    meminfo = procfs.read_meminfo(proc_root)
    return None if meminfo is None else meminfo.total


def node_system_settings(node: str, proc_root: Path, kube: KubeApi, *, metrics: AgentMetrics, dry_run: bool,
                         interval: float, timeout: float) -> SystemSettingsReconciler:
    """The reconciler of a real node: its /proc/sys, its writes counted, its Events posted."""
    events = NodeEvents(kube, node, wall=time.time, timeout=timeout,
                        on_result=lambda result: metrics.node_events.labels(result).inc())
    return SystemSettingsReconciler(SysctlFiles(proc_root), node=node, dry_run=dry_run, events=events,
                                    interval=interval, memory_total=lambda: node_memory_total(proc_root),
                                    on_write=lambda key, result: metrics.sysctl_writes.labels(key, result).inc())
