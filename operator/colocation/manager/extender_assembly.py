"""The scheduler extender as the manager assembles it (`--scheduler-extender-port`): its pod cache,
its figures, its answers and its own HTTPS listener.

Every replica serves it, leader and standbys alike, from its NodeMetric copy, its Node directory
(allocatable) and its share of the replica's one Pod informer (`pod_consumer`); the configuration
is the controllers' copy of colocation-config (the defaults without controllers). `refresh_forever`
computes each node's figures soon after its report arrives, so that a request only reads them.
When the replica turns ready (a restarted one, its copies just current), the figures are computed
at once (`WarmOnReady`): those of the last refresh may predate the copy, and would let a hot node
pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from colocation.apiserver.scheduler_extender_routes import ExtenderMetrics, SchedulerExtenderRoutes
from colocation.kube.nodes import NodeDirectory
from colocation.kube.shared_informer import InformerConsumer
from colocation.loadaware.bound_pods import BoundPods
from colocation.loadaware.extender_answers import LoadAwareExtender
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.node_figure_cache import NodeFigureCache
from colocation.loadaware.tentative_placements import TentativePlacements
from colocation.nodemetrics.storage_interface import NodeMetricReader

REFRESH_SECONDS = 1.0  # a report's figures are ready this long after it arrives, at most


@dataclass(frozen=True, kw_only=True)
class SchedulerExtender:
    routes: SchedulerExtenderRoutes
    pods: BoundPods
    cache: NodeFigureCache
    config: Callable[[], LoadAwareConfig]

    def pod_consumer(self) -> InformerConsumer[dict[str, Any]]:
        return self.pods.consumer()

    async def refresh_forever(self) -> None:
        while True:
            for _ in self.cache.refresh_in_steps(self.config()):
                await asyncio.sleep(0)  # let waiting requests in: a step is 200 nodes, a few ms
            await asyncio.sleep(REFRESH_SECONDS)  # a period, not synchronisation


class WarmOnReady:
    """The extender's readiness: the replica's, and figures computed since it last turned ready."""

    def __init__(self, ready: Callable[[], bool], cache: NodeFigureCache,
                 config: Callable[[], LoadAwareConfig]) -> None:
        self._ready = ready
        self._cache = cache
        self._config = config
        self._warm = False

    def __call__(self) -> bool:
        if not self._ready():
            self._warm = False
            return False
        if not self._warm:
            self._cache.refresh(self._config())  # once per transition: what changed since the last refresh
            self._warm = True
        return True


def assemble_extender(store: NodeMetricReader, nodes: NodeDirectory, *, config: Callable[[], LoadAwareConfig],
                      ready: Callable[[], bool], registry: CollectorRegistry,
                      clock_wall: Callable[[], float] = time.time,
                      clock_monotonic: Callable[[], float] = time.monotonic) -> SchedulerExtender:
    tentatives = TentativePlacements(clock=clock_monotonic, hold_seconds=config().tentative_hold_seconds)
    pods = BoundPods(on_bound=tentatives.confirm)
    cache = NodeFigureCache(store, pods, tentatives, allocatable=nodes.allocatable)
    extender = LoadAwareExtender(cache, tentatives, config=config, clock=clock_wall)
    warm = WarmOnReady(lambda: pods.synced and nodes.synced and ready(), cache, config)
    routes = SchedulerExtenderRoutes(extender, ready=warm, metrics=ExtenderMetrics(registry))
    return SchedulerExtender(routes=routes, pods=pods, cache=cache, config=config)
