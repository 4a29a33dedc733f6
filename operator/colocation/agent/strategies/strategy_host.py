"""What a strategy's setup gets on a real node, and what the strategies of one node share.

The node's roots, API client, metrics and cpus; one reader of the Node (created by the first
strategy that asks, run by NodeEnforcement while a strategy `reads_node`); one of anything else
strategies share (`shared`: CPU suppress's hold on best-effort pods, the eviction metrics).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.kubeapi import KubeApi
from colocation.agent.node_events import NodeEvents
from colocation.agent.strategies.node_reservation import NodeReservation

T = TypeVar("T")


class StrategyHost:
    def __init__(self, node: str, *, cgroup_root: Path, proc_root: Path, kube: KubeApi, metrics: AgentMetrics,
                 cpus: Callable[[], int], timeout: float, dry_run: bool, collect_interval: float) -> None:
        self.node = node
        self.cgroup_root = cgroup_root
        self.proc_root = proc_root
        self.kube = kube
        self.metrics = metrics
        self.cpus = cpus
        self.timeout = timeout  # of one API request
        self.dry_run = dry_run  # computed, logged and exported, never written nor asked for
        self.collect_interval = collect_interval
        self.node_reader: NodeReservation | None = None  # until a strategy asks for it
        self._shared: dict[type[Any], Any] = {}

    def reservation(self) -> NodeReservation:
        """The node's one reader of its Node."""
        if self.node_reader is None:
            self.node_reader = NodeReservation(self.kube, self.node, timeout=self.timeout)
        return self.node_reader

    def node_events(self) -> NodeEvents:
        """A queue of Events about the Node, the strategy's own (run it in its background)."""
        metrics = self.metrics
        return NodeEvents(self.kube, self.node, wall=time.time, timeout=self.timeout,
                          on_result=lambda result: metrics.node_events.labels(result).inc())

    def shared(self, kind: type[T], make: Callable[[], T]) -> T:
        """The node's one `kind`, made by the first strategy that asks."""
        if kind not in self._shared:
            self._shared[kind] = make()
        found: T = self._shared[kind]
        return found
