"""The leader-scale suite's arithmetic, verdicts and section, from made-up numbers (no sandbox)."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from benchmarks import leader_scale, leader_scale_report, machine
from benchmarks.leader_scale_figures import (
    INCONCLUSIVE,
    KUBE,
    MET,
    MISSED,
    Convergence,
    ReportBurst,
    SizeResult,
    Window,
    cache_memory_fit,
    extrapolate,
    fit,
    memory_fit,
    verdicts,
)
from benchmarks.leader_scale_probes import HIGH, Freshness, batch_cpu, parse_time, probe_node, probe_report

WINDOW_EVENT = 6000  # bytes of one event line in the NodeMetric watch window


def window(nodes: int, *, leader_cpu: float = 6.0, rss: int = 0, reports: float = 0.0, agents_cpu: float = 6.0,
           problems: list[str] | None = None, window_events: int = 0, connections: int = 0,
           connection_bytes: float = math.nan) -> Window:
    """A 60 s window of `nodes` nodes reporting every 10 s: 6 reports per node unless told. The leader's
    RSS is 100 MiB + 30 KiB per node + its watch window's events + the connections it serves, unless told."""
    held = window_events * WINDOW_EVENT
    held_by_connections = 0 if math.isnan(connection_bytes) else int(connections * connection_bytes)
    return Window(nodes=nodes, seconds=60.0, report_interval=10.0, leader_cpu=leader_cpu, standby_cpu=1.2,
                  agents_cpu=agents_cpu, control_plane_cpu=3.0,
                  leader_rss=rss or (100 << 20) + nodes * 30 * 1024 + held + held_by_connections,
                  leader_window_bytes=held, leader_window_events=window_events, standby_rss=90 << 20,
                  reports=reports or nodes * 6.0, evaluations=12.0, evaluation_seconds=1.2, batch_writes=5.0,
                  agent_problems=problems or [], leader_connections=connections, connection_bytes=connection_bytes)


def result(nodes: int, converged: float = 12.0, **kwargs: object) -> SizeResult:
    return SizeResult(nodes, 4, window(nodes + 4, **kwargs),  # type: ignore[arg-type]
                      latencies=[2.0, 3.0, 4.5], kills=[Convergence(nodes, 0, 1.0, 1.5, 10.0, converged)])


def test_a_line_through_two_points_and_none_through_one() -> None:
    assert fit([(1000, 150.0), (5000, 350.0)]) == pytest.approx((100.0, 0.05))
    assert fit([(1000, 1.0), (2000, 2.0), (3000, 3.0)]) == pytest.approx((0.0, 0.001))
    assert fit([(1000, 1.0), (1000, 2.0)]) is None


def test_unit_costs_and_the_extrapolation_to_ten_thousand_nodes() -> None:
    w = window(1000)  # 6,000 reports, 6 s of CPU, 1.2 s of wall time evaluating, 12 evaluations of 1,000 nodes
    assert w.leader_cores == pytest.approx(0.1)
    assert w.us_per_report == pytest.approx(800.0)  # (6 - 1.2) s / 6,000
    assert w.us_per_report_all_in == pytest.approx(1000.0)
    assert w.us_per_node_evaluation == pytest.approx(100.0)  # 1.2 s / (12 x 1,000)
    # 800 µs x 1,000 reports/s + 100 µs x 10,000 nodes x 0.2 evaluations/s
    assert extrapolate(w) == pytest.approx(0.8 + 0.2)
    assert math.isnan(Window(10, 60.0, 10.0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0).us_per_report)
    w.evaluation_share = 0.1  # a profile: the evaluations took 10 % of the leader's 6 s, not their 1.2 s of wall time
    assert w.evaluation_cpu == pytest.approx(0.6) and w.us_per_node_evaluation_wall == pytest.approx(100.0)
    assert w.us_per_report == pytest.approx(900.0) and w.us_per_node_evaluation == pytest.approx(50.0)
    assert extrapolate(w) == pytest.approx(0.9 + 0.1)


def test_a_report_burst_gives_the_cost_of_a_report_at_a_high_rate() -> None:
    w = window(1000)  # 0.1 cores at 100 reports/s; evaluations 0.02 cores, 100 µs per node evaluation
    burst = ReportBurst(seconds=30.0, leader_cpu=10.5, reports=33_000, probe_reports=30_000, failed=0,
                        client_cpu=27.0, baseline_cores=w.leader_cores, baseline_rate=w.report_rate)
    assert burst.rate == pytest.approx(1100.0) and burst.client_cores == pytest.approx(0.9)
    assert burst.us_per_report == pytest.approx(250.0)  # 0.25 more cores for 1,000 more reports/s
    # 250 µs x 1,000 reports/s + 100 µs x 10,000 nodes x 0.2/s + what the window spent on neither
    # (0.1 - 100/s x 250 µs - 0.02 evaluations = 0.055 cores).
    assert extrapolate(w, burst=burst) == pytest.approx(0.25 + 0.2 + 0.055)
    assert extrapolate(w, burst=None) == pytest.approx(extrapolate(w)) == pytest.approx(0.8 + 0.2)
    idle = ReportBurst(30.0, 3.0, 3000, 0, 120, 1.0, w.leader_cores, w.report_rate)  # no extra report went through
    assert math.isnan(idle.us_per_report) and extrapolate(w, burst=idle) == pytest.approx(1.0)


def test_the_load_client_is_saturated_when_busy_or_behind() -> None:
    assert window(1000).saturation() == []
    assert "0.95 cores" in window(1000, agents_cpu=57.0).saturation()[0]
    # Ten agents' processes at 0.15 cores each keep up; one of them at 0.95 does not.
    spread = window(5000, agents_cpu=90.0)
    spread.agents_busiest_cpu = 9.0
    assert spread.saturation() == []
    spread.agents_busiest_cpu = 57.0
    assert "busiest simulated agents' process used 0.95 cores" in spread.saturation()[0]
    # Leader 0.1 + standby 0.02 + agents 1.5 + sandbox API 0.05 cores: no CPU left on 1 core, some on 2.
    spread.agents_busiest_cpu, spread.machine_cores = 9.0, 2
    assert spread.saturation() == []
    spread.machine_cores = 1
    assert spread.saturation() == ["the machine had no CPU left: the measured processes used 1.67 of its 1 cores"]
    assert "fell behind: 5,000 reports accepted of 6,000 due" in window(1000, reports=5000).saturation()[0]
    assert window(1000, problems=["3 Leases are overdue"]).saturation() == ["agent self-check: 3 Leases are overdue"]


def test_memory_per_node_is_the_slope_over_node_counts() -> None:
    fixed, per_node = memory_fit([result(996), result(4996)]) or (0.0, 0.0)
    assert per_node == pytest.approx(30 * 1024) and fixed == pytest.approx(100 << 20)


def test_a_watch_window_still_filling_at_the_smaller_count_is_not_counted_per_node() -> None:
    # 250 nodes had filled 3,000 of the window's 10,000 events when the RSS was read, 1,000 all of them.
    results = [result(246, window_events=3000), result(996, window_events=10_000)]
    fixed, per_node = memory_fit(results) or (0.0, 0.0)
    assert per_node == pytest.approx(30 * 1024) and fixed == pytest.approx(100 << 20)
    _, with_window = memory_fit(results, with_window=True) or (0.0, 0.0)
    assert with_window == pytest.approx(30 * 1024 + 7000 * WINDOW_EVENT / 750)
    assert verdicts(results)[0][1] == ("30.0 KiB per node (fixed 100 MiB, plus the watch window's 57.2 MiB of "
                                       "10,000 events); the connections it serves not measured")


def test_the_agents_connections_are_counted_apart_from_the_caches() -> None:
    # The load client's connections grow with its processes: 50 at 1,000 nodes, 250 at 5,000, 80 KiB each.
    results = [result(996, connections=50, connection_bytes=80 * 1024),
               result(4996, connections=250, connection_bytes=80 * 1024)]
    _, whole = memory_fit(results) or (0.0, 0.0)
    fixed, caches = cache_memory_fit(results) or (0.0, 0.0)
    assert whole == pytest.approx(30 * 1024 + 200 * 80 * 1024 / 4000)
    assert caches == pytest.approx(30 * 1024) and fixed == pytest.approx(100 << 20)
    target, figure, verdict = verdicts(results)[0]
    assert (target, verdict) == ("≤ 40 KiB of leader RSS per node (NodeMetrics, pod and node caches together)", MET)
    assert figure == ("30.0 KiB per node without the connections it serves (fixed 100 MiB, plus the watch window's "
                      "0.0 MiB of 0 events); 34.0 KiB per node (fixed 100 MiB, plus the watch window's 0.0 MiB of 0 "
                      "events) with them (50 at 1,000 nodes, 250 at 5,000 nodes; at most 80 KiB each, measured)")
    # One size without the measurement: no fit without the connections, the verdict on the whole RSS.
    assert cache_memory_fit([results[0], result(4996)]) is None


def test_verdicts_follow_the_numbers() -> None:
    met = verdicts([result(996), result(4996, leader_cpu=40.0)])
    assert [v for _, _, v in met] == [MET, MISSED, MET]  # 30 KiB/node; 1.33 cores at 10,000; 12 s
    assert met[0][1] == ("30.0 KiB per node (fixed 100 MiB, plus the watch window's 0.0 MiB of 0 events); the "
                         "connections it serves not measured")
    assert met[1][1] == "1.33 cores (from 5,000 nodes, the window's µs per report)"
    fat = verdicts([result(996), result(4996, rss=(100 << 20) + 5000 * 50 * 1024, converged=math.nan)])
    assert [v for _, _, v in fat] == [MISSED, MET, MISSED]
    assert fat[2][1] == ("max 12.0 s; 1 of 2 kills not converged before the timeout (1 at 1,000 nodes, "
                         "1 at 5,000 nodes)")
    # A count where the load client was held down is left out of the memory and CPU verdicts, which
    # the others decide; a slow failover there is inconclusive.
    busy = verdicts([result(996), result(1996, rss=(100 << 20) + 2000 * 30 * 1024),
                     result(4996, leader_cpu=40.0, agents_cpu=60.0, converged=45.0)])
    assert [v for _, _, v in busy] == [MET, MET, INCONCLUSIVE]
    assert busy[0][1].endswith("; left out: 5,000 nodes (the load client was held down)")
    assert busy[1][1].startswith("0.50 cores (from 2,000 nodes")
    alone = verdicts([result(996), result(4996, leader_cpu=40.0, agents_cpu=60.0)])
    assert alone[0][2] == INCONCLUSIVE  # one count left: no line through it
    assert [v for _, _, v in verdicts([SizeResult(1000)])] == [INCONCLUSIVE] * 3


def test_the_real_control_plane_counts_for_the_failover_but_not_the_fits() -> None:
    kube = result(996, rss=(900 << 20), leader_cpu=50.0, converged=31.0)
    kube.apiserver = KUBE
    both = verdicts([result(996), result(4996), kube])
    assert [v for _, _, v in both] == [MET, MET, MISSED]  # the fits are the builtin's; the kube kill took 31 s
    assert both[2][1] == "max 31.0 s of 3 kills (1 at 1,000 nodes, 1 at 5,000 nodes, 1 at 1,000 (kube) nodes)"
    assert kube.label == "1,000 (kube)"
    assert leader_scale.profile_path(1000, KUBE).name == "leader_scale_profile_kube_1000.txt"
    assert leader_scale.profile_path(1000).name == "leader_scale_profile_1000.txt"


def report_of(results: list[SizeResult]) -> leader_scale.ScaleReport:
    config = leader_scale.ScaleConfig(sizes=tuple(r.nodes for r in results), window=60.0)
    return leader_scale.ScaleReport(config, ["--max-report-interval=10", "--report-change-threshold=0"], [], results,
                                    20000, [(1.0, 1.5, 2.0)], 600.0)


def test_the_section_states_the_run_the_tables_and_the_verdicts(tmp_path: Path) -> None:
    small, large = result(996), result(4996)
    large.profile_samples, large.profile = 2000, [("evaluate (noderesource_controller.py:160)", 0.25)]
    large.profile_shares = [(label, 0.1) for label, _ in leader_scale.PROFILE_MARKERS]
    large.latency_failures = ["leader-probe-0: the report was answered 503"]
    large.burst = ReportBurst(30.0, 10.5, 33_000, 30_000, 2, 27.0, 0.1, 100.0)
    report = report_of([small, large])
    section = leader_scale_report.render(report, machine.describe(), "python -m benchmarks.run --suite leader-scale")
    assert section.startswith("## Leader at scale: 996, 4,996 nodes, every node reporting every 10 s")
    assert "Open files limit (`ulimit -n`): 20,000." in section
    assert ("- ≤ 40 KiB of leader RSS per node (NodeMetrics, pod and node caches together): 30.0 KiB per node "
            "(fixed 100 MiB, plus the watch window's 0.0 MiB of 0 events); the connections it serves not measured: "
            "**met**") in section
    assert "| 5,000 | 0.10 | 0.02 |" in section
    assert "| 5,000 | 30 | 1,100 | 100 | 30,000 (2 failed) | 0.90 | 0.10 | 0.35 | 250 |" in section
    assert "cores (from 5,000 nodes, 250 µs per report at 1,100 reports/s): **" in section
    assert "| 5,000 | 3 | 3.00 | 4.50 | 4.50 | 1 |" in section  # latency: samples, p50, p99, max, failed
    assert "| 1,000 | 1 | 1.0 | 1.5 | 10.0 | 12.0 | — |" in section
    assert "Kopf's per-event handling at 5,000 nodes: 10.0% of the samples have a Kopf frame" in section
    assert "| Samples with a frame of | 5,000 nodes |" in section
    assert "The load client kept up at every node count" in section
    assert "- 5,000 nodes: leader-probe-0: the report was answered 503" in section
    assert "On the real control plane," not in section

    again = leader_scale_report.from_json(orjson.loads(orjson.dumps(leader_scale_report.to_json(report))))
    assert leader_scale_report.render(again, machine.describe(), "x") == \
        leader_scale_report.render(report, machine.describe(), "x")
    leader_scale_report.save_raw(report, tmp_path / "raw.json", machine.describe())
    assert len(orjson.loads((tmp_path / "raw.json").read_bytes())["results"]) == 2
    leader_scale_report.rerender(tmp_path / "B.md", "again", tmp_path / "raw.json", tmp_path / "again.png")
    assert "<!-- leader-scale:begin -->\n## Leader at scale: 996, 4,996 nodes" in (tmp_path / "B.md").read_text()
    assert leader_scale_report.plot(report, tmp_path / "plot.png") is not None
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")

    kube = result(996, rss=(150 << 20))
    kube.apiserver = KUBE
    kube.profile_samples, kube.profile = 1000, [("serve (nodemetric_routes.py:240)", 0.3)]
    kube.profile_shares = large.profile_shares
    report.results.append(kube)
    section = leader_scale_report.render(report, machine.describe(), "x")
    # The innermost frames shown are the largest builtin count's, the verdicts' basis, not the kube row's.
    assert "Innermost frames (own time) at 5,000 nodes, top 12:" in section
    assert "| Samples with a frame of | 5,000 nodes | 1,000 (kube) nodes |" in section
    assert section.startswith("## Leader at scale: 996, 4,996 nodes (and 996 on the real control plane), every")
    assert "| 1,000 (kube) | 0.10 | 0.02 | 150.0 MiB |" in section
    assert "Leader RSS = 100 MiB + 30.0 KiB x nodes" in section  # the fits leave the real control plane out
    assert "With the window counted: 100 MiB + 30.0 KiB x nodes." in section
    assert ("On the real control plane, 1,000 (kube) nodes: leader RSS 150.0 MiB (the fit above gives 129.3 MiB), "
            "leader 0.10 cores (the fit above gives 0.10), 800 µs per report; its control plane 0.05 cores.") in section
    again = leader_scale_report.from_json(orjson.loads(orjson.dumps(leader_scale_report.to_json(report))))
    assert again.results[-1].apiserver == KUBE


def test_profile_shares_count_each_sample_once_per_marker() -> None:
    raw = ("main;kopf/_core/reactor.py;Controllers.on_nodeslo 20\nmain;kube/informer.py;Controllers.on_lease 10\n"
           "main;NodeMetricGroup._report;_read_ready 60\nmain;Controllers._loop;NodeResourceReconciler.evaluate 10\n"
           "not a sample\n")
    shares = dict(leader_scale.profile_shares(raw))
    assert shares["Kopf (any frame of kopf/)"] == pytest.approx(0.2)
    assert shares[leader_scale.EVALUATION] == pytest.approx(0.1)  # counted once, though two frames match
    assert shares["Node and Lease events (ClusterState.node_changed, Controllers.on_lease)"] == pytest.approx(0.1)
    assert shares["report API (NodeMetricGroup._report)"] == pytest.approx(0.6)
    assert leader_scale.profile_shares("") == []


def test_scale_nodes_take_commas() -> None:
    assert leader_scale.sizes("1000,5_000, 10000") == (1000, 5000, 10000)


def test_probe_nodes_copy_a_simulated_node_without_its_batch_resources() -> None:
    template = {"status": {"capacity": {"cpu": "16", "kubernetes.io/batch-cpu": "5420"},
                           "allocatable": {"cpu": "15580m", "kubernetes.io/batch-memory": "1"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
    node = probe_node(template, "leader-probe-0")
    assert node["status"]["capacity"] == {"cpu": "16"} and node["status"]["allocatable"] == {"cpu": "15580m"}
    assert node["metadata"]["labels"]["colocation.dev/leader-probe"] == "true"
    assert "annotations" not in node["metadata"]
    # On the real control plane: kwok keeps the probe Ready as it does the template; nothing else is copied.
    template["metadata"] = {"annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}}
    assert probe_node(template, "leader-probe-0")["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert batch_cpu(node) is None and batch_cpu(template) is None
    assert batch_cpu({"status": {"allocatable": {"kubernetes.io/batch-cpu": "5420"}}}) == 5420
    body = orjson.loads(probe_report("leader-probe-0", HIGH))
    usage = body["status"]["nodeMetric"]
    assert usage["systemUsage"]["resources"]["cpu"] == usage["nodeUsage"]["resources"]["cpu"] == f"{HIGH}m"


def test_freshness_counts_whole_seconds() -> None:
    fresh = Freshness(None)  # type: ignore[arg-type]
    fresh.times = {"a": parse_time("2026-01-01T00:00:10Z"), "b": parse_time("2026-01-01T00:00:09Z")}
    assert fresh.stale(["a", "b", "c"], parse_time("2026-01-01T00:00:10Z")) == ["b", "c"]


def test_the_agent_flags_are_read_from_its_help() -> None:
    found, missing = leader_scale.agent_args(10.0)
    assert missing == []
    assert found == ["--max-report-interval=10", "--report-change-threshold=0", "--collect-interval=10"]
