"""The store records when the leader received a report: what orders and ages, never updateTime."""

from __future__ import annotations

import orjson
import pytest

from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from tests.unit.nodemetrics.test_report_bounds import NOW, report_body


def test_a_stored_report_records_when_the_leader_received_it_on_every_replica() -> None:
    clock = [NOW]
    leader, standby, relisted = (NodeMetricStore(lambda: clock[0], lambda: 100.0) for _ in range(3))
    first = leader.put(validate_report(orjson.dumps(report_body(updateTime="9999-12-31T23:59:59Z")), "node-1"), {})
    clock[0] += 5
    unchanged = leader.put(validate_report(orjson.dumps(report_body(updateTime="9999-12-31T23:59:59Z")), "node-1"), {})
    standby.apply_event("ADDED", first.body)
    clock[0] += 600  # e.g. a standby that relists after a failover, ten minutes on
    relisted.replace_all([first.body], first.resource_version)
    assert (first.received_at, unchanged.received_at) == (NOW, NOW)  # the content was received at NOW
    # A copy carries the leader's receipt (its resourceVersion is the leader's wall clock in
    # microseconds), so data copied late does not look fresh.
    for copy in (standby.get("node-1"), relisted.get("node-1")):
        assert copy is not None and copy.received_at == pytest.approx(NOW, abs=1e-3)
