"""The "Agent cost" section of BENCHMARKS.md and its raw samples (JSON); verdicts from the run's own numbers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from benchmarks import machine
from benchmarks.agent_cost import CostConfig, CostReport, CostWindow, run
from benchmarks.client import say
from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.stats import percentile

SECTION = "agent-cost"
RAW = Path(__file__).resolve().parent / "plots" / "agent_cost.json"
CPU_TARGET = 0.02  # cores
RSS_TARGET = 100 * 2**20  # bytes
ROUNDS_KEPT = 0.9  # of the samples due: below that the agent was short of cpu and its figure is inconclusive
MIN_WINDOWS = 5
CPU, RSS = "CPU ≤ 2 % of a core", "RSS ≤ 100 MiB"
NOT_DEFAULT = "Not in a bare `make bench` (it takes 6 min): run by name."


def spread(values: Sequence[float]) -> tuple[float, float, float, float]:
    """min / median / p90 / max (nearest rank)."""
    return min(values), percentile(values, 0.5), percentile(values, 0.9), max(values)


def rounds_kept(config: CostConfig, window: CostWindow) -> float:
    """The share of the samples due in the window (one per collect interval) that the agent took."""
    due = window.seconds / config.collect_interval
    return window.counters.get("colocation_agent_samples_total", 0.0) / due if due else 0.0


def verdicts(report: CostReport) -> list[tuple[str, str, str]]:
    """(target, figure, verdict) for CPU, RSS and the import alone; computed from this run's samples only."""
    result = _running_verdicts(report)
    if report.import_rss:
        median = percentile(report.import_rss, 0.5)
        result.append(("import alone (no target; the issue measured about 85 MiB)",
                       f"median {median / 2**20:.1f} MiB", "measured"))
    return result


def _running_verdicts(report: CostReport) -> list[tuple[str, str, str]]:
    config, windows = report.config, report.windows
    if len(windows) < MIN_WINDOWS or report.failures:
        why = f"{len(windows)} of {MIN_WINDOWS} windows measured" + (f"; {report.failures[0]}" if report.failures
                                                                     else "")
        return [(target, why, "not measured") for target in (CPU, RSS)]
    cores = [w.cores for w in windows]
    short = [i + 1 for i, w in enumerate(windows) if rounds_kept(config, w) < ROUNDS_KEPT]
    worst = max(cores)
    cpu_figure = f"max {worst * 100:.2f} % over {len(windows)} windows (median {percentile(cores, 0.5) * 100:.2f} %)"
    if worst > CPU_TARGET:
        cpu = "not met"
    elif short:
        cpu = "inconclusive"
        cpu_figure += (f"; the agent took under {ROUNDS_KEPT:.0%} of its due samples in window(s) "
                       f"{', '.join(map(str, short))} (short of cpu on this machine: it may have worked less)")
    else:
        cpu = "met"
    peak = max(w.hwm for w in windows)
    rss_figure = f"VmHWM {peak / 2**20:.1f} MiB (VmRSS at the last window's end {windows[-1].rss / 2**20:.1f} MiB)"
    return [(CPU, cpu_figure, cpu), (RSS, rss_figure, "met" if peak <= RSS_TARGET else "not met")]


def _percent(values: Sequence[float]) -> list[str]:
    return [f"{v * 100:.2f} %" for v in spread(values)]


def _mib(values: Sequence[float]) -> list[str]:
    return [f"{v / 2**20:.1f} MiB" for v in spread(values)]


def _rate_rows(report: CostReport) -> list[list[str]]:
    rows = []
    for name, label in (("colocation_agent_samples_total", "samples (/proc and cgroups)"),
                        ("colocation_agent_reports_sent_total", "reports sent"),
                        ("colocation_agent_scrapes_total", "pod scrapes"),
                        ("colocation_agent_custom_metric_samples_sent_total", "custom metric samples sent"),
                        ("colocation_agent_eviction_rounds_total", "eviction rounds (memory and cpu)"),
                        ("colocation_agent_evictions_total", "evictions asked"),
                        ("colocation_agent_cgroup_writes_total", "CPU suppress cgroup writes"),
                        ("colocation_agent_batch_cgroup_writes_total", "batch cgroup writes"),
                        ("colocation_agent_errors_total", "errors logged")):
        rates = [w.counters.get(name, 0.0) / w.seconds * 60 for w in report.windows]
        rows.append([label, *[f"{v:,.1f}" for v in spread(rates)]])
    return rows


def render(report: CostReport, where: Machine, command: str) -> str:
    c, windows = report.config, report.windows
    lines = [f"## Agent cost: one `colocation agent`, {c.pods} pods, every NodeSLO strategy on", "",
             *run_lines(command, where, report.seconds, NOT_DEFAULT), "",
             "A real `colocation agent` process (its default intervals, enforcement not dry run) against "
             "`colocation sandbox` (builtin API server, one operator replica, custom metrics served). The node "
             f"has {c.pods} pods: the agent's own and {c.pods - 1} workload pods, 60 % best-effort with "
             "`kubernetes.io/batch-cpu` and `batch-memory`, the rest latency-sensitive, 20 of them scraped for "
             "custom metrics. colocation-config enables CPU suppress (cpuset policy), memory and CPU eviction, "
             "and cpuBurstStrategy `auto`; batch cgroups follow the pods' batch requests. /proc and the cgroup v2 "
             "tree (cgroupfs naming) are files under a temporary directory whose counters move in real time "
             "(`benchmarks/agent_cost_host.py`): the node at a quarter of its cpus and 40 % of its memory, so "
             "every strategy runs every round and none evicts. After the agent first reports, suppresses, "
             f"limits every batch pod and sends custom metrics, {c.warmup:g} s of warm-up, then {len(windows)} "
             f"windows of {c.window:g} s: CPU is utime + stime from /proc/PID/stat over a window, as a share of "
             "one core; RSS is VmRSS and VmHWM from /proc/PID/status at each window's end. The import figure is "
             f"VmRSS of {len(report.import_rss)} fresh interpreters right after importing `colocation.cli` and "
             "`colocation.agent.runtime` (what the agent loads before it connects; "
             f"{report.import_modules:,} modules). The last window ends "
             f"{c.warmup + len(windows) * c.window:,.0f} s after the agent first enforced; its per-pod "
             "aggregation rings fill in 300 s (metricCollectPolicy's aggregateDurationSeconds default), "
             "the node's in 30 min (1,800 points of a few numbers each).", "", "### Verdicts", ""]
    lines += [f"- {target}: {figure}: **{verdict}**" for target, figure, verdict in verdicts(report)]
    if windows:
        lines += ["", "### Figures (min / median / p90 / max)", "",
                  table(["Figure", "min", "median", "p90", "max"], [
                      ["agent CPU, % of one core", *_percent([w.cores for w in windows])],
                      ["agent VmRSS at window end", *_mib([w.rss for w in windows])],
                      ["agent VmHWM at window end", *_mib([w.hwm for w in windows])],
                      *([["RSS right after import", *_mib(report.import_rss)]] if report.import_rss else []),
                      ["samples taken / due", *[f"{v:.0%}" for v in spread([rounds_kept(c, w) for w in windows])]]]),
                  "", "The agent's own counters over the windows, per minute:", "",
                  table(["Counter (per minute)", "min", "median", "p90", "max"], _rate_rows(report)), "",
                  "At the end: CPU suppress leaves the best-effort pods "
                  f"{report.gauges.get('colocation_agent_cpu_suppress_millicores', 0):,.0f} millicores; batch "
                  f"cgroups manage {report.gauges.get('colocation_agent_batch_pods_managed', 0):,.0f} pods; cgroup "
                  "files the agent changed from the kubelet's values: "
                  + (", ".join(f"{name} {count}" for name, count in report.written.items()) or "none") + "."]
    if report.failures:
        lines += ["", "Not measured or failed:", "", *[f"- {failure}" for failure in report.failures]]
    loads = "; ".join(" / ".join(f"{v:.2f}" for v in w.load) for w in windows)
    lines += ["", f"Machine load (shared): load averages {' / '.join(f'{v:.2f}' for v in report.load_before)} "
                  f"before, {loads or 'n/a'} after each window; {report.machine_busy:.2f} of "
                  f"{where.cores} cores busy machine-wide during the windows. Raw samples: "
                  f"`benchmarks/plots/{RAW.name}`."]
    return "\n".join(lines)


def save_raw(report: CostReport, path: Path = RAW, where: Machine | None = None) -> None:
    report.model_copy(update={"machine": where}).to_file(path)


def run_suite(config: CostConfig, output: Path, command: str) -> CostReport:
    where = machine.describe()  # before the run: its outputs (tracked files) would read as "+changes"
    report = asyncio.run(run(config))
    save_raw(report, RAW, where)
    write_section(output, SECTION, render(report, where, command))
    say(f"wrote the {SECTION} section of {output} and {RAW}")
    return report
