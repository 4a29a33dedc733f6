"""The built-in metrics' history is kept by the time reports were received, never the agent's clock.

Issue 17: one report with updateTime 9999-12-31T23:59:59Z froze the history of its node and its
pods (every later sample was older than the newest, and that one never expired).
"""

from __future__ import annotations

import orjson
import pytest

from colocation.custommetrics.builtin_metrics import CPU_USAGE, BuiltinMetrics
from colocation.custommetrics.series_store import NODES, PODS, SeriesKey, SeriesStore
from colocation.custommetrics.suffix_aggregations import parse_metric_name
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from colocation.nodemetrics.resource_metrics_view import ResourceMetricsView
from tests.clock import FakeClock

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
RETENTION = 600.0


class Replica:
    def __init__(self) -> None:
        self.clock = FakeClock(NOW)
        self.store = NodeMetricStore(clock_wall=self.clock.wall, clock_monotonic=self.clock)
        self.history = SeriesStore(self.clock.wall, retention_seconds=RETENTION)
        self.builtins = BuiltinMetrics(self.store, ResourceMetricsView(self.store), self.history)

    def report(self, update_time: str, cpu: str) -> None:
        body = {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "node-1"},
                "status": {"updateTime": update_time,
                           "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}},
                           "podsMetric": [{"namespace": "web", "name": "web-0",
                                           "podUsage": {"resources": {"cpu": cpu, "memory": "1Mi"}}}]}}
        self.store.put(validate_report(orjson.dumps(body), "node-1"), {})
        self.builtins.sample_history()

    def samples(self, key: SeriesKey) -> list[tuple[float, float]]:
        found = self.history.series_of(key.metric, key.resource, key.namespace, name=key.name)
        if not found:
            return []
        timestamps, values = found[0].window(self.history.oldest_kept())
        return list(zip(timestamps, values, strict=True))


NODE_CPU = SeriesKey(metric=CPU_USAGE, resource=NODES, namespace="", name="node-1", labels=())
POD_CPU = SeriesKey(metric=CPU_USAGE, resource=PODS, namespace="web", name="web-0", labels=())


@pytest.mark.parametrize("first_update_time", ["9999-12-31T23:59:59Z", "1970-01-01T00:00:00Z"])
def test_a_report_from_a_skewed_clock_does_not_freeze_the_history(first_update_time: str) -> None:
    replica = Replica()
    replica.report(first_update_time, "1")
    replica.clock.advance(10)
    replica.report("2027-01-15T08:00:10Z", "2")
    replica.clock.advance(10)
    replica.report("2027-01-15T08:00:20Z", "3")
    for key in (NODE_CPU, POD_CPU):
        assert replica.samples(key) == [(NOW, 1.0), (NOW + 10, 2.0), (NOW + 20, 3.0)]
    point = replica.builtins.node_value("node-1", parse_metric_name("cpu_usage_agg_max"))
    assert point is not None and (point.value, point.timestamp, point.window_seconds) == (3.0, NOW + 20, 20)


def test_the_history_of_a_far_future_report_expires_by_receipt_time() -> None:
    replica = Replica()
    replica.report("9999-12-31T23:59:59Z", "1")
    replica.clock.advance(RETENTION + 1)
    replica.history.collect_garbage()
    assert len(replica.history) == 0


def test_the_history_refuses_a_sample_beyond_the_future_tolerance() -> None:
    history = SeriesStore(lambda: NOW, retention_seconds=RETENTION, future_tolerance_seconds=300)
    assert not history.record(NODE_CPU, NOW + 301, 1.0)
    assert history.record(NODE_CPU, NOW + 300, 1.0)
    assert not history.record(NODE_CPU, NOW - RETENTION - 1, 1.0)
