"""Prometheus metrics of the operator's API server and leadership, on a registry of its own."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# The RBAC verb a request was authorized for, kept on the request for the latency histogram.
VERB = web.RequestKey("verb", str)

# Request latencies of an in-memory API: most answers take well under a millisecond.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reports_accepted = Counter("colocation_nodemetric_reports_accepted_total",
                                        "NodeMetric reports stored.", registry=r)
        self.reports_rejected = Counter("colocation_nodemetric_reports_rejected_total",
                                        "NodeMetric reports refused, by reason.", ["reason"], registry=r)
        self.nodes = Gauge("colocation_nodemetric_nodes", "Nodes with NodeMetric data in memory.", registry=r)
        self.watchers = Gauge("colocation_nodemetric_watchers", "Open NodeMetric watches.", registry=r)
        self.expired = Counter("colocation_nodemetric_expired_total",
                               "Nodes dropped after being silent for the metric TTL.", registry=r)
        self.requests = Histogram("colocation_apiserver_request_duration_seconds",
                                  "API requests by verb and response code.", ["verb", "code"],
                                  buckets=_LATENCY_BUCKETS, registry=r)
        self.leader = Gauge("colocation_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.leader_transitions = Counter("colocation_leader_transitions_total",
                                          "Times this replica started or stopped leading.", registry=r)
        self.replication_events = Counter("colocation_standby_replicated_events_total",
                                          "NodeMetric events a standby applied from the leader's watch.",
                                          registry=r)
        self.replication_relists = Counter("colocation_standby_relists_total",
                                           "Full relists a standby made of the leader's NodeMetrics.", registry=r)

    def track(self, nodes: Callable[[], int], watchers: Callable[[], int]) -> None:
        """Read the store's sizes at scrape time instead of updating gauges on every change."""
        self.nodes.set_function(nodes)
        self.watchers.set_function(watchers)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
