"""NodeMetrics on NATS JetStream in the whole system (issue 36): replica and nats-server CPU per report,
the apply of other replicas' writes, custom metrics, and a sizing table projected from them.

    python -m benchmarks.run --suite nats-ingest [--nats-ingest-nodes 1000 --nats-ingest-window 60 ...]

First, in process, the evaluations' split (`measure_split`): the reconciler's CPU per node holding every
node, none and one of the evaluation shards, so the sizing can share them among the replicas; and the
follower probe's CPU per write at several write rates (`nats_apply_rates`). Then several
`colocation sandbox` configurations, one after another (`nats_sizing.CONFIG_NAMES`):
memory-2 (in-memory store, 2 replicas), nats-1 and nats-2 (`--store nats`, 1 and 2 replicas),
nats-2-custom and memory-2-custom (the same with custom metrics on: the operators serve them and a
`scraped_share` of each simulated node's pods, annotated for scraping, is scraped every `scrape_interval` s:
the sandbox's `--scraped-pod-share`), and nats-2-small
(nats-2 at `small_nodes`: with nats-2, the line of CPU and memory over the nodes). Every configuration
runs N Nodes of 30 pods whose agents report every `report_interval` s, changed or not
(`leader_scale.agent_args`). For each:

1. steady state: every replica Ready and holding every node's NodeMetric (and, with custom metrics,
   the replicas' series count steady), then one report interval more;
2. a window: CPU (utime + stime, /proc) of each replica, each nats-server, the agents' processes and
   the sandbox (the builtin API server); RSS of each at its end; each replica's accepted reports and
   samples (its /metrics), series held; the stream's bytes (/jsz); the agents' self-check;
3. py-spy on the leader (`profile_seconds`): its evaluations' share of its CPU, taken out of the
   report figures (`leader_scale.profile_shares`);
4. nats-1 and nats-2: a second window with a follower probe (`python -m benchmarks.nats_ingest follow`,
   a reader of the stream that takes no report, applying every write to a store of its own): what a
   replica spends on each write of another replica, measured apart from its own ingest. It runs after
   the first window because it is one more reader of the stream: the servers' figures come from the
   first.

Why a probe and a small run: the model of two configurations alone (C1 = r·w, C_sum = r·w + r·a, so
a = (C_sum - C1) / r) counts the second replica's fixed cost in a, and makes two replicas' ingest cost
equal one's by construction; the probe measures a apart, and the line through nats-2-small and nats-2
separates what a replica spends whatever the reports (at ~100 reports/s, much of its CPU) from what
each report adds, which is what grows at 100,000 nodes. Both figures of a are shown.
`nats_sizing` has the per-unit derivations and the sizing's formulas. A configuration whose agents or
load generator fell behind makes every figure derived from it inconclusive.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from pydantic import ConfigDict, Field, field_validator

from benchmarks import cp_cluster, ingest_profile, leader_scale, machine, nats_apply_rates, processes
from benchmarks.client import Request, say, sit_out
from benchmarks.cp_cluster import Cluster, Replica
from benchmarks.cp_kube_metrics import Samples, parse, total
from benchmarks.failover_probes import FAILURES, reader_token
from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.nats_sizing import (
    CONFIG_NAMES,
    GOAL_CADENCE,
    GOAL_NODES,
    GOAL_SHARE,
    MEMORY,
    MEMORY_2,
    MEMORY_2_CUSTOM,
    NATS,
    NATS_1,
    NATS_2,
    NATS_2_CUSTOM,
    NATS_2_SMALL,
    OPERATOR_MAX_SERIES,
    RETENTION,
    SAMPLE_BYTES,
    SIZING_SHARDS,
    ApplyRate,
    ConfigRun,
    Derived,
    EvaluationSplit,
    ProbeWindow,
    ReplicaFigures,
    Scenario,
    ServerFigures,
    Sizing,
    Spec,
    UnitCosts,
    derive,
    size,
    sizing_table,
    unclean,
    verdicts,
)
from benchmarks.polling import eventually_async
from benchmarks.results import Record
from benchmarks.stats import size as human_size
from colocation.agent import selfcheck
from colocation.agent.synthetic import scraped_pod_count
from colocation.apimachinery.stop_signals import install_stop_signal_handlers, on_stop_signals
from colocation.jetstream.nats_connection import NatsOptions

SUITE = SECTION = "nats-ingest"
ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "benchmarks" / "plots" / "nats_ingest.json"
REPORTS = leader_scale.REPORTS
NODES_HELD = leader_scale.NODES_HELD
SERIES = "colocation_custom_metrics_series"
SAMPLES = "colocation_custom_metrics_samples_accepted_total"
DROPPED = "colocation_custom_metrics_samples_dropped_total"
SERIES_LIMIT = "series-limit"
METRICS = (REPORTS, NODES_HELD, SERIES, SAMPLES, DROPPED)
NATS_DIR = "nats"  # the sandbox's NATS cluster, under its state directory
NATS_STATE_FILE = "cluster.json"  # where a sandbox that lists its servers lists them


class IngestConfig(Record):
    model_config = ConfigDict(frozen=True)

    nodes: int = 1000
    small_nodes: int = 250  # nats-2-small: the second node count of the memory-per-node line
    pods_per_node: int = 30
    window: float = 60.0
    probe_window: float = 30.0
    report_interval: float = 10.0
    scrape_interval: float = 5.0  # the agent's default
    # With custom metrics on, of each simulated node's pods annotated for scraping (issue 36: 0 % and 20 %
    # in the sizing; at 100 %, 1,000 nodes x 30 pods saturated a 2-core machine's simulated agents).
    scraped_share: float = Field(default=0.2, ge=0.0, le=1.0)
    profile_seconds: float = 20.0  # py-spy on the leader after each window; 0: none (evaluations stay in)
    # With custom metrics on, well above the series a run makes, so none is dropped (the default is
    # OPERATOR_MAX_SERIES).
    max_series: int = 1_000_000
    configs: tuple[str, ...] = CONFIG_NAMES
    evaluation_split: bool = True  # the in-process split of the evaluations (`EvaluationSplit`), first
    apply_rates: tuple[float, ...] = (100.0, 500.0, 1500.0, 3000.0)  # writes/s of `nats_apply_rates`; (): none
    apply_window: float = 15.0
    raw: Path = Field(default=RAW, exclude=True)
    state_dir: Path = Field(default=Path(".bench"), exclude=True)

    def specs(self) -> list[Spec]:
        every = {MEMORY_2: Spec(name=MEMORY_2, store=MEMORY, replicas=2, nodes=self.nodes),
                 NATS_1: Spec(name=NATS_1, store=NATS, replicas=1, nodes=self.nodes, probe=True),
                 NATS_2: Spec(name=NATS_2, store=NATS, replicas=2, nodes=self.nodes, probe=True),
                 NATS_2_CUSTOM: Spec(name=NATS_2_CUSTOM, store=NATS, replicas=2, nodes=self.nodes,
                                     custom_metrics=True),
                 MEMORY_2_CUSTOM: Spec(name=MEMORY_2_CUSTOM, store=MEMORY, replicas=2, nodes=self.nodes,
                                       custom_metrics=True),
                 NATS_2_SMALL: Spec(name=NATS_2_SMALL, store=NATS, replicas=2, nodes=self.small_nodes)}
        return [every[name] for name in CONFIG_NAMES if name in self.configs]


class NatsIngestReport(Record):
    """What benchmarks/plots/nats_ingest.json holds; rendered again from it without running anything."""

    config: IngestConfig
    agent_args: list[str] = Field(default_factory=list)
    missing_flags: list[str] = Field(default_factory=list)
    runs: list[ConfigRun] = Field(default_factory=list)
    evaluation_split: EvaluationSplit | None = None
    apply_rates: list[ApplyRate] = Field(default_factory=list)
    load: list[tuple[float, float, float]] = Field(default_factory=list)  # os.getloadavg() after each
    seconds: float = 0.0
    machine: Machine | None = None

    @field_validator("config", mode="before")
    @classmethod
    def _scraped_every_pod_before_the_share(cls, config: Any) -> Any:
        """A file saved before `scraped_share` existed comes from a run that scraped every simulated pod."""
        if isinstance(config, Mapping) and "scraped_share" not in config:
            return {**config, "scraped_share": 1.0}
        return config

    def by_name(self) -> dict[str, ConfigRun]:
        return {run.spec.name: run for run in self.runs}

    def derived(self) -> Derived:
        return derive(self.by_name(), pods_per_node=self.config.pods_per_node,
                      scraped_share=self.config.scraped_share,
                      scrape_interval=self.config.scrape_interval, split=self.evaluation_split,
                      apply_rates=self.apply_rates)


# ---- the sandbox's processes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NatsProcess:
    name: str
    pid: int
    monitor_port: int  # 0: unknown


def _monitor_port(config: Path) -> int:
    """The monitoring port a nats-server configuration file names (`http: HOST:PORT`), 0 if none."""
    with contextlib.suppress(OSError):
        if found := re.search(r"^http:\s*\S*?:(\d+)\s*$", config.read_text(), re.MULTILINE):
            return int(found.group(1))
    return 0


def nats_servers(state_dir: Path, proc: Path = Path("/proc")) -> list[NatsProcess]:
    """The nats-server processes of the sandbox at `state_dir`: as its state file lists them, else the
    processes whose `--config` is under its NATS directory (from /proc/PID/cmdline)."""
    directory = state_dir / NATS_DIR
    listed = directory / NATS_STATE_FILE
    if listed.exists():
        return [NatsProcess(str(e["name"]), int(e["pid"]), int(e.get("monitorPort") or 0))
                for e in orjson.loads(listed.read_bytes())]
    found = []
    for cmdline in proc.glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = [a.decode(errors="replace") for a in cmdline.read_bytes().split(b"\0") if a]
            if not args or not args[0].endswith("nats-server") or "--config" not in args[:-1]:
                continue
            config = Path(args[args.index("--config") + 1])
            if config.is_relative_to(directory):
                found.append(NatsProcess(config.parent.name, int(cmdline.parent.name), _monitor_port(config)))
    return sorted(found, key=lambda server: server.name)


def nats_options(args: list[str]) -> NatsOptions:
    """The NATS connection an operator replica's command line asks for (its --nats-* flags)."""
    values: dict[str, list[str]] = {}
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag.startswith("--nats-"):
            if not equals and index + 1 < len(args):
                value = args[index + 1]
            values.setdefault(flag, []).append(value)
    return NatsOptions(servers=tuple(values.get("--nats-server", ())), ca_file=values.get("--nats-ca-file", [""])[-1],
                       user=values.get("--nats-user", [""])[-1],
                       password_file=values.get("--nats-password-file", [""])[-1])


def streams(jsz: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """(bytes, messages) of every stream in a nats-server's `/jsz?streams=true` answer, by name."""
    found = {}
    for account in jsz.get("account_details") or ():
        for stream in account.get("stream_detail") or ():
            state = stream.get("state") or {}
            found[str(stream["name"])] = (float(state.get("bytes", 0)), float(state.get("messages", 0)))
    return found


async def _streams(servers: list[NatsProcess]) -> dict[str, tuple[float, float]]:
    for server in servers:
        if not server.monitor_port:
            continue
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10.0)) as session, \
                    session.get(f"http://127.0.0.1:{server.monitor_port}/jsz?streams=true") as response:
                return streams(await response.json())
    return {}


def _cpu(pid: int) -> float:
    try:
        return processes.cpu_seconds(pid)
    except OSError:
        return math.nan


def _rss(pid: int) -> int:
    try:
        return processes.rss_bytes(pid)
    except (OSError, RuntimeError):
        return 0


async def _metrics(cluster: Cluster, replica: Replica) -> Samples:
    status, body = await cluster.replica_client(replica).send(Request("GET", "/metrics", accept="text/plain"))
    if status != 200:
        raise RuntimeError(f"GET /metrics of {replica.identity}: {status}")
    return parse(body.decode(), METRICS)


def _dropped(samples: Samples) -> float:
    return sum(value for (name, labels), value in samples.items()
               if name == DROPPED and ("reason", SERIES_LIMIT) in labels)


async def _steady(cluster: Cluster, spec: Spec, timeout: float = 1800.0) -> None:
    """Every replica Ready and holding every node's NodeMetric, and a leader."""
    async def ready() -> bool:
        try:
            replicas = cluster.replicas()
            if len(replicas) < spec.replicas or await cluster.leader_replica() is None:
                return False
            for replica in replicas:
                status, _ = await cluster.replica_client(replica).send(Request("GET", "/readyz"))
                if status != 200 or total(await _metrics(cluster, replica), NODES_HELD) < spec.nodes:
                    return False
        except (*FAILURES, RuntimeError, ValueError):  # ValueError: operators.json being written
            return False
        return True

    await eventually_async(ready, timeout, interval=2.0,
                           message=f"{spec.replicas} Ready replicas holding {spec.nodes:,} nodes")


async def _series_settled(cluster: Cluster, interval: float, timeout: float = 600.0) -> None:
    """Until every replica holds series and their counts stayed the same over `interval`."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        with contextlib.suppress(*FAILURES, RuntimeError):
            counts = tuple([total(await _metrics(cluster, r), SERIES) for r in cluster.replicas()])
            if counts == last and min(counts, default=0.0) > 0:
                return
            last = counts
        await asyncio.sleep(interval)  # polling the system under test
    raise TimeoutError(f"the replicas' custom metric series did not settle within {timeout:.0f} s: {last}")


# ---- one configuration ----------------------------------------------------------------------------------


async def _window(config: IngestConfig, cluster: Cluster, run: ConfigRun) -> None:
    replicas = cluster.replicas()
    leader = await cluster.leader_replica()
    agents = [*cluster.agent_pids(simulated=True), *cluster.agent_pids(simulated=False)]
    simulated = set(cluster.agent_pids(simulated=True))
    servers = nats_servers(cluster.state_dir) if run.spec.store == NATS else []
    apart = {r.pid for r in replicas} | set(agents) | {s.pid for s in servers}
    sandbox = sorted({cluster.server.pid} | processes.descendants(cluster.server.pid) - apart)
    checks_before = await selfcheck.read_sandbox(cluster.state_dir)
    before = [await _metrics(cluster, r) for r in replicas]
    rss_before = [_rss(r.pid) for r in replicas]
    pids = [*(r.pid for r in replicas), *(s.pid for s in servers), *agents, *sandbox]
    cpu_before = {pid: _cpu(pid) for pid in pids}
    started = time.monotonic()
    await sit_out(config.window, started, 10.0, lambda elapsed: (
        f"nats ingest [{run.spec.name}]: window {elapsed:.0f}/{config.window:.0f} s, replicas "
        + ", ".join(f"{(_cpu(r.pid) - cpu_before[r.pid]) / (time.monotonic() - started):.2f}" for r in replicas)
        + " cores"))
    cpu = {pid: _cpu(pid) - value for pid, value in cpu_before.items()}
    run.seconds = time.monotonic() - started
    after = [await _metrics(cluster, r) for r in replicas]
    run.agent_checks, run.agent_problems = selfcheck.sandbox_verdict(
        checks_before, await selfcheck.read_sandbox(cluster.state_dir))
    if [(r.identity, r.pid) for r in cluster.replicas()] != [(r.identity, r.pid) for r in replicas]:
        run.failures.append("a replica restarted during the window")
    if leader is None or (await cluster.leader_replica() or leader).pid != leader.pid:
        run.failures.append("the leader changed during the window")
    run.replicas = [ReplicaFigures(
        identity=r.identity, leader=leader is not None and r.pid == leader.pid, cpu=cpu[r.pid], rss=_rss(r.pid),
        rss_before=rss, reports=total(now, REPORTS) - total(then, REPORTS),
        samples=total(now, SAMPLES) - total(then, SAMPLES), samples_total=total(now, SAMPLES),
        series=total(now, SERIES), series_dropped=_dropped(now) - _dropped(then))
        for r, rss, then, now in zip(replicas, rss_before, before, after, strict=True)]
    run.servers = [ServerFigures(name=s.name, cpu=cpu[s.pid], rss=_rss(s.pid)) for s in servers]
    run.agents_cpu = sum(cpu[pid] for pid in agents)
    run.agents_busiest_cpu = max((cpu[pid] for pid in simulated), default=0.0)
    run.sandbox_cpu = sum(value for pid in sandbox if not math.isnan(value := cpu[pid]))
    run.machine_cores = os.cpu_count() or 0
    for name, (held, messages) in (await _streams(servers)).items():
        run.stream_bytes[name], run.stream_messages[name] = held, messages


async def _profile(config: IngestConfig, cluster: Cluster, run: ConfigRun) -> None:
    leader = await cluster.leader_replica()
    figures = next((r for r in run.replicas if r.leader), None)
    if leader is None or figures is None:
        return
    out = cluster.state_dir / "leader-profile.txt"
    say(f"nats ingest [{run.spec.name}]: py-spy on the leader (pid {leader.pid}) for {config.profile_seconds:.0f} s")
    try:
        recorder = await ingest_profile.record(leader.pid, config.profile_seconds, out)
        await recorder.wait()
    except OSError as error:
        run.notes.append(f"no profile ({error!r}): the evaluations count as report cost")
        return
    raw = out.read_text() if out.exists() else ""
    samples, _, _ = ingest_profile.summarize(raw)
    if not samples:
        run.notes.append("py-spy wrote no samples (ptrace permission?): the evaluations count as report cost")
        return
    figures.profile_samples = samples
    figures.evaluation_share = dict(leader_scale.profile_shares(raw))[leader_scale.EVALUATION]


async def _probe_window(config: IngestConfig, cluster: Cluster, run: ConfigRun) -> None:
    """A follower of the stream that takes no report, for `probe_window` s: its CPU per write applied."""
    replicas = cluster.replicas()
    options = nats_options(processes.command_line(replicas[0].pid))
    if not options.servers:
        run.notes.append("no probe: the replica's command line names no --nats-server")
        return
    args = ["-m", "benchmarks.nats_ingest", "follow", *(f"--server={url}" for url in options.servers)]
    args += [f"--{flag}={value}" for flag, value in (("ca-file", options.ca_file), ("user", options.user),
                                                     ("password-file", options.password_file)) if value]
    probe = await processes.start(args, cluster.state_dir / "probe.log", timeout=300.0)
    try:
        say(f"nats ingest [{run.spec.name}]: follower probe (pid {probe.pid}) caught up at "
            f"{probe.ready.get('position')}; {config.probe_window:.0f} s window")
        servers = nats_servers(cluster.state_dir)
        before = [total(await _metrics(cluster, r), REPORTS) for r in replicas]
        probe_cpu, servers_cpu = probe.cpu(), sum(_cpu(s.pid) for s in servers)
        started = time.monotonic()
        await sit_out(config.probe_window, started, 10.0, lambda elapsed: (
            f"nats ingest [{run.spec.name}]: probe window {elapsed:.0f}/{config.probe_window:.0f} s"))
        probe_cpu, servers_cpu = probe.cpu() - probe_cpu, sum(_cpu(s.pid) for s in servers) - servers_cpu
        seconds = time.monotonic() - started
        after = [total(await _metrics(cluster, r), REPORTS) for r in replicas]
        writes = sum(after) - sum(before)
        run.probe = ProbeWindow(seconds=seconds, cpu=probe_cpu, writes=writes, servers_cpu=servers_cpu)
    finally:
        await probe.stop()


async def _run_config(config: IngestConfig, spec: Spec, agent_args: list[str]) -> ConfigRun:
    run = ConfigRun(spec=spec, report_interval=config.report_interval)
    state_dir = config.state_dir / f"nats-ingest-{spec.name}"
    shutil.rmtree(state_dir, ignore_errors=True)
    operator_args: tuple[str, ...] = ()
    agents: tuple[str, ...] = tuple(agent_args)
    extra: tuple[str, ...] = ("--store", spec.store)
    if spec.custom_metrics:
        # cp_cluster.start passes --no-serve-custom-metrics; a later --serve-custom-metrics wins (click
        # takes the last of a flag pair), and the sandbox then lets the agents scrape.
        operator_args = (f"--custom-metrics-max-series={config.max_series}",)
        agents += (f"--scrape-interval={config.scrape_interval:g}",)
        extra += ("--serve-custom-metrics", f"--scraped-pod-share={config.scraped_share:g}")
    custom = f", custom metrics on ({_percent(config.scraped_share)} of the pods scraped)" \
        if spec.custom_metrics else ""
    say(f"nats ingest [{spec.name}]: starting the sandbox ({spec.nodes:,} nodes x {config.pods_per_node} pods, "
        f"--store {spec.store}, {spec.replicas} replicas{custom})")
    started = time.monotonic()
    cluster = await cp_cluster.start(state_dir, nodes=spec.nodes, pods_per_node=config.pods_per_node,
                                     operators=spec.replicas, operator_args=operator_args, agent_args=agents,
                                     extra=extra, start_timeout=1800.0)
    try:
        cluster.replica_token = await reader_token(cluster.client)
        await _steady(cluster, spec)
        if spec.custom_metrics:
            await _series_settled(cluster, 2 * config.scrape_interval)
        await asyncio.sleep(config.report_interval)  # one report round past the start-up
        run.setup_seconds = time.monotonic() - started
        say(f"nats ingest [{spec.name}]: steady after {run.setup_seconds:.0f} s; {config.window:.0f} s window")
        await _window(config, cluster, run)
        say(f"nats ingest [{spec.name}]: {run.report_rate:,.0f} reports/s, replicas "
            + ", ".join(f"{r.cpu / run.seconds:.2f}" for r in run.replicas) + " cores, nats-server "
            + (f"{run.servers_cpu() / run.seconds:.2f} cores" if run.servers else "none")
            + f"; problems: {run.problems() or 'none'}")
        if config.profile_seconds > 0:
            await _profile(config, cluster, run)
        if spec.probe and spec.store == NATS and config.probe_window > 0:
            await _probe_window(config, cluster, run)
    except (TimeoutError, RuntimeError, OSError, *FAILURES) as error:
        run.failures.append(repr(error))
        say(f"nats ingest [{spec.name}]: failed: {error!r}")
    finally:
        await cluster.close()
    return run


async def run(config: IngestConfig) -> NatsIngestReport:
    started = time.monotonic()
    args, missing = leader_scale.agent_args(config.report_interval)
    report = NatsIngestReport(config=config, agent_args=args, missing_flags=missing, machine=machine.describe())
    if missing:
        say(f"nats ingest: `colocation agent --help` has no {', '.join(missing)}: left out")
    if config.evaluation_split:
        say(f"nats ingest: the evaluations' split, in process ({config.nodes:,} nodes, {SIZING_SHARDS} shards)")
        report.evaluation_split = await asyncio.to_thread(measure_split, config.nodes, config.pods_per_node)
    if config.apply_rates:
        say(f"nats ingest: the applies at {', '.join(f'{rate:g}' for rate in config.apply_rates)} writes/s, "
            "in process")
        report.apply_rates = await nats_apply_rates.measure(config.apply_rates, config.apply_window,
                                                            config.pods_per_node)
    with on_stop_signals():
        for spec in config.specs():
            report.runs.append(await _run_config(config, spec, args))
            report.load.append(os.getloadavg())
    report.seconds = time.monotonic() - started
    return report


def measure_split(nodes: int, pods_per_node: int) -> EvaluationSplit:
    """The reconciler's CPU per node of the cluster, holding every node, no shard and one shard."""
    from benchmarks.leader_pods import reconciler_micros

    return EvaluationSplit(nodes=nodes, shards=SIZING_SHARDS, whole_us=reconciler_micros(nodes, pods_per_node),
                           no_shard_us=reconciler_micros(nodes, pods_per_node, shards=(0, SIZING_SHARDS)),
                           one_shard_us=reconciler_micros(nodes, pods_per_node, shards=(1, SIZING_SHARDS)))


# ---- the section ----------------------------------------------------------------------------------------


def _percent(share: float) -> str:
    return f"{share * 100:g} %"


def _us(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def _cores(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def _bytes(value: float) -> str:
    return "n/a" if math.isnan(value) else f"-{human_size(-value)}" if value < 0 else human_size(value)


def _windows(report: NatsIngestReport) -> str:
    rows = []
    for run in report.runs:
        if not run.replicas:
            rows.append([run.spec.name, f"{run.spec.nodes:,}", str(run.spec.replicas), *["n/a"] * 8,
                         "; ".join(run.problems())])
            continue
        leader = run.leader()
        rows.append([
            run.spec.name, f"{run.spec.nodes:,}", str(run.spec.replicas),
            f"{run.report_rate:,.0f} ({run.reports / run.expected_reports:.0%})",
            " / ".join(f"{r.cpu / run.seconds:.2f}{' (L)' if r.leader else ''}" for r in run.replicas),
            "n/a" if leader is None or math.isnan(leader.evaluation_share) else f"{leader.evaluation_share:.0%}",
            _cores(run.servers_cpu() / run.seconds) if run.servers else "—",
            f"{run.agents_cpu / run.seconds:.2f} / {run.sandbox_cpu / run.seconds:.2f}",
            " / ".join(human_size(r.rss) for r in run.replicas),
            human_size(max(s.rss for s in run.servers)) if run.servers else "—",
            f"{max(r.series for r in run.replicas):,.0f}, {run.sample_rate:,.0f}/s" if run.spec.custom_metrics
            else "—", "; ".join(run.problems()) or "none"])
    return table(["Config", "Nodes", "Replicas", "Reports/s (of due)", "Replica cores ((L): leader)",
                  "Evaluations' share of the leader", "nats-server cores (3)", "Agents / sandbox cores",
                  "Replica RSS", "nats-server RSS (max)", "Series, samples/s", "Held down"], rows)


def _units(derived: Derived, split: EvaluationSplit | None, apply_rates: list[ApplyRate]) -> str:
    def row(name: str, value: str, unit: str, how: str) -> list[str]:
        return [name, value, unit, how]

    def share(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.0%}"

    rows = [
        row("in-memory leader, per report (memory-2)", _us(derived.memory_us), "µs", "its CPU less evaluations / r"),
        row("in-memory standby, per report of the leader (memory-2)", _us(derived.memory_standby_us), "µs",
            "its CPU / r"),
        row("NATS, one replica, per report, all in (nats-1)", _us(derived.all_in_us), "µs", "C1 / r"),
        row("F: a replica's fixed cost (nats-2-small, nats-2)", _cores(derived.fixed_cores, 3), "cores",
            "half of C_sum's line at r = 0"),
        row("w + a: a report's marginal cost with two replicas", _us(derived.marginal_us), "µs", "that line's slope"),
        row("a: per write of another replica (follower probe)", _us(derived.apply_probe_us), "µs",
            "the probe's CPU / writes"),
        row("a, two configurations' model (nats-2 less nats-1, fixed costs in)", _us(derived.apply_model_us), "µs",
            "C_sum / r - C1 / r"),
        *(row(f"a at {point.rate:,.0f} writes/s (in process)", _us(point.us), "µs", "the probe's CPU / writes")
          for point in apply_rates),
        row("w1: per report taken, one replica (nats-1)", _us(derived.ingest_us), "µs", "(C1 - F) / r"),
        row("w2: per report taken, two replicas (nats-2)", _us(derived.two_ingest_us), "µs", "slope - a"),
        row("e: the leader's evaluations, per node per second (nats-2)", _us(derived.evaluation_us), "µs",
            "leader CPU x profile share / s / nodes"),
        *([row("in process: a replica evaluating every node, per node per evaluation", _us(split.whole_us), "µs",
               "its CPU / nodes / evaluations"),
           row(f"in process: holding none of {split.shards} shards (every node's health, the guard)",
               _us(split.no_shard_us), "µs", "the same"),
           row(f"in process: holding one of {split.shards} shards", _us(split.one_shard_us), "µs", "the same")]
          if split is not None else []),
        row("g / e: the evaluations' part every replica pays", share(derived.evaluation_global_share), "",
            "in process: holding none / every node"),
        row("nats-server (3), per report, one replica, all in", _us(derived.server_one_us), "µs", "servers' CPU / r"),
        row("nats-server (3), per report, two replicas, all in", _us(derived.server_two_us), "µs", "servers' CPU / r"),
        row("nats-server (3), fixed (nats-2-small, nats-2)", _cores(derived.server_fixed_cores, 3), "cores",
            "its line at r = 0"),
        row("nats-server (3), per report, two replicas", _us(derived.server_marginal_us), "µs", "its line's slope"),
        row("d: nats-server (3), one more reader (the probe), per report", _us(derived.server_probe_us), "µs",
            "probe window less the window"),
        row("busiest nats-server's share (nats-2)", share(derived.busiest_server_share), "", "of the three's CPU"),
        row("replica RSS, fixed (nats-2-small, nats-2)", _bytes(derived.replica_fixed), "",
            "the busiest replica's line at 0 nodes"),
        row("replica RSS per node", _bytes(derived.replica_per_node), "", "its slope"),
        row("nats-server RSS, fixed", _bytes(derived.server_fixed), "", "the busiest server's line at 0 nodes"),
        row("nats-server RSS per node", _bytes(derived.server_per_node), "", "its slope"),
        row("NodeMetric stream per node (each server's copy)", _bytes(derived.stream_per_node), "",
            "/jsz bytes / nodes"),
    ]
    return table(["Per-unit cost (measured)", "Value", "Unit", "How"], rows)


def _replicas_table(report: NatsIngestReport, derived: Derived) -> str:
    two = report.by_name().get(NATS_2)
    if two is None or not two.replicas:
        return ""
    a, fixed = derived.apply_probe_us, derived.fixed_cores * two.seconds
    rows = []
    for r in two.replicas:
        others = two.reports - r.reports
        applies = others * a / 1e6
        per_report = (two.net_cpu(r) - fixed - applies) / r.reports * 1e6 if r.reports else math.nan
        rows.append([f"{r.identity}{' (leader)' if r.leader else ''}", f"{r.reports / two.seconds:,.1f}",
                     f"{others / two.seconds:,.1f}", _cores(two.net_cpu(r) / two.seconds),
                     _us(two.net_cpu(r) / r.reports * 1e6 if r.reports else math.nan),
                     _cores(applies / two.seconds), _us(per_report)])
    return table(["Replica (nats-2)", "Reports/s taken", "Others' writes/s applied", "Cores, evaluations out",
                  "µs per report taken, all in", "Cores applying the others' (a)",
                  "µs per report taken, F and the others' applies out"], rows)


def _samples_table(derived: Derived) -> str:
    rows = [[costs.store, f"{costs.sample_rate:,.0f}",
             f"{costs.series:,.0f} ({costs.series_per_pod:.2f} per scraped pod)",
             _us(costs.leader_us), _us(costs.standby_us), _us(costs.server_us),
             f"{_bytes(costs.rss_per_series)} ({costs.held:.0f} samples held)",
             _bytes(costs.growth_per_sample), _bytes(costs.steady_series_bytes), _bytes(costs.stream_per_sample)]
            for costs in derived.samples.values()]
    return table(["Store", "Samples/s", "Series", "Leader µs per sample", "Standby µs per sample",
                  "nats-server µs per sample", "Extra RSS per series", "Window's extra RSS growth per sample",
                  f"Per series at the retention's end (projected, +{SAMPLE_BYTES} B per sample)",
                  "Sample stream per sample"], rows)


def _sizing_table(rows: list[Sizing]) -> str:
    def replicas(row: Sizing) -> str:
        if row.replicas is not None:
            return str(row.replicas)
        return "n/a" if math.isnan(row.floor_cores) else f"none (≥ {row.floor_cores:.2f} cores each)"

    body = [[f"{row.scenario.nodes:,}", f"{row.scenario.cadence:g} s", f"{row.scenario.share:.0%}",
             f"{row.scenario.report_rate:,.0f}", f"{row.sample_rate:,.0f}",
             f"{row.series:,.0f}{' (over the cap)' if row.over_series_cap else ''}", replicas(row),
             f"{_cores(row.busiest_cores)} / {_cores(row.other_cores)}", _bytes(row.replica_bytes),
             f"{_cores(row.server_cores)} / {_cores(row.busiest_server_cores)}", _bytes(row.server_bytes),
             _bytes(row.stream_bytes)] for row in rows]
    return table(["Nodes", "Cadence", "Pods scraped", "Reports/s", "Samples/s", "Series per replica",
                  "Replicas (≤ 1 core)", "Busiest / other replica cores", "Replica memory",
                  "nats-server cores: all / busiest", "nats-server memory each", "Streams on disk, each"], body)


def _scraped_pods(config: IngestConfig) -> str:
    """Which simulated pods the custom-metrics configurations scraped, and how often, in words."""
    every = f"every {config.scrape_interval:g} s"
    if config.scraped_share == 1.0:
        return (f"**every simulated pod scraped (100 %)** {every} (each has the scrape annotation; "
                "`make run`'s default too)")
    per_node = scraped_pod_count(config.pods_per_node, config.scraped_share)
    return (f"**{_percent(config.scraped_share)} of the simulated pods scraped** {every} ({per_node} of each node's "
            f"{config.pods_per_node} carry the scrape annotation, spread evenly: `--scraped-pod-share "
            f"{config.scraped_share:g}`; `make run` annotates every pod)")


def render(report: NatsIngestReport, command: str) -> str:
    config = report.config
    runs = report.by_name()
    derived = report.derived()
    units = UnitCosts.of(derived)
    goal = size(units, Scenario(nodes=GOAL_NODES, cadence=GOAL_CADENCE, share=GOAL_SHARE,
                                pods_per_node=config.pods_per_node, scrape_interval=config.scrape_interval))
    lines = [f"## NodeMetrics on NATS JetStream at {config.nodes:,} nodes: replica and nats-server CPU per report, "
             "custom metrics, sizing", ""]
    if report.machine is not None:
        lines += [*run_lines(command, report.machine, report.seconds), ""]
    lines += [
        f"`colocation sandbox` (builtin API server, controllers on) once per configuration, each with "
        f"{config.nodes:,} Nodes of {config.pods_per_node} pods (nats-2-small: {config.small_nodes:,}) whose agents "
        f"run with `{' '.join(report.agent_args)}`: every node reports every {config.report_interval:g} s. "
        "memory-2: `--store memory`, 2 replicas; nats-1, nats-2: `--store nats` (3 nats-servers on loopback), 1 and "
        "2 replicas; nats-2-custom, memory-2-custom: 2 replicas with custom metrics on, "
        f"{_scraped_pods(config)}. A window of "
        f"{config.window:g} s once every replica is Ready and holds every node, and one report interval more: "
        "CPU is utime + stime from /proc, RSS at the window's end, reports and samples each replica's own "
        "counters. The leader's evaluations (their share of a py-spy profile of "
        f"{config.profile_seconds:g} s after the window) are taken out of the per-report figures and projected "
        f"per node. nats-1 and nats-2 then run a follower probe for {config.probe_window:g} s: a reader of the "
        "stream that takes no report. How each figure is derived, and the sizing's formulas: the docstrings of "
        "`benchmarks/nats_ingest.py` and `benchmarks/nats_sizing.py`.", "",
        "### Verdicts", "",
        *(f"- {target}: {figure}: **{verdict}**" for target, figure, verdict in verdicts(runs, derived, goal)), ""]
    if held := unclean(runs, [spec.name for spec in config.specs()]):
        lines += ["The load generator or the agents fell behind, or the run failed (figures from these "
                  "configurations are inconclusive): " + " | ".join(held), ""]
    lines += ["### Windows", "", _windows(report), "",
              "### Per-unit costs (measured at this run's node count)", "",
              _units(derived, report.evaluation_split, report.apply_rates), ""]
    if replicas := _replicas_table(report, derived):
        lines += ["Each replica of nats-2 (µs per report it took; what it spends applying the other's writes at "
                  "the probe's cost per write):", "", replicas, ""]
    if derived.samples:
        lines += ["### Custom metrics (custom metrics on less off, replica by replica)", "",
                  f"{_percent(config.scraped_share)} of the simulated pods "
                  f"({scraped_pod_count(config.pods_per_node, config.scraped_share)} per node) are scraped every "
                  f"{config.scrape_interval:g} s; series per pod are per scraped pod. µs per sample: a replica's "
                  "extra CPU over the samples every replica accepted. Extra RSS per series: at the window's end, "
                  "when each series held the samples of the run so far; at the retention's end "
                  f"(`--custom-metrics-retention` {RETENTION:g} s) each holds "
                  f"{min(RETENTION / config.scrape_interval, 360):.0f}, {SAMPLE_BYTES} B each (two arrays of "
                  "doubles).", "", _samples_table(derived), ""]
    lines += ["### Sizing (projected from the per-unit costs above; this machine ran "
              f"{config.nodes:,} nodes)", "",
              f"{config.pods_per_node} pods per node, scraped pods every {config.scrape_interval:g} s at the "
              "measured series per scraped pod; each replica ≤ 1 core, the evaluations shared in "
              f"{SIZING_SHARDS} shards (`--evaluation-shards`: the busiest replica holds the most); custom metric "
              "CPU per sample is nats-2-custom's busiest replica's; a, the CPU per write applied, at the row's "
              "write rate from the in-process points (past the fastest, the fastest's). \"none\": no replica count "
              "keeps the busiest within a core (the cores it keeps with infinitely many). Memory: replica RSS "
              f"fixed + per node ({config.pods_per_node} pods each) + series x bytes per series; a replica keeps at "
              f"most `--custom-metrics-max-series` ({OPERATOR_MAX_SERIES:,} by default) series: rows over it need "
              "it raised. nats-server: 3 servers, each with a copy of the streams (3 replicas); the sample stream "
              f"holds {RETENTION:g} s of samples.", "",
              _sizing_table(sizing_table(units, pods_per_node=config.pods_per_node,
                                         scrape_interval=config.scrape_interval)), ""]
    notes = [f"{run.spec.name}: {note}" for run in report.runs for note in run.notes]
    if notes:
        lines += ["Notes: " + " | ".join(notes), ""]
    if report.load:
        lines += ["Load averages after each configuration: "
                  + "; ".join(" / ".join(f"{v:.2f}" for v in load) for load in report.load) + ".", ""]
    raw = config.raw.resolve()
    shown = raw.relative_to(ROOT) if raw.is_relative_to(ROOT) else raw
    lines.append(f"Raw samples: `{shown}`.")
    return "\n".join(lines)


def run_suite(config: IngestConfig, output: Path, command: str) -> NatsIngestReport:
    report = asyncio.run(run(config))
    report.to_file(config.raw)
    write_section(output, SECTION, render(report, command))
    say(f"nats ingest: done in {report.seconds / 60:,.1f} min; wrote {config.raw} and {output}")
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    c = IngestConfig()
    p.add_argument("--nats-ingest-nodes", type=int, default=c.nodes, help="nats-ingest: nodes per configuration.")
    p.add_argument("--nats-ingest-small-nodes", type=int, default=c.small_nodes,
                   help="nats-ingest: nodes of nats-2-small (replica and nats-server memory per node).")
    p.add_argument("--nats-ingest-pods-per-node", type=int, default=c.pods_per_node)
    p.add_argument("--nats-ingest-window", type=float, default=c.window, help="Seconds of steady state counted.")
    p.add_argument("--nats-ingest-probe-window", type=float, default=c.probe_window,
                   help="Seconds of the follower probe's window (nats-1, nats-2); 0: none.")
    p.add_argument("--nats-ingest-report-interval", type=float, default=c.report_interval)
    p.add_argument("--nats-ingest-scrape-interval", type=float, default=c.scrape_interval,
                   help="The agents' --scrape-interval with custom metrics on.")
    p.add_argument("--nats-ingest-scraped-share", type=_share, default=c.scraped_share,
                   help="With custom metrics on, the share of each simulated node's pods scraped (0 to 1): the "
                        "sandbox's --scraped-pod-share.")
    p.add_argument("--nats-ingest-profile-seconds", type=float, default=c.profile_seconds,
                   help="py-spy on the leader after each window (separates its evaluations); 0: none.")
    p.add_argument("--nats-ingest-configs", type=_names, default=c.configs,
                   help=f"Configurations to run, comma-separated, of {','.join(CONFIG_NAMES)}.")
    p.add_argument("--nats-ingest-raw", type=Path, default=RAW, help="Where to save the raw figures.")


def _share(text: str) -> float:
    share = float(text)
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"a share is between 0 and 1, not {text}")
    return share


def _names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if unknown := [name for name in names if name not in CONFIG_NAMES]:
        raise argparse.ArgumentTypeError(f"unknown configurations: {', '.join(unknown)}")
    return names


def config_from(args: argparse.Namespace, state_dir: Path) -> IngestConfig:
    return IngestConfig(nodes=args.nats_ingest_nodes, small_nodes=args.nats_ingest_small_nodes,
                        pods_per_node=args.nats_ingest_pods_per_node, window=args.nats_ingest_window,
                        probe_window=args.nats_ingest_probe_window,
                        report_interval=args.nats_ingest_report_interval,
                        scrape_interval=args.nats_ingest_scrape_interval,
                        scraped_share=args.nats_ingest_scraped_share,
                        profile_seconds=args.nats_ingest_profile_seconds, configs=args.nats_ingest_configs,
                        raw=args.nats_ingest_raw, state_dir=state_dir)


# ---- the follower probe ---------------------------------------------------------------------------------


async def follow(options: NatsOptions) -> None:
    """Apply the NodeMetric stream to a store of our own until SIGTERM; `ready:` once caught up."""
    from colocation.jetstream.log_follower import LogFollower
    from colocation.jetstream.nats_connection import connect
    from colocation.nodemetrics.nodemetric_store import NodeMetricStore
    from colocation.nodemetrics.resource_versions import LogPositions

    stop = asyncio.Event()
    install_stop_signal_handlers(stop.set)
    client = await connect(options, name="nats-ingest-probe")
    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic, versions=LogPositions())
    follower = LogFollower(client.jetstream(timeout=5.0), store)
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(follower.synced.wait(), 240.0)
        print(f"ready: position={follower.position}", flush=True)
        await stop.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.nats_ingest",
                                description="follow: the nats-ingest suite's follower probe.")
    p.add_argument("command", choices=["follow"])
    p.add_argument("--server", action="append", required=True)
    p.add_argument("--ca-file", default="")
    p.add_argument("--user", default="")
    p.add_argument("--password-file", default="")
    args = p.parse_args(argv)
    asyncio.run(follow(NatsOptions(servers=tuple(args.server), ca_file=args.ca_file, user=args.user,
                                   password_file=args.password_file)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
