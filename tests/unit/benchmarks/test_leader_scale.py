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
    Takeover,
    Window,
    before_standby_fit,
    cache_memory_fit,
    extrapolate,
    fit,
    memory_fit,
    standby_memory_fit,
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


def result(nodes: int, converged: float = 12.0, first_evaluation: float = 1.5, **kwargs: object) -> SizeResult:
    return SizeResult(nodes, 4, window(nodes + 4, **kwargs),  # type: ignore[arg-type]
                      latencies=[2.0, 3.0, 4.5], kills=[Convergence(nodes, 0, 1.0, first_evaluation, 10.0, converged)])


def killed(nodes: int, firsts: list[float], **kwargs: object) -> SizeResult:
    """A count whose kills' first evaluations took `firsts` (each polled 0.05 s after the last poll without it)."""
    r = result(nodes, **kwargs)  # type: ignore[arg-type]
    r.kills = [Convergence(nodes, i, 0.5, first, 9.0, 10.0, evaluation_after=first - 0.05, evaluation_seconds=0.4)
               for i, first in enumerate(firsts)]
    return r


def stopped(r: SizeResult, firsts: list[float], lease: float = 15.0, void: str = "") -> SizeResult:
    r.stops = [Takeover(r.nodes, i, lease, first - 1.0, first, first - 0.05, 0.4, void)
               for i, first in enumerate(firsts)]
    return r


def failover(results: list[SizeResult]) -> list[str]:
    """The three failover verdicts: SIGKILL within 3 s, no growth with the nodes, SIGSTOP within the Lease + 2 s."""
    return [v for _, _, v in verdicts(results)[2:]]


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
    # 30 KiB/node; 1.33 cores at 10,000; 1.5 s from each kill, the same at both counts; no stop measured
    assert [v for _, _, v in met] == [MET, MISSED, MET, MET, INCONCLUSIVE]
    assert met[0][1] == ("30.0 KiB per node (fixed 100 MiB, plus the watch window's 0.0 MiB of 0 events); the "
                         "connections it serves not measured")
    assert met[1][1] == "1.33 cores (from 5,000 nodes, the window's µs per report)"
    assert met[2][1] == ("max 1.50 s of 2 kills (1 at 1,000 nodes: median 1.50 s, max 1.50 s, 1 at 5,000 nodes: "
                         "median 1.50 s, max 1.50 s)")
    assert met[3][1] == "1.50 s at 1,000 nodes, 1.50 s at 5,000 nodes (+0.00 s)"
    assert met[4][1] == "no stop measured"
    # Convergence (every node re-reported, evaluated again) is information now: 45 s of it misses nothing.
    assert failover([result(996, converged=45.0), result(4996, converged=math.nan)])[:2] == [MET, MET]
    fat = verdicts([result(996), result(4996, rss=(100 << 20) + 5000 * 50 * 1024, first_evaluation=math.nan)])
    assert [v for _, _, v in fat] == [MISSED, MET, MISSED, MISSED, INCONCLUSIVE]
    assert fat[2][1] == ("max 1.50 s of 2 kills; 1 without an evaluation before the timeout (1 at 1,000 nodes: "
                         "median 1.50 s, max 1.50 s, 1 at 5,000 nodes: median never, max never)")
    assert fat[3][1] == "1.50 s at 1,000 nodes, never at 5,000 nodes"
    # A count where the load client was held down is left out of the memory and CPU verdicts, which
    # the others decide; a slow failover there is inconclusive.
    busy = verdicts([result(996), result(1996, rss=(100 << 20) + 2000 * 30 * 1024),
                     result(4996, leader_cpu=40.0, agents_cpu=60.0, first_evaluation=4.5)])
    assert [v for _, _, v in busy] == [MET, MET, INCONCLUSIVE, INCONCLUSIVE, INCONCLUSIVE]
    assert busy[0][1].endswith("; left out: 5,000 nodes (the load client was held down)")
    assert busy[1][1].startswith("0.50 cores (from 2,000 nodes")
    alone = verdicts([result(996), result(4996, leader_cpu=40.0, agents_cpu=60.0)])
    assert alone[0][2] == INCONCLUSIVE  # one count left: no line through it
    assert [v for _, _, v in verdicts([SizeResult(1000)])] == [INCONCLUSIVE] * 5


def test_every_kill_at_every_count_must_reach_a_first_evaluation_within_three_seconds() -> None:
    assert failover([killed(996, [1.0, 2.0, 3.0, 2.5, 1.1]), killed(2496, [2.0] * 5)])[0] == MET  # 3.0 s is in
    assert failover([killed(996, [1.0, 2.0, 3.01, 2.5, 1.1]), killed(2496, [2.0] * 5)])[0] == MISSED  # one kill
    assert failover([killed(996, [1.0] * 5), killed(2496, [1.0, 1.0, 1.0, 1.0, math.nan])])[0] == MISSED
    # The kube count is judged as the builtin ones are.
    kube = killed(996, [1.0, 3.2])
    kube.apiserver = KUBE
    assert failover([killed(996, [1.0]), kube])[0] == MISSED
    # The profiled kill (py-spy on the new leader) is shown but not counted.
    profiled = killed(996, [1.0, 1.2])
    profiled.kills.append(Convergence(996, 2, 0.5, 7.0, 9.0, 10.0, profiled=True))
    assert failover([profiled])[0] == MET
    assert [k.index for k in profiled.counted_kills] == [0, 1] and profiled.failover_median == pytest.approx(1.1)
    # A miss only at a count whose load client was held down is inconclusive; one elsewhere too is a miss.
    held = killed(2496, [4.0], agents_cpu=60.0)
    assert failover([killed(996, [1.0]), held])[0] == INCONCLUSIVE
    assert failover([killed(996, [3.5]), held])[0] == MISSED
    assert failover([SizeResult(1000)])[0] == INCONCLUSIVE  # no kill


def test_the_failover_must_not_grow_with_the_node_count() -> None:
    # The medians (1.0 and 2.0 s: two slow kills of five move neither) at the smallest and largest counts.
    small, large = killed(996, [1.0, 1.0, 1.0, 2.9, 2.9]), killed(4996, [2.0, 2.0, 2.0, 0.1, 0.1])
    middle = killed(2496, [2.9] * 5)  # the counts between are not compared
    assert failover([small, middle, large])[1] == MET
    assert verdicts([small, middle, large])[3][1] == "1.00 s at 1,000 nodes, 2.00 s at 5,000 nodes (+1.00 s)"
    assert failover([small, killed(4996, [2.01] * 5)])[1] == MISSED
    assert failover([killed(4996, [1.0] * 3), killed(996, [2.5] * 3)])[1] == MET  # by node count, not by order
    # A kill that never evaluated counts as the latest: in the majority it makes the median.
    assert failover([killed(996, [1.0] * 3), killed(4996, [1.0, math.nan, math.nan])])[1] == MISSED
    assert failover([killed(996, [1.0] * 3), killed(4996, [1.0, 1.0, math.nan])])[1] == MET
    # Each control plane against itself: a builtin count and a kube count are not compared.
    kube = killed(4996, [2.9] * 3)
    kube.apiserver = KUBE
    assert failover([killed(996, [1.0] * 3), kube])[1] == INCONCLUSIVE
    assert verdicts([killed(996, [1.0] * 3), kube])[3][1] == "needs kills at two node counts on one control plane"
    kube_small = killed(996, [0.5] * 3)
    kube_small.apiserver = KUBE
    assert failover([killed(996, [1.0] * 3), killed(4996, [1.1] * 3), kube_small, kube])[1] == MISSED
    assert verdicts([killed(996, [1.0] * 3), killed(4996, [1.1] * 3), kube_small, kube])[3][1] == (
        "1.00 s at 1,000 nodes, 1.10 s at 5,000 nodes (+0.10 s); 0.50 s at 1,000 (kube) nodes, 2.90 s at "
        "5,000 (kube) nodes (+2.40 s)")
    # Grown where an end had the load client held down: inconclusive.
    assert failover([small, killed(4996, [3.5] * 5, agents_cpu=60.0)])[1] == INCONCLUSIVE


def test_a_leader_gone_without_a_restart_is_replaced_within_the_lease_and_two_seconds() -> None:
    assert failover([stopped(killed(996, [1.0]), [16.0, 17.0])])[2] == MET  # a 15 s Lease: 17 s
    assert failover([stopped(killed(996, [1.0]), [16.0, 17.1])])[2] == MISSED
    assert failover([stopped(killed(996, [1.0]), [12.5], lease=10.0)])[2] == MISSED  # the bound is the sample's Lease
    assert failover([stopped(killed(996, [1.0]), [11.9], lease=10.0)])[2] == MET
    assert failover([stopped(killed(996, [1.0]), [15.0]), stopped(killed(2496, [1.0]), [math.nan])])[2] == MISSED
    figure = verdicts([stopped(killed(996, [1.0]), [16.0, 16.5]), stopped(killed(2496, [1.0]), [15.5])])[4][1]
    assert figure == ("max 16.50 s of 3 stops, against 17 s (the Lease's 15 s + 2 s) (2 at 1,000 nodes: max 16.50 s, "
                      "1 at 2,500 nodes: max 15.50 s)")
    # A stop whose process died (or ran) before the takeover shows nothing: alone, inconclusive.
    void = stopped(killed(996, [1.0]), [3.0], void="the stopped leader was gone")
    assert failover([void])[2] == INCONCLUSIVE and not void.stops[0].within
    assert "1 not counted: the stopped leader was gone" in verdicts([void])[4][1]
    assert failover([void, stopped(killed(2496, [1.0]), [18.0])])[2] == MISSED
    assert failover([void, stopped(killed(2496, [1.0]), [16.0])])[2] == INCONCLUSIVE
    assert failover([stopped(killed(996, [1.0], agents_cpu=60.0), [18.0])])[2] == INCONCLUSIVE  # held down
    t = Takeover(996, 0, 15.0, 14.0, 16.2, 16.1)
    assert t.bound == 17.0 and t.within and t.resolution == pytest.approx(0.1)
    assert not Takeover(996, 0, 15.0, math.nan, math.nan).within


def test_the_standby_memory_per_node_and_the_figures_before() -> None:
    a, b = result(996), result(2496)
    assert a.window is not None and b.window is not None
    a.window.standby_rss, b.window.standby_rss = (150 << 20) + 1000 * 20 * 1024, (150 << 20) + 2500 * 20 * 1024
    fixed, per_node = standby_memory_fit([a, b]) or (0.0, 0.0)
    assert per_node == pytest.approx(20 * 1024) and fixed == pytest.approx(150 << 20)
    # Before (commit ffa7290): 132.9 MiB at 1,004 nodes, 137.0 MiB at 2,504.
    fixed, per_node = before_standby_fit()
    assert per_node == pytest.approx(4.1 * 2**20 / 1500) and fixed == pytest.approx((132.9 - 1004 * 4.1 / 1500) * 2**20)


def test_the_real_control_plane_counts_for_the_failover_but_not_the_fits() -> None:
    kube = result(996, rss=(900 << 20), leader_cpu=50.0, first_evaluation=3.1)
    kube.apiserver = KUBE
    both = verdicts([result(996), result(4996), kube])
    # The fits are the builtin's; the kube kill took 3.1 s; one kube count: compared with none.
    assert [v for _, _, v in both] == [MET, MET, MISSED, MET, INCONCLUSIVE]
    assert both[2][1] == ("max 3.10 s of 3 kills (1 at 1,000 nodes: median 1.50 s, max 1.50 s, 1 at 5,000 nodes: "
                          "median 1.50 s, max 1.50 s, 1 at 1,000 (kube) nodes: median 3.10 s, max 3.10 s)")
    assert kube.label == "1,000 (kube)"
    assert leader_scale.profile_path(1000, KUBE).name == "leader_scale_profile_kube_1000.txt"
    assert leader_scale.profile_path(1000).name == "leader_scale_profile_1000.txt"


def report_of(results: list[SizeResult]) -> leader_scale.ScaleReport:
    config = leader_scale.ScaleConfig(sizes=tuple(r.nodes for r in results), window=60.0)
    return leader_scale.ScaleReport(config=config,
                                    agent_args=["--max-report-interval=10", "--report-change-threshold=0"],
                                    missing_flags=[], results=results, fd_limit=20000, load=[(1.0, 1.5, 2.0)],
                                    seconds=600.0)


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
    # Every kill: Lease moved, first evaluation, the poll before it, its duration, re-reported, converged.
    assert "| 1,000 | 1 | 1.00 | 1.50 | n/a | n/a | 10.0 | 12.0 | — |" in section
    assert "Kopf's per-event handling at 5,000 nodes: 10.0% of the samples have a Kopf frame" in section
    assert "| Samples with a frame of | 5,000 nodes |" in section
    assert "The load client kept up at every node count" in section
    assert "- 5,000 nodes: leader-probe-0: the report was answered 503" in section
    assert "On the real control plane," not in section

    again = leader_scale.ScaleReport.model_validate_json(orjson.dumps(report.document()))
    assert leader_scale_report.render(again, machine.describe(), "x") == \
        leader_scale_report.render(report, machine.describe(), "x")
    # A file saved before the stops, the failover profile and the first evaluation's poll bounds loads too.
    old = orjson.loads(orjson.dumps(report.document()))
    for key in ("kills", "stops", "failover_poll", "failover_profile_seconds", "stop_timeout"):
        old["config"].pop(key, None)
    for saved in old["results"]:
        for key in ("stops", "failover_profile", "failover_profile_shares", "failover_profile_samples"):
            del saved[key]
        for kill in saved["kills"]:
            for key in ("evaluation_after", "evaluation_seconds", "profiled"):
                del kill[key]
    loaded = leader_scale.ScaleReport.model_validate(old)
    assert loaded.results[0].stops == [] and loaded.results[0].kills[0].first_evaluation == 1.5
    assert math.isnan(loaded.results[0].kills[0].evaluation_after) and not loaded.results[0].kills[0].profiled
    assert loaded.config.kills == 5 and loaded.config.stops == 2
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
    again = leader_scale.ScaleReport.model_validate_json(orjson.dumps(report.document()))
    assert again.results[-1].apiserver == KUBE


def test_the_section_shows_the_failover_side_by_side_the_stops_and_the_memory_before() -> None:
    small = stopped(killed(996, [1.0, 1.2, 1.4, 1.1, 1.3]), [15.5, 16.0])
    large = stopped(killed(2496, [1.5, 3.5, 1.7, 1.6, 1.8]), [17.5, math.nan], void="")
    large.kills.append(Convergence(2496, 5, 0.5, 4.0, 9.0, 10.0, note="profiled (py-spy on the new leader), not in "
                                   "the verdicts", profiled=True))
    large.failover_profile_samples, large.failover_profile = 250, [("evaluate (noderesource_controller.py:160)", 0.4)]
    large.failover_profile_shares = [(label, 0.3) for label, _ in leader_scale.PROFILE_MARKERS]
    assert small.window is not None and large.window is not None
    small.window.standby_rss, large.window.standby_rss = 140 << 20, (140 << 20) + 1500 * 10 * 1024
    section = leader_scale_report.render(report_of([small, large]), machine.describe(), "x")
    assert ("- ≤ 3 s from a SIGKILL of the leader (restarted) to the new leader's first finished evaluation of every "
            "node, every kill at every node count: max 3.50 s of 10 kills (5 at 1,000 nodes: median 1.20 s, max "
            "1.40 s, 5 at 2,500 nodes: median 1.70 s, max 3.50 s): **missed**") in section
    assert ("- the failover does not grow with the node count: on each control plane, the median first evaluation at "
            "its largest node count ≤ the median at its smallest + 1 s: 1.20 s at 1,000 nodes, 1.70 s at 2,500 nodes "
            "(+0.50 s): **met**") in section
    assert ("- ≤ the Lease's duration + 2 s from a SIGSTOP of the leader (gone without a restart) to the new leader's "
            "first finished evaluation, every stop at every node count: max 17.50 s of 4 stops, against 17 s (the "
            "Lease's 15 s + 2 s); 1 without an evaluation before the timeout (2 at 1,000 nodes: max 16.00 s, 2 at "
            "2,500 nodes: max never): **missed**") in section
    # The counts side by side: kills, min / median / max, its duration, Lease, re-reported, converged, resolution.
    assert "| 1,000 | 5 | 1.00 / 1.20 / 1.40 | 0.40 | 0.50 | 9.0 | 10.0 | 0.05 |" in section
    assert "| 2,500 | 5 | 1.50 / 1.70 / 3.50 | 0.40 | 0.50 | 9.0 | 10.0 | 0.05 |" in section
    assert "polled every 0.05 s" in section and "that is at most 0.05 s" in section
    assert ("Over 3 s at 2,500 nodes: 1 of 5 kills; there the Lease moved at 0.50 s and the first evaluation itself "
            "took 0.40 s (medians); where its time went: the profile below.") in section
    assert "| 2,500 | 6 | 0.50 | 4.00 | n/a | n/a | 9.0 | 10.0 | profiled (py-spy on the new leader), not in the " \
           "verdicts |" in section
    assert "| 1,000 | 2 | 15 | 17 | 15.00 | 16.00 | 15.95 | 0.40 | within |" in section
    assert "| 2,500 | 1 | 15 | 17 | 16.50 | 17.50 | 17.45 | 0.40 | over |" in section
    assert "| 2,500 | 2 | 15 | 17 | n/a | n/a | n/a | 0.40 | over |" in section
    assert "### Where the new leader's time goes as it takes over (py-spy, one more kill per count)" in section
    assert "| `evaluate (noderesource_controller.py:160)` | 40.0% |" in section
    # The standby's RSS per node now and before (commit ffa7290: 132.9 and 137.0 MiB at 1,004 and 2,504 nodes).
    assert "Standby RSS = 130 MiB + 10.0 KiB x nodes (the same least squares, of its whole RSS)." in section
    assert "### Memory per node: before (commit ffa7290) and now" in section
    assert "so 2.8 KiB per node (fixed 130.2 MiB, the line through those two)" in section
    assert "| Standby RSS per node | 2.8 KiB | 10.0 KiB | +7.2 KiB |" in section
    assert "| Leader RSS per node, with them | 40.5 KiB | 30.0 KiB | -10.5 KiB |" in section
    assert "| Standby RSS at 1,000 nodes | 132.9 MiB | 140.0 MiB | +7.1 MiB (+5%) |" in section


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
