"""Validation of an agent's NodeMetric report: what is stored, and the Status errors for bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.report_schema import FIELD_ERRORS, ValidatedReport, validate_report

Body = dict[str, Any]


def resources(cpu: Any, memory: Any) -> Body:
    return {"resources": {"cpu": cpu, "memory": memory}}


def report_body(node: str = "node-1", pods: int = 3) -> Body:
    return {
        "apiVersion": "metrics.colocation.dev/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": node},
        "status": {
            "updateTime": "2026-11-22T10:00:00Z",
            "nodeMetric": {
                "nodeUsage": resources("2500m", "8Gi"),
                "systemUsage": resources("300m", "1Gi"),
                "aggregatedNodeUsages": [{"usage": {"avg": resources("2", "7Gi"), "p99": resources("3", "8Gi")},
                                          "duration": "5m0s"}],
            },
            "podsMetric": [{"namespace": "default", "name": f"pod-{i}", "podUsage": resources("100m", "64Mi"),
                            "priority": "koord-prod", "qos": "LS"} for i in range(pods)],
            "hostApplicationMetric": [{"name": "kubelet", "usage": resources("50m", "100Mi"),
                                       "priority": "koord-prod", "qos": "SYSTEM"}],
        },
    }


def validate(body: Body, node: str = "node-1") -> ValidatedReport:
    return validate_report(orjson.dumps(body), node)


def rejection(body: Body | bytes, node: str = "node-1") -> ApiError:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    with pytest.raises(ApiError) as caught:
        validate_report(raw, node)
    return caught.value


def causes(error: ApiError) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in error.details["causes"]]


def test_a_valid_report_yields_its_canonical_status_and_figures() -> None:
    body = report_body(pods=2)
    body["metadata"]["labels"] = {"ignored": "the store sets the Node's labels"}
    body["status"]["nodeCPUInfo"] = {"coreNum": 4}  # not a field of ours: dropped
    body["status"]["podsMetric"][0]["extra"] = 1
    report = validate(body)
    assert report.name == "node-1"
    assert report.figures.cpu_millis == 2500
    assert report.figures.memory_bytes == 8 * 2**30
    assert report.figures.pod_count == 2
    assert report.figures.update_time == 1795341600.0  # 2026-11-22T10:00:00Z
    status = orjson.loads(report.status_json)
    assert list(status) == ["updateTime", "nodeMetric", "podsMetric", "hostApplicationMetric"]
    assert status["podsMetric"][0] == {"namespace": "default", "name": "pod-0",
                                       "podUsage": resources("100m", "64Mi"), "priority": "koord-prod", "qos": "LS"}
    assert report.obj()["metadata"] == {"name": "node-1"}


def test_prod_reclaimable_is_kept_after_the_other_fields() -> None:
    body = report_body()
    body["status"]["prodReclaimableMetric"] = {"resource": resources("4", "6Gi"), "extra": True}
    status = orjson.loads(validate(body).status_json)
    assert list(status)[-1] == "prodReclaimableMetric"
    assert status["prodReclaimableMetric"] == {"resource": resources("4", "6Gi")}


def test_a_null_prod_reclaimable_is_no_prediction() -> None:
    body = report_body()
    body["status"]["prodReclaimableMetric"] = None
    assert "prodReclaimableMetric" not in orjson.loads(validate(body).status_json)


def test_optional_parts_may_be_left_out_and_stay_out() -> None:
    body = report_body()
    del body["status"]["podsMetric"], body["status"]["hostApplicationMetric"], body["apiVersion"], body["kind"]
    del body["status"]["nodeMetric"]["systemUsage"]
    status = orjson.loads(validate(body).status_json)
    assert set(status) == {"updateTime", "nodeMetric"}
    assert set(status["nodeMetric"]) == {"nodeUsage", "aggregatedNodeUsages"}


def test_update_time_is_stored_in_utc_whole_seconds_like_metav1_time() -> None:
    body = report_body()
    body["status"]["updateTime"] = "2026-11-22T12:00:00.987654+02:00"
    report = validate(body)
    assert orjson.loads(report.status_json)["updateTime"] == "2026-11-22T10:00:00Z"
    assert report.figures.update_time == 1795341600.0


def test_quantities_sent_as_numbers_or_with_spaces_are_stored_as_canonical_text() -> None:
    body = report_body()
    body["status"]["nodeMetric"]["nodeUsage"] = resources(2, " 1Gi ")
    body["status"]["nodeMetric"]["systemUsage"] = resources(0.5, "-0")
    report = validate(body)
    node_metric = orjson.loads(report.status_json)["nodeMetric"]
    assert node_metric["nodeUsage"] == resources("2", "1Gi")
    assert node_metric["systemUsage"] == resources("0.5", "0")
    assert (report.figures.cpu_millis, report.figures.memory_bytes) == (2000, 2**30)


def set_path(body: Body, path: list[Any], value: Any) -> Body:
    target: Any = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


@pytest.mark.parametrize(("path", "value", "field", "message"), [
    (["status", "podsMetric", 2, "podUsage", "resources", "cpu"], "-1",
     "status.podsMetric[2].podUsage.resources[cpu]", 'Invalid value: "-1": must be greater than or equal to 0'),
    (["status", "nodeMetric", "nodeUsage", "resources", "memory"], "-1Gi",
     "status.nodeMetric.nodeUsage.resources[memory]", 'Invalid value: "-1Gi": must be greater than or equal to 0'),
    (["status", "nodeMetric", "nodeUsage", "resources", "cpu"], -0.5,
     "status.nodeMetric.nodeUsage.resources[cpu]", "Invalid value: -0.5: must be greater than or equal to 0"),
    (["status", "hostApplicationMetric", 0, "usage", "resources", "cpu"], "NaN",
     "status.hostApplicationMetric[0].usage.resources[cpu]",
     "Invalid value: \"NaN\": quantities must match the regular expression "
     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    (["status", "nodeMetric", "aggregatedNodeUsages", 0, "usage", "p99", "resources", "memory"], "8 GB",
     "status.nodeMetric.aggregatedNodeUsages[0].usage[p99].resources[memory]",
     "Invalid value: \"8 GB\": quantities must match the regular expression "
     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    (["status", "nodeMetric", "nodeUsage", "resources", "cpu"], None,
     "status.nodeMetric.nodeUsage.resources[cpu]", 'Invalid value: null: must be a quantity, e.g. "2500m" or "1Gi"'),
    (["status", "podsMetric", 0, "qos"], "Gold", "status.podsMetric[0].qos",
     'Unsupported value: "Gold": supported values: "LSE", "LSR", "LS", "BE", "SYSTEM"'),
    (["status", "podsMetric", 1, "priority"], "koord-high", "status.podsMetric[1].priority",
     'Unsupported value: "koord-high": supported values: "koord-prod", "koord-mid", "koord-batch", "koord-free"'),
    (["status", "nodeMetric", "aggregatedNodeUsages", 0, "usage", "max"], resources("1", "1"),
     "status.nodeMetric.aggregatedNodeUsages[0].usage[max]",
     'Unsupported value: "max": supported values: "avg", "p50", "p90", "p95", "p99"'),
    (["status", "podsMetric", 0, "name"], "Pod_0", "status.podsMetric[0].name",
     "Invalid value: \"Pod_0\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
     "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
     "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
    (["status", "podsMetric", 0, "namespace"], "x" * 64, "status.podsMetric[0].namespace",
     "Too long: may not be more than 63 bytes"),
    (["status", "nodeMetric", "aggregatedNodeUsages", 0, "duration"], "5 minutes",
     "status.nodeMetric.aggregatedNodeUsages[0].duration",
     "Invalid value: \"5 minutes\": must be a duration such as '5m0s' or '30s'"),
    (["status", "updateTime"], "2026-11-22T10:00:00", "status.updateTime",
     "Invalid value: \"2026-11-22T10:00:00\": must be an RFC 3339 time with seconds and a zone, "
     "e.g. '2006-01-02T15:04:05Z' or '2006-01-02T15:04:05.999+07:00'"),
    (["status", "podsMetric"], {"not": "a list"}, "status.podsMetric",
     'Invalid value: {"not":"a list"}: input should be a valid array'),
])
def test_invalid_fields_are_422_with_the_field_path(path: list[Any], value: Any, field: str, message: str) -> None:
    error = rejection(set_path(report_body(), path, value))
    assert (error.code, error.reason) == (422, "Invalid")
    assert causes(error) == [(field, message)]
    assert error.message == f'NodeMetric.metrics.colocation.dev "node-1" is invalid: {field}: {message}'
    assert error.details["kind"] == "NodeMetric" and error.details["group"] == "metrics.colocation.dev"


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_number_literals_are_not_json(literal: bytes) -> None:
    error = rejection(orjson.dumps(report_body()).replace(b'"2500m"', literal))
    assert (error.code, error.reason) == (400, "BadRequest")
    assert "json parse error" in error.message


def test_every_invalid_field_is_reported() -> None:
    body = report_body()
    body["status"]["podsMetric"][0]["podUsage"]["resources"]["cpu"] = "-1"
    body["status"]["podsMetric"][2]["qos"] = "Gold"
    del body["status"]["updateTime"]
    assert [field for field, _ in causes(rejection(body))] == [
        "status.updateTime", "status.podsMetric[0].podUsage.resources[cpu]", "status.podsMetric[2].qos"]


def test_required_parts_are_named() -> None:
    body = report_body()
    del body["status"]["nodeMetric"]["nodeUsage"]
    assert causes(rejection(body)) == [("status.nodeMetric.nodeUsage", "Required value")]
    body = report_body()
    del body["status"]
    assert causes(rejection(body)) == [("status", "Required value")]


def test_a_pod_listed_twice_is_a_duplicate() -> None:
    body = report_body(pods=3)
    body["status"]["podsMetric"][2]["name"] = "pod-0"
    error = rejection(body)
    assert error.details["causes"] == [{"reason": "FieldValueDuplicate", "field": "status.podsMetric[2]",
                                        "message": 'Duplicate value: "default/pod-0"'}]


@pytest.mark.parametrize(("raw", "message"), [
    (b"{nope", "the object provided is unrecognized (must be of type NodeMetric): couldn't get version/kind; "
               "json parse error: "),
    (b"[1, 2]", "the object provided is unrecognized (must be of type NodeMetric): couldn't get version/kind; "
                "json parse error: expected an object (5b312c20325d)"),
    (b"", "the object provided is unrecognized (must be of type NodeMetric): couldn't get version/kind; "
          "json parse error: "),
])
def test_malformed_json_is_400(raw: bytes, message: str) -> None:
    error = rejection(raw)
    assert (error.code, error.reason) == (400, "BadRequest")
    assert error.message.startswith(message)


@pytest.mark.parametrize(("change", "message"), [
    (lambda b: b.update(kind="Pod", apiVersion="v1"),
     'Pod in version "v1" cannot be handled as a NodeMetric: no kind "Pod" is registered for version "v1"'),
    (lambda b: b.update(apiVersion="metrics.colocation.dev/v1beta1"),
     'NodeMetric in version "v1beta1" cannot be handled as a NodeMetric: '
     'no kind "NodeMetric" is registered for version "metrics.colocation.dev/v1beta1"'),
    (lambda b: b["metadata"].update(name="node-2"),
     "the name of the object (node-2) does not match the name on the URL (node-1)"),
    (lambda b: b.pop("metadata"), "the name of the object () does not match the name on the URL (node-1)"),
])
def test_wrong_kind_or_name_is_400_even_when_fields_are_also_invalid(change: Callable[[Body], Any],
                                                                     message: str) -> None:
    for body in (report_body(), set_path(report_body(), ["status", "podsMetric", 0, "qos"], "Gold")):
        change(body)
        error = rejection(body)
        assert (error.code, error.reason, error.message) == (400, "BadRequest", message)


def test_an_invalid_node_name_is_422() -> None:
    error = rejection(report_body(node="Node_1"), node="Node_1")
    assert error.code == 422
    assert causes(error)[0][0] == "metadata.name"


@pytest.mark.parametrize(("location", "path"), [
    (("status", "podsMetric", 3, "podUsage", "resources", "cpu"), "status.podsMetric[3].podUsage.resources[cpu]"),
    (("status", "hostApplicationMetric", 0, "usage", "resources", "memory"),
     "status.hostApplicationMetric[0].usage.resources[memory]"),
    (("status", "nodeMetric", "aggregatedNodeUsages", 1, "usage", "p50", "[key]"),
     "status.nodeMetric.aggregatedNodeUsages[1].usage[p50]"),
    (("metadata", "name"), "metadata.name"),
])
def test_field_paths_are_written_the_kubernetes_way(location: tuple[int | str, ...], path: str) -> None:
    assert FIELD_ERRORS.path(location) == path
