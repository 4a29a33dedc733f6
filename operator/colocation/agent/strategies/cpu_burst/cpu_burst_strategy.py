"""CPU burst as a strategy: its flag and its setup (its loop: cpu_burster, beside it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, flag

if TYPE_CHECKING:
    from colocation.agent.strategies.strategy_host import StrategyHost


@dataclass(frozen=True)
class CpuBurstOptions:
    interval: float = flag(
        1.0, "--cpu-burst-interval", type=click.FloatRange(min=0), show_default=True,
        help="Seconds between two rounds of CPU burst (NodeSLO cpuBurstStrategy, or a pod's "
             "koordinator.sh/cpuBurst annotation, when its policy is not none): LS pods with a CPU limit get "
             "a cfs burst and a CFS quota raised while throttled; 0 turns it off.")


def _setup(host: StrategyHost, options: CpuBurstOptions) -> NodeStrategy:
    from colocation.agent.strategies.cpu_burst.cpu_burster import CpuBurstEnforcer, node_burster

    burster = node_burster(host.node, host.cgroup_root, dry_run=host.dry_run, metrics=host.metrics,
                           events=host.node_events(), cpus=host.cpus)
    return CpuBurstEnforcer(burster, interval=options.interval)


CPU_BURST = AgentStrategy(name="cpu-burst", options=CpuBurstOptions,
                          enabled=lambda options: options.interval > 0, setup=_setup)
