"""Hostile reports through the whole report path: validation, the store, a standby, every consumer.

Property (issue 17): whatever an agent's token sends, the leader answers with a Status or
stores something every reader can use. For each generated body:
- a refusal is an ApiError whose Status is 400 or 422, a 422 with a cause per field;
- a refusal changes nothing: the list, the resourceVersion, the standby's copy;
- an accepted report raises the resourceVersion (or, unchanged, keeps it), replicates to a
  standby with the same figures, stores an RFC 3339 updateTime, leaves the other node alone,
  is served by both with an updateTime no later than its receipt + MAX_UPDATE_TIME_AHEAD (the
  one sent, or, when that is later, the receipt time: issue 34),
  and every consumer reads it: the resource metrics view and objects, the built-in custom
  metrics (values, history, the namespace-wide query), the batch formula, the table, health;
- afterwards a sane report is recorded in the history at its receipt time (no hostile
  updateTime freezes it), and everything expires by receipt time.

The budget is small for CI (150 examples); COLOCATION_FUZZ_EXAMPLES=5000 runs a longer search.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from colocation.apimachinery.clock import RFC3339_PATTERN, format_time, parse_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.fieldtypes import MAX_QUANTITY
from colocation.apimachinery.quantity import parse_quantity
from colocation.apiserver.nodemetric_table import entry_row
from colocation.apiserver.resource_metrics_routes import node_metrics, pod_metrics
from colocation.controllers.health import NodeHealthTracker
from colocation.custommetrics.builtin_metrics import BUILTIN_METRICS, CPU_USAGE, BuiltinMetrics
from colocation.custommetrics.metric_value_shapes import metric_value_list
from colocation.custommetrics.metrics_query import ALL_OBJECTS, MetricsQuery
from colocation.custommetrics.series_store import NODES, PODS, SeriesStore
from colocation.custommetrics.suffix_aggregations import parse_metric_name
from colocation.koordinator.batch_formula import calculate_batch_resources
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import (
    API_VERSION,
    MAX_AGGREGATIONS,
    MAX_HOST_APPLICATIONS,
    MAX_PODS,
    MAX_RESOURCES,
    MAX_UPDATE_TIME_AHEAD,
    validate_report,
)
from colocation.nodemetrics.resource_metrics_view import ResourceMetricsView
from colocation.nodemetrics.storage_interface import Entry
from tests.clock import FakeClock

EXAMPLES = int(os.environ.get("COLOCATION_FUZZ_EXAMPLES", "150"))
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
RETENTION = 600.0
NODE, OTHER = "node-1", "node-0"
QUERIED = (*BUILTIN_METRICS, "cpu_usage_agg_max", "memory_usage_agg_avg", "cpu_usage_agg_p95")
NODE_OBJECT = {"metadata": {"name": NODE}, "status": {"capacity": {"cpu": "64", "memory": "256Gi"},
                                                      "allocatable": {"cpu": "60", "memory": "250Gi"}}}


# ---- bodies -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Raw:
    """JSON text orjson does not write: numbers beyond 64 bits or a double, NaN, deep nesting."""

    text: str


def encode(document: Any) -> bytes:
    raws: list[str] = []

    def swap(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
            value = Raw(str(value))
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"@@raw{len(raws) - 1}@@"
        if isinstance(value, dict):
            return {key: swap(item) for key, item in value.items()}
        if isinstance(value, list):
            return [swap(item) for item in value]
        return value

    body = orjson.dumps(swap(document))
    for index, text in enumerate(raws):
        body = body.replace(f'"@@raw{index}@@"'.encode(), text.encode(), 1)
    return body


scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
any_json = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
raw_json = st.one_of(
    st.integers(19, 5_000).map(lambda digits: Raw("9" * digits)),
    st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("NaN"), Raw("Infinity"), Raw("1e-400")]),
    st.integers(1, 1_500).map(lambda depth: Raw("[" * depth + "]" * depth)),
)


def mostly(valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` nine times in ten: a report has many fields, and one odd field refuses it whole."""
    # Not a bound: Hypothesis draws bounds (0, 9) far more often than one in ten.
    return st.integers(0, 9).flatmap(lambda roll: odd if roll == 7 else valid)


hostile = mostly(any_json, raw_json)  # a body no parser reads is refused before any field is seen

quantities = st.one_of(
    # "\uff11", a fullwidth one, is a digit to str.isdigit() and to int().
    st.sampled_from(["0", "1", "2500m", "1536Mi", "1Gi", "9223372036854775807m", "9223372036854775808m",
                     "9223372036854775.807", "8Ei", "999Ti", " 5 ", "-0", "-1", "1e-30", "1e18", "0.5n", "1.5e3",
                     "0" * 63 + "1", "0" * 64 + "1", "1" * 4_301, ".", "1.2.3", "1Ki1", "\uff11"]),
    st.from_regex(r"[+-]?[0-9]{0,20}(\.[0-9]{0,12})?([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]{1,4})?", fullmatch=True),
    st.integers(20, 6_000).map(lambda digits: "1" * digits),
    st.integers(0, 2**64 - 1), st.floats(min_value=0, max_value=1e300),
)
quantities = mostly(st.one_of(st.sampled_from(["0", "1", "250m", "1536Mi", "2Gi"]), quantities),
                    st.one_of(quantities, hostile))
resource_names = st.sampled_from(["cpu", "memory", "example.com/gpu", "Bad Name", "", "a/b/c"])


def many_resources(count: int) -> dict[str, Any]:
    return {"resources": {f"example.com/r{index}": "1" for index in range(count)}}


resource_maps = mostly(
    st.one_of(st.fixed_dictionaries({"resources": st.fixed_dictionaries({"cpu": quantities, "memory": quantities})}),
              st.fixed_dictionaries({"resources": st.dictionaries(resource_names, quantities, max_size=3)}),
              st.just({})),
    st.one_of(st.sampled_from([MAX_RESOURCES, MAX_RESOURCES + 1]).map(many_resources), hostile))
zones = st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=14)), dt.timezone(-dt.timedelta(hours=12, minutes=30))])
times = mostly(
    st.one_of(st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(9999, 12, 30),
                           timezones=zones).map(dt.datetime.isoformat),
              st.sampled_from(["9999-12-31T23:59:59Z", "9999-12-31T23:59:59.999999999Z", "1970-01-01T00:00:00Z",
                               "2027-01-15T08:00:00Z", "2027-01-15T08:00:00.123+02:00"]),
              # Around the bound of how far ahead of the receipt time (NOW + 1 to 3 s) it is kept.
              st.integers(-5, 5).map(lambda offset: format_time(NOW + MAX_UPDATE_TIME_AHEAD + offset))),
    st.one_of(st.datetimes(min_value=dt.datetime(1, 1, 1), timezones=zones).map(dt.datetime.isoformat),
              st.sampled_from(["0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2027-01-15T08:00:00", "2027-01-15",
                               "garbage", "9999-12-31T23:59:59-01:00", "2027-02-30T00:00:00Z", "2027-01-15T07:59:60Z",
                               "1-01-01T00:00:00Z", "+2027-01-15T08:00:00Z"]),
              st.integers(), hostile))
priorities = st.sampled_from(["koord-prod", "koord-mid", "koord-batch", "koord-free", "gold", None])
qos_classes = st.sampled_from(["LSE", "LSR", "LS", "BE", "SYSTEM", "gold", None])


def many_pods(count: int) -> list[dict[str, Any]]:
    return [{"namespace": "default", "name": f"pod-{index}", "podUsage": {"resources": {"cpu": "1m"}}}
            for index in range(count)]


pods = mostly(
    st.lists(st.fixed_dictionaries(
        {"namespace": mostly(st.sampled_from(["default", "web"]), st.sampled_from(["Bad_NS", "", "x" * 64])),
         "name": mostly(st.sampled_from(["web-0", "web-1", "db-0"]), st.sampled_from(["X", "", "a" * 254])),
         "podUsage": resource_maps},
        optional={"priority": priorities, "qos": qos_classes, "unknown": hostile}), max_size=4),
    st.one_of(st.sampled_from([MAX_PODS, MAX_PODS + 1]).map(many_pods), hostile))
host_applications = mostly(
    st.lists(st.fixed_dictionaries({"name": mostly(st.just("containerd"), st.sampled_from(["", "x" * 254])),
                                    "usage": resource_maps},
                                   optional={"priority": priorities, "qos": qos_classes}), max_size=3),
    st.one_of(st.sampled_from([MAX_HOST_APPLICATIONS, MAX_HOST_APPLICATIONS + 1]).map(
        lambda count: [{"name": f"app-{index}", "usage": {}} for index in range(count)]), hostile))
durations = mostly(st.sampled_from(["5m0s", "0", "1h", "10s", "2562047h47m16.854775807s"]),
                   st.one_of(st.sampled_from(["99999999999999h", "2562047h47m16.854775808s", "-1s", "1.5.5s", ""]),
                             hostile))
aggregations = mostly(
    st.lists(st.fixed_dictionaries({}, optional={
        "usage": st.dictionaries(mostly(st.sampled_from(["avg", "p50", "p90", "p95", "p99"]), st.just("max")),
                                 resource_maps, max_size=3),
        "duration": durations}), max_size=3),
    st.one_of(st.sampled_from([MAX_AGGREGATIONS, MAX_AGGREGATIONS + 1]).map(
        lambda count: [{"duration": f"{index + 1}m0s"} for index in range(count)]), hostile))
node_metrics_bodies = mostly(st.fixed_dictionaries(
    {"nodeUsage": resource_maps}, optional={"systemUsage": resource_maps, "aggregatedNodeUsages": aggregations}),
    hostile)
statuses = mostly(st.fixed_dictionaries(
    {"updateTime": times, "nodeMetric": node_metrics_bodies},
    optional={"podsMetric": pods, "hostApplicationMetric": host_applications, "unknown": hostile}), hostile)
reports = st.fixed_dictionaries(
    {"apiVersion": mostly(st.just(API_VERSION), st.sampled_from(["v1", "metrics.colocation.dev/v2"])),
     "kind": mostly(st.just("NodeMetric"), st.just("Pod")),
     "metadata": st.fixed_dictionaries({"name": mostly(st.just(NODE), st.just(OTHER))},
                                       optional={"labels": hostile, "resourceVersion": hostile}),
     "status": statuses},
    optional={"unknown": hostile},
).map(encode)
bodies = mostly(reports, st.one_of(st.binary(max_size=40), st.sampled_from([b"", b"[]", b"null", b"{}"])))


def sane_report(cpu: str) -> bytes:
    return orjson.dumps({"apiVersion": API_VERSION, "kind": "NodeMetric", "metadata": {"name": NODE},
                         "status": {"updateTime": "2027-01-15T08:00:00Z",
                                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}},
                                    "podsMetric": [{"namespace": "web", "name": "web-0",
                                                    "podUsage": {"resources": {"cpu": cpu, "memory": "1Mi"}}}]}})


# ---- one leader, one standby and the consumers --------------------------------------------------

class AnyPod:
    def labels(self, namespace: str, name: str) -> dict[str, str]:
        return {}


class Replicas:
    def __init__(self) -> None:
        self.clock = FakeClock(NOW)
        self.leader = NodeMetricStore(clock_wall=self.clock.wall, clock_monotonic=self.clock)
        self.standby = NodeMetricStore(clock_wall=self.clock.wall, clock_monotonic=self.clock)
        self.history = SeriesStore(self.clock.wall, retention_seconds=RETENTION)
        self.view = ResourceMetricsView(self.leader)
        self.builtins = BuiltinMetrics(self.leader, self.view, self.history)
        self.query = MetricsQuery(SeriesStore(self.clock.wall), self.builtins, AnyPod(), node_labels=lambda name: {})
        self.health = NodeHealthTracker(self.clock)
        self.health.track(NODE)

    def accept(self, raw: bytes) -> Entry:
        previous = self.leader.get(NODE)
        entry = self.leader.put(validate_report(raw, NODE), {"pool": "web"})
        # As the standby's informer hands it over: parsed, then written again.
        self.standby.apply_event("MODIFIED" if previous else "ADDED", orjson.dumps(orjson.loads(entry.body)))
        return entry

    def state(self) -> tuple[bytes, int, bytes]:
        return self.leader.list_body(), self.leader.resource_version, self.standby.list_body()


def consume(replicas: Replicas, entry: Entry) -> None:
    """Every reader of a stored report, as it reads it; any exception fails the property."""
    now = replicas.clock.now
    for node in replicas.view.nodes():
        served = node_metrics(node, "2027-01-15T08:00:00Z")
        for text in served["usage"].values():
            assert 0 <= parse_quantity(text) <= MAX_QUANTITY
    for node, pod in replicas.view.pods().values():
        pod_metrics(node, pod, {}, created="2027-01-15T08:00:00Z")
    replicas.builtins.sample_history()
    namespaces = {namespace for namespace, _ in replicas.view.pods()} | {"default"}
    for metric in QUERIED:
        replicas.builtins.node_value(NODE, parse_metric_name(metric))
        custom = replicas.query.custom(NODES, "", ALL_OBJECTS, metric_name=metric, selector=None,
                                       metric_selector=None)
        orjson.dumps(metric_value_list("v1beta2", custom, None))
        for namespace in namespaces:
            values = replicas.query.custom(PODS, namespace, ALL_OBJECTS, metric_name=metric, selector=None,
                                           metric_selector=None)
            orjson.dumps(metric_value_list("v1beta1", values, None))
    obj = orjson.loads(entry.body)
    for received_at in (entry.received_at, None):  # what the controller passes, and Koordinator's rule
        batch = calculate_batch_resources(NODE_OBJECT, [], obj, strategy={}, now=now, received_at=received_at)
        assert batch is None or all(isinstance(value, int) and value >= 0 for value in batch.values())
    orjson.dumps(entry_row(entry, now, "Object"))
    replicas.health.observe_metric(NODE, update_time=obj["status"]["updateTime"], seen_at=now)
    replicas.health.evaluate_all()


def assert_refusal(error: ApiError) -> None:
    status = error.status()
    assert (status["kind"], status["apiVersion"], status["status"]) == ("Status", "v1", "Failure")
    assert (status["code"], status["reason"]) in ((400, "BadRequest"), (422, "Invalid")), status
    assert status["message"]
    if status["code"] == 422:
        causes = status["details"]["causes"]
        assert causes and all(cause["field"].startswith("status") and cause["message"] for cause in causes), causes


def assert_update_time_bounded(replicas: Replicas, raw: bytes, entry: Entry, *, changed: bool) -> None:
    """No copy serves an updateTime later than the receipt time + the bound; a changed report's is
    the one sent, or the receipt time when that is later."""
    latest = replicas.clock.now + MAX_UPDATE_TIME_AHEAD
    for store in (replicas.leader, replicas.standby):
        for item in orjson.loads(store.list_body())["items"]:
            assert parse_time(item["status"]["updateTime"]) <= latest, item["status"]["updateTime"]
    sent = validate_report(raw, NODE).figures.update_time
    if sent > latest:
        event("updateTime replaced by the receipt time")
    if changed:
        assert entry.figures.update_time == (sent if sent <= latest else float(int(replicas.clock.now)))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(st.lists(bodies, min_size=1, max_size=3))
def test_no_report_fails_a_reader_and_a_refused_one_changes_nothing(hostile_bodies: list[bytes]) -> None:
    replicas = Replicas()
    other = replicas.leader.put(validate_report(sane_report("3").replace(NODE.encode(), OTHER.encode()), OTHER), {})
    replicas.standby.apply_event("ADDED", other.body)
    for raw in hostile_bodies:
        replicas.clock.advance(1)
        before = replicas.state()
        try:
            entry = replicas.accept(raw)
        except ApiError as error:
            event(f"refused: {error.code}")
            assert_refusal(error)
            assert replicas.state() == before
            continue
        event("accepted")
        assert entry.resource_version >= before[1] and replicas.leader.resource_version >= before[1]
        if entry.body not in before[0]:
            assert entry.resource_version > before[1]
        copied = replicas.standby.get(NODE)
        assert copied is not None and (copied.body, copied.figures) == (entry.body, entry.figures)
        assert re.fullmatch(RFC3339_PATTERN, orjson.loads(entry.body)["status"]["updateTime"])
        assert_update_time_bounded(replicas, raw, entry, changed=entry.resource_version > before[1])
        assert replicas.leader.get(OTHER) == other
        consume(replicas, entry)

    # Whatever came before, a sane report is history at the moment it arrives...
    replicas.clock.advance(1)
    consume(replicas, replicas.accept(sane_report("7")))
    for resource, namespace, name in ((NODES, "", NODE), (PODS, "web", "web-0")):
        [series] = replicas.history.series_of(CPU_USAGE, resource, namespace, name=name)
        assert (series.timestamps[-1], series.values[-1]) == (replicas.clock.now, 7.0)
    # ... and all of it expires by the time it arrived.
    replicas.clock.advance(RETENTION + 1)
    replicas.history.collect_garbage()
    assert len(replicas.history) == 0
