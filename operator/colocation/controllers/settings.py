"""The controllers' thresholds: flags of `colocation operator` (docs/architecture.md, Node health).

The per-node thresholds of the batch formula and of the Node writes (degradeTimeMinutes,
resourceDiffThreshold, updateTimeThresholdSeconds, the reclaim percentages) are keys of the
colocation-config ConfigMap instead (`colocation.controllers.config`), so they can differ by node.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControllerSettings:
    enabled: bool = True
    # Every node is judged and its batch resources recomputed this often, events or not.
    evaluation_interval: float = 5.0
    # Agent Lease silence that makes a node unhealthy (the Lease's duration).
    node_grace_period: float = 40.0
    # Unhealthy this long: its batch and free pods are evicted.
    eviction_timeout: float = 300.0
    # Nodes per second whose pods start being evicted (a token bucket per zone); 0 disables evictions.
    eviction_rate: float = 0.1
    # A zone is partially disrupted when more than this fraction of its nodes, and more than
    # `unhealthy_zone_min_nodes`, are unhealthy (`colocation.controllers.disruption`).
    unhealthy_zone_threshold: float = 0.55
    unhealthy_zone_min_nodes: int = 2
    # A partially disrupted zone of more than `large_cluster_size_threshold` nodes evicts at this
    # rate; a smaller one not at all.
    secondary_eviction_rate: float = 0.01
    large_cluster_size_threshold: int = 50
    # No node is judged this long after becoming leader; None: one grace period.
    startup_grace: float | None = None
    # On-time Lease renewals in a row that make an unhealthy node healthy again.
    recovery_renewals: int = 2
    # Concurrent writes to the API server (Node, NodeSLO, NodeResource, evictions, events).
    write_concurrency: int = 16

    def __post_init__(self) -> None:
        if self.evaluation_interval <= 0 or self.node_grace_period <= 0:
            raise ValueError("evaluation_interval and node_grace_period must be positive")
        if self.eviction_timeout < 0 or self.eviction_rate < 0 or self.secondary_eviction_rate < 0:
            raise ValueError("eviction_timeout and the eviction rates must not be negative")
        if self.large_cluster_size_threshold < 0:
            raise ValueError("large_cluster_size_threshold must not be negative")
        if not 0 <= self.unhealthy_zone_threshold <= 1:
            raise ValueError("unhealthy_zone_threshold must be within [0, 1]")
