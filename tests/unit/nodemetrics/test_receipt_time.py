"""The store records when the leader received a report: what orders and ages, never updateTime.

An updateTime more than MAX_UPDATE_TIME_AHEAD ahead of that receipt time (issue 34) is stored as
the receipt time, on the leader and on every copy of it, and counted.
"""

from __future__ import annotations

import orjson
import pytest
from prometheus_client import CollectorRegistry

from colocation.apimachinery.clock import format_time
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import MAX_UPDATE_TIME_AHEAD, ValidatedReport, validate_report
from colocation.nodemetrics.storage_interface import Entry, update_time_ahead
from colocation.nodemetrics.storage_metrics import StorageMetrics
from tests.clock import FakeClock
from tests.unit.nodemetrics.test_nodemetric_store import T0
from tests.unit.nodemetrics.test_report_bounds import NOW, report_body

REPLACED = "colocation_nodemetric_update_time_replaced_total"


def test_a_stored_report_records_when_the_leader_received_it_on_every_replica() -> None:
    clock = FakeClock(100.0, wall=NOW)
    leader, standby, relisted = (NodeMetricStore(clock_wall=clock.wall,
                                                 clock_monotonic=lambda: 100.0) for _ in range(3))
    first = leader.put(validate_report(orjson.dumps(report_body(updateTime="9999-12-31T23:59:59Z")), "node-1"), {})
    clock.wall_now += 5
    unchanged = leader.put(validate_report(orjson.dumps(report_body(updateTime="9999-12-31T23:59:59Z")), "node-1"), {})
    standby.apply_event("ADDED", first.body)
    clock.wall_now += 600  # e.g. a standby that relists after a failover, ten minutes on
    relisted.replace_all([first.body], first.resource_version)
    assert (first.received_at, unchanged.received_at) == (NOW, NOW)  # the content was received at NOW
    # A copy carries the leader's receipt (its resourceVersion is the leader's wall clock in
    # microseconds), so data copied late does not look fresh.
    for copy in (standby.get("node-1"), relisted.get("node-1")):
        assert copy is not None and copy.received_at == pytest.approx(NOW, abs=1e-3)


# ---- an updateTime from the future (issue 34) -------------------------------------------------------

def report(update_time: float | str, cpu: str = "1500m") -> ValidatedReport:
    body = report_body(updateTime=format_time(update_time) if isinstance(update_time, float) else update_time)
    body["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = cpu
    return validate_report(orjson.dumps(body), "node-1")


def served_update_time(entry: Entry | None) -> str:
    assert entry is not None
    update_time: str = orjson.loads(entry.body)["status"]["updateTime"]
    assert format_time(entry.figures.update_time) == update_time  # what the controllers read agrees
    return update_time


def counted(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value(REPLACED)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0, wall=T0)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def store(clock: FakeClock, registry: CollectorRegistry) -> NodeMetricStore:
    store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic)
    StorageMetrics(registry).track(store)
    return store


@pytest.mark.parametrize(("received", "sent", "stored"), [
    (T0, T0 + MAX_UPDATE_TIME_AHEAD, T0 + MAX_UPDATE_TIME_AHEAD),  # just under the bound: as sent
    (T0, T0 + MAX_UPDATE_TIME_AHEAD + 1, T0),  # just over: the receipt time
    (T0 + 0.75, T0 + MAX_UPDATE_TIME_AHEAD, T0 + MAX_UPDATE_TIME_AHEAD),
    (T0 + 0.75, T0 + MAX_UPDATE_TIME_AHEAD + 1, T0),  # 300.25 s ahead: the receipt time, in whole seconds
    (T0, T0 - 86_400, T0 - 86_400),  # a clock behind is the agent's business: as sent
    (T0, "9999-12-31T23:59:59Z", T0),  # far ahead
    (T0, "9999-12-31T23:59:59.999999999Z", T0),
])
def test_an_update_time_more_than_the_bound_ahead_is_stored_as_the_receipt_time(
        clock: FakeClock, store: NodeMetricStore, registry: CollectorRegistry, received: float, sent: float | str,
        stored: float) -> None:
    clock.wall_now = received
    sent_report = report(sent)
    entry = store.put(sent_report, {})
    assert served_update_time(entry) == served_update_time(store.get("node-1")) == format_time(stored)
    assert entry.received_at == received
    replaced = stored != sent_report.figures.update_time
    assert update_time_ahead(sent_report, entry) == (sent_report.figures.update_time - stored if replaced else 0)
    assert entry.update_time_sent == (sent_report.figures.update_time if replaced else None)
    assert counted(registry) == int(replaced)
    # Only the updateTime differs from what was sent, and the rest keeps its bytes and order.
    assert entry.body.endswith(sent_report.with_update_time(stored).status_json + b"}")
    assert entry.figures == sent_report.with_update_time(stored).figures


def test_the_rule_is_pure_the_report_itself_within_the_bound_else_a_copy_at_the_receipt_time() -> None:
    within = report(NOW + MAX_UPDATE_TIME_AHEAD)
    assert within.as_received(NOW) is within
    ahead = report(NOW + MAX_UPDATE_TIME_AHEAD + 1)
    replaced = ahead.as_received(NOW + 0.5)
    assert (replaced.name, replaced.figures.update_time) == ("node-1", NOW)
    assert orjson.loads(replaced.status_json) == {**orjson.loads(ahead.status_json), "updateTime": format_time(NOW)}
    assert list(orjson.loads(replaced.status_json)) == list(orjson.loads(ahead.status_json))
    assert ahead.figures.update_time == NOW + MAX_UPDATE_TIME_AHEAD + 1  # the report itself is unchanged


def test_the_same_report_sent_again_keeps_the_first_receipt_time(
        clock: FakeClock, store: NodeMetricStore, registry: CollectorRegistry) -> None:
    """A stuck agent resending one snapshot must not look as if it reported anew (health judges
    freshness by a new updateTime); an agent whose clock ticks does report anew."""
    far = T0 + 3600
    first = store.put(report(far), {})
    clock.wall_now += 10
    again = store.put(report(far), {})
    assert (again.resource_version, served_update_time(again), again.received_at) == (
        first.resource_version, format_time(T0), T0)
    assert update_time_ahead(report(far), again) == 3600  # still ahead: answered with a warning, counted
    clock.wall_now += 10
    ticked = store.put(report(far + 20), {})  # the same usage, the agent's clock 20 s on
    assert ticked.resource_version > first.resource_version
    assert (served_update_time(ticked), ticked.received_at) == (format_time(T0 + 20), T0 + 20)
    clock.wall_now += 10
    changed = store.put(report(far + 30, cpu="2"), {})
    assert served_update_time(changed) == format_time(T0 + 30)
    assert counted(registry) == 4


def test_a_report_identical_once_its_update_time_is_replaced_is_no_change(
        clock: FakeClock, store: NodeMetricStore) -> None:
    clock.wall_now = T0 + 0.25
    first = store.put(report(T0), {})  # the agent's clock is right
    clock.wall_now = T0 + 0.5
    jumped = store.put(report(T0 + 3600), {})  # then jumps, within the same second
    assert (jumped.resource_version, served_update_time(jumped)) == (first.resource_version, format_time(T0))
    assert update_time_ahead(report(T0 + 3600), jumped) == 3600


def test_standbys_serve_the_receipt_time_the_leader_stored(clock: FakeClock) -> None:
    leader = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic)
    entry = leader.put(report("9999-12-31T23:59:59Z"), {"pool": "web"})
    clock.wall_now += 600  # the standbys' clocks, or their time of copying, do not matter
    # As the follower hands them over: parsed, then written again.
    copied = orjson.dumps(orjson.loads(entry.body))
    following = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic)
    relisted = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic)
    following.apply_event("ADDED", copied)
    relisted.replace_all([copied], leader.resource_version)
    for standby in (following, relisted):
        copy = standby.get("node-1")
        assert served_update_time(copy) == format_time(T0)
        assert copy is not None and (copy.body, copy.figures) == (entry.body, entry.figures)
        assert orjson.loads(standby.list_body())["items"] == orjson.loads(leader.list_body())["items"]
