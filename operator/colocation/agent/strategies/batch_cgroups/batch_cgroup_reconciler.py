"""Batch resources into cgroups, the loop's step: the node's batch pods' values written to their cgroups.

Each round (`BatchCgroupReconciler.step`) takes the node's pods as the agent's pod watch last saw
them and writes what `batch_cgroups` gives each one on its pod cgroup and its containers'
cgroups, only where a file differs, in an order cgroup v1 accepts. A pod that stops qualifying,
and every pod written to when the agent exits with `--restore-on-exit`, gets `kubelet_settings`
back. Pods never written are never touched. Changes and undos are logged; a failing write is
logged once per run of failures.

Where the cgroups are, and the order: docs/agent.md#batch-resources-into-cgroups
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation.agent import cgroups
from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CgroupWriter, WriteOutcome
from colocation.agent.node_pods import PodView
from colocation.agent.strategies.batch_cgroups.batch_cgroups import (
    UNLIMITED,
    CgroupSettings,
    PodResources,
    PodSettings,
    batch_settings,
    cfs_quota_us,
    kubelet_settings,
    pod_resources,
)
from colocation.agent.strategies.cpu_suppress.cpu_suppress import BestEffortLimit
from colocation.agent.strategies.strategy import NodeStrategy, Round
from colocation.apimachinery.pods import KubeQoSClass

log = logging.getLogger(__name__)


def pod_cgroup_path(kubepods_root: str, kube_qos: KubeQoSClass, uid: str) -> str:
    """Where the kubelet puts a pod under one kubepods root (as listed in cgroups.KUBEPODS_ROOTS)."""
    tier = "" if kube_qos == "Guaranteed" else kube_qos.lower()
    if kubepods_root.endswith(".slice"):  # systemd: each unit's name repeats its parents'
        prefix = kubepods_root.rsplit("/", 1)[-1].removesuffix(".slice")
        pod_unit = f"pod{uid.replace('-', '_')}.slice"
        return f"{prefix}-{tier}.slice/{prefix}-{tier}-{pod_unit}" if tier else f"{prefix}-{pod_unit}"
    return f"{tier}/pod{uid}" if tier else f"pod{uid}"


def pod_directory(controller_root: Path | None, kube_qos: KubeQoSClass, uid: str) -> Path | None:
    if controller_root is None:
        return None
    for root in cgroups.KUBEPODS_ROOTS:
        candidate = controller_root / root / pod_cgroup_path(root, kube_qos, uid)
        if candidate.is_dir():
            return candidate
    return None


def is_container_cgroup(name: str, container_id: str) -> bool:
    """`<id>` (containerd, docker with cgroupfs), `crio-<id>` (CRI-O with cgroupfs) or
    `<runtime>-<id>.scope` (systemd); never CRI-O's `crio-conmon-<id>.scope`, its monitor's."""
    return name == container_id or (name.removesuffix(".scope").endswith(f"-{container_id}")
                                    and not name.startswith("crio-conmon-"))


def container_directory(pod_dir: Path | None, container_id: str | None) -> Path | None:
    if pod_dir is None or not container_id:
        return None
    for name in cgroups.subdirectories(pod_dir):
        if is_container_cgroup(name, container_id):
            return pod_dir / name
    return None


@dataclass(frozen=True)
class Target:
    """One cgroup to write (its directory in the cpu and the memory hierarchies; the same under v2)."""

    cpu: Path | None
    memory: Path | None
    settings: CgroupSettings


def quota_loosens(target: int, current: int) -> bool:
    """Whether going from `current` to `target` gives more cpu (written parents first under v1)."""
    return target != current and (target == UNLIMITED or (current != UNLIMITED and target > current))


class BatchCgroupReconciler:
    def __init__(self, writer: CgroupWriter, metrics: AgentMetrics, *, node: str) -> None:
        self.writer = writer
        self.metrics = metrics
        self.node = node
        self.managed: dict[str, PodResources] = {}  # pods given batch values, by UID, as last seen
        self.in_force: dict[str, PodSettings] = {}  # what was last logged for each
        self._failing: set[str] = set()

    def step(self, pods: Mapping[str, PodResources], *, unlimited_quota: bool = False) -> None:
        """One round: `pods` are the node's pods that name a batch resource, by UID."""
        for uid, pod in pods.items():
            desired = batch_settings(pod, unlimited_quota=unlimited_quota)
            if desired is None:
                if uid in self.managed:
                    self.undo(uid)
                continue
            self.managed[uid] = pod
            if self._write(pod, desired) and self.in_force.get(uid) != desired:
                log.info("batch cgroups applied", extra={
                    "node": self.node, "pod": f"{pod.namespace}/{pod.name}", "uid": uid,
                    "pod_cgroup": _describe(desired.pod),
                    "containers": {name: _describe(values) for name, values in desired.containers},
                    "dry_run": self.writer.dry_run})
                self.in_force[uid] = desired
        for uid in [uid for uid in self.managed if uid not in pods]:
            self.undo(uid)
        self.metrics.batch_pods.set(len(self.managed))

    def restore(self) -> None:
        """Undo every pod given batch values (at exit, with --restore-on-exit)."""
        for uid in list(self.managed):
            self.undo(uid)
        self.metrics.batch_pods.set(0)

    def undo(self, uid: str) -> None:
        pod = self.managed.pop(uid)
        self.in_force.pop(uid, None)
        self._failing.discard(uid)
        if self._write(pod, kubelet_settings(pod)):
            log.info("batch cgroups undone", extra={"node": self.node, "pod": f"{pod.namespace}/{pod.name}",
                                                    "uid": uid, "dry_run": self.writer.dry_run})

    # ---- the writes ---------------------------------------------------------------------------------

    def _targets(self, pod: PodResources, settings: PodSettings) -> list[Target]:
        """The pod's cgroup, then its containers' (those that exist), parents first."""
        cpu_root, memory_root = self.writer.cpu_root(), self.writer.memory_root()
        cpu_pod = pod_directory(cpu_root, pod.kube_qos, pod.uid)
        # v2: one hierarchy, so the directories are looked up once
        memory_pod = cpu_pod if memory_root == cpu_root else pod_directory(memory_root, pod.kube_qos, pod.uid)
        if cpu_pod is None and memory_pod is None:
            return []  # not started yet, or gone: the kubelet owns its creation and removal
        ids = {container.name: container.container_id for container in pod.containers}
        targets = [Target(cpu_pod, memory_pod, settings.pod)]
        for name, values in settings.containers:
            cpu = container_directory(cpu_pod, ids.get(name))
            memory = cpu if memory_pod == cpu_pod else container_directory(memory_pod, ids.get(name))
            if cpu is not None or memory is not None:
                targets.append(Target(cpu, memory, values))
        return targets

    def _write(self, pod: PodResources, settings: PodSettings) -> bool:
        """Write what differs; True when the pod's cgroup was there and every write succeeded."""
        targets = self._targets(pod, settings)
        if not targets:
            return False
        outcomes: list[WriteOutcome | None] = []
        quotas = []
        for target in targets:
            current = None if target.cpu is None else self.writer.read_cfs_quota(target.cpu)
            if target.cpu is not None and current is not None:
                quota = cfs_quota_us(target.settings.cpu_limit_millis, current.period_us)
                quotas.append((target.cpu, quota, current, quota_loosens(quota, current.quota_us)))
        outcomes += [self.writer.write_cfs_quota(path, quota, now.period_us, current=now)
                     for path, quota, now, looser in quotas if looser]
        outcomes += [self.writer.write_cfs_quota(path, quota, now.period_us, current=now)
                     for path, quota, now, looser in reversed(quotas) if not looser]
        for target in targets:
            if target.cpu is not None:
                outcomes.append(self.writer.write_cpu_shares(target.cpu, target.settings.cpu_shares))
            if target.memory is not None:
                outcomes.append(self.writer.write_memory_limit(target.memory, target.settings.memory_limit_bytes))
        return self._settled(pod, [outcome for outcome in outcomes if outcome is not None])

    def _settled(self, pod: PodResources, outcomes: Sequence[WriteOutcome]) -> bool:
        failed = [outcome for outcome in outcomes if outcome.result == "failed"]
        if not failed:
            self._failing.discard(pod.uid)
            return True
        if pod.uid not in self._failing:  # once per run of failures, not every round
            log.warning("cannot write batch cgroups", extra={
                "node": self.node, "pod": f"{pod.namespace}/{pod.name}", "path": str(failed[0].path),
                "value": failed[0].value, "error": failed[0].error, "failed_writes": len(failed)})
            self._failing.add(pod.uid)
        return False


def _describe(values: CgroupSettings) -> dict[str, int]:
    return {"cpu_limit_millicores": values.cpu_limit_millis, "cpu_shares": values.cpu_shares,
            "memory_limit_bytes": values.memory_limit_bytes}


class BatchCgroupsEnforcer(NodeStrategy):
    """Batch cgroups on a node: a round on the pods the watch last saw naming batch resources; pods'
    quotas unlimited while CPU suppress holds the tier by its quota; every pod undone at exit."""

    name = "batch-cgroups"
    failure = "batch cgroups failed"

    def __init__(self, reconciler: BatchCgroupReconciler, *, interval: float, limit: BestEffortLimit) -> None:
        self.reconciler = reconciler
        self.interval = interval
        self.limit = limit
        self.pods = PodView(self.name, pod_resources)

    def run_once(self, round: Round) -> None:
        self.reconciler.step(self.pods.by_uid, unlimited_quota=self.limit.by_tier_quota)

    def pod_views(self) -> Sequence[PodView[Any]]:
        return (self.pods,)

    async def restore(self, timeout: float) -> None:
        self.reconciler.restore()


def node_batch_cgroups(node: str, cgroup_root: Path, *, dry_run: bool, metrics: AgentMetrics) -> BatchCgroupReconciler:
    """The reconciler of a real node: its cgroups, its writes counted by resource and result."""
    writer = CgroupWriter(cgroup_root, dry_run=dry_run, on_write=lambda resource, result:
                          metrics.batch_cgroup_writes.labels(resource, result).inc())
    return BatchCgroupReconciler(writer, metrics, node=node)
