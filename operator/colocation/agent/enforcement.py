"""The agent's enforcement on its node, wired to what it watches: CPU suppress, batch cgroups, evictions,
CPU burst.

A NodeAgent (colocation.agent.runtime) has one `NodeEnforcement`, holding the node's enforcers;
any may be absent (turned off by its flag, or a simulated node): CPU suppress
(colocation.agent.cpu_suppressor), a round every suppress interval on the latest sample, batch
cgroups (colocation.agent.batch_cgroup_reconciler), a round every few seconds on the pods the pod
watch last saw, and the evictions by node pressure (colocation.agent.pressure_evictor: memory and
cpu), each a round every its interval on the latest sample, which ask the leader to evict (through
the NodeAgent's way to the leader, `connect`), and CPU burst of LS pods
(colocation.agent.cpu_burster), a round every burst interval on the pods and the latest sample.
All wait until the NodeSLO has been listed, so that a restarting agent does not undo what the
NodeSLO wants; batch quotas give way while CPU suppress holds the best-effort tier by its quota
(koordlet's rule: a v1 child's quota may not exceed its parent's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.batch_cgroup_reconciler import BatchCgroupReconciler, node_batch_cgroups
from colocation.agent.batch_cgroups import PodResources
from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.cpu_burst import BurstPod, BurstStrategy, burst_strategy
from colocation.agent.cpu_burster import CpuBurster, node_burster
from colocation.agent.cpu_evict import CpuEvictor
from colocation.agent.cpu_suppress import SuppressPolicy, suppress_policy
from colocation.agent.cpu_suppressor import CpuSuppressor, EnforcementOptions, NodeReservation, node_suppressor
from colocation.agent.kubeapi import KubeApi
from colocation.agent.memory_evict import MemoryEvictor
from colocation.agent.node_events import NodeEvents
from colocation.agent.pressure_evictor import EvictionMetrics, EvictionStrategy, Exchange, PressureEviction
from colocation.agent.system_settings_reconciler import SystemSettingsReconciler, node_system_settings

log = logging.getLogger(__name__)


class NodeEnforcement:
    def __init__(self, node: str, *, suppressor: CpuSuppressor | None = None,
                 batch_cgroups: BatchCgroupReconciler | None = None,
                 evictions: Sequence[PressureEviction] = (), reservation: NodeReservation | None = None,
                 burster: CpuBurster | None = None,
                 system_settings: SystemSettingsReconciler | None = None) -> None:
        self.node = node
        self.system_settings = system_settings  # /proc/sys/vm from NodeSLO systemStrategy, a loop of its own
        self.suppressor = suppressor
        self.batch_cgroups = batch_cgroups
        self.burster = burster
        self.burst = BurstStrategy()
        self.evictions = tuple(evictions)  # memory eviction, cpu eviction: each with a round of its own
        # The Node's reservation, memory capacity and batch allocatable: read for CPU suppress and evictions.
        self.reservation = reservation or (suppressor.reservation if suppressor is not None else None)
        self.policy = SuppressPolicy()
        self.nodeslo_synced = False

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None, *, listed: bool = False) -> None:
        """The NodeSLO as the watch now has it (None: there is none); `listed` after a full list."""
        policy = suppress_policy(nodeslo)
        if policy != self.policy and self.suppressor is not None:
            log.info("cpu suppress policy changed", extra={"node": self.node, "policy": str(policy)})
        self.policy = policy
        burst = burst_strategy(nodeslo)
        if burst != self.burst and self.burster is not None:
            log.info("cpu burst strategy changed", extra={"node": self.node, "strategy": str(burst)})
        self.burst = burst
        for eviction in self.evictions:
            eviction.nodeslo_changed(nodeslo)
        if self.system_settings is not None:
            self.system_settings.nodeslo_changed(nodeslo)
        self.nodeslo_synced = self.nodeslo_synced or listed

    def connect(self, exchange: Exchange) -> None:
        """The way to the leader evictions ask through (the NodeAgent's delivery)."""
        for eviction in self.evictions:
            eviction.exchange = exchange

    def suppress_once(self, sample: Sample | None, pods: Mapping[str, PodInfo]) -> None:
        """One round of CPU suppress (`sample` None: no fresh one, neither tighten nor loosen)."""
        if self.suppressor is not None and self.nodeslo_synced:
            self.suppressor.step(self.policy, sample, pods)

    def evict_once(self, eviction: PressureEviction, sample: Sample | None, pods: Mapping[str, PodInfo]) -> None:
        """One round of one of the evictions (`sample` None: no fresh one, nothing decided)."""
        if self.nodeslo_synced:
            eviction.step(sample, pods)

    def batch_cgroups_once(self, pods: Mapping[str, PodResources]) -> None:
        if self.batch_cgroups is None or not self.nodeslo_synced:
            return
        by_tier_quota = self.suppressor is not None and self.policy.enabled and self.policy.policy == "cfsQuota"
        self.batch_cgroups.step(pods, unlimited_quota=by_tier_quota)

    def burst_once(self, sample: Sample | None, pods: Mapping[str, BurstPod], infos: Mapping[str, PodInfo]) -> None:
        """One round of CPU burst (`sample` None: no fresh one, the share pool unknown)."""
        if self.burster is not None and self.nodeslo_synced:
            self.burster.step(self.burst, pods, sample, infos)

    def background(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """What runs beside the rounds, by name: CPU suppress's Node Events and the reads of the Node."""
        tasks: list[tuple[str, Coroutine[Any, Any, None]]] = []
        if self.suppressor is not None and self.suppressor.events is not None:
            tasks.append(("node-events", self.suppressor.events.run()))
        if self.burster is not None and self.burster.events is not None:
            tasks.append(("cpu-burst-events", self.burster.events.run()))
        if self.reservation is not None:
            tasks.append(("node-reservation", self.reservation.run(self._node_wanted)))
        if self.system_settings is not None:
            tasks.append(("system-settings", self.system_settings.run(lambda: self.nodeslo_synced)))
            if self.system_settings.events is not None:
                tasks.append(("system-settings-events", self.system_settings.events.run()))
        return tasks

    def _node_wanted(self) -> bool:
        evicting = any(eviction.strategy.enabled for eviction in self.evictions)
        return (self.suppressor is not None and self.policy.enabled) or evicting

    def be_real_limit(self, cpus: Callable[[], int]) -> int:
        """What BE pods may use now (milli-cpus): CPU suppress's budget in force, else the node's cpus."""
        in_force = self.suppressor.in_force if self.suppressor is not None else None
        return in_force.millicores if in_force is not None else cpus() * 1000

    async def restore(self, timeout: float) -> None:
        """At exit (--restore-on-exit): undo what was written; post the Event saying so within `timeout`."""
        if self.batch_cgroups is not None:
            self.batch_cgroups.restore()
        if self.burster is not None:
            self.burster.restore()
            if self.burster.events is not None:
                await self.burster.events.drain(timeout)
        if self.suppressor is not None:
            await self.suppressor.restore_and_tell(timeout)
        for eviction in self.evictions:
            await eviction.settle()
        if self.system_settings is not None:
            await self.system_settings.restore_and_tell(timeout)


def node_enforcement(node: str, cgroup_root: Path, proc_root: Path, options: EnforcementOptions, kube: KubeApi,
                     metrics: AgentMetrics, *, cpus: Callable[[], int], timeout: float) -> NodeEnforcement:
    """A real node's enforcers, as `options` turn them on."""
    suppressor = None
    if options.cpu_suppress:
        suppressor = node_suppressor(node, cgroup_root, proc_root, options, kube, metrics, cpus=cpus, timeout=timeout)
    batch_cgroups = None
    if options.batch_cgroups:
        batch_cgroups = node_batch_cgroups(node, cgroup_root, dry_run=options.dry_run, metrics=metrics)
    burster = None
    if options.cpu_burst:
        events = NodeEvents(kube, node, wall=time.time, timeout=timeout,
                            on_result=lambda result: metrics.node_events.labels(result).inc())
        burster = node_burster(node, cgroup_root, dry_run=options.dry_run, metrics=metrics, events=events, cpus=cpus)
    system_settings = None
    if options.system_settings:
        system_settings = node_system_settings(node, proc_root, kube, metrics, dry_run=options.dry_run,
                                               interval=options.system_settings_interval, timeout=timeout)
    if not (options.memory_evict or options.cpu_evict):
        return NodeEnforcement(node, suppressor=suppressor, batch_cgroups=batch_cgroups, burster=burster,
                               system_settings=system_settings)
    # The Node's memory capacity is memory eviction's 100 %, as koordlet's; its allocatable
    # batch-cpu is cpu eviction's limit with evictByAllocatable.
    node_reader = (suppressor.reservation if suppressor is not None else None) or \
        NodeReservation(kube, node, timeout=timeout)
    eviction_metrics = EvictionMetrics(metrics.registry)
    strategies: list[EvictionStrategy] = []
    if options.memory_evict:
        strategies.append(MemoryEvictor(time.monotonic, capacity=lambda: node_reader.memory_capacity))
    enforcement = NodeEnforcement(node, suppressor=suppressor, batch_cgroups=batch_cgroups, reservation=node_reader,
                                  burster=burster, system_settings=system_settings)
    if options.cpu_evict:
        strategies.append(CpuEvictor(time.monotonic, collect_interval=options.collect_interval,
                                     real_limit=lambda: enforcement.be_real_limit(cpus),
                                     batch_allocatable=lambda: node_reader.batch_cpu_allocatable))
    enforcement.evictions = tuple(PressureEviction(node, strategy, eviction_metrics, dry_run=options.dry_run)
                                  for strategy in strategies)
    return enforcement
