"""The agent's enforcement on its node, wired to what it watches: CPU suppress, batch cgroups, memory eviction.

A NodeAgent (colocation.agent.runtime) has one `NodeEnforcement`, holding the node's enforcers;
any may be absent (turned off by its flag, or a simulated node): CPU suppress
(colocation.agent.cpu_suppressor), a round every suppress interval on the latest sample, batch
cgroups (colocation.agent.batch_cgroup_reconciler), a round every few seconds on the pods the pod
watch last saw, and memory eviction (colocation.agent.memory_evictor), a round every memory evict
interval on the latest sample, which asks the leader to evict (through the NodeAgent's way to the
leader, `connect`). All wait until the NodeSLO has been listed, so that a restarting agent does not
undo what the NodeSLO wants; batch quotas give way while CPU suppress holds the best-effort tier
by its quota (koordlet's rule: a v1 child's quota may not exceed its parent's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.batch_cgroup_reconciler import BatchCgroupReconciler, node_batch_cgroups
from colocation.agent.batch_cgroups import PodResources
from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.cpu_suppress import SuppressPolicy, suppress_policy
from colocation.agent.cpu_suppressor import CpuSuppressor, EnforcementOptions, NodeReservation, node_suppressor
from colocation.agent.kubeapi import KubeApi
from colocation.agent.memory_evict import MemoryEvictor, memory_evict_policy
from colocation.agent.memory_evictor import Exchange, MemoryEviction, MemoryEvictionMetrics

log = logging.getLogger(__name__)


class NodeEnforcement:
    def __init__(self, node: str, *, suppressor: CpuSuppressor | None = None,
                 batch_cgroups: BatchCgroupReconciler | None = None,
                 memory_eviction: MemoryEviction | None = None, reservation: NodeReservation | None = None) -> None:
        self.node = node
        self.suppressor = suppressor
        self.batch_cgroups = batch_cgroups
        self.memory_eviction = memory_eviction
        # The Node's reservation and memory capacity: read for CPU suppress and memory eviction.
        self.reservation = reservation or (suppressor.reservation if suppressor is not None else None)
        self.policy = SuppressPolicy()
        self.nodeslo_synced = False

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None, *, listed: bool = False) -> None:
        """The NodeSLO as the watch now has it (None: there is none); `listed` after a full list."""
        policy = suppress_policy(nodeslo)
        if policy != self.policy and self.suppressor is not None:
            log.info("cpu suppress policy changed", extra={"node": self.node, "policy": str(policy)})
        self.policy = policy
        if self.memory_eviction is not None:
            self.memory_eviction.policy_changed(memory_evict_policy(nodeslo))
        self.nodeslo_synced = self.nodeslo_synced or listed

    def connect(self, exchange: Exchange) -> None:
        """The way to the leader memory eviction asks through (the NodeAgent's delivery)."""
        if self.memory_eviction is not None:
            self.memory_eviction.exchange = exchange

    def suppress_once(self, sample: Sample | None, pods: Mapping[str, PodInfo]) -> None:
        """One round of CPU suppress (`sample` None: no fresh one, neither tighten nor loosen)."""
        if self.suppressor is not None and self.nodeslo_synced:
            self.suppressor.step(self.policy, sample, pods)

    def evict_once(self, sample: Sample | None, pods: Mapping[str, PodInfo]) -> None:
        """One round of memory eviction (`sample` None: no fresh one, nothing decided)."""
        if self.memory_eviction is not None and self.nodeslo_synced:
            self.memory_eviction.step(sample, pods)

    def batch_cgroups_once(self, pods: Mapping[str, PodResources]) -> None:
        if self.batch_cgroups is None or not self.nodeslo_synced:
            return
        by_tier_quota = self.suppressor is not None and self.policy.enabled and self.policy.policy == "cfsQuota"
        self.batch_cgroups.step(pods, unlimited_quota=by_tier_quota)

    def background(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """What runs beside the rounds, by name: CPU suppress's Node Events and reservation reads."""
        tasks: list[tuple[str, Coroutine[Any, Any, None]]] = []
        if self.suppressor is not None and self.suppressor.events is not None:
            tasks.append(("node-events", self.suppressor.events.run()))
        if self.reservation is not None:
            tasks.append(("node-reservation", self.reservation.run(self._node_wanted)))
        return tasks

    def _node_wanted(self) -> bool:
        evicting = self.memory_eviction is not None and self.memory_eviction.policy.enabled
        return (self.suppressor is not None and self.policy.enabled) or evicting

    async def restore(self, timeout: float) -> None:
        """At exit (--restore-on-exit): undo what was written; post the Event saying so within `timeout`."""
        if self.batch_cgroups is not None:
            self.batch_cgroups.restore()
        if self.suppressor is not None:
            await self.suppressor.restore_and_tell(timeout)
        if self.memory_eviction is not None:
            await self.memory_eviction.settle()


def node_enforcement(node: str, cgroup_root: Path, proc_root: Path, options: EnforcementOptions, kube: KubeApi,
                     metrics: AgentMetrics, *, cpus: Callable[[], int], timeout: float) -> NodeEnforcement:
    """A real node's enforcers, as `options` turn them on."""
    suppressor = None
    if options.cpu_suppress:
        suppressor = node_suppressor(node, cgroup_root, proc_root, options, kube, metrics, cpus=cpus, timeout=timeout)
    batch_cgroups = None
    if options.batch_cgroups:
        batch_cgroups = node_batch_cgroups(node, cgroup_root, dry_run=options.dry_run, metrics=metrics)
    memory_eviction, reservation = None, None
    if options.memory_evict:
        # The Node's memory capacity is memory eviction's 100 %, as koordlet's.
        node_reader = (suppressor.reservation if suppressor is not None else None) or \
            NodeReservation(kube, node, timeout=timeout)
        memory_eviction = node_memory_eviction(node, MemoryEvictionMetrics(metrics.registry), dry_run=options.dry_run,
                                               capacity=lambda: node_reader.memory_capacity)
        reservation = node_reader
    return NodeEnforcement(node, suppressor=suppressor, batch_cgroups=batch_cgroups, memory_eviction=memory_eviction,
                           reservation=reservation)


def node_memory_eviction(node: str, metrics: MemoryEvictionMetrics, *, dry_run: bool,
                         capacity: Callable[[], int | None]) -> MemoryEviction:
    """Memory eviction of one node (real or simulated); `connect` gives it the way to the leader."""
    return MemoryEviction(node, None, MemoryEvictor(time.monotonic), metrics, capacity=capacity, dry_run=dry_run)
