"""Batch cgroups as a strategy: its flag and its setup (its loop: batch_cgroup_reconciler, beside it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, flag

if TYPE_CHECKING:
    from colocation.agent.strategies.strategy_host import StrategyHost


@dataclass(frozen=True)
class BatchCgroupsOptions:
    interval: float = flag(
        5.0, "--batch-cgroups-interval", type=click.FloatRange(min=0), show_default=True,
        help="Seconds between two rounds of batch cgroups: the CFS quota, cpu shares and memory limit of "
             "every best-effort pod naming kubernetes.io/batch-cpu or batch-memory written to its and its "
             "containers' cgroups, a value written by someone else put back, undone when the pod no "
             "longer names them; 0 turns it off.")


def _setup(host: StrategyHost, options: BatchCgroupsOptions) -> NodeStrategy:
    from colocation.agent.strategies.batch_cgroups.batch_cgroup_reconciler import (
        BatchCgroupsEnforcer,
        node_batch_cgroups,
    )
    from colocation.agent.strategies.cpu_suppress.cpu_suppress import BestEffortLimit

    reconciler = node_batch_cgroups(host.node, host.cgroup_root, dry_run=host.dry_run, metrics=host.metrics)
    return BatchCgroupsEnforcer(reconciler, interval=options.interval,
                                limit=host.shared(BestEffortLimit, BestEffortLimit))


BATCH_CGROUPS = AgentStrategy(name="batch-cgroups", options=BatchCgroupsOptions,
                              enabled=lambda options: options.interval > 0, setup=_setup)
