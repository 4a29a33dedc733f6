"""The bounds every report field is held to (issue 17): quantities, updateTime, counts.

A report outside them is refused whole with a 422 naming the field; one inside them is stored
in a form every consumer reads back (the standby's copy, the table, the controllers).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.served_apigroups import Caller
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import (
    COLLECTION_PATH,
    MAX_AGGREGATIONS,
    MAX_HOST_APPLICATIONS,
    MAX_PODS,
    MAX_RECENT_WINDOW_SECONDS,
    MAX_RESOURCES,
    figures_of,
    validate_report,
)

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HUGE = "1" * 4_301  # one digit over Python's int-conversion limit
TOO_LARGE = ("must be less than or equal to 9223372036854775807m "
             "(the largest quantity whose milli-value fits in a 64-bit integer)")


def usage() -> dict[str, Any]:
    return {"resources": {"cpu": "1500m", "memory": "2Gi"}}


def report_body(**status: Any) -> dict[str, Any]:
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "node-1"},
            "status": {"updateTime": "2027-01-15T07:59:50Z",
                       "nodeMetric": {"nodeUsage": usage(), "recentUsage": {**usage(), "windowSeconds": 10},
                                      "systemUsage": usage(),
                                      "aggregatedNodeUsages": [{"duration": "5m0s", "usage": {"p90": usage()}}]},
                       "podsMetric": [{"namespace": "default", "name": "web", "podUsage": usage(),
                                       "recentUsage": usage()}],
                       "hostApplicationMetric": [{"name": "containerd", "usage": usage()}],
                       "prodReclaimableMetric": {"resource": usage()}, **status}}


def at(body: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


def refusal(body: dict[str, Any] | bytes) -> ApiError:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    with pytest.raises(ApiError) as refused:
        validate_report(raw, "node-1")
    return refused.value


def causes(error: ApiError) -> list[tuple[str, str]]:
    assert (error.code, error.reason) == (422, "Invalid")
    return [(cause["field"], cause["message"]) for cause in error.status()["details"]["causes"]]


# ---- quantities -----------------------------------------------------------------------------------

QUANTITY_PATHS: list[tuple[list[Any], str]] = [
    (["status", "nodeMetric", "nodeUsage", "resources", "cpu"], "status.nodeMetric.nodeUsage.resources[cpu]"),
    (["status", "nodeMetric", "systemUsage", "resources", "memory"],
     "status.nodeMetric.systemUsage.resources[memory]"),
    (["status", "nodeMetric", "aggregatedNodeUsages", 0, "usage", "p90", "resources", "cpu"],
     "status.nodeMetric.aggregatedNodeUsages[0].usage[p90].resources[cpu]"),
    (["status", "podsMetric", 0, "podUsage", "resources", "cpu"], "status.podsMetric[0].podUsage.resources[cpu]"),
    (["status", "nodeMetric", "recentUsage", "resources", "cpu"], "status.nodeMetric.recentUsage.resources[cpu]"),
    (["status", "podsMetric", 0, "recentUsage", "resources", "memory"],
     "status.podsMetric[0].recentUsage.resources[memory]"),
    (["status", "hostApplicationMetric", 0, "usage", "resources", "memory"],
     "status.hostApplicationMetric[0].usage.resources[memory]"),
    (["status", "prodReclaimableMetric", "resource", "resources", "cpu"],
     "status.prodReclaimableMetric.resource.resources[cpu]"),
]


@pytest.mark.parametrize(("path", "field"), QUANTITY_PATHS)
def test_a_quantity_of_more_than_4300_digits_is_invalid_wherever_it_is(path: list[Any], field: str) -> None:
    # It used to be a 500 in nodeUsage, and accepted elsewhere, failing every consumer after.
    assert causes(refusal(at(report_body(), path, HUGE))) == [
        (field, f'Invalid value: "{HUGE[:96]}...: must be no more than 64 characters')]


@pytest.mark.parametrize(("path", "field"), QUANTITY_PATHS)
@pytest.mark.parametrize("value", ["1e30", "9223372036854775808m", "9223372036854775.808", "8Ei", "10P"])
def test_a_quantity_whose_milli_value_overflows_int64_is_invalid(path: list[Any], field: str, value: str) -> None:
    assert causes(refusal(at(report_body(), path, value))) == [(field, f'Invalid value: "{value}": {TOO_LARGE}')]


def test_a_json_number_too_large_for_int64_is_invalid_with_its_path() -> None:
    raw = orjson.dumps(report_body()).replace(b'"1500m"', b"1" * 400, 1)
    [(field, message)] = causes(refusal(raw))
    assert field == "status.nodeMetric.nodeUsage.resources[cpu]"
    assert message.endswith(TOO_LARGE)


def test_a_json_number_no_parser_takes_is_a_malformed_body() -> None:
    # Over 4,300 digits neither JSON parser reads it: refused as undecodable, never stored.
    error = refusal(orjson.dumps(report_body()).replace(b'"1500m"', HUGE.encode(), 1))
    assert (error.code, error.reason) == (400, "BadRequest")
    assert "json parse error: number out of range" in error.message


@pytest.mark.parametrize("value", ["9223372036854775807m", "9223372036854775.807", "999999999999999", "999Ti",
                                   "0.000000000000000000001", "1.5e3", 1e15])
def test_quantities_up_to_the_bound_are_stored_and_read_back(value: Any) -> None:
    path = ["status", "nodeMetric", "nodeUsage", "resources", "cpu"]
    report = validate_report(orjson.dumps(at(report_body(), path, value)), "node-1")
    assert report.figures.cpu_millis <= 2**63 - 1
    assert figures_of(report.obj()) == report.figures


async def test_a_refused_quantity_is_a_422_counted_as_rejected_and_stores_nothing(
        client: TestClient[Any, Any], metrics: ServerMetrics, store: NodeMetricStore) -> None:
    before = store.list_body()
    response = await client.put(f"{COLLECTION_PATH}/node-1/status",
                                data=orjson.dumps(at(report_body(), QUANTITY_PATHS[0][0], HUGE)))
    status = await response.json()
    assert response.status == 422
    assert (status["kind"], status["reason"], status["details"]["causes"][0]["field"]) == (
        "Status", "Invalid", "status.nodeMetric.nodeUsage.resources[cpu]")
    assert 'colocation_nodemetric_reports_rejected_total{reason="Invalid"} 1.0' in metrics.exposition().decode()
    assert store.list_body() == before


# ---- updateTime -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("sent", "canonical", "stored"), [
    ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z"),
    # A clock far ahead is not refused; the store keeps the receipt time instead (test_receipt_time).
    ("9999-12-31T23:59:59Z", "9999-12-31T23:59:59Z", "2027-01-15T08:00:00Z"),
    ("9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59Z", "2027-01-15T08:00:00Z"),
    ("2027-01-15T09:59:50.5+02:00", "2027-01-15T07:59:50Z", "2027-01-15T07:59:50Z"),
    ("2027-01-15T07:29:50-00:30", "2027-01-15T07:59:50Z", "2027-01-15T07:59:50Z"),
])
def test_update_time_is_stored_as_rfc3339_utc_and_read_back_by_a_standby(sent: str, canonical: str,
                                                                          stored: str) -> None:
    report = validate_report(orjson.dumps(report_body(updateTime=sent)), "node-1")
    assert orjson.loads(report.status_json)["updateTime"] == canonical
    leader = NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0)
    entry = leader.put(report, {})
    assert orjson.loads(entry.body)["status"]["updateTime"] == stored
    standby = NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0)
    standby.apply_event("ADDED", entry.body)
    copied = standby.get("node-1")
    assert copied is not None and copied.figures == entry.figures


@pytest.mark.parametrize(("value", "message"), [
    ("0001-01-01T00:00:00Z", "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z"),
    ("0999-12-31T23:59:59Z", "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z"),
    ("1969-12-31T23:59:59Z", "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z"),
    ("9999-12-31T23:59:59-00:01", "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z"),
    ("2027-02-30T00:00:00Z", "must be a valid RFC 3339 time: day is out of range for month"),
    ("2027-01-15T07:59:60Z", "must be a valid RFC 3339 time: second must be in 0..59"),
])
def test_update_time_outside_the_bounds_is_invalid(value: str, message: str) -> None:
    assert causes(refusal(report_body(updateTime=value))) == [
        ("status.updateTime", f'Invalid value: "{value}": {message}')]


@pytest.mark.parametrize("value", ["2027-01-15 07:59:50Z", "2027-01-15T07:59Z", "2027-01-15", "2027-01-15T07:59:50",
                                   "2027-01-15t07:59:50z", "+2027-01-15T07:59:50Z", "2027-01-15T07:59:50+0200"])
def test_update_time_that_is_not_rfc3339_is_invalid(value: str) -> None:
    [(field, message)] = causes(refusal(report_body(updateTime=value)))
    assert field == "status.updateTime"
    assert message.startswith(f'Invalid value: "{value}": must be an RFC 3339 time with seconds and a zone')


def test_update_time_as_a_number_is_invalid() -> None:
    # Upstream's metav1.Time takes a string only; pydantic alone would read a number as epoch seconds.
    assert causes(refusal(report_body(updateTime=1_800_000_000))) == [
        ("status.updateTime", "Invalid value: 1800000000: input should be a valid string")]


# ---- counts ---------------------------------------------------------------------------------------

def pods(count: int) -> list[dict[str, Any]]:
    return [{"namespace": "default", "name": f"pod-{index}", "podUsage": {}} for index in range(count)]


@pytest.mark.parametrize(("field", "items", "limit"), [
    ("podsMetric", pods, MAX_PODS),
    ("hostApplicationMetric", lambda n: [{"name": f"app-{i}", "usage": {}} for i in range(n)], MAX_HOST_APPLICATIONS),
])
def test_lists_of_a_report_are_bounded(field: str, items: Any, limit: int) -> None:
    assert validate_report(orjson.dumps(report_body(**{field: items(limit)})), "node-1")
    assert causes(refusal(report_body(**{field: items(limit + 1)}))) == [
        (f"status.{field}", f"Too many: {limit + 1}: must have at most {limit} items")]


def test_aggregations_and_resources_are_bounded() -> None:
    body = report_body()
    body["status"]["nodeMetric"]["aggregatedNodeUsages"] = [{"duration": f"{i + 1}m0s"}
                                                            for i in range(MAX_AGGREGATIONS + 1)]
    body["status"]["nodeMetric"]["nodeUsage"]["resources"] = {f"example.com/r{i}": "1"
                                                              for i in range(MAX_RESOURCES + 1)}
    assert causes(refusal(body)) == [
        ("status.nodeMetric.nodeUsage.resources",
         f"Too many: {MAX_RESOURCES + 1}: must have at most {MAX_RESOURCES} items"),
        ("status.nodeMetric.aggregatedNodeUsages",
         f"Too many: {MAX_AGGREGATIONS + 1}: must have at most {MAX_AGGREGATIONS} items")]


def test_a_duration_beyond_go_is_invalid() -> None:
    body = at(report_body(), ["status", "nodeMetric", "aggregatedNodeUsages", 0, "duration"], "2562048h")
    assert causes(refusal(body)) == [("status.nodeMetric.aggregatedNodeUsages[0].duration",
                                      'Invalid value: "2562048h": must be at most 2562047h47m16.854775807s '
                                      "(Go's time.Duration)")]


# ---- recentUsage.windowSeconds ---------------------------------------------------------------------

WINDOW = ["status", "nodeMetric", "recentUsage", "windowSeconds"]


@pytest.mark.parametrize("seconds", [1, 10, MAX_RECENT_WINDOW_SECONDS])
def test_a_recent_window_of_a_minute_or_less_is_stored(seconds: int) -> None:
    stored = orjson.loads(validate_report(orjson.dumps(at(report_body(), WINDOW, seconds)), "node-1").status_json)
    assert stored["nodeMetric"]["recentUsage"] == {**usage(), "windowSeconds": seconds}
    assert stored["podsMetric"][0]["recentUsage"] == usage()


@pytest.mark.parametrize(("value", "message"), [
    (0, "Invalid value: 0: input should be greater than or equal to 1"),
    (61, "Invalid value: 61: input should be less than or equal to 60"),
    (2**63, f"Invalid value: {2**63}: input should be less than or equal to 60"),
    ("10", 'Invalid value: "10": input should be a valid integer'),  # a JSON integer, as Go's int would read
    (10.5, "Invalid value: 10.5: input should be a valid integer"),
    (True, "Invalid value: true: input should be a valid integer"),
])
def test_a_recent_window_out_of_bounds_is_invalid(value: Any, message: str) -> None:
    assert causes(refusal(at(report_body(), WINDOW, value))) == [
        ("status.nodeMetric.recentUsage.windowSeconds", message)]


def test_a_recent_usage_without_its_window_is_invalid() -> None:
    body = at(report_body(), ["status", "nodeMetric", "recentUsage"], usage())
    assert causes(refusal(body)) == [("status.nodeMetric.recentUsage.windowSeconds", "Required value")]


async def test_a_refused_recent_window_is_a_422_and_stores_nothing(client: TestClient[Any, Any],
                                                                    store: NodeMetricStore) -> None:
    response = await client.put(f"{COLLECTION_PATH}/node-1/status", data=orjson.dumps(at(report_body(), WINDOW, 0)))
    status = await response.json()
    assert (response.status, status["reason"]) == (422, "Invalid")
    assert status["details"]["causes"][0]["field"] == "status.nodeMetric.recentUsage.windowSeconds"
    assert store.get("node-1") is None


# ---- the HTTP harness -----------------------------------------------------------------------------

AGENT = Caller(username="system:serviceaccount:colocation-system:colocation-agent",
               extra={"authentication.kubernetes.io/node-name": ("node-1",)})


class Leader:
    is_leader = True
    leader_identity = "me"
    leader_endpoint = ""


async def review(token: str) -> TokenReviewResult:
    return TokenReviewResult(True, AGENT)


async def allowed(spec: SubjectAccessSpec) -> bool:
    return True


@pytest.fixture
def store() -> NodeMetricStore:
    return NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0)


@pytest.fixture
def metrics() -> ServerMetrics:
    return ServerMetrics()


@pytest.fixture
async def client(store: NodeMetricStore, metrics: ServerMetrics) -> AsyncIterator[TestClient[Any, Any]]:
    authorizer = DelegatingAuthorizer(allowed)
    group = NodeMetricGroup(store, authorizer, Leader(), known_node=lambda node: True, node_labels=lambda node: {},
                            metrics=metrics, wall=lambda: NOW)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=Leader(),
                              metrics=metrics, groups=[group])
    client: TestClient[Any, Any] = TestClient(TestServer(api.application()),
                                              headers={"Authorization": "Bearer token",
                                                       "Content-Type": "application/json"})
    await client.start_server()
    yield client
    await client.close()


# ---- what a standby replicates --------------------------------------------------------------------

@pytest.mark.parametrize(("status", "cpu_millis"), [
    # Read as upstream reads it: capped at 2^63-1 cores.
    ({"updateTime": "1-01-01T00:00:00Z", "nodeMetric": {"nodeUsage": {"resources": {"cpu": HUGE}}}},
     (2**63 - 1) * 1000),
    ({"updateTime": 1_800_000_000, "nodeMetric": {"nodeUsage": {"resources": {"cpu": "lots", "memory": [1]}}}}, 0),
    ({"nodeMetric": "none", "podsMetric": {"not": "a list"}}, 0),
    ("not an object", 0),
])
def test_a_standby_replicates_any_object_its_leader_serves(status: Any, cpu_millis: int) -> None:
    # A leader of another version may have stored what we would refuse: its copy must not freeze.
    body = orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                         "metadata": {"name": "node-1", "resourceVersion": "1800000000000000"}, "status": status})
    standby = NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0)
    standby.apply_event("ADDED", body)
    entry = standby.get("node-1")
    assert entry is not None and entry.body == body
    assert (entry.figures.cpu_millis, entry.figures.update_time) == (cpu_millis, 0.0)

