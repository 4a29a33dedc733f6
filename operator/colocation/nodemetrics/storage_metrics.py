"""Prometheus metrics of the storage stage: what the store holds, expiry, a standby's replication."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import MAX_UPDATE_TIME_AHEAD


class StorageMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.nodes = Gauge("colocation_nodemetric_nodes", "Nodes with NodeMetric data in memory.", registry=r)
        self.watchers = Gauge("colocation_nodemetric_watchers", "Open NodeMetric watches.", registry=r)
        self.window_events = Gauge("colocation_nodemetric_watch_window_events",
                                   "NodeMetric events kept for watches to resume from (10,000 at most).",
                                   registry=r)
        self.window_bytes = Gauge("colocation_nodemetric_watch_window_bytes",
                                  "Bytes of the NodeMetric objects only the watch window keeps (not each "
                                  "node's latest, which it shares with the store).", registry=r)
        self.expired = Counter("colocation_nodemetric_expired_total",
                               "Nodes dropped after being silent for the metric TTL.", registry=r)
        self.deleted = Counter("colocation_nodemetric_deleted_nodes_total",
                               "Nodes dropped because their Node was deleted.", registry=r)
        self.update_time_replaced = Counter(
            "colocation_nodemetric_update_time_replaced_total",
            f"Reports whose status.updateTime was more than {MAX_UPDATE_TIME_AHEAD:.0f} s ahead of the leader's "
            "clock, stored with the time they were received instead.", registry=r)
        self.replication_events = Counter("colocation_standby_replicated_events_total",
                                          "NodeMetric events a standby applied from the leader's watch.",
                                          registry=r)
        self.replication_relists = Counter("colocation_standby_relists_total",
                                           "Full relists a standby made of the leader's NodeMetrics.", registry=r)

    def track(self, store: NodeMetricStore) -> None:
        """Read the store's sizes at scrape time instead of updating gauges on every change, and
        count the updateTimes it replaces."""
        store.on_update_time_replaced = self.update_time_replaced.inc
        self.nodes.set_function(lambda: store.node_count)
        self.watchers.set_function(lambda: store.watcher_count)
        self.window_events.set_function(lambda: store.window_events)
        self.window_bytes.set_function(lambda: store.window_bytes)
