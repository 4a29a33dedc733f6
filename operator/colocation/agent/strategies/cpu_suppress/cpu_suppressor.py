"""CPU suppress, the loop's step: from a sample and the NodeSLO to the best-effort cgroups.

Each round (`CpuSuppressor.step`) computes the BE budget (`cpu_suppress`) from the latest sample
and applies it by the NodeSLO's policy, undoing the other, as koordlet does: `cfsQuota` on the
best-effort tier; `cpuset` on the tier, its pods and their containers (cpus chosen by
colocation.agent.cpuset; widened from the tier down, then narrowed from the containers up).
Suppression off, or the NodeSLO gone, restores both: quota -1 and the tier parent's cpus, once
per change and again at start. Changes of the value in force are logged; an Event on the Node
says when suppression starts and stops.

The policies, and what is restored: docs/agent.md#cpu-suppress
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import DEFAULT_CFS_PERIOD_US, CgroupWriter, WriteOutcome
from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.cpuset import Processor, choose_cpus, format_cpuset
from colocation.agent.node_events import NodeEvent, NodeEvents
from colocation.agent.procfs import read_cpu_topology
from colocation.agent.strategies.cpu_suppress.cpu_suppress import (
    BestEffortLimit,
    CpuUsage,
    SuppressPolicy,
    SuppressPolicyName,
    be_budget_millis,
    cpu_usage,
    quota_millis,
    suppress_policy,
    target_cfs_quota,
    target_cpuset_size,
)
from colocation.agent.strategies.node_reservation import NodeReservation
from colocation.agent.strategies.strategy import NodeStrategy, Round
from colocation.agent.strategies.strategy_host import StrategyHost

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InForce:
    policy: SuppressPolicyName
    millicores: int  # what BE pods may use together
    setting: str  # as written: the quota in µs, or the cpuset list


class CpuSuppressor:
    def __init__(self, writer: CgroupWriter, metrics: AgentMetrics, *, node: str, cpus: Callable[[], int],
                 topology: Callable[[], Sequence[Processor]] = tuple, events: NodeEvents | None = None,
                 reservation: NodeReservation | None = None) -> None:
        self.writer = writer
        self.reservation = reservation
        self.metrics = metrics
        self.node = node
        self.cpus = cpus
        self.topology = topology
        self.events = events
        self.in_force: InForce | None = None
        self._quota_restored = False
        self._cpuset_restored = False
        self._dry_run_quota: int | None = None  # dry run: what would be in the file now
        self._dry_run_cpuset: frozenset[int] | None = None
        self._failing: set[str] = set()

    # ---- a round ----------------------------------------------------------------------------------

    def step(self, policy: SuppressPolicy, sample: Sample | None, pods: Mapping[str, PodInfo]) -> None:
        if not policy.enabled:
            self.restore()
            return
        if sample is None or not sample.node_cpu_measured:
            return  # no usage yet: neither tighten nor loosen
        reserved = self.reservation.cpu_millis if self.reservation is not None else 0
        usage = cpu_usage(sample, pods, self.cpus(), reserved=reserved)
        budget = be_budget_millis(usage, policy)
        if policy.policy == "cfsQuota":
            self._restore_cpuset()
            applied = self._apply_quota(budget, usage)
        else:
            self._restore_quota()
            applied = self._apply_cpuset(budget)
        if applied is not None:
            self._now_in_force(applied, policy, budget, usage=usage)

    def restore(self) -> None:
        """Unlimited quota and full cpusets on the best-effort tier; an Event if that ends suppression."""
        self._restore_quota()
        self._restore_cpuset()
        if self.in_force is not None:
            log.info("cpu suppress stopped", extra={"node": self.node, "policy": self.in_force.policy,
                                                    "dry_run": self.writer.dry_run})
            self._event("CPUSuppressStopped", "best-effort pods are no longer held back (cpu suppress off)")
            self.in_force = None
        self.metrics.cpu_suppress.set(-1)

    async def restore_and_tell(self, timeout: float) -> None:
        """At exit: restore, and post the Event that says so within `timeout` seconds."""
        self.restore()
        if self.events is not None:
            await self.events.drain(timeout)

    # ---- cfsQuota ---------------------------------------------------------------------------------

    def _apply_quota(self, budget: int, usage: CpuUsage) -> InForce | None:
        directory = self.writer.besteffort_cpu_dir()
        current = None if directory is None else self.writer.read_cfs_quota(directory)
        if directory is None or current is None:
            self._failed("cfs_quota", "no best-effort cgroup with a CFS quota under the cgroup root")
            return None
        quota = current.quota_us
        if self.writer.dry_run and self._dry_run_quota is not None:
            quota = self._dry_run_quota
        target = target_cfs_quota(budget, quota, usage.capacity // 1000, period_us=current.period_us)
        if target is not None:
            outcome = self.writer.write_cfs_quota(directory, target, current.period_us)
            if outcome is not None and outcome.result == "failed":
                self._failed("cfs_quota", f"{outcome.path}: {outcome.error}")
                return None
            quota = target
        self._succeeded("cfs_quota")
        self._quota_restored = False
        self._dry_run_quota = quota if self.writer.dry_run else None
        return InForce("cfsQuota", quota_millis(quota, current.period_us), str(quota))

    def _restore_quota(self) -> None:
        if self._quota_restored:
            return
        self._dry_run_quota = None
        directory = self.writer.besteffort_cpu_dir()
        current = None if directory is None else self.writer.read_cfs_quota(directory)
        period = current.period_us if current is not None else DEFAULT_CFS_PERIOD_US
        outcome = None if directory is None else self.writer.write_cfs_quota(directory, -1, period)
        self._quota_restored = self._settled("cfs_quota", [outcome] if outcome else [])

    # ---- cpuset -----------------------------------------------------------------------------------

    def _apply_cpuset(self, budget: int) -> InForce | None:
        directories = self.writer.besteffort_cpuset_dirs()
        pool = self.writer.pool(directories)
        old = self.writer.read_cpuset(directories[0]) if directories else None
        if not directories or not pool or old is None:
            self._failed("cpuset", "no best-effort cgroup with a cpuset under the cgroup root")
            return None
        if self.writer.dry_run and self._dry_run_cpuset is not None:
            old = self._dry_run_cpuset
        processors = [processor for processor in self.topology() if processor.cpu in pool]
        if {processor.cpu for processor in processors} != pool:  # topology unknown: each cpu its own core
            processors = [Processor(cpu=cpu, core=cpu, socket=0) for cpu in sorted(pool)]
        size = target_cpuset_size(budget, len(old), self.cpus(), available=len(processors))
        chosen = frozenset(choose_cpus(size, processors))
        # Every round, as koordlet: pods created since the last one start with the full cpuset.
        outcomes = self.writer.set_cpusets(directories, chosen)
        if not self._settled("cpuset", outcomes):
            return None
        self._cpuset_restored = False
        self._dry_run_cpuset = chosen if self.writer.dry_run else None
        return InForce("cpuset", len(chosen) * 1000, format_cpuset(chosen))

    def _restore_cpuset(self) -> None:
        if self._cpuset_restored:
            return
        self._dry_run_cpuset = None
        directories = self.writer.besteffort_cpuset_dirs()
        pool = self.writer.pool()
        outcomes = self.writer.set_cpusets(directories, pool) if directories and pool else []
        self._cpuset_restored = self._settled("cpuset", outcomes)

    # ---- reporting --------------------------------------------------------------------------------

    def _now_in_force(self, applied: InForce, policy: SuppressPolicy, budget: int, *, usage: CpuUsage) -> None:
        self.metrics.cpu_suppress.set(applied.millicores)
        if applied == self.in_force:
            return
        started = self.in_force is None
        log.info("cpu suppress applied", extra={
            "node": self.node, "policy": applied.policy, "setting": applied.setting,
            "be_millicores": applied.millicores, "budget_millicores": budget,
            "capacity_millicores": usage.capacity, "threshold_percent": policy.threshold_percent,
            "node_millicores": usage.node, "non_be_pods_millicores": usage.non_be_pods,
            "host_applications_millicores": usage.host_applications, "system_millicores": usage.system,
            "dry_run": self.writer.dry_run})
        self.in_force = applied
        if started:
            self._event("CPUSuppressStarted",
                        f"best-effort pods held to {applied.millicores}m cpu by {applied.policy} "
                        f"({applied.setting}): node usage kept under {policy.threshold_percent}% of "
                        f"{usage.capacity}m")

    def _event(self, reason: str, message: str) -> None:
        if self.events is not None and not self.writer.dry_run:  # an Event says a write happened
            self.events.post(NodeEvent("Normal", reason, message))

    def _settled(self, resource: str, outcomes: Sequence[WriteOutcome]) -> bool:
        failed = [outcome for outcome in outcomes if outcome.result == "failed"]
        if failed:
            self._failed(resource, f"{failed[0].path}: {failed[0].error}")
            return False
        self._succeeded(resource)
        return True

    def _failed(self, resource: str, why: str) -> None:
        if resource not in self._failing:  # once per run of failures, not every second
            log.warning("cpu suppress cannot act", extra={"node": self.node, "resource": resource, "error": why})
            self._failing.add(resource)

    def _succeeded(self, resource: str) -> None:
        self._failing.discard(resource)


class CpuSuppressEnforcer(NodeStrategy):
    """CPU suppress on a node: the NodeSLO's policy, a round on each sample, restored at exit; what it
    holds best-effort pods to published in `limit`."""

    name = "cpu-suppress"
    failure = "cpu suppress failed"

    def __init__(self, suppressor: CpuSuppressor, *, interval: float, limit: BestEffortLimit) -> None:
        self.suppressor = suppressor
        self.interval = interval
        self.limit = limit
        self.policy = SuppressPolicy()

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:
        policy = suppress_policy(nodeslo)
        if policy != self.policy:
            log.info("cpu suppress policy changed", extra={"node": self.suppressor.node, "policy": str(policy)})
        self.policy = policy
        self.limit.by_tier_quota = policy.enabled and policy.policy == "cfsQuota"

    def run_once(self, round: Round) -> None:
        self.suppressor.step(self.policy, round.sample, round.pods)
        self._publish()

    def reads_node(self) -> bool:
        return self.policy.enabled

    def background(self, ready: Callable[[], bool]) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        events = self.suppressor.events
        return [] if events is None else [("node-events", events.run())]

    async def restore(self, timeout: float) -> None:
        await self.suppressor.restore_and_tell(timeout)
        self._publish()

    def _publish(self) -> None:
        in_force = self.suppressor.in_force
        self.limit.millicores = None if in_force is None else in_force.millicores


def node_suppressor(host: StrategyHost) -> CpuSuppressor:
    """The suppressor of a real node: its cgroups, its cpu topology, Events through the host's client."""
    metrics = host.metrics
    writer = CgroupWriter(host.cgroup_root, dry_run=host.dry_run,
                          on_write=lambda resource, result: metrics.cgroup_writes.labels(resource, result).inc())
    topology = read_cpu_topology(host.proc_root)
    return CpuSuppressor(writer, metrics, node=host.node, cpus=host.cpus, topology=lambda: topology,
                         events=host.node_events(), reservation=host.reservation())
