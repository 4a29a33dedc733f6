"""The agent's enforcement on its node: the NodeSLO strategies of colocation.agent.strategies.registry.

A NodeAgent (colocation.agent.runtime) has one `NodeEnforcement`, holding the strategies set up on
its node (none on a simulated node, or all turned off by their flags). It hands each the NodeSLO
as the watch has it, runs a strategy's round only once the NodeSLO has been listed (so that a
restarting agent does not undo what the NodeSLO wants), gathers what runs beside the rounds (with
the Node's reader, read while a strategy needs it) and restores every strategy at exit.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.kubeapi import KubeApi
from colocation.agent.node_pods import PodView
from colocation.agent.strategies.node_reservation import NodeReservation
from colocation.agent.strategies.pressure_evictor import Exchange
from colocation.agent.strategies.registry import STRATEGIES
from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, Round
from colocation.agent.strategies.strategy_host import StrategyHost

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

OptionsT = TypeVar("OptionsT", bound="DataclassInstance")


@dataclass(frozen=True, kw_only=True)
class EnforcementOptions:
    """Enforcement on this node: each strategy's options (a strategy whose options are not in
    `strategies` has its defaults, its flags'); with `dry_run` computed, logged and exported but
    never written (nor asked for); undone at exit with `restore_on_exit`."""

    strategies: tuple[Any, ...] = ()  # options of colocation.agent.strategies.registry's strategies
    dry_run: bool = False
    collect_interval: float = 1.0  # cpu eviction's shortest window
    restore_on_exit: bool = False

    def of(self, strategy: AgentStrategy[OptionsT]) -> OptionsT:
        """The options of `strategy`: as given, else its defaults."""
        for options in self.strategies:
            if isinstance(options, strategy.options):
                return options
        return strategy.options()


class NodeEnforcement:
    def __init__(self, node: str, strategies: Sequence[NodeStrategy] = (), *,
                 reservation: NodeReservation | None = None) -> None:
        self.node = node
        self.strategies = tuple(strategies)
        # The Node's reservation, memory capacity and batch allocatable, read while a strategy needs them.
        self.reservation = reservation
        self.nodeslo_synced = False

    def find(self, name: str) -> NodeStrategy | None:
        return next((strategy for strategy in self.strategies if strategy.name == name), None)

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None, *, listed: bool = False) -> None:
        """The NodeSLO as the watch now has it (None: there is none); `listed` after a full list."""
        for strategy in self.strategies:
            strategy.nodeslo_changed(nodeslo)
        self.nodeslo_synced = self.nodeslo_synced or listed

    def connect(self, exchange: Exchange) -> None:
        """The way to the leader strategies ask through (the NodeAgent's delivery)."""
        for strategy in self.strategies:
            strategy.connect(exchange)

    def pod_views(self) -> list[PodView[Any]]:
        return [view for strategy in self.strategies for view in strategy.pod_views()]

    def run_once(self, strategy: NodeStrategy, round: Round) -> None:
        """One round of `strategy`, once the NodeSLO has been listed."""
        if self.nodeslo_synced:
            strategy.run_once(round)

    def background(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """What runs beside the rounds, by name: the strategies' own, and the reads of the Node."""
        tasks = [task for strategy in self.strategies for task in strategy.background(self._ready)]
        if self.reservation is not None:
            tasks.append(("node-reservation", self.reservation.run(self._node_wanted)))
        return tasks

    def _ready(self) -> bool:
        return self.nodeslo_synced

    def _node_wanted(self) -> bool:
        return any(strategy.reads_node() for strategy in self.strategies)

    async def restore(self, timeout: float) -> None:
        """At exit (--restore-on-exit): undo what was written; post the Events saying so within `timeout`."""
        for strategy in self.strategies:
            await strategy.restore(timeout)


def node_enforcement(node: str, cgroup_root: Path, proc_root: Path, *, options: EnforcementOptions, kube: KubeApi,
                     metrics: AgentMetrics, cpus: Callable[[], int], timeout: float,
                     strategies: Sequence[AgentStrategy[Any]] = STRATEGIES) -> NodeEnforcement:
    """A real node's strategies, those `options` turn on."""
    host = StrategyHost(node, cgroup_root=cgroup_root, proc_root=proc_root, kube=kube, metrics=metrics, cpus=cpus,
                        timeout=timeout, dry_run=options.dry_run, collect_interval=options.collect_interval)
    enabled = [(strategy, options.of(strategy)) for strategy in strategies]
    return NodeEnforcement(node, [strategy.setup(host, own) for strategy, own in enabled if strategy.enabled(own)],
                           reservation=host.node_reader)
