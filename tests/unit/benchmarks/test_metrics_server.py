"""The metrics-server side-by-side suite's arithmetic and report (benchmarks/metrics_server.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import machine, markdown, metrics_server, run
from benchmarks.metrics_server import MetricsServerConfig, Phase

WHERE = machine.Machine("cpu", 2, 8 * 2**30, "3.13", "6.8", "3.12", "abc1234", "2026-11-29 12:00 UTC")


def phase(system: str, *, cpu: float, rss: int, requests: float, steps: list[float],
          reads: list[tuple[float, int]]) -> Phase:
    serving = metrics_server.SERVING[system]
    return Phase(system=system, simulated_nodes=10, window_seconds=60.0, cpu_seconds={serving: cpu, "kwok": 1.0},
                 rss_bytes={serving: rss}, apiserver_requests=requests, apiserver_bytes=requests * 1000,
                 step_seconds=steps, kill_reads=reads, killed=f"one {serving}")


def test_the_longest_gap_runs_from_the_kill_to_the_first_good_answer_or_to_the_end() -> None:
    recovered = phase("colocation", cpu=1, rss=1, requests=1, steps=[], reads=[(0.2, 503), (1.0, 0), (2.5, 200),
                                                                             (2.7, 200)])
    assert recovered.failed_reads == 2 and recovered.longest_gap == 2.5
    never = phase("metrics-server", cpu=1, rss=1, requests=1, steps=[], reads=[(0.2, 200), (0.4, 503), (9.0, 503)])
    assert never.failed_reads == 2 and never.longest_gap == 8.8
    served = phase("colocation", cpu=1, rss=1, requests=1, steps=[], reads=[(0.2, 200), (0.4, 200), (0.9, 200)])
    assert served.failed_reads == 0 and served.longest_gap == 0.0


def test_per_node_figures_and_the_verdict_of_each_row(tmp_path: Path) -> None:
    theirs = phase("metrics-server", cpu=6.0, rss=40 * 2**20, requests=600, steps=[20.0, 25.0, 30.0],
                   reads=[(0.2, 503), (0.4, 200)])
    ours = phase("colocation", cpu=3.0, rss=80 * 2**20, requests=600, steps=[8.0, 9.0, 12.0],
                 reads=[(0.2, 200), (0.4, 200)])
    assert theirs.serving_millicores_per_node == 10.0  # 6 s over 60 s, over 10 nodes
    assert theirs.per_node_minute(theirs.apiserver_requests) == 60.0
    text = metrics_server.render([theirs, ours], MetricsServerConfig(nodes=11), WHERE, "python -m benchmarks.run", 90)
    rows = {line.split(" | ")[0].lstrip("| "): line.rstrip(" |").split(" | ") for line in text.splitlines()
            if line.startswith("| ") and " | " in line}
    assert rows["CPU of the serving processes, millicores per node"][-1] == "ahead"
    assert rows["RSS of the serving processes, KiB per node"][-1] == "behind"
    assert rows["CPU of the whole sandbox, millicores per node"][1:] == ["11.667", "6.667", "0.57", "ahead"]
    assert rows["kube-apiserver requests per node per minute"][-1] == "even"
    assert rows["load step seen by metrics.k8s.io, median s"][1:3] == ["25.0", "9.0"]
    assert rows["after a SIGKILL: failed reads"][-1] == "ahead"
    assert "commit abc1234" in text and "Load steps seen (s): metrics-server [20.0, 25.0, 30.0]" in text
    assert "self-check was clean" in text
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
