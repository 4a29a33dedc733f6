"""Operator ingest: how many reports the leader takes, the memory it holds per node, and reads under load.

    python -m benchmarks.operator_ingest [--nodes 1000 5000] [--ingest-seconds 15 ...]

For each cluster size: the sandbox runs one `colocation operator` replica (the leader, with the
manifests' ServiceAccount and RBAC); N kubelet-shaped Nodes get an agent pod each and a token
bound to it. A load client then sends realistic reports (the agent's own report builder, 30 pods,
about 6 KB) straight to the leader over HTTPS, each node with its own token, so every report
goes through the real path: TokenReview and SubjectAccessReview (cached), the node rule,
validation, the store and its watch events. Phases:

1. every node's first report (nothing cached yet), with the leader's RSS before and after;
2. sustained ingest: `concurrency` reports always in flight, for `ingest_seconds`;
3. reads while ingesting at a steady rate: lists (JSON, Table), gets, 20 watchers;
4. when a target is missed (or with --profile always), py-spy samples the leader during more ingest;
5. the same reports, tokens, client and TLS against a bare aiohttp server that only authenticates
   them from a cache, parses and keeps them (benchmarks/ingest_baseline.py): the ceiling,
   measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import ingest_cluster, ingest_profile, ingest_reads, ingest_stages, machine, processes
from benchmarks.client import Client, Endpoint, Request, say
from benchmarks.ingest_figures import MemoryFigures, PhaseFigures, ReadSummary, SizeReport, WatchSummary
from benchmarks.ingest_load import IngestResult, ReportSender, resource_version_of
from benchmarks.ingest_reports import Reports

SUITE = "operator-ingest"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "ingest_results.json"
PLOTS = Path(__file__).resolve().parent / "plots"
WARM_UP_REPORTS = 500


@dataclass(frozen=True)
class IngestConfig:
    sizes: tuple[int, ...] = (1000, 5000)
    pods_per_node: int = 30
    concurrency: int = 64  # reports in flight
    ingest_seconds: float = 15.0
    read_seconds: float = 20.0
    report_interval: float = 10.0  # during the reads every node reports this often...
    read_load_share: float = 0.5  # ...but at most this share of the rate the leader sustained
    watchers: int = 20
    profile: str = "auto"  # auto: when a target is missed; always; never
    profile_seconds: float = 10.0
    controllers: bool = False
    state_dir: Path = Path(".bench")
    progress_every: float = 10.0


def _operator_args(config: IngestConfig) -> list[str]:
    return [] if config.controllers else ["--no-controllers"]


async def _phase(sender: ReportSender, pids: tuple[int, int], name: str,
                 run: Callable[[ReportSender], Awaitable[IngestResult]]) -> PhaseFigures:
    """Run one load phase, charging the CPU of the server (pids[0]) and of kube-apiserver (pids[1])."""
    server_before, kernel_before = processes.cpu_seconds(pids[0]), _system_cpu_seconds(pids[0])
    apiserver_before = processes.cpu_seconds(pids[1]) if pids[1] else 0.0
    result = await run(sender)
    figures = PhaseFigures.of(result, processes.cpu_seconds(pids[0]) - server_before,
                              (processes.cpu_seconds(pids[1]) - apiserver_before) if pids[1] else 0.0,
                              server_system_cpu=_system_cpu_seconds(pids[0]) - kernel_before)
    say(f"{name}: {figures.count:,} reports, {figures.rate:,.0f}/s, p50 {figures.latency.p50 * 1000:,.1f} ms, "
        f"p99 {figures.latency.p99 * 1000:,.1f} ms, server {figures.server_cpu_per_report * 1e6:,.0f} µs CPU "
        f"per report ({figures.server_busy:.0%} busy), client {figures.client_busy:.0%} busy, "
        f"{figures.errors} errors")
    if figures.errors:
        say(f"  first error: {figures.first_error}")
    return figures


def _system_cpu_seconds(pid: int) -> float:
    """The kernel's share of a process's CPU time so far (stime, /proc/PID/stat field 15): on
    loopback it includes the TCP receive work of the peer and waking it, charged to the sender."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2:].split()[12]) / os.sysconf("SC_CLK_TCK")


async def _wait_for_nodes(sender: ReportSender, timeout: float = 120.0) -> None:
    """Until the leader's Node informer knows the last Node (a report for it stops being 404)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = len(sender.paths) - 1
    while True:
        status, body = await sender.send(last)
        if status == 200:
            return
        if status != 404 or loop.time() > deadline:
            raise RuntimeError(f"the leader does not take reports: {status} {body[:300]!r}")
        await asyncio.sleep(0.25)


async def _operator(config: IngestConfig, nodes: int, report_: SizeReport,
                    state_dir: Path) -> tuple[Reports, list[str]]:
    say(f"[{nodes:,} nodes] starting the sandbox with one operator replica")
    cluster = await ingest_cluster.start(state_dir / f"sandbox-{nodes}", _operator_args(config))
    pid = cluster.operator_pid
    pids = (pid, cluster.sandbox_pid)
    assert cluster.leader is not None
    sender: ReportSender | None = None
    reader = Client(cluster.leader, concurrency=4, timeout=120.0)
    try:
        await asyncio.sleep(1.0)  # let start-up allocations settle
        empty = processes.rss_bytes(pid)
        started = time.perf_counter()
        names, tokens = await ingest_cluster.create_nodes(cluster.admin, nodes)
        report_.setup_seconds = time.perf_counter() - started
        reports = Reports(names, config.pods_per_node)
        report_.body_bytes = reports.mean_size()
        sender = ReportSender(cluster.leader.url, cluster.leader.ssl_context(), reports, tokens,
                              concurrency=config.concurrency)
        await _wait_for_nodes(sender)
        nodes_known = processes.rss_bytes(pid)
        # The first reports of a few nodes at once: threads, buffers and connections are fixed
        # costs of serving, not of nodes; those nodes' own share is then left out of the per-node figure.
        warm_nodes = min(config.concurrency, nodes // 10) or 1
        await sender.run("warm-up", count=WARM_UP_REPORTS, start=0, only=warm_nodes)
        warm = processes.rss_bytes(pid)
        report_.load = await _phase(sender, pids, "first report of every node", lambda s: s.run(
            "first reports", count=nodes - warm_nodes, start=warm_nodes, progress=say,
            progress_every=config.progress_every))
        loaded = processes.rss_bytes(pid)
        say(f"leader RSS: {empty / 2**20:,.0f} MiB empty, {loaded / 2**20:,.0f} MiB with {nodes:,} nodes")
        report_.ingest = await _phase(sender, pids, "sustained ingest", lambda s: s.run(
            "ingest", seconds=config.ingest_seconds, progress=say, progress_every=config.progress_every))
        after_ingest = processes.rss_bytes(pid)
        rate = min(nodes / config.report_interval, config.read_load_share * report_.ingest.rate)
        live = sender

        def paced_reports(on_response: Callable[[int, bytes, float], None]) -> Awaitable[IngestResult]:
            return live.run("reads: paced reports", seconds=config.read_seconds, rate=rate, on_response=on_response,
                            progress=say, progress_every=config.progress_every)

        reads, watch, paced = await ingest_reads.measure(
            reader, names, ingest_reads.ReadPlan(watchers=config.watchers), paced_reports, resource_version_of)
        report_.read_ingest = PhaseFigures.of(paced, 0.0)
        report_.reads = [ReadSummary(r.name, r.request, r.latency, r.response_bytes, r.errors) for r in reads]
        report_.watch = WatchSummary(watch.watchers, watch.events_expected, watch.delay, watch.received_share,
                                     watch.complete_watchers)
        _say_reads(report_)
        report_.memory = MemoryFigures(empty, nodes_known, warm, loaded, after_ingest,
                                       processes.rss_bytes(pid, "VmHWM"), nodes, warm_nodes)
        if _wants_profile(config, report_):
            await _profile(sender, pid, nodes, config, report_, state_dir)
        return reports, tokens
    finally:
        if sender is not None:
            await sender.close()
        await reader.close()
        await cluster.stop()


def _say_reads(report_: SizeReport) -> None:
    for r in report_.reads:
        say(f"  {r.name}: {r.latency.count} requests, p50 {r.latency.p50 * 1000:,.1f} ms, "
            f"p99 {r.latency.p99 * 1000:,.1f} ms, {r.response_bytes / 1e6:,.1f} MB")
    if report_.watch is not None and report_.read_ingest is not None:
        w = report_.watch
        say(f"  watch: {w.watchers} watchers, {w.events:,} events at {report_.read_ingest.rate:,.0f}/s, "
            f"delay p50 {w.delay.p50 * 1000:,.1f} ms, p99 {w.delay.p99 * 1000:,.1f} ms, "
            f"{w.received_share:.1%} received")


def _wants_profile(config: IngestConfig, report_: SizeReport) -> bool:
    if config.profile == "never":
        return False
    if config.profile == "auto" and all(v is True for v in report_.targets_met().values()):
        return False
    if ingest_profile.py_spy() is None:
        say("profile: py-spy is not installed (pip install py-spy); skipped")
        return False
    return True


async def _profile(sender: ReportSender, pid: int, nodes: int, config: IngestConfig, report_: SizeReport,
                   state_dir: Path) -> None:
    out = state_dir / f"profile-{nodes}.txt"
    say(f"profile: py-spy on the leader for {config.profile_seconds:g} s of sustained ingest")
    spy = await ingest_profile.record(pid, config.profile_seconds, out)
    await sender.run("profiled ingest", seconds=config.profile_seconds + 1)
    await spy.wait()
    profile = ingest_profile.load(out)
    if profile is None:
        say("profile: py-spy recorded nothing (is ptrace allowed?)")
        return
    report_.profile, report_.hottest, report_.profile_samples = profile.activities, profile.hottest, profile.samples
    for label, share in profile.activities[:8]:
        say(f"  {share:6.1%} {label}")


async def _baseline(config: IngestConfig, nodes: int, reports: Reports, tokens: list[str], report_: SizeReport,
                    state_dir: Path) -> None:
    say(f"[{nodes:,} nodes] baseline: the bare aiohttp server")
    server = await processes.start(["-m", "benchmarks.ingest_baseline", "--state-dir", str(state_dir)],
                                   state_dir / f"ingest-baseline-{nodes}.log")
    endpoint = Endpoint.from_ca_file(server.ready["url"], Path(server.ready["ca"]))
    # The same tokens as the leader's run: the same bytes to send and to hash, the same node rule.
    sender = ReportSender(endpoint.url, endpoint.ssl_context(), reports, tokens, concurrency=config.concurrency)
    reader = Client(endpoint, concurrency=1, timeout=120.0)
    try:
        await sender.run("baseline: first reports", count=nodes)
        report_.baseline = await _phase(sender, (server.pid, 0), "baseline: sustained ingest", lambda s: s.run(
            "baseline ingest", seconds=config.ingest_seconds, progress=say, progress_every=config.progress_every))
        report_.baseline_reads = await _bare_reads(reader, reports.nodes, max(len(report_.reads) and
                                                                              report_.reads[0].latency.count, 3))
    finally:
        await sender.close()
        await reader.close()
        await server.stop()


async def _bare_reads(reader: Client, names: list[str], repeats: int) -> list[ReadSummary]:
    pick = random.Random(7)
    lists = ingest_reads.ReadFigures("list, JSON", ingest_reads.COLLECTION)
    for _ in range(repeats):
        await ingest_reads.timed(reader, lists, Request("GET", ingest_reads.COLLECTION))
    gets = ingest_reads.ReadFigures("get one", f"{ingest_reads.COLLECTION}/NODE")
    for _ in range(50):
        await ingest_reads.timed(reader, gets, Request("GET", f"{ingest_reads.COLLECTION}/{pick.choice(names)}"))
    return [ReadSummary(f.name, f.request, f.latency, f.response_bytes, f.errors) for f in (lists, gets)]


async def run(config: IngestConfig, command: str, describe: machine.Machine) -> list[SizeReport]:
    results = []
    for nodes in config.sizes:
        started = time.perf_counter()
        size_report = SizeReport(nodes, config.pods_per_node, 0.0, command, describe.date, describe.describe())
        load_before = ingest_stages.load_average()
        reports, tokens = await _operator(config, nodes, size_report, config.state_dir)
        await _baseline(config, nodes, reports, tokens, size_report, config.state_dir)
        size_report.load_average = f"{load_before} at the start, {ingest_stages.load_average()} at the end"
        say(f"[{nodes:,} nodes] done in {time.perf_counter() - started:,.0f} s: "
            f"{size_report.share_of_baseline:.0%} of the bare server's rate; targets "
            + ", ".join(f"{k} {'inconclusive' if v is None else 'met' if v else 'missed'}"
                        for k, v in size_report.targets_met().items()))
        results.append(size_report)
    return results


# ---- command line --------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The suite's flags (with `prefix`, e.g. "ingest-", when they share a parser with other suites)."""
    d = IngestConfig()
    p.add_argument(f"--{prefix}nodes", type=int, nargs="+", default=list(d.sizes), metavar="N",
                   help="Cluster sizes to measure (one fresh sandbox and leader each); the issue's third is 20000.")
    p.add_argument(f"--{prefix}pods-per-node", type=int, default=d.pods_per_node)
    p.add_argument(f"--{prefix}concurrency", type=int, default=d.concurrency, help="Reports in flight.")
    p.add_argument(f"--{prefix}ingest-seconds", type=float, default=d.ingest_seconds)
    p.add_argument(f"--{prefix}read-seconds", type=float, default=d.read_seconds)
    p.add_argument(f"--{prefix}report-interval", type=float, default=d.report_interval,
                   help="During the reads, every node reports this often (seconds)...")
    p.add_argument(f"--{prefix}read-load-share", type=float, default=d.read_load_share,
                   help="...at most this share of the sustained rate the leader reached.")
    p.add_argument(f"--{prefix}watchers", type=int, default=d.watchers)
    p.add_argument(f"--{prefix}profile", choices=("auto", "always", "never"), default=d.profile,
                   help="Sample the leader with py-spy: when a target is missed, always, or never.")
    p.add_argument(f"--{prefix}controllers", action="store_true",
                   help="Run the leader's controllers too (they have no agent Leases to read here).")


def config_from(args: argparse.Namespace, state_dir: Path, prefix: str = "") -> IngestConfig:
    key = prefix.replace("-", "_")

    def arg(name: str) -> Any:
        return getattr(args, key + name)

    return IngestConfig(
        sizes=tuple(arg("nodes")), pods_per_node=arg("pods_per_node"), concurrency=arg("concurrency"),
        ingest_seconds=arg("ingest_seconds"), read_seconds=arg("read_seconds"),
        report_interval=arg("report_interval"), read_load_share=arg("read_load_share"), watchers=arg("watchers"),
        profile=arg("profile"), controllers=arg("controllers"), state_dir=state_dir)


def run_suite(config: IngestConfig, output: Path, command: str, *, results_path: Path = RESULTS,
              plots_dir: Path = PLOTS, stages_path: Path | None = None) -> list[SizeReport]:
    """Measure, merge into `results_path`, time the stages, write the plots and the section of `output`."""
    from benchmarks import ingest_figures, ingest_history, ingest_report

    stages_path = stages_path or results_path.with_name("ingest_stages.json")

    described = machine.describe()
    say(f"operator ingest: sizes {', '.join(f'{n:,}' for n in config.sizes)} nodes x {config.pods_per_node} pods")
    results = asyncio.run(run(config, command, described))
    everything = ingest_figures.load_all(results_path)
    everything.update({r.nodes: r for r in results})
    ingest_figures.save_all(results_path, everything)
    say("stages: the report path's stages in one process (benchmarks.ingest_stages)")
    ingest_stages.run(ingest_stages.DEFAULT_NODES, config.pods_per_node, ingest_stages.DEFAULT_REPEATS, "after",
                      stages_path)
    plots = ingest_report.plot(everything, plots_dir)
    section = ingest_report.render(everything, plots, output.parent, ingest_history.load_before(),
                                   ingest_history.load_stages(stages_path))
    ingest_report.write(output, section)
    say(f"wrote {output} and {len(plots)} plots")
    return results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m benchmarks.operator_ingest", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="Figures by size, kept between runs (a run replaces the sizes it measures).")
    p.add_argument("--plots", type=Path, default=PLOTS, help="Directory of the PNG plots.")
    p.add_argument("--state-dir", type=Path, default=None, help="Logs and state (default: a temporary directory).")
    args = p.parse_args(argv)
    command = " ".join(["python -m benchmarks.operator_ingest", *map(shlex.quote, argv)])
    with tempfile.TemporaryDirectory(prefix="colocation-ingest-") as scratch:
        run_suite(config_from(args, args.state_dir or Path(scratch)), args.output, command,
                  results_path=args.results, plots_dir=args.plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
