"""The leader's sweep of silent nodes: a node that stopped reporting leaves the store (a DELETED event).

Only the leader sweeps; a standby's copy loses those nodes through the leader's feed.
"""

from __future__ import annotations

import asyncio
import logging

from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.storage_metrics import StorageMetrics

log = logging.getLogger(__name__)


async def expire_silent_nodes(store: NodeMetricStore, metrics: StorageMetrics, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)  # the sweep period
        for name in store.expire():
            metrics.expired.inc()
            log.info("dropped NodeMetric of a silent node", extra={"node": name})
