"""CPU eviction as a strategy: its flag and its setup (its rounds: colocation.agent.strategies.pressure_evictor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, flag

if TYPE_CHECKING:
    from colocation.agent.strategies.strategy_host import StrategyHost


@dataclass(frozen=True)
class CpuEvictOptions:
    interval: float = flag(
        1.0, "--cpu-evict-interval", type=click.FloatRange(min=0), show_default=True,
        help="Seconds between two rounds of cpu eviction (NodeSLO resourceUsedThresholdWithBE with "
             "cpuEvictBESatisfactionLowerPercent and UpperPercent): when best-effort pods get too little of "
             "the batch cpu they request, the agent asks the leader to evict some; 0 turns it off.")


def _setup(host: StrategyHost, options: CpuEvictOptions) -> NodeStrategy:
    import time

    from colocation.agent.strategies.cpu_evict.cpu_evict import CpuEvictor
    from colocation.agent.strategies.cpu_suppress.cpu_suppress import BestEffortLimit
    from colocation.agent.strategies.pressure_evictor import EvictionMetrics, PressureEviction, PressureEvictionEnforcer

    # What BE pods may use: CPU suppress's budget in force, else the node's cpus; with
    # evictByAllocatable, the Node's allocatable batch-cpu.
    node_reader, limit, cpus = host.reservation(), host.shared(BestEffortLimit, BestEffortLimit), host.cpus
    evictor = CpuEvictor(time.monotonic, collect_interval=host.collect_interval,
                         real_limit=lambda: limit.millicores if limit.millicores is not None else cpus() * 1000,
                         batch_allocatable=lambda: node_reader.batch_cpu_allocatable)
    metrics = host.shared(EvictionMetrics, lambda: EvictionMetrics(host.metrics.registry))
    return PressureEvictionEnforcer("cpu-evict", PressureEviction(host.node, evictor, metrics, dry_run=host.dry_run),
                                    interval=options.interval)


CPU_EVICT = AgentStrategy(name="cpu-evict", options=CpuEvictOptions,
                          enabled=lambda options: options.interval > 0, setup=_setup)
