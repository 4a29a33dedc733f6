"""benchmarks.dashboard_pngs: recorded /metrics become the dashboard panels' lines and PNGs, by way of
a real Prometheus (skipped, saying so, where it is not built)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import dashboard_pngs, prometheus

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


def test_the_recording_is_openmetrics_for_promtool_series_by_series_without_staleness_markers() -> None:
    epoch = dashboard_pngs.RECORDING_EPOCH
    a, b = {"__name__": "a", "reason": 'say "no"'}, {"__name__": "b", "instance": "r0"}
    samples = [(5.0, b, 2.0), (0.0, a, math.inf), (0.0, b, 1.0), (5.0, a, math.nan)]
    assert dashboard_pngs.openmetrics(samples).splitlines() == [
        f'a{{reason="say \\"no\\""}} +Inf {epoch:.3f}',
        f'b{{instance="r0"}} 1.0 {epoch:.3f}', f'b{{instance="r0"}} 2.0 {epoch + 5:.3f}', "# EOF"]


def test_a_panel_gives_one_line_per_series_of_each_query_at_times_since_the_run_started() -> None:
    epoch = dashboard_pngs.RECORDING_EPOCH
    panel = {"targets": [{"expr": "sum(x)", "legendFormat": "all"}, {"expr": "y", "legendFormat": "{{reason}}"}]}
    answers: list[dashboard_pngs.Matrix] = [
        [{"metric": {}, "values": [[epoch + 5, "1"], [epoch + 10, "2"]]}],
        [{"metric": {"reason": "memory"}, "values": [[epoch + 10, "+Inf"]]}]]
    lines = dashboard_pngs.panel_lines(panel, answers)
    assert [(line.legend, line.points, line.target) for line in lines] == [
        ("all", [(5.0, 1.0), (10.0, 2.0)], 0), ("memory", [(10.0, math.inf)], 1)]


@pytest.fixture
def recording() -> list[dashboard_pngs.Sample]:
    """Two replicas scraped every 5 s for 2 minutes: r0 leads, and is gone after 60 s (a staleness
    marker at 65 s); r1 stands by throughout, rejecting one report a second."""
    rejected = [(t, {"__name__": "colocation_nodemetric_reports_rejected_total", "instance": "r1"}, t)
                for t in range(0, 125, 5)]
    leader = [(t, {"__name__": "colocation_leader", "instance": "r0"}, 1) for t in range(0, 65, 5)]
    return [(float(t), labels, float(v)) for t, labels, v in [*rejected, *leader]] + [
        (65.0, {"__name__": "colocation_leader", "instance": "r0"}, math.nan)]


def test_prometheus_draws_a_panel_from_the_recording(prometheus_binaries: prometheus.Binaries,
                                                     recording: list[dashboard_pngs.Sample]) -> None:
    panel = {"targets": [{"expr": "sum(rate(colocation_nodemetric_reports_rejected_total[1m]))", "legendFormat": "A"},
                         {"expr": "colocation_leader", "legendFormat": "{{instance}}"}]}
    (lines,) = dashboard_pngs.query_panels(prometheus_binaries, {"panels": [panel]}, recording)
    rejected, leader = lines
    # One query half an interval after each scrape; a rate from the second scrape on.
    assert [t for t, _ in rejected.points] == [t + 2.5 for t in range(5, 125, 5)]
    # Prometheus's rate: the increase (extrapolated to the query time, 7.5 at 7.5 s) over the whole
    # minute, so it grows over the first one; then the counter's slope.
    assert rejected.points[0][1] == pytest.approx(7.5 / 60)
    assert all(rate == pytest.approx(1.0) for t, rate in rejected.points if t >= 60)
    # The leader's series ends with its last scrape, as its staleness marker has it, not 5 minutes later.
    assert leader.legend == "r0" and leader.points == [(t + 2.5, 1.0) for t in range(0, 65, 5)]


def test_samples_survive_the_json_recording_infinities_included(tmp_path: Path) -> None:
    samples = [(1.5, {"__name__": "g", "instance": "a"}, math.inf), (2.0, {"__name__": "h", "instance": "a"}, 3.0),
               (2.5, {"__name__": "g", "instance": "a"}, 4.0)]
    dashboard_pngs.dump_samples(samples, tmp_path / "samples.json")
    assert dashboard_pngs.load_samples(tmp_path / "samples.json") == samples


def test_every_panel_of_the_dashboard_is_rendered_even_without_data(prometheus_binaries: prometheus.Binaries,
                                                                    tmp_path: Path) -> None:
    dashboard = json.loads(dashboard_pngs.DASHBOARD.read_text())
    samples = [(t, {"__name__": "colocation_leader", "instance": "r0"}, 1.0) for t in (0.0, 5.0)]
    paths = dashboard_pngs.render_all(prometheus_binaries, dashboard, samples, tmp_path)
    expected = sorted(f"{dashboard_pngs.slug(panel['title'])}.png" for panel in dashboard["panels"])
    assert sorted(p.name for p in paths) == expected
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_a_missing_stretch_of_samples_is_drawn_as_a_gap() -> None:
    points = [(0.0, 1.0), (5.0, 1.0), (10.0, 1.0), (25.0, 0.0), (30.0, 0.0)]
    drawn = dashboard_pngs.with_gaps(points)
    assert [t for t, v in drawn if math.isnan(v)] == [17.5]
    assert [p for p in drawn if not math.isnan(p[1])] == points


def test_legend_fills_in_labels() -> None:
    labels = {"reason": "memory", "result": "evicted"}
    assert dashboard_pngs.legend("{{reason}} pressure: {{ result }}", labels) == "memory pressure: evicted"
