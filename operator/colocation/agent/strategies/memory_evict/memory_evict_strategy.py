"""Memory eviction as a strategy: its flag and its setup (its rounds: colocation.agent.strategies.pressure_evictor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, flag

if TYPE_CHECKING:
    from colocation.agent.strategies.strategy_host import StrategyHost


@dataclass(frozen=True)
class MemoryEvictOptions:
    interval: float = flag(
        1.0, "--memory-evict-interval", type=click.FloatRange(min=0), show_default=True,
        help="Seconds between two rounds of memory eviction (NodeSLO resourceUsedThresholdWithBE, when it "
             "enables it): above memoryEvictThresholdPercent of the Node's memory, the agent asks the "
             "leader to evict best-effort pods until usage is under memoryEvictLowerPercent; 0 turns it off.")


def _setup(host: StrategyHost, options: MemoryEvictOptions) -> NodeStrategy:
    import time

    from colocation.agent.strategies.memory_evict.memory_evict import MemoryEvictor
    from colocation.agent.strategies.pressure_evictor import EvictionMetrics, PressureEviction, PressureEvictionEnforcer

    # The Node's memory capacity is memory eviction's 100 %, as koordlet's.
    node_reader = host.reservation()
    evictor = MemoryEvictor(time.monotonic, capacity=lambda: node_reader.memory_capacity)
    metrics = host.shared(EvictionMetrics, lambda: EvictionMetrics(host.metrics.registry))
    return PressureEvictionEnforcer("memory-evict", PressureEviction(host.node, evictor, metrics, dry_run=host.dry_run),
                                    interval=options.interval)


MEMORY_EVICT = AgentStrategy(name="memory-evict", options=MemoryEvictOptions,
                             enabled=lambda options: options.interval > 0, setup=_setup)
