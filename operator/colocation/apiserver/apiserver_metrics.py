"""Prometheus metrics of the API server: request latencies, the reports it took or refused, and the
reviews it asked kube-apiserver for.

The registry is the operator's, shared with the other stages (storage, custom metrics, leadership),
so that one /metrics serves them all.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

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
        self.requests = Histogram("colocation_apiserver_request_duration_seconds",
                                  "API requests by verb and response code.", ["verb", "code"],
                                  buckets=_LATENCY_BUCKETS, registry=r)
        self.token_authentications = Counter(
            "colocation_token_authentications_total",
            "Bearer tokens authenticated, by what decided (local: the issuer's keys and the pod cache; "
            "tokenreview: kube-apiserver, cached) and the result (accepted, rejected, error).",
            ["method", "result"], registry=r)
        self.token_local_undecided = Counter(
            "colocation_token_local_undecided_total",
            "Bearer tokens the local check left to TokenReview, by reason.", ["reason"], registry=r)
        self.subject_access_reviews = Counter(
            "colocation_subject_access_reviews_total",
            "SubjectAccessReviews sent to kube-apiserver (cache misses), by the API group asked about "
            "(empty for a non-resource path), the verb and the result (allowed, denied, error).",
            ["group", "verb", "result"], registry=r)

        # Labelled children by label values: prometheus_client's labels() takes a lock and checks
        # every value on each call, and every request observes a latency.
        self._children: dict[tuple[Any, ...], Any] = {}

    def child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, looked up once: one entry per child the metric itself holds."""
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
