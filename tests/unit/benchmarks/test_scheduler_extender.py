"""The scheduler-extender suite's arithmetic and report (benchmarks/scheduler_extender*.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import machine, markdown, run, scheduler_extender, scheduler_extender_kube
from benchmarks.scheduler_extender import Results, SchedulerExtenderConfig
from benchmarks.scheduler_extender_kube import KubeConfig, Placement, SystemRun, Throughput
from benchmarks.scheduler_extender_latency import LatencyFigures, measure
from colocation.agent.synthetic import CPU_USAGE_ANNOTATION

WHERE = machine.Machine("cpu", 2, 8 * 2**30, "3.13", "6.8", "3.12", "abc1234", "2026-11-29 16:00 UTC")
NODES = {"sim-node-1": 4000, "sim-node-2": 4000, "sim-node-3": 4000}


def placement(label: str, placed: dict[str, str], *, pod_cpu: int = 400) -> Placement:
    return Placement(label=label, pod_cpu=pod_cpu, allocatable=dict(NODES),
                     base={"sim-node-1": 3200, "sim-node-2": 1800, "sim-node-3": 400}, placed=placed, seconds=2.0)


def spread_over(nodes: list[str]) -> dict[str, str]:
    return {f"pod-{i}": node for i, node in enumerate(nodes)}


def runs(*, client_bound: bool = False, problems: list[str] | None = None,
         burst_problems: list[str] | None = None) -> list[SystemRun]:
    fast_labels = [0.01 * i for i in range(1, 11)]  # 10 nodes labelled within 0.1 s
    alone = Throughput(pods=100, opened_at=fast_labels, bound_at=[0.05 * i for i in range(1, 101)])  # 20 pods/s
    extended = Throughput(pods=100, opened_at=fast_labels if not client_bound else [0.6 * i for i in range(1, 11)],
                          bound_at=[0.0625 * i for i in range(1, 101)])  # 16 pods/s
    # The default scheduler spreads by requests: 4 pods each; the extender puts them on the cool nodes.
    default = placement("kube-scheduler", spread_over(["sim-node-1", "sim-node-2", "sim-node-3"] * 4))
    best = placement("kube-scheduler + extender", spread_over(["sim-node-3"] * 8 + ["sim-node-2"] * 4))
    burst = placement("kube-scheduler + extender, tentativeHoldSeconds 0", spread_over(["sim-node-3"] * 12))
    return [SystemRun("kube-scheduler", [alone], [default]),
            SystemRun("kube-scheduler + extender", [extended], [best, burst], throughput_problems=burst_problems or [],
                      placement_problems=problems or [])]


def test_node_usage_counts_the_base_and_the_placed_pods_in_percent_of_allocatable() -> None:
    default = runs()[0].placements[0]
    # 3200 + 4 x 400 = 4800 of 4000; 1800 + 1600; 400 + 1600.
    assert default.usage() == {"sim-node-1": 120.0, "sim-node-2": 85.0, "sim-node-3": 50.0}
    stdev, highest = scheduler_extender.spread(default)
    assert stdev == pytest.approx(28.577, abs=1e-3) and highest == 120.0
    assert default.most_on_one_node() == 4
    extended = runs()[1].placements[0]
    assert extended.usage() == {"sim-node-1": 80.0, "sim-node-2": 85.0, "sim-node-3": 90.0}
    stdev, highest = scheduler_extender.spread(extended)
    assert stdev == pytest.approx(4.082, abs=1e-3) and highest == 90.0


def test_throughput_is_the_pods_over_the_last_binding_and_a_client_bound_run_says_so() -> None:
    alone, extended = (r.bursts[0] for r in runs())
    assert alone.pods_per_second == pytest.approx(20.0) and extended.pods_per_second == pytest.approx(16.0)
    assert alone.opened_in == pytest.approx(0.1) and not alone.client_bound
    slow = runs(client_bound=True)[1].bursts[0]
    assert slow.client_bound  # the last node labelled at 6.0 s, the last binding at 6.25 s
    assert Throughput(pods=1, opened_at=[1.0], bound_at=[1.05]).client_bound
    assert not Throughput(pods=1, opened_at=[0.5], bound_at=[1.0]).client_bound
    assert Throughput(pods=1).client_bound and Throughput(pods=1).pods_per_second != Throughput(pods=1).pods_per_second


def test_the_skew_runs_from_hot_to_cool_in_node_order_and_the_pods_add_the_new_load() -> None:
    allocatable = {"sim-node-10": 1000, "sim-node-2": 1000, "sim-node-1": 2000}
    assert scheduler_extender_kube.skew_targets(allocatable) == {"sim-node-1": 1600, "sim-node-2": 450,
                                                                 "sim-node-10": 100}
    assert scheduler_extender_kube.placement_pod_cpu(allocatable, 20, 0.15) == 30  # 15 % of 4000m over 20 pods
    assert scheduler_extender_kube.placement_pod_cpu(allocatable, 10_000, 0.01) == 1
    made = scheduler_extender_kube.pod("p-1", "place-1", 30, annotated=True)
    assert made["metadata"]["annotations"][CPU_USAGE_ANNOTATION] == "30m"
    assert made["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "30m"
    assert not scheduler_extender_kube.pod("t", "tp", 10, annotated=False)["metadata"]["annotations"]


def test_a_report_shows_its_short_window_else_its_node_usage() -> None:
    recent = {"status": {"nodeMetric": {"recentUsage": {"resources": {"cpu": "1500m"}},
                                        "nodeUsage": {"resources": {"cpu": "1"}}}}}
    assert scheduler_extender_kube.reported_cpu(recent) == 1500
    assert scheduler_extender_kube.reported_cpu({"status": {"nodeMetric": {"nodeUsage": {
        "resources": {"cpu": "2"}}}}}) == 2000
    assert scheduler_extender_kube.reported_cpu({"status": {}}) is None


def test_config_reads_count_each_replicas_log_lines(tmp_path: Path) -> None:
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    line = b'{"message": "cluster configuration read"}\n'
    logs[0].write_bytes(line + b"other\n" + line)
    (tmp_path / "operators.json").write_text(json.dumps([{"log": str(log)} for log in logs]))
    assert scheduler_extender_kube.config_reads(tmp_path) == {str(logs[0]): 2, str(logs[1]): 0}


def test_the_report_gives_each_verdict_from_the_same_runs_numbers(tmp_path: Path) -> None:
    latency = [LatencyFigures(1000, [0.001] * 99 + [0.004], [0.002] * 100, 700),
               LatencyFigures(5000, [0.004] * 98 + [0.012] * 2, [0.009] * 100, 3500)]
    config = SchedulerExtenderConfig(kube=KubeConfig(nodes=4, pods=100, placement_pods=12))
    text = scheduler_extender.render(Results(latency, runs()), config, WHERE, "python -m benchmarks.run", 120)
    rows = [line.rstrip(" |").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    by_size = {(row[0].lstrip("| "), row[1]): row for row in rows if "candidates" in row[0]}
    assert by_size[("1,000 candidates (700 passed the filter)", "filter")][2:] == ["100", "1.00", "1.00", "4.00",
                                                                                 "met"]
    assert by_size[("5,000 candidates (3,500 passed the filter)", "filter")][4:] == ["12.0", "12.0", "missed"]
    assert by_size[("5,000 candidates (3,500 passed the filter)", "prioritize")][-1] == "met"
    assert "Ratio (with / without the extender): 0.80" in text and "binds 0.80x the pods per second" in text
    placements = {row[0].lstrip("| "): row for row in rows if row[0].lstrip("| ").startswith("kube-scheduler")
                  and len(row) == 7}
    assert placements["kube-scheduler"][-1] == "reference"
    assert placements["kube-scheduler + extender"][3:] == ["4.1", "90.0", "8", "spread better, max better"]
    assert placements["kube-scheduler + extender, tentativeHoldSeconds 0"][3:5] == ["34.9", "130.0"]
    assert "Before the placement: standard deviation 28.6, max 80.0" in text and "commit abc1234" in text
    assert "self-check was clean" in text
    troubled = scheduler_extender.render(Results(latency, runs(problems=["a late heartbeat"])), config, WHERE,
                                         "cmd", 120)
    assert "inconclusive" in troubled and "spread better" not in troubled and "binds 0.80x" in troubled
    burst = scheduler_extender.render(Results(latency, runs(burst_problems=["a late heartbeat"])), config, WHERE,
                                      "cmd", 120)
    assert "binds 0.80x" not in burst and "spread better" in burst  # each part judged by its own problems
    client_bound = scheduler_extender.render(Results([], runs(client_bound=True)), config, WHERE, "cmd", 120)
    assert "the client was measured" in client_bound and "### Latency" not in client_bound
    output = tmp_path / "BENCHMARKS.md"
    markdown.write_section(output, scheduler_extender.SUITE, text)
    assert "<!-- scheduler-extender:begin -->" in output.read_text()


def test_a_last_binding_seen_only_in_a_list_after_a_closed_watch_states_no_throughput_verdict() -> None:
    late = runs()
    late[1].bursts[0].last_listed = True
    reasons = scheduler_extender.throughput_inconclusive(late)
    assert reasons == ["kube-scheduler + extender: kube-apiserver closed the watch as too slow, and the last binding "
                       "was seen in the list after it (its time is late)"]
    assert scheduler_extender.throughput_inconclusive(runs()) == []


def test_each_systems_throughput_is_the_median_of_its_bursts() -> None:
    run = runs()[0]
    run.bursts = [Throughput(pods=100, opened_at=[0.1], bound_at=[seconds * i / 100 for i in range(1, 101)])
                  for seconds in (2.0, 5.0, 4.0)]
    assert scheduler_extender.median_rate(run) == pytest.approx(25.0)  # 50, 20 and 25 pods/s


def test_the_raw_samples_load_back_as_they_were_run(tmp_path: Path) -> None:
    latency = [LatencyFigures(1000, [0.001, 0.002], [0.003], 700)]
    results = Results(latency, runs())
    scheduler_extender.save_raw(results, tmp_path / "raw.json", WHERE)
    saved = scheduler_extender.SchedulerExtenderSamples.from_file(tmp_path / "raw.json")
    assert (saved.latency, saved.runs, saved.machine) == (results.latency, results.runs, WHERE)


async def test_the_latency_part_times_both_verbs_through_the_extenders_application() -> None:
    figures = await measure(50, 3)
    assert len(figures.filter_seconds) == len(figures.prioritize_seconds) == 3
    assert 0 < figures.passed < 50  # the filter refuses the nodes above 65 %
    assert figures.filter.p99 > 0


def test_the_suite_runs_only_when_named() -> None:
    assert scheduler_extender.SUITE in run.SUITES and scheduler_extender.SUITE not in run.DEFAULT_SUITES
    args = run.parser().parse_args(["--suite", "scheduler-extender", "--se-nodes", "5", "--se-pods", "20",
                                    "--se-parts", "latency", "--se-latency-nodes", "1000,5000"])
    config = scheduler_extender.config_from(args, Path("state"))
    assert config.parts == ("latency",) and config.latency_nodes == (1000, 5000)
    assert (config.kube.nodes, config.kube.pods, config.kube.state_dir) == (5, 20, Path("state"))
    with pytest.raises(SystemExit):
        scheduler_extender.config_from(run.parser().parse_args(["--se-parts", "latency,nope"]), Path("state"))
