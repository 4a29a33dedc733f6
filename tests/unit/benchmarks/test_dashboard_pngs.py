"""benchmarks.dashboard_pngs: recorded /metrics become the dashboard panels' lines and PNGs."""

from __future__ import annotations

import json
import math
from pathlib import Path

from benchmarks import dashboard_pngs, promql

EXPOSITION = """\
# HELP colocation_nodemetric_reports_accepted_total NodeMetric reports stored.
# TYPE colocation_nodemetric_reports_accepted_total counter
colocation_nodemetric_reports_accepted_total 12.0
colocation_nodemetric_reports_accepted_created 1.7e9
# HELP colocation_agent_last_report_age_seconds Seconds since the last accepted report.
# TYPE colocation_agent_last_report_age_seconds gauge
colocation_agent_last_report_age_seconds +Inf
# HELP colocation_leader 1 while this replica holds the leader Lease.
# TYPE colocation_leader gauge
colocation_leader 1.0
"""


def test_exposition_keeps_the_named_samples_labelled_with_their_target() -> None:
    keep = {"colocation_nodemetric_reports_accepted_total", "colocation_agent_last_report_age_seconds"}
    samples = dashboard_pngs.exposition_samples(EXPOSITION, 5.0, {"job": "op", "instance": "r0"}, keep)
    assert [(t, labels["__name__"], labels["instance"], value) for t, labels, value in samples] == [
        (5.0, "colocation_nodemetric_reports_accepted_total", "r0", 12.0),
        (5.0, "colocation_agent_last_report_age_seconds", "r0", math.inf)]


def test_batch_allocatable_is_recorded_as_kube_state_metrics_names_it() -> None:
    allocatable = {"cpu": "4", "kubernetes.io/batch-cpu": "2500", "kubernetes.io/batch-memory": "1Gi"}
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": allocatable}}
    samples = dashboard_pngs.allocatable_samples([node, {"metadata": {"name": "n2"}, "status": {}}], 1.0)
    assert {(labels["node"], labels["resource"], value) for _, labels, value in samples} == {
        ("n1", "kubernetes_io_batch_cpu", 2500.0), ("n1", "kubernetes_io_batch_memory", 2.0**30)}


def test_a_panel_gives_one_line_per_legend_over_the_scrape_times() -> None:
    name = "colocation_nodemetric_reports_rejected_total"
    samples = [(t, {"__name__": name, "reason": reason}, count * t)
               for t in (0.0, 10.0, 20.0) for reason, count in (("Forbidden", 1.0), ("Invalid", 0.5))]
    panel = {"targets": [{"expr": f"sum by (reason) (rate({name}[1m]))", "legendFormat": "rejected: {{reason}}"}]}
    lines = dashboard_pngs.panel_lines(panel, promql.Series(samples), [0.0, 10.0, 20.0])
    assert [(line.legend, line.points) for line in lines] == [
        ("rejected: Forbidden", [(10.0, 1.0), (20.0, 1.0)]), ("rejected: Invalid", [(10.0, 0.5), (20.0, 0.5)])]


def test_samples_survive_the_json_recording_infinities_included(tmp_path: Path) -> None:
    samples = [(1.5, {"__name__": "g", "instance": "a"}, math.inf), (2.0, {"__name__": "h", "instance": "a"}, 3.0),
               (2.5, {"__name__": "g", "instance": "a"}, 4.0)]
    dashboard_pngs.dump_samples(samples, tmp_path / "samples.json")
    assert dashboard_pngs.load_samples(tmp_path / "samples.json") == samples


def test_every_panel_of_the_dashboard_is_rendered_even_without_data(tmp_path: Path) -> None:
    dashboard = json.loads(dashboard_pngs.DASHBOARD.read_text())
    samples = [(t, {"__name__": "colocation_leader", "instance": "r0"}, 1.0) for t in (0.0, 5.0)]
    paths = dashboard_pngs.render_all(dashboard, samples, tmp_path)
    expected = sorted(f"{dashboard_pngs.slug(panel['title'])}.png" for panel in dashboard["panels"])
    assert sorted(p.name for p in paths) == expected
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_a_missing_stretch_of_samples_is_drawn_as_a_gap() -> None:
    points = [(0.0, 1.0), (5.0, 1.0), (10.0, 1.0), (25.0, 0.0), (30.0, 0.0)]
    drawn = dashboard_pngs.with_gaps(points)
    assert [t for t, v in drawn if math.isnan(v)] == [17.5]
    assert [p for p in drawn if not math.isnan(p[1])] == points


def test_legend_fills_in_labels() -> None:
    labels = (("reason", "memory"), ("result", "evicted"))
    assert dashboard_pngs.legend("{{reason}} pressure: {{ result }}", labels) == "memory pressure: evicted"
