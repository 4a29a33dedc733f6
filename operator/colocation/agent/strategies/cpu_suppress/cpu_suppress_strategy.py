"""CPU suppress as a strategy: its flag and its setup (its loop: cpu_suppressor, beside it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, flag

if TYPE_CHECKING:
    from colocation.agent.strategies.strategy_host import StrategyHost


@dataclass(frozen=True)
class CpuSuppressOptions:
    interval: float = flag(
        1.0, "--cpu-suppress-interval", type=click.FloatRange(min=0), show_default=True,
        help="Seconds between two rounds of CPU suppress (NodeSLO resourceUsedThresholdWithBE, when it "
             "enables it): the best-effort pods' CFS quota or cpuset recomputed from the latest sample "
             "and written to their cgroups; 0 turns CPU suppress off (nothing read or written).")


def _setup(host: StrategyHost, options: CpuSuppressOptions) -> NodeStrategy:
    from colocation.agent.strategies.cpu_suppress.cpu_suppress import BestEffortLimit
    from colocation.agent.strategies.cpu_suppress.cpu_suppressor import CpuSuppressEnforcer, node_suppressor

    return CpuSuppressEnforcer(node_suppressor(host), interval=options.interval,
                               limit=host.shared(BestEffortLimit, BestEffortLimit))


CPU_SUPPRESS = AgentStrategy(name="cpu-suppress", options=CpuSuppressOptions,
                             enabled=lambda options: options.interval > 0, setup=_setup)
