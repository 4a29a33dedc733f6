"""The metrics-server side-by-side suite's arithmetic and report (benchmarks/metrics_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import machine, markdown, metrics_server, run
from benchmarks.metrics_server import MetricsServerConfig, Phase

WHERE = machine.Machine("cpu", 2, 8 * 2**30, "3.13", "6.8", "3.12", "abc1234", "2026-11-29 12:00 UTC")


def phase(system: str, *, cpu: dict[str, float] | None = None, rss: dict[str, int] | None = None,
          requests: float = 1, steps: list[float] | None = None, reads: list[tuple[float, int]] | None = None) -> Phase:
    return Phase(system=system, simulated_nodes=10, window_seconds=60.0, cpu_seconds=cpu or {}, rss_bytes=rss or {},
                 apiserver_requests=requests, apiserver_bytes=requests * 1000,
                 apiserver_traffic={"core/nodes list": (requests, requests * 1000)},
                 step_seconds=steps or [], kill_reads=reads or [], killed=f"one of the {system}")


def test_the_longest_gap_runs_from_the_kill_to_the_first_good_answer_or_to_the_end() -> None:
    recovered = phase("colocation", reads=[(0.2, 503), (1.0, 0), (2.5, 200), (2.7, 200)])
    assert recovered.failed_reads == 2 and recovered.longest_gap == 2.5
    never = phase("metrics-server", reads=[(0.2, 200), (0.4, 503), (9.0, 503)])
    assert never.failed_reads == 2 and never.longest_gap == 8.8
    served = phase("colocation", reads=[(0.2, 200), (0.4, 200), (0.9, 200)])
    assert served.failed_reads == 0 and served.longest_gap == 0.0


def test_per_node_figures_and_the_verdict_of_each_row(tmp_path: Path) -> None:
    # The operators do the same other work in both runs (2 s); serving adds 1 s to them. metrics-server
    # uses 3 s, and kwok 1.5 s more answering its scrapes: serving costs them 4.5 s, us 1 s.
    theirs = phase("metrics-server", cpu={"metrics-server": 3.0, "kwok": 2.5, "operator replicas": 2.0},
                   rss={"metrics-server": 40 * 2**20, "operator replicas": 100 * 2**20}, requests=600,
                   steps=[20.0, 25.0, 30.0], reads=[(0.2, 503), (0.4, 200)])
    ours = phase("colocation", cpu={"kwok": 1.0, "operator replicas": 3.0},
                 rss={"operator replicas": 180 * 2**20}, requests=600, steps=[8.0, 9.0, 12.0],
                 reads=[(0.2, 200), (0.4, 200)])
    assert theirs.millicores_per_node("metrics-server") == 5.0  # 3 s over 60 s, over 10 nodes
    assert metrics_server.serving_added([theirs, ours], Phase.millicores_per_node) == pytest.approx((7.5, 5 / 3))
    assert theirs.per_node_minute(theirs.apiserver_requests) == 60.0
    text = metrics_server.render([theirs, ours], MetricsServerConfig(nodes=11), WHERE, "python -m benchmarks.run", 90)
    rows = {line.split(" | ")[0].lstrip("| "): line.rstrip(" |").split(" | ") for line in text.splitlines()
            if line.startswith("| ") and " | " in line}
    assert rows["CPU added by serving metrics.k8s.io, millicores per node"][1:] == ["7.500", "1.667", "0.22", "ahead"]
    assert rows["RSS added by serving metrics.k8s.io, KiB per node"][1:] == ["4,096", "8,192", "2.00", "behind"]
    assert rows["CPU of the whole sandbox, millicores per node"][1:] == ["12.500", "6.667", "0.53", "ahead"]
    assert rows["kube-apiserver requests per node per minute"][-1] == "even"
    assert rows["load step seen by metrics.k8s.io, median s"][1:3] == ["25.0", "9.0"]
    assert rows["after a SIGKILL: failed reads"][-1] == "ahead"
    assert "commit abc1234" in text and "Load steps seen (s): metrics-server [20.0, 25.0, 30.0]" in text
    assert "self-check was clean" in text
    assert rows["core/nodes list"][1:] == ["60.00; 60,000", "60.00; 60,000"]
    ours.agent_problems = ["simulated agents: a late heartbeat"]
    troubled = metrics_server.render([theirs, ours], MetricsServerConfig(nodes=11), WHERE, "cmd", 90)
    assert "No verdict" in troubled and " ahead |" not in troubled and "inconclusive" in troubled
    output = tmp_path / "BENCHMARKS.md"
    markdown.write_section(output, metrics_server.SUITE, text)
    assert "<!-- metrics-server:begin -->" in output.read_text()


def test_the_suite_runs_only_when_named() -> None:
    assert metrics_server.SUITE in run.SUITES and metrics_server.SUITE not in run.DEFAULT_SUITES
    args = run.parser().parse_args(["--suite", "metrics-server", "--ms-nodes", "11", "--ms-window-seconds", "30"])
    config = metrics_server.config_from(args, Path("state"))
    assert (config.nodes, config.window_seconds, config.state_dir) == (11, 30.0, Path("state"))


def test_a_watch_counts_what_it_sends_in_the_window_not_its_whole_life_when_it_ends() -> None:
    pods = (("group", ""), ("resource", "pods"))
    window = {("apiserver_request_total", (*pods, ("verb", "WATCH"))): 2.0,
              ("apiserver_response_sizes_sum", (*pods, ("verb", "WATCH"))): 5000.0,  # two watches ended
              ("apiserver_response_sizes_sum", (*pods, ("verb", "LIST"))): 300.0,
              ("apiserver_watch_events_sizes_sum", pods): 700.0}
    rows = metrics_server.window_traffic(window)
    assert rows[("", "pods", "watch")].bytes == 0 and rows[("", "pods", "watch")].requests == 2
    assert rows[("", "pods", "list")].bytes == 300 and rows[("", "pods", "watch event")].bytes == 700
