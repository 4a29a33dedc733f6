"""The arithmetic of the control-plane-kube suite: Prometheus text, window deltas, path minus base,
the Lease check and the section's refusal to state figures from a run that misbehaved."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson

from benchmarks import cp_kube_report
from benchmarks.cp_kube import ClusterRun, KubeCostConfig, KubeCostReport, LeaseCheck, check_leases
from benchmarks.cp_kube_metrics import (
    APISERVER_WANTED,
    ETCD_WANTED,
    WATCH_EVENT_VERB,
    EtcdWindow,
    Traffic,
    delta,
    parse,
    per_node_minute,
    subtract,
    traffic,
)
from benchmarks.machine import Machine

APISERVER_BEFORE = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_body_size_bytes_sum{group="coordination.k8s.io",resource="leases",verb="update"} 5000
apiserver_request_body_size_bytes_count{group="coordination.k8s.io",resource="leases",verb="update"} 11
apiserver_response_sizes_sum{component="apiserver",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 4000
apiserver_watch_events_sizes_sum{group="coordination.k8s.io",resource="leases",version="v1"} 8000
apiserver_watch_events_sizes_count{group="coordination.k8s.io",resource="leases",version="v1"} 20
apiserver_response_sizes_sum{component="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 7
"""  # noqa: E501  (exposition lines as kube-apiserver writes them)

APISERVER_AFTER = APISERVER_BEFORE.replace("} 10\n", "} 70\n").replace("} 5000\n", "} 35000\n").replace(
    "} 4000\n", "} 28000\n").replace("} 8000\n", "} 56000\n").replace("} 20\n", "} 140\n") + (
    'apiserver_request_total{code="200",component="apiserver",dry_run="",group="slo.koordinator.sh",'
    'resource="nodemetrics",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 3\n')

ETCD = """\
etcd_debugging_mvcc_total_put_size_in_bytes {put}
etcd_disk_wal_write_bytes_total {wal}
etcd_mvcc_db_total_size_in_bytes {db}
etcd_mvcc_db_total_size_in_use_in_bytes 1000
etcd_mvcc_put_total {puts}
etcd_server_has_leader 1
"""


def test_parse_reads_labels_and_values_and_keeps_only_what_is_wanted() -> None:
    samples = parse(APISERVER_BEFORE, APISERVER_WANTED)
    assert len(samples) == 8  # the _count of the body size is not wanted
    key = ("apiserver_request_total", (("code", "409"), ("component", "apiserver"), ("dry_run", ""),
                                        ("group", "coordination.k8s.io"), ("resource", "leases"),
                                        ("scope", "resource"), ("subresource", ""), ("verb", "PUT"),
                                        ("version", "v1")))
    assert samples[key] == 1.0
    assert parse('x{a="q\\"uote"} 1.5e3 1700000000\n') == {("x", (("a", 'q"uote'),)): 1500.0}


def test_traffic_joins_the_metrics_on_group_resource_and_kubernetes_verb() -> None:
    window = delta(parse(APISERVER_BEFORE, APISERVER_WANTED), parse(APISERVER_AFTER, APISERVER_WANTED))
    rows = traffic(window)
    leases = rows[("coordination.k8s.io", "leases", "update")]
    assert leases == Traffic(requests=60, request_bytes=30000, response_bytes=24000)
    assert rows[("coordination.k8s.io", "leases", WATCH_EVENT_VERB)] == Traffic(watch_bytes=48000, watch_events=120)
    assert rows[("slo.koordinator.sh", "nodemetrics", "update")].requests == 3  # new series count from 0
    assert rows[("", "pods", "patch")].requests == 0  # unchanged: in the window, zero
    assert rows[("", "/readyz", "get")].response_bytes == 0
    assert leases.bytes == 54000


def test_subtract_and_per_node_minute() -> None:
    path = {("g", "r", "update"): Traffic(requests=30, request_bytes=300), ("g", "w", "get"): Traffic(requests=5)}
    base = {("g", "r", "update"): Traffic(requests=10, request_bytes=100), ("g", "w", "get"): Traffic(requests=5),
            ("g", "x", "list"): Traffic(requests=2)}
    added = subtract(path, base)
    assert added == {("g", "r", "update"): Traffic(requests=20, request_bytes=200),
                     ("g", "x", "list"): Traffic(requests=-2)}
    per = per_node_minute(added, nodes=10, seconds=120)
    assert per[("g", "r", "update")] == Traffic(requests=1.0, request_bytes=10.0)


def test_etcd_window() -> None:
    before = parse(ETCD.format(put=1000, wal=5000, db=65536, puts=10), ETCD_WANTED)
    after = parse(ETCD.format(put=3000, wal=9000, db=131072, puts=30), ETCD_WANTED)
    window = EtcdWindow.of(before, after)
    assert window == EtcdWindow(puts=20, put_bytes=2000, wal_bytes=4000, db_growth=65536, db_in_use_growth=0)
    assert (window - EtcdWindow(puts=10)).per_node_minute(nodes=5, seconds=120).puts == 1.0


def _lease(name: str, renewed: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"renewTime": renewed, "leaseDurationSeconds": 40}}


def test_check_leases_finds_unrenewed_and_late_leases() -> None:
    now = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
    before = [_lease("a", "2026-11-23T11:57:55.000000Z"), _lease("b", "2026-11-23T11:57:55.000000Z"),
              _lease("c", "2026-11-23T11:57:55.000000Z")]
    after = [_lease("a", "2026-11-23T11:59:55.000000Z"), _lease("b", "2026-11-23T11:57:55.000000Z"),
             _lease("c", "2026-11-23T11:59:30.000000Z")]
    check = check_leases(before, after, expected=3, now=now)
    assert check.not_renewed == ["b"] and check.late == ["c"] and check.renew_interval == 10.0
    assert not check.ok
    assert check_leases(before, after[:1], expected=1, now=now).ok
    assert not check_leases(before, after[:1], expected=2, now=now).ok


def _report(problem: str = "") -> KubeCostReport:
    config = KubeCostConfig(nodes=10, window=60.0)
    report = KubeCostReport(config)
    shared = {("coordination.k8s.io", "leases", "update"): Traffic(requests=60, request_bytes=6000)}
    report.runs["base"] = ClusterRun("base", 10, 60.0, dict(shared), EtcdWindow(puts=60, wal_bytes=60000))
    report.runs["ours"] = ClusterRun("ours", 10, 60.0, {
        **shared, ("slo.colocation.dev", "noderesources", "update"): Traffic(requests=10, request_bytes=20000),
    }, EtcdWindow(puts=70, wal_bytes=80000), leases=LeaseCheck(expected=10, seen=10, renew_interval=10.0))
    report.runs["crd"] = ClusterRun("crd", 10, 60.0, {
        **shared, ("slo.koordinator.sh", "nodemetrics", "update"): Traffic(requests=10, request_bytes=80000,
                                                                           response_bytes=80000),
    }, EtcdWindow(puts=70, wal_bytes=140000), crd_writes=10, crd_object_bytes=8000)
    if problem:
        report.runs["ours"].problems.append(problem)
    return report


def test_the_section_states_the_differences_and_their_ratio() -> None:
    report = _report()
    costs = cp_kube_report.path_costs(report)
    assert costs["ours"][0] == {("slo.colocation.dev", "noderesources", "update"): Traffic(1, 2000)}
    assert costs["crd"][1] == EtcdWindow(puts=1, wal_bytes=8000)
    summary = {row[0]: row for row in cp_kube_report.summary_rows(report)}
    assert summary["API requests"][1:] == ["6.00", "1.00", "1.00", "1.00x"]
    assert summary["etcd puts"][2:] == ["1.00", "1.00", "1.00x"]
    machine = Machine("cpu", 2, 1 << 30, "3.11", "6.1", "3.9", "abc", "2026-11-23")
    text = cp_kube_report.render(report, machine, "python -m benchmarks.run --suite control-plane-kube")
    assert "### Per node per minute" in text and "ours is 0.12x the CRD path's (less)" in text


def test_the_section_refuses_figures_when_the_agents_misbehaved(tmp_path: Path) -> None:
    report = _report("the agents did not keep their Leases: 10 of 10 Leases, 3 not renewed in the window")
    machine = Machine("cpu", 2, 1 << 30, "3.11", "6.1", "3.9", "abc", "2026-11-23")
    text = cp_kube_report.render(report, machine, "cmd")
    assert "No figures" in text and "3 not renewed" in text and "Per node per minute" not in text
    cp_kube_report.save_raw(report, tmp_path / "raw.json")
    assert (tmp_path / "raw.json").read_bytes().startswith(b"{")


def test_the_raw_numbers_render_the_same_section_again(tmp_path: Path) -> None:
    report = _report()
    cp_kube_report.save_raw(report, tmp_path / "raw.json")
    again = KubeCostReport.from_json(orjson.loads((tmp_path / "raw.json").read_bytes()))
    assert again.runs["ours"].apiserver == report.runs["ours"].apiserver
    assert again.runs["crd"].etcd == report.runs["crd"].etcd and again.config.nodes == 10
    assert cp_kube_report.summary_rows(again) == cp_kube_report.summary_rows(report)
