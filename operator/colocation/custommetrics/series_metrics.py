"""Prometheus metrics of the custom metrics store, on the operator's registry."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class StoreMetrics:
    def __init__(self, registry: CollectorRegistry, series: Callable[[], int]) -> None:
        r = registry
        self.series = Gauge("colocation_custom_metrics_series", "Custom metric series held in memory.", registry=r)
        self.series.set_function(series)  # read at scrape time, not updated per sample
        self.samples_accepted = Counter("colocation_custom_metrics_samples_accepted_total",
                                        "Custom metric samples stored.", registry=r)
        self.samples_dropped = Counter("colocation_custom_metrics_samples_dropped_total",
                                       "Samples of accepted batches not stored, by reason (too-old, future, "
                                       "out-of-order, series-limit).", ["reason"], registry=r)
        self.batches_accepted = Counter("colocation_custom_metrics_batches_accepted_total",
                                        "Sample batches accepted from agents.", registry=r)
        self.batches_rejected = Counter("colocation_custom_metrics_batches_rejected_total",
                                        "Sample batches refused whole, by reason.", ["reason"], registry=r)
        self.gc_series_removed = Counter("colocation_custom_metrics_gc_series_removed_total",
                                         "Series dropped by garbage collection: no sample within the retention.",
                                         registry=r)
        self.gc_runs = Counter("colocation_custom_metrics_gc_runs_total", "Garbage collection sweeps.", registry=r)
        # Replication: the leader's feed, and a standby's copy of it.
        self.feed_followers = Gauge("colocation_custom_metrics_feed_followers",
                                    "Standbys reading the leader's feed of samples now.", registry=r)
        self.feed_bytes = Gauge("colocation_custom_metrics_feed_bytes",
                                "Bytes of accepted samples the leader holds for its standbys.", registry=r)
        self.feed_dropped = Counter("colocation_custom_metrics_feed_dropped_total",
                                    "Standbys cut off for falling behind the feed (they come back for a snapshot).",
                                    registry=r)
        self.replica_snapshots = Counter("colocation_custom_metrics_replica_snapshots_total",
                                         "Snapshots of the leader's samples this standby applied.", registry=r)
        self.replica_samples = Counter("colocation_custom_metrics_replica_samples_total",
                                       "Samples this standby applied from the leader's feed, snapshots included.",
                                       registry=r)
        self.replica_failures = Counter("colocation_custom_metrics_replica_failures_total",
                                        "Failures following the leader's feed, by reason (timeout, http-NNN, "
                                        "decode, connection, expired, protocol).", ["reason"], registry=r)

    def track_feed(self, followers: Callable[[], int], held_bytes: Callable[[], int]) -> None:
        self.feed_followers.set_function(followers)
        self.feed_bytes.set_function(held_bytes)
