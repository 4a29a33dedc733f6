"""The agents' MetricSampleBatch: what is accepted, and the Status a bad batch gets (nothing stored)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from colocation.apimachinery.errors import ApiError
from colocation.custommetrics.sample_batches import validate_batch


def batch(*series: dict[str, Any], node: str = "node-1", **overrides: Any) -> bytes:
    body = {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "MetricSampleBatch", "node": node,
            "series": list(series), **overrides}
    return orjson.dumps(body)


def series(metric: str = "http_requests", labels: dict[str, str] | None = None, pod: tuple[str, str] | None = None,
           samples: list[tuple[float, float]] | None = None) -> dict[str, Any]:
    pairs = samples if samples is not None else [(1000.0, 1.0)]
    body: dict[str, Any] = {"metric": metric, "labels": labels or {},
                            "samples": [{"timestamp": t, "value": v} for t, v in pairs]}
    if pod is not None:
        body["pod"] = {"namespace": pod[0], "name": pod[1]}
    return body


def rejection(raw: bytes, node: str = "node-1") -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate_batch(raw, node)
    return caught.value


def test_a_valid_batch_keeps_metric_labels_pod_and_samples_in_order() -> None:
    validated = validate_batch(batch(
        series("http_requests", {"method": "GET", "code": "200"}, ("default", "web-1"), [(10.0, 1.5), (15.0, 2)]),
        series("node_temperature:celsius")), "node-1")
    first, second = validated.series
    assert (first.metric, first.labels, first.namespace, first.pod) == (
        "http_requests", (("code", "200"), ("method", "GET")), "default", "web-1")
    assert (first.timestamps, first.values) == ((10.0, 15.0), (1.5, 2.0))
    assert (second.namespace, second.pod) == ("", "")  # a series of the node itself
    assert validated.sample_count == 3


def test_a_batch_says_when_the_agent_sent_it_or_not() -> None:
    assert validate_batch(batch(series(), sentTime=1000.5), "node-1").sent_at == 1000.5
    assert validate_batch(batch(series()), "node-1").sent_at is None  # an older agent
    for bad in (0, -1, "1000"):
        problem = rejection(batch(series(), sentTime=bad))
        assert (problem.code, [c["field"] for c in problem.details["causes"]]) == (422, ["sentTime"]), bad


@pytest.mark.parametrize(("raw", "message"), [
    (b"{not json", "json parse error"),
    (b"[]", "expected an object"),
    (batch(kind="NodeMetric"), 'got kind "NodeMetric"'),
    (batch(apiVersion="v1"), 'in version "v1"'),
    (batch(node="node-2"), "does not match the name on the URL (node-1)"),
])
def test_a_body_that_is_not_this_nodes_batch_is_a_bad_request(raw: bytes, message: str) -> None:
    error = rejection(raw)
    assert (error.code, error.reason) == (400, "BadRequest")
    assert message in error.message


@pytest.mark.parametrize(("bad", "field", "message"), [
    (series("1bad"), "series[0].metric", "a Prometheus metric name must match"),
    (series("m" * 201), "series[0].metric", "Too long"),
    (series(labels={"bad-name": "x"}), "series[0].labels[bad-name]", "a Prometheus label name must match"),
    (series(labels={"ok": "v" * 1025}), "series[0].labels[ok]", "Too long"),
    (series(labels={f"l{i}": "v" for i in range(33)}), "series[0].labels", "must have at most 32 items"),
    (series(pod=("Not_A_Namespace", "web")), "series[0].pod.namespace", "RFC 1123"),
    (series(samples=[]), "series[0].samples", "Required value"),
    (series(samples=[(float(t), 1.0) for t in range(1, 122)]), "series[0].samples",
     "Too many: 121: must have at most 120 items"),
    (series(samples=[(20.0, 1.0), (10.0, 2.0)]), "series[0].samples", "oldest first"),
    (series(samples=[(-1.0, 1.0)]), "series[0].samples[0].timestamp", "greater than 0"),
    ({**series(), "samples": [{"timestamp": 10.0, "value": "1"}]}, "series[0].samples[0].value", "valid number"),
    ({**series(), "samples": [{"timestamp": 10.0, "value": True}]}, "series[0].samples[0].value", "valid number"),
    ({**series(), "surprise": 1}, "series[0].surprise", "unknown field"),
    ({"labels": {}, "samples": [{"timestamp": 1.0, "value": 1.0}]}, "series[0].metric", "Required value"),
])
def test_an_invalid_series_is_422_with_the_field_and_why(bad: dict[str, Any], field: str, message: str) -> None:
    error = rejection(batch(series(), bad))
    assert (error.code, error.reason) == (422, "Invalid")
    causes = {cause["field"]: cause["message"] for cause in error.details["causes"]}
    assert field.replace("series[0]", "series[1]") in causes, causes
    assert message in causes[field.replace("series[0]", "series[1]")]


def test_non_finite_values_are_refused() -> None:
    # JSON has no NaN, but Python's encoders write one: it must not reach a Quantity.
    raw = b'{"apiVersion":"metrics.colocation.dev/v1alpha1","kind":"MetricSampleBatch","node":"node-1",' \
          b'"series":[{"metric":"m","samples":[{"timestamp":1.0,"value":NaN}]}]}'
    error = rejection(raw)
    assert error.code in (400, 422)


def test_the_same_series_twice_in_a_batch_is_a_duplicate() -> None:
    error = rejection(batch(series(labels={"a": "1"}), series(labels={"a": "1"})))
    assert error.code == 422
    assert error.details["causes"][0]["field"] == "series[1]"
    assert error.details["causes"][0]["reason"] == "FieldValueDuplicate"


def test_too_many_series_are_refused() -> None:
    error = rejection(batch(*[series(labels={"i": str(i)}) for i in range(20_001)]))
    assert error.code == 422
    assert "Too many: 20001: must have at most 20000 items" in error.details["causes"][0]["message"]


@pytest.mark.parametrize("field", ["timestamp", "value"])
def test_a_number_beyond_64_bits_is_invalid_with_its_path(field: str) -> None:
    # orjson cannot read it back for the field errors; the validator's parser can, and does.
    raw = batch(series(samples=[(1_800_000_000.0, 2.0)])).replace(
        b'"timestamp":1800000000.0' if field == "timestamp" else b'"value":2.0', f'"{field}":{"9" * 400}'.encode())
    error = rejection(raw)
    assert (error.code, error.reason) == (422, "Invalid")
    [cause] = error.status()["details"]["causes"]
    assert cause["field"] == f"series[0].samples[0].{field}"
