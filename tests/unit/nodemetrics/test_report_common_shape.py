"""The common shape's validator (what agents send, checked without Python) stores exactly what the
whole schema stores, and refuses nothing the whole schema accepts."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.report_schema import NODE_METRIC, validate_report
from tests.unit.nodemetrics.test_nodemetric_models import report_body

# Places a value may be changed: (path into the body, values to put there). Nulls, numbers and
# other quantity forms go to the whole schema; the rest stays in the common shape.
_QUANTITIES = st.one_of(
    st.sampled_from(["0", "0m", "100m", "1.5", "+3", "1e3", " 2 ", "-0", "1Ki", "7Gi", "9223372036854775807m",
                     "9223372036854775808m", "1.", ".5", "x", "", "0.000000001", "100000000000000000"]),
    st.integers(min_value=-5, max_value=2**70), st.floats(allow_nan=False, allow_infinity=False), st.none(),
    st.booleans())
_NULLABLE = [("status", "nodeMetric", "systemUsage"), ("status", "nodeMetric", "aggregatedNodeUsages"),
             ("status", "podsMetric"), ("status", "hostApplicationMetric"), ("status", "podsMetric", 0, "priority"),
             ("status", "podsMetric", 1, "qos"), ("status", "nodeMetric", "aggregatedNodeUsages", 0, "duration"),
             ("status", "hostApplicationMetric", 0, "qos")]
_QUANTITY_PLACES = [("status", "nodeMetric", "nodeUsage", "resources", "cpu"),
                    ("status", "podsMetric", 2, "podUsage", "resources", "memory"),
                    ("status", "nodeMetric", "aggregatedNodeUsages", 0, "usage", "p99", "resources", "cpu"),
                    ("status", "hostApplicationMetric", 0, "usage", "resources", "memory")]


def _set(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = body
    for step in path[:-1]:
        target = target[step]
        if target is None:  # a null already put above this place
            return
    target[path[-1]] = value


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    body = copy.deepcopy(report_body(pods=3))
    for path in draw(st.lists(st.sampled_from(_NULLABLE), max_size=3)):
        _set(body, path, None)
    for path in draw(st.lists(st.sampled_from(_QUANTITY_PLACES), max_size=3)):
        _set(body, path, draw(_QUANTITIES))
    return body


@settings(max_examples=300, deadline=None)
@given(bodies())
def test_a_report_is_stored_as_the_whole_schema_would_store_it(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()  # orjson refuses integers beyond 64 bits; JSON has them
    try:
        expected = orjson.dumps(NODE_METRIC.validate_json(raw)["status"])
    except ValidationError:
        try:
            validate_report(raw, "node-1")
        except ApiError as error:
            assert error.code == 422
        else:
            raise AssertionError("accepted a report the whole schema refuses") from None
        return
    assert validate_report(raw, "node-1").status_json == expected


def test_nulls_and_quantity_forms_outside_the_common_shape_are_stored_canonically() -> None:
    body = report_body(pods=2)
    body["status"]["nodeMetric"]["systemUsage"] = None
    body["status"]["podsMetric"][0]["qos"] = None
    body["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = 3
    body["status"]["podsMetric"][1]["podUsage"]["resources"]["memory"] = " 64Mi "
    status = orjson.loads(validate_report(orjson.dumps(body), "node-1").status_json)
    assert "systemUsage" not in status["nodeMetric"]
    assert "qos" not in status["podsMetric"][0]
    assert status["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "3"
    assert status["podsMetric"][1]["podUsage"]["resources"]["memory"] == "64Mi"
