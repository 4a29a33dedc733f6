"""Prometheus metrics of an agent process (one set per process, shared by simulated agents)."""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Lease renewals are one small PUT: milliseconds when healthy, seconds when the API server struggles.
_RENEW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Scrapes and sample batches: milliseconds on a healthy node, up to their timeouts otherwise.
_REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.samples = Counter("colocation_agent_samples_total", "Samples collected (all nodes of the process).",
                               registry=r)
        self.reports_sent = Counter("colocation_agent_reports_sent_total",
                                    "NodeMetric reports accepted, by route (leader, apiserver) and trigger "
                                    "(initial, pods-changed, usage-changed, max-interval, leader-changed, retry).",
                                    ["route", "trigger"], registry=r)
        self.reports_failed = Counter("colocation_agent_reports_failed_total",
                                      "NodeMetric report attempts that failed, by reason.", ["reason"], registry=r)
        self.last_report_age = Gauge("colocation_agent_last_report_age_seconds",
                                     "Seconds since the last accepted report (the oldest node of the process; "
                                     "+Inf before the first).", registry=r)
        self.lease_renew = Histogram("colocation_agent_lease_renew_duration_seconds",
                                     "Time to renew the node Lease, conflicts and retries included.",
                                     buckets=_RENEW_BUCKETS, registry=r)
        self.lease_renew_failures = Counter("colocation_agent_lease_renew_failures_total",
                                            "Node Lease requests that failed, by reason.", ["reason"], registry=r)
        self.scrapes = Counter("colocation_agent_scrapes_total",
                               "Scrapes of annotated pods by result (ok, timeout, unreachable, http-error, "
                               "too-large, bad-exposition, no-address, invalid-annotation).", ["result"], registry=r)
        self.scrape_duration = Histogram("colocation_agent_scrape_duration_seconds",
                                         "Time to fetch and parse one pod's metrics.", buckets=_REQUEST_BUCKETS,
                                         registry=r)
        self.custom_samples_scraped = Counter("colocation_agent_custom_metric_samples_scraped_total",
                                              "Custom metric samples taken (scraped or simulated) and kept.",
                                              registry=r)
        self.custom_samples_sent = Counter("colocation_agent_custom_metric_samples_sent_total",
                                           "Custom metric samples the leader accepted.", registry=r)
        self.custom_samples_dropped = Counter("colocation_agent_custom_metric_samples_dropped_total",
                                              "Custom metric samples dropped, by reason (non-finite, invalid, "
                                              "series-limit, node-series-limit, buffer-full, refused, "
                                              "repeated).", ["reason"], registry=r)
        self.sample_batches_sent = Counter("colocation_agent_sample_batches_sent_total",
                                           "Sample batches the leader accepted, by route (leader, apiserver).",
                                           ["route"], registry=r)
        self.sample_batches_failed = Counter("colocation_agent_sample_batches_failed_total",
                                             "Sample batch attempts that failed, by reason.", ["reason"], registry=r)
        self.sample_batch_duration = Histogram("colocation_agent_sample_batch_duration_seconds",
                                               "Time to deliver one accepted sample batch, fallbacks included.",
                                               buckets=_REQUEST_BUCKETS, registry=r)
        self.leader_changes = Counter("colocation_agent_leader_changes_total",
                                      "Changes of the leader seen on the leader Lease.", registry=r)

    def track_report_age(self, ages: Callable[[], list[float]]) -> None:
        """Read the reporters' ages at scrape time; the gauge shows the largest."""
        self.last_report_age.set_function(lambda: max(ages(), default=math.inf))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
