"""Each replica records when it received a report, on its own clock: what orders and ages, never updateTime."""

from __future__ import annotations

import orjson

from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from tests.unit.nodemetrics.test_report_bounds import NOW, report_body


def test_a_stored_report_records_when_this_replica_received_it() -> None:
    clock = [NOW]
    leader, standby = (NodeMetricStore(lambda: clock[0], lambda: 100.0) for _ in range(2))
    first = leader.put(validate_report(orjson.dumps(report_body(updateTime="9999-12-31T23:59:59Z")), "node-1"), {})
    clock[0] += 5
    unchanged = leader.put(validate_report(orjson.dumps(report_body(updateTime="9999-12-31T23:59:59Z")), "node-1"), {})
    standby.apply_event("ADDED", first.body)
    copied = standby.get("node-1")
    assert (first.received_at, unchanged.received_at) == (NOW, NOW)  # the content was received at NOW
    assert copied is not None and copied.received_at == NOW + 5  # the standby's own receipt
