"""`kubectl get nodemetrics` rows: usage in cores and Mi/Gi, the data's age and the object's."""

from __future__ import annotations

import pytest

from colocation.apimachinery import human_units
from colocation.apimachinery.objects import deflated
from colocation.apiserver.nodemetric_table import COLUMNS, entry_row, object_row
from colocation.nodemetrics.report_schema import UsageFigures
from colocation.nodemetrics.storage_interface import Entry

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CREATED = "2027-01-15T07:00:00Z"  # an hour before NOW


@pytest.mark.parametrize(("millis", "shown"), [(1500, "1.50"), (0, "0.00"), (250, "0.25"), (64000, "64.00"),
                                               (1, "0.00"), (1005, "1.00"), (1006, "1.01")])
def test_cpu_is_shown_in_cores_with_two_decimals(millis: int, shown: str) -> None:
    assert human_units.cores(millis) == shown


@pytest.mark.parametrize(("value", "shown"), [
    (0, "0Mi"), (512 << 20, "512Mi"), (1023 << 20, "1023Mi"), (1 << 30, "1.00Gi"), (1536 << 20, "1.50Gi"),
    (3 << 40, "3.00Ti"), (1000, "0Mi"),
])
def test_memory_is_shown_in_mi_below_a_gi_else_in_gi(value: int, shown: str) -> None:
    assert human_units.memory(value) == shown


def test_a_stored_entry_is_a_row_in_human_units_with_both_ages() -> None:
    entry = Entry(name="node-a", labels={"pool": "web"}, resource_version=7, deflated_body=deflated(b"{}"),
                  figures=UsageFigures(cpu_millis=1500, memory_bytes=1536 << 20, pod_count=3, update_time=NOW - 12),
                  creation_timestamp=CREATED, last_seen_monotonic=0.0, received_at=NOW)
    row = entry_row(entry, NOW)
    assert [c["name"] for c in COLUMNS] == ["Name", "CPU", "Memory", "Pods", "Data Age", "Age"]
    assert row["cells"] == ["node-a", "1.50", "1.50Gi", 3, "12s", "60m"]
    assert row["object"]["metadata"]["labels"] == {"pool": "web"}


def test_an_object_row_reads_the_same_figures_from_the_object() -> None:
    obj = {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
           "metadata": {"name": "node-b", "creationTimestamp": CREATED},
           "status": {"updateTime": "2027-01-15T07:59:30Z",
                      "nodeMetric": {"nodeUsage": {"resources": {"cpu": "250m", "memory": "700Mi"}}},
                      "podsMetric": []}}
    assert object_row(obj, NOW)["cells"] == ["node-b", "0.25", "700Mi", 0, "30s", "60m"]


def test_a_bookmark_row_has_only_its_name() -> None:
    assert object_row({"metadata": {"name": ""}}, NOW)["cells"] == ["", None, None, None, None, None]
