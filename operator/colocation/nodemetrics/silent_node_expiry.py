"""The leader's sweep of silent nodes: a node that stopped reporting leaves the store (a DELETED event).

Only the leader sweeps; a standby's copy loses those nodes through the leader's feed. With a store
every replica writes (--store nats), `remove` deletes each node there, and every replica applies it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.storage_metrics import StorageMetrics

log = logging.getLogger(__name__)


async def expire_silent_nodes(store: NodeMetricStore, metrics: StorageMetrics, interval: float, *,
                              remove: Callable[[str], Awaitable[bool]] | None = None) -> None:
    while True:
        await asyncio.sleep(interval)  # the sweep period
        expired = store.expire() if remove is None else [name for name in store.silent() if await remove(name)]
        for name in expired:
            metrics.expired.inc()
            log.info("dropped NodeMetric of a silent node", extra={"node": name})
