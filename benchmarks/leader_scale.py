"""Leader at scale: does the leader replica keep up with 1,000 / 5,000 / 10,000 nodes reporting every 10 s?

    python -m benchmarks.run --suite leader-scale --scale-nodes 1000,2500 --scale-kube-nodes 1000 [...]

On a 2-core machine the defaults are 1,000 and 2,500 nodes, and 1,000 on the real control plane: at
5,000 the simulated agents alone take about 1.3 cores, the sandbox's API server (one Python process,
no priority and fairness) falls behind, the leader's Lease renewals time out, and leadership moves
every one to five minutes, each new leader listing 150,000 pods again (2026-11-27, two runs: no
steady state; once not every node judged in 10 minutes, once not every Node with batch resources
in 15 minutes, the replicas restarted 7 times); the 10,000-node figures are extrapolated
(`leader_scale_figures.extrapolate`).

For each node count, `colocation sandbox` (the builtin API server, 2 operator replicas, controllers
on; for `--scale-kube-nodes` the same with `--apiserver kube`: kube-apiserver, etcd, kwok's Nodes)
runs N Nodes whose agents report every `report_interval` s (`--max-report-interval`,
`--report-change-threshold=0`, as `colocation agent --help` names them today), plus a few probe
Nodes of this client (leader_scale_probes). Then:

1. steady state: every node served by the leader, judged (startup grace over) and given batch
   resources, one report interval more; then a window: CPU (utime + stime) of the leader, the
   standby, the simulated agents' process and the control plane (the sandbox's processes but the
   replicas and agents), the leader's RSS and standby's at its end, the leader's accepted reports
   and evaluations (its /metrics), the agents' self-check;
2. py-spy samples the leader for `profile_seconds`: where its CPU goes, and the evaluations' share of it;
3. latency: probe reports that move batch resources, timed to the Node patch;
4. failover: the leader SIGKILLed (the sandbox restarts it), timed to the new leader's first finished
   evaluation of every node (the verdict's figure: its `colocation_reconcile_duration_seconds_count`,
   polled every `failover_poll` s), and on, for information, until it serves every node's NodeMetric
   with an updateTime from after the kill and an evaluation finished after that; one more kill with
   py-spy on the standby (where the new leader's time goes), left out of the verdicts;
5. the leader gone without a restart: SIGSTOPped (it neither renews nor releases its Lease: the
   standby waits for it to expire), timed to the new leader's first finished evaluation, then
   SIGCONTed (it finds it lost the Lease and exits; the sandbox starts it again, and the next stop
   waits for a ready standby holding every node).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import ConfigDict, Field

from benchmarks import cp_cluster, ingest_profile, processes
from benchmarks.client import Request, say, sit_out
from benchmarks.control_plane import _judged
from benchmarks.cp_cluster import LEADER_LEASE, NODEMETRICS, Cluster, Replica
from benchmarks.cp_kube_metrics import parse, total
from benchmarks.failover_probes import FAILURES, reader_token
from benchmarks.leader_scale_figures import (
    BUILTIN,
    EXTRAPOLATE_INTERVAL,
    EXTRAPOLATE_NODES,
    KUBE,
    Convergence,
    ReportBurst,
    SizeResult,
    Takeover,
    Window,
    extrapolate,
)
from benchmarks.leader_scale_probes import Freshness, ProbeNodes
from benchmarks.machine import Machine
from benchmarks.polling import eventually_async
from benchmarks.results import Record
from colocation.agent import selfcheck
from colocation.apimachinery.stop_signals import on_stop_signals

SUITE = "leader-scale"
_T = TypeVar("_T")
PLOTS = Path(__file__).resolve().parent / "plots"
REPORTS = "colocation_nodemetric_reports_accepted_total"
EVALUATIONS = "colocation_reconcile_duration_seconds_count"
EVALUATION_SECONDS = "colocation_reconcile_duration_seconds_sum"
BATCH_WRITES = "colocation_batch_resource_writes_total"
NODES_HELD = "colocation_nodemetric_nodes"
# 1 once a replica's controllers have read the configuration and listed every pod: a takeover is warm.
WARM = "colocation_controllers_warm"
WINDOW_BYTES = "colocation_nodemetric_watch_window_bytes"
WINDOW_EVENTS = "colocation_nodemetric_watch_window_events"
CONNECTION_PROBES = 200  # idle TLS connections opened to the leader to measure what one costs
GAUGES = (NODES_HELD, WINDOW_BYTES, WINDOW_EVENTS)
# The agent flags that make every node report every interval, changed or not, from one sample per
# report: the leader gets the same reports as from agents sampling every second (their default), and
# the load client costs about a third (0.18 against 0.58 cores at 1,000 nodes, measured), which is
# what lets 5,000 nodes fit on 2 cores. Kept here only, and checked against `colocation agent --help`
# at run time.
AGENT_FLAGS = (("--max-report-interval", "{interval:g}"), ("--report-change-threshold", "0"),
               ("--collect-interval", "{interval:g}"))


class ScaleConfig(Record):
    model_config = ConfigDict(frozen=True)

    sizes: tuple[int, ...] = (1000, 2500)
    kube_sizes: tuple[int, ...] = (1000,)  # node counts run again on the real control plane (kwok nodes)
    pods_per_node: int = 30
    window: float = 60.0
    report_interval: float = 10.0
    probes: int = 4
    latency_samples: int = 24
    latency_timeout: float = 30.0
    kills: int = 5
    kill_timeout: float = 180.0
    # How often a failover polls the Lease and the new leader's evaluation count: the first finished
    # evaluation is seen at most this late (plus a request's round trip), and each poll is one GET
    # /metrics on the new leader and one GET of the Lease.
    failover_poll: float = 0.05
    failover_profile_seconds: float = 5.0  # py-spy on the standby across one more kill; 0: none
    stops: int = 2  # SIGSTOPs of the leader per node count (gone without a restart); 0: none
    stop_timeout: float = 60.0  # beyond the Lease's duration
    # The sandbox restarts a replica that exits again within 10 minutes after 10 s, 20 s, ... (the kubelet's
    # crashLoopBackOff); a leader killed twice would then hold its Lease until it expires (15 s): measured
    # is the failover, so restarts are immediate, as in the failover suite.
    max_restart_period: float = 1.0
    profile_seconds: float = 20.0  # at every node count, right after the window; 0: no profile
    burst_seconds: float = 30.0  # probe reports at 10,000 nodes' rate, after the profile; 0: no burst
    burst_concurrency: int = 16  # probe reports in flight at once during the burst
    state_dir: Path = Field(default=Path(".bench"), exclude=True)  # this run's scratch space: not saved


class ScaleReport(Record):
    """What benchmarks/plots/leader_scale.json holds; rendered again from it without running anything."""

    model_config = ConfigDict(populate_by_name=True)

    config: ScaleConfig
    agent_args: list[str] = Field(default_factory=list, alias="agentArgs")
    missing_flags: list[str] = Field(default_factory=list, alias="missingFlags")
    fd_limit: int = Field(default=0, alias="fdLimit")
    # os.getloadavg() after each size
    load: list[tuple[float, float, float]] = Field(default_factory=list, alias="loadAverages")
    seconds: float = 0.0
    results: list[SizeResult] = Field(default_factory=list)
    machine: Machine | None = None  # where it ran, described before the run


def agent_args(interval: float) -> tuple[list[str], list[str]]:
    """(the agent arguments for reports every `interval` s, the flags `colocation agent --help` lacks)."""
    helptext = subprocess.run([sys.executable, "-m", "colocation", "agent", "--help"], capture_output=True,
                              text=True, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": processes.python_path()}).stdout
    known = set(re.findall(r"--[a-z][a-z0-9-]*", helptext))
    found = [f"{flag}={value.format(interval=interval)}" for flag, value in AGENT_FLAGS if flag in known]
    return found, [flag for flag, _ in AGENT_FLAGS if flag not in known]


async def _metrics(cluster: Cluster, replica: Replica) -> dict[str, float]:
    status, body = await cluster.replica_client(replica).send(Request("GET", "/metrics", accept="text/plain"))
    if status != 200:
        raise RuntimeError(f"GET /metrics of {replica.identity}: {status}")
    names = (REPORTS, EVALUATIONS, EVALUATION_SECONDS, BATCH_WRITES, WARM, *GAUGES)
    samples = parse(body.decode(), names)
    return {name: total(samples, name) for name in names}


async def _roles(cluster: Cluster) -> tuple[Replica, Replica, str]:
    holder = await cluster.leader()
    leader = cluster.replica_of(holder) if holder else None
    standby = [r for r in cluster.replicas() if leader is not None and r.identity != leader.identity]
    if leader is None or not standby:
        raise RuntimeError(f"no leader and standby (holder {holder!r})")
    return leader, standby[0], holder


async def _steady(cluster: Cluster, count: int, timeout: float = 300.0) -> None:
    """A leader and a standby, both alive and ready, each holding at least `count` nodes' NodeMetrics, and
    the standby warm (a replica restarted by the last kill lists every pod again before it is)."""
    async def ready() -> bool:
        try:
            leader, standby, _ = await _roles(cluster)
            for replica in (leader, standby):
                status, _ = await cluster.replica_client(replica).send(Request("GET", "/readyz"))
                figures = await _metrics(cluster, replica)
                if status != 200 or figures[NODES_HELD] < count or figures.get(WARM, 0) < 1:
                    return False
        except (*FAILURES, RuntimeError):
            return False
        return True

    await eventually_async(ready, timeout, interval=0.5, message=f"a leader and a standby holding {count:,} nodes")


def _control_plane_pids(cluster: Cluster) -> list[int]:
    """The sandbox process and everything under it but the operator replicas and the agents: the builtin
    API server, or kube-apiserver, etcd, kwok, the controller manager and scheduler."""
    measured_apart = {r.pid for r in cluster.replicas()} | set(cluster.agent_pids(simulated=True)) \
        | set(cluster.agent_pids(simulated=False))
    return sorted({cluster.server.pid} | processes.descendants(cluster.server.pid) - measured_apart)


def _cpu(pid: int) -> float:
    try:
        return processes.cpu_seconds(pid)
    except OSError:
        return math.nan


async def _window(config: ScaleConfig, cluster: Cluster, nodes: int) -> Window:
    leader, standby, _ = await _roles(cluster)
    agents = cluster.agent_pids(simulated=True)  # one process per 500 simulated nodes
    control_plane = _control_plane_pids(cluster)
    pids = (leader.pid, standby.pid, *agents, *control_plane)
    checks_before = await selfcheck.read_sandbox(cluster.state_dir)
    metrics_before = await _metrics(cluster, leader)
    cpu_before = [_cpu(pid) for pid in pids]
    loop = asyncio.get_running_loop()
    started = loop.time()
    await sit_out(config.window, started, 10.0, lambda elapsed: (
        f"leader scale [{nodes:,} nodes]: window {elapsed:.0f}/{config.window:.0f} s, leader "
        f"{(_cpu(leader.pid) - cpu_before[0]) / (loop.time() - started):.2f} cores"))
    cpu = [_cpu(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
    agents_cpu = cpu[2:2 + len(agents)]
    seconds = loop.time() - started
    metrics_after = await _metrics(cluster, leader)
    checks, problems = selfcheck.sandbox_verdict(checks_before, await selfcheck.read_sandbox(cluster.state_dir))
    if (await _roles(cluster))[0].pid != leader.pid:
        raise RuntimeError("the leader changed during the window")
    delta = {name: metrics_after[name] - metrics_before[name] for name in metrics_after}
    return Window(nodes=nodes, seconds=seconds, report_interval=config.report_interval, leader_cpu=cpu[0],
                  standby_cpu=cpu[1], agents_cpu=sum(agents_cpu), agents_busiest_cpu=max(agents_cpu, default=0.0),
                  machine_cores=os.cpu_count() or 0, control_plane_cpu=sum(cpu[2 + len(agents):]),
                  leader_rss=processes.rss_bytes(leader.pid), standby_rss=processes.rss_bytes(standby.pid),
                  leader_window_bytes=int(metrics_after[WINDOW_BYTES]),
                  leader_window_events=int(metrics_after[WINDOW_EVENTS]),
                  leader_connections=processes.served_connections(leader.pid),
                  reports=delta[REPORTS], evaluations=delta[EVALUATIONS], evaluation_seconds=delta[EVALUATION_SECONDS],
                  batch_writes=delta[BATCH_WRITES], agent_problems=problems, agent_checks=checks)


async def _burst(config: ScaleConfig, cluster: Cluster, probes: ProbeNodes, window: Window) -> ReportBurst:
    """Probe reports for `burst_seconds`, the leader's total at 10,000 nodes' rate: its CPU per report there."""
    leader, _, _ = await _roles(cluster)
    simulated = await cluster.replica_client(leader).json(Request("GET", f"{NODEMETRICS}/sim-node-1"))
    before = await _metrics(cluster, leader)
    cpu_before, client_before = _cpu(leader.pid), time.process_time()
    loop = asyncio.get_running_loop()
    started = loop.time()
    # The probes add what makes the leader's reports per second those of 10,000 nodes.
    rate = max(EXTRAPOLATE_NODES / EXTRAPOLATE_INTERVAL - window.report_rate, 1.0)
    accepted, failed = await probes.flood(config.burst_seconds, config.burst_concurrency, simulated["status"], rate)
    seconds = loop.time() - started
    cpu, client = _cpu(leader.pid) - cpu_before, time.process_time() - client_before
    after = await _metrics(cluster, leader)
    if (await _roles(cluster))[0].pid != leader.pid:
        raise RuntimeError("the leader changed during the report burst")
    return ReportBurst(seconds=seconds, leader_cpu=cpu, reports=after[REPORTS] - before[REPORTS],
                       probe_reports=accepted, failed=failed, client_cpu=client,
                       baseline_cores=window.leader_cores, baseline_rate=window.report_rate)


async def _profile(config: ScaleConfig, cluster: Cluster, result: SizeResult) -> None:
    leader, _, _ = await _roles(cluster)
    out = profile_path(result.nodes, result.apiserver)
    say(f"leader scale [{result.label} nodes]: py-spy on the leader (pid {leader.pid}) for "
        f"{config.profile_seconds:.0f} s")
    try:
        recorder = await ingest_profile.record(leader.pid, config.profile_seconds, out)
        await recorder.wait()
    except (FileNotFoundError, OSError) as error:
        result.failures.append(f"no profile: {error!r}")
        return
    raw = out.read_text() if out.exists() else ""
    samples, _, hottest = ingest_profile.summarize(raw)
    if not samples:
        result.failures.append(f"no profile: py-spy exited {recorder.returncode} without samples "
                               "(ptrace permission?)")
        return
    result.profile_samples, result.profile = samples, hottest
    result.profile_shares = profile_shares(raw)
    if result.window is not None:
        result.window.evaluation_share = dict(result.profile_shares)[EVALUATION]


def profile_path(nodes: int, apiserver: str = BUILTIN) -> Path:
    """Where py-spy's raw samples of the leader at `nodes` (sandbox) nodes are kept."""
    return PLOTS / ("leader_scale_profile_" + ("" if apiserver == BUILTIN else f"{apiserver}_") + f"{nodes}.txt")


# (label, substrings of frames): the share of samples with any frame matching any of them, one row at a time.
EVALUATION = "controllers' evaluations (Controllers._loop, NodeResourceReconciler, NodeSLOReconciler)"
PROFILE_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Kopf (any frame of kopf/)", ("kopf/",)),
    ("Kopf building each event's handler kwargs (Cause._kwargs)", ("Cause._kwargs",)),
    ("Node and Lease events (ClusterState.node_changed, Controllers.on_lease)",
     ("ClusterState.node_changed", "ClusterState.nodes_synced_with", "Controllers.on_lease")),
    (EVALUATION, ("Controllers._loop", "NodeResourceReconciler.", "NodeSLOReconciler.")),
    ("batch formula (calculate_batch_resources)", ("calculate_batch_resources",)),
    ("report API (NodeMetricGroup._report)", ("NodeMetricGroup._report", "NodeMetricApi._report")),
    ("validating reports (validate_report)", ("validate_report",)),
    ("authentication (DelegatingAuthenticator)", ("DelegatingAuthenticator",)),
    ("NodeMetric store", ("NodeMetricStore",)),
    ("informers: Pods, Nodes, Leases, NodeMetrics (colocation/kube/informer.py)", ("kube/informer.py",)),
    ("leader election (colocation/kube/leaderelection.py)", ("leaderelection.py",)),
    ("TLS and HTTP parsing (_read_ready)", ("_read_ready",)),
    ("prometheus_client", ("prometheus_client",)),
)


def profile_shares(raw: str) -> list[tuple[str, float]]:
    """Share of py-spy's samples (raw format) whose stack has a frame matching each marker."""
    counts = dict.fromkeys((label for label, _ in PROFILE_MARKERS), 0)
    samples = 0
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples += int(count)
        for label, markers in PROFILE_MARKERS:
            if any(marker in stack for marker in markers):
                counts[label] += int(count)
    return [(label, n / samples) for label, n in counts.items()] if samples else []


async def _evaluations(cluster: Cluster, replica: Replica) -> tuple[float, float] | None:
    """(count, summed seconds) of the evaluations of every node `replica` finished; None: no answer.
    The count moves when an evaluation returns (`NodeResourceReconciler.evaluate` observes its duration
    then), and a standby's evaluation loop waits for its promotion, so a standby's stays at 0."""
    with contextlib.suppress(*FAILURES, RuntimeError):
        metrics = await _metrics(cluster, replica)
        return metrics[EVALUATIONS], metrics[EVALUATION_SECONDS]
    return None


async def _holder(cluster: Cluster) -> str | None:
    with contextlib.suppress(*FAILURES, RuntimeError):
        return await cluster.leader()
    return None


@dataclass
class Seen:
    """What the polls of one failover saw, in seconds from the signal."""

    marks: dict[str, float] = field(default_factory=dict)  # "lease", "evaluation"
    leader: Replica | None = None  # the new leader
    after: float = math.nan  # when the last poll that saw no evaluation of the new leader was sent
    evaluation_seconds: float = math.nan  # the first evaluation's own duration (sum / count when seen)
    gone: bool = False  # `alive` said no before an evaluation was seen


async def _until_evaluated(config: ScaleConfig, cluster: Cluster, holder: str, standby: Replica,
                           baseline: float, started: float, timeout: float,
                           alive: Callable[[], bool] = lambda: True) -> Seen:
    """Poll, every `failover_poll` s from `started` (the signal), the Lease and the standby's evaluation
    count (and the count of whichever other replica the Lease names, should it win) until the new
    leader's count passes `baseline` (the standby's before the signal): its first finished evaluation."""
    loop = asyncio.get_running_loop()
    seen = Seen()
    zero: dict[int, float] = {}  # pid → when the last poll that saw its count at the baseline was sent

    async def answered(request: Awaitable[_T]) -> tuple[_T, float]:
        """The answer and when it came, in seconds from the signal."""
        answer = await request
        return answer, loop.time() - started

    due = started
    while loop.time() - started < timeout:
        if not alive():
            seen.gone = True
            break
        due = max(due + config.failover_poll, loop.time())
        await asyncio.sleep(due - loop.time())  # polling the system under test at its pace
        sent = loop.time() - started
        (current, leased), (counts, arrived) = await asyncio.gather(answered(_holder(cluster)),
                                                                    answered(_evaluations(cluster, standby)))
        target = standby
        new = cluster.replica_of(current) if current and current != holder else None
        if new is not None:
            seen.marks.setdefault("lease", leased)
            if new.identity != standby.identity or new.pid != standby.pid:  # the restarted one won
                target, sent = new, loop.time() - started
                counts, arrived = await answered(_evaluations(cluster, new))
        if counts is None:
            continue
        count, seconds = counts
        if count > (baseline if target is standby else 0):
            seen.marks["evaluation"] = arrived
            seen.leader, seen.after = target, zero.get(target.pid, math.nan)
            seen.evaluation_seconds = seconds / count
            break
        zero[target.pid] = sent
    return seen


async def _kill(config: ScaleConfig, cluster: Cluster, names: list[str], result: SizeResult, index: int,
                profile: bool = False) -> None:
    """One SIGKILL of the leader; with `profile`, py-spy samples the standby across it (not counted)."""
    await _steady(cluster, len(names))
    leader, standby, holder = await _roles(cluster)
    baseline = await _evaluations(cluster, standby)
    if baseline is None:
        raise RuntimeError(f"the standby {standby.identity} does not answer GET /metrics")
    freshness = Freshness(cluster.replica_client(standby))
    watch = asyncio.create_task(freshness.run())
    loop = asyncio.get_running_loop()
    seen = Seen()
    stale: list[str] = names
    recorder: asyncio.subprocess.Process | None = None
    out = failover_profile_path(result.nodes, result.apiserver)
    try:
        await eventually_async(lambda: _settled(freshness, names), 120.0, interval=0.2,
                               message="the standby's NodeMetric watch listing")
        if profile:
            try:
                recorder = await ingest_profile.record(standby.pid, config.failover_profile_seconds, out)
            except (FileNotFoundError, OSError) as error:
                result.failures.append(f"no failover profile: {error!r}")
                return
            await asyncio.sleep(1.0)  # py-spy attaching; it then samples a second or so of the standby idling
        await asyncio.sleep(1.05 - time.time() % 1)  # just after a whole second: updateTime has whole seconds
        killed_at = float(int(time.time()))
        started = loop.time()
        os.kill(leader.pid, signal.SIGKILL)
        seen = await _until_evaluated(config, cluster, holder, standby, baseline[0], started, config.kill_timeout)
        marks, new = seen.marks, seen.leader
        reported_evaluations = math.inf
        # For information: every node re-reported, and an evaluation after that (polled less often).
        while new is not None and "converged" not in marks and loop.time() - started < config.kill_timeout:
            with contextlib.suppress(*FAILURES, RuntimeError):
                evaluations = (await _metrics(cluster, new))[EVALUATIONS]
                now = loop.time() - started
                stale = freshness.stale(names, killed_at)
                if not stale and "reported" not in marks:
                    marks["reported"], reported_evaluations = now, evaluations
                if evaluations > reported_evaluations:
                    marks["converged"] = now
            await asyncio.sleep(0.25)  # polling the system under test
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        if recorder is not None:
            await recorder.wait()
    marks = seen.marks
    note = "" if "converged" in marks else (f"gave up after {config.kill_timeout:.0f} s; {len(stale)} nodes not "
                                            "re-reported" if "evaluation" in marks else
                                            f"no evaluation within {config.kill_timeout:.0f} s")
    if profile:
        note = "profiled (py-spy on the new leader), not in the verdicts" + (f"; {note}" if note else "")
    kill = Convergence(result.nodes, index, marks.get("lease", math.nan), marks.get("evaluation", math.nan),
                       marks.get("reported", math.nan), marks.get("converged", math.nan), len(stale), note,
                       evaluation_after=seen.after, evaluation_seconds=seen.evaluation_seconds, profiled=profile)
    result.kills.append(kill)
    say(f"leader scale [{result.label} nodes]: kill {index + 1}{' (profiled)' if profile else ''}: Lease moved "
        f"{kill.lease_moved:.2f} s, first evaluation {kill.first_evaluation:.2f} s (after {kill.evaluation_after:.2f} "
        f"s; it took {kill.evaluation_seconds:.2f} s), every node re-reported {kill.all_reported:.1f} s, "
        f"converged {kill.converged:.1f} s{'; ' + kill.note if kill.note else ''}")
    if profile:
        _failover_profile(out, result)


def _failover_profile(out: Path, result: SizeResult) -> None:
    raw = out.read_text() if out.exists() else ""
    samples, _, hottest = ingest_profile.summarize(raw)
    if not samples:
        result.failures.append("no failover profile: py-spy wrote no samples (ptrace permission?)")
        return
    result.failover_profile_samples, result.failover_profile = samples, hottest
    result.failover_profile_shares = profile_shares(raw)


def failover_profile_path(nodes: int, apiserver: str = BUILTIN) -> Path:
    """Where py-spy's raw samples of the new leader across the profiled kill at `nodes` nodes are kept."""
    return PLOTS / ("leader_scale_failover_profile_" + ("" if apiserver == BUILTIN else f"{apiserver}_")
                    + f"{nodes}.txt")


def _state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped), "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


async def _stop(config: ScaleConfig, cluster: Cluster, names: list[str], result: SizeResult, index: int) -> None:
    """The leader gone without a restart: SIGSTOPped until the new leader's first finished evaluation,
    then SIGCONTed; it finds it lost the Lease and exits, and the sandbox starts it again."""
    await _steady(cluster, len(names))
    leader, standby, holder = await _roles(cluster)
    baseline = await _evaluations(cluster, standby)
    if baseline is None:
        raise RuntimeError(f"the standby {standby.identity} does not answer GET /metrics")
    lease = await cluster.client.json(Request("GET", LEADER_LEASE))
    duration = float((lease.get("spec") or {}).get("leaseDurationSeconds") or math.nan)
    timeout = (duration if math.isfinite(duration) else 15.0) + config.stop_timeout
    loop = asyncio.get_running_loop()
    started = loop.time()
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        for _ in range(100):  # the signal is delivered asynchronously: until /proc shows it stopped
            if _state(leader.pid) == "T":
                break
            await asyncio.sleep(0.01)
        seen = await _until_evaluated(config, cluster, holder, standby, baseline[0], started, timeout,
                                      alive=lambda: _state(leader.pid) == "T")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leader.pid, signal.SIGCONT)
    void = (f"the stopped leader (pid {leader.pid}) was gone or running again before the takeover (a liveness "
            "probe?)" if seen.gone else "")
    stop = Takeover(result.nodes, index, duration, seen.marks.get("lease", math.nan),
                    seen.marks.get("evaluation", math.nan), seen.after, seen.evaluation_seconds, void)
    result.stops.append(stop)
    say(f"leader scale [{result.label} nodes]: stop {index + 1}: Lease ({duration:g} s) moved {stop.lease_moved:.2f} "
        f"s, first evaluation {stop.first_evaluation:.2f} s (after {stop.evaluation_after:.2f} s; it took "
        f"{stop.evaluation_seconds:.2f} s; bound {stop.bound:g} s){'; ' + void if void else ''}")
    if "lease" in seen.marks:  # it finds it lost the Lease and exits; the sandbox starts it again
        async def restarted() -> bool:
            return any(r.identity == leader.identity and r.pid != leader.pid for r in cluster.replicas())

        await eventually_async(restarted, 120.0, interval=0.5,
                               message=f"the stopped leader {leader.identity} restarted after SIGCONT")


async def _batched(cluster: Cluster, count: int) -> bool:
    try:
        return len(await cluster.nodes_with_batch()) >= count
    except FAILURES:
        return False


async def _settled(freshness: Freshness, names: list[str]) -> bool:
    return not [name for name in names if name not in freshness.times]


async def _size(config: ScaleConfig, nodes: int, args: list[str], apiserver: str = BUILTIN) -> SizeResult:
    result = SizeResult(nodes, config.probes, apiserver=apiserver)
    say(f"leader scale [{result.label} nodes]: starting the sandbox ({config.pods_per_node} pods per node, "
        f"2 operators, agents {' '.join(args)})")
    started = time.perf_counter()
    where = ("--apiserver", KUBE) if apiserver == KUBE else ()
    state_dir = config.state_dir / f"leader-scale-{apiserver}-{nodes}"
    shutil.rmtree(state_dir, ignore_errors=True)  # a fresh etcd each time: the real one keeps its data there
    cluster = await cp_cluster.start(state_dir, nodes=nodes,
                                     pods_per_node=config.pods_per_node, agent_args=tuple(args),
                                     extra=(f"--max-container-restart-period={config.max_restart_period:g}", *where),
                                     start_timeout=1800.0)
    probes = ProbeNodes(cluster.client, config.probes, config.report_interval)
    try:
        cluster.replica_token = await reader_token(cluster.client)
        template = await cluster.client.json(Request("GET", "/api/v1/nodes/sim-node-1"))
        await probes.create(template)
        total_nodes = nodes + config.probes
        polled = time.monotonic()
        await eventually_async(lambda: cluster.complete(total_nodes), 1800.0, interval=2.0,
                               message="every node reporting")
        waited = time.monotonic() - polled
        say(f"leader scale [{result.label} nodes]: the leader serves all {total_nodes:,} nodes after {waited:.0f} s")
        await eventually_async(lambda: _judged(cluster), 600.0, interval=2.0,
                               message="every node judged (startup grace over)")
        # The leader's first batch writes take minutes on the real control plane (16 in flight, each
        # a Node patch, a NodeResource status and an Event): a window before they end counts them.
        polled = time.monotonic()
        await eventually_async(lambda: _batched(cluster, total_nodes), 900.0, interval=5.0,
                               message="every Node with batch resources")
        waited = time.monotonic() - polled
        say(f"leader scale [{result.label} nodes]: every Node has batch resources after {waited:.0f} s more")
        if not await probes.ready(120.0):
            result.failures.append(f"the probe Nodes got no batch resources: {probes.batch}")
        await asyncio.sleep(config.report_interval)  # one report round past the start-up burst
        result.setup_seconds = time.perf_counter() - started
        result.window = window = await _window(config, cluster, total_nodes)
        say(f"leader scale [{result.label} nodes]: leader {window.leader_cores:.2f} cores, "
            f"RSS {window.leader_rss / 2**20:,.0f} MiB; standby {window.standby_cores:.2f} cores; "
            f"{window.report_rate:,.0f} reports/s, {window.evaluation_rate:.2f} evaluations/s; "
            f"agents {window.agents_cores:.2f} cores; problems: {window.saturation() or 'none'}")
        leader_pid = (await _roles(cluster))[0].pid
        opened, window.connection_bytes = await probes.idle_connections_cost(
            CONNECTION_PROBES, lambda: processes.rss_bytes(leader_pid),
            lambda: processes.served_connections(leader_pid))
        say(f"leader scale [{result.label} nodes]: {window.leader_connections:,} connections served by the leader; "
            f"{opened:,} idle ones more added {window.connection_bytes / 1024:,.0f} KiB of RSS each")
        if config.profile_seconds > 0:  # at every count: it splits the leader's CPU (leader_scale_figures)
            await _profile(config, cluster, result)
        say(f"leader scale [{result.label} nodes]: {window.us_per_report:,.0f} µs per report, "
            f"{window.us_per_node_evaluation:.1f} µs per node evaluation (evaluations: "
            f"{window.evaluation_share:.0%} of the profile), {extrapolate(window):.2f} cores at 10,000 nodes")
        if config.burst_seconds > 0:
            say(f"leader scale [{result.label} nodes]: {config.burst_seconds:g} s of probe reports at "
                "10,000 nodes' rate")
            result.burst = burst = await _burst(config, cluster, probes, window)
            say(f"leader scale [{result.label} nodes]: burst of {burst.rate:,.0f} reports/s (client "
                f"{burst.client_cores:.2f} cores, {burst.failed} failed): leader {burst.leader_cores:.2f} cores, "
                f"{burst.us_per_report:,.0f} µs per extra report; "
                f"{extrapolate(window, burst=burst):.2f} cores at 10,000 nodes")
        say(f"leader scale [{result.label} nodes]: {config.latency_samples} latency samples on {config.probes} probes")
        result.latencies, result.latency_failures = await probes.latencies(config.latency_samples,
                                                                           config.latency_timeout)
        say(f"leader scale [{result.label} nodes]: report to Node patch p50 {result.latency.p50:.2f} s, "
            f"p99 {result.latency.p99:.2f} s, {len(result.latency_failures)} failed")
        names = sorted(set((await cluster.served_metrics(cluster.replica_client((await _roles(cluster))[0]))) or ())
                       - set(probes.names))
        for index in range(config.kills):
            await _kill(config, cluster, names, result, index)
        if config.failover_profile_seconds > 0:
            await _kill(config, cluster, names, result, config.kills, profile=True)
        for index in range(config.stops):
            await _stop(config, cluster, names, result, index)
    except (TimeoutError, RuntimeError, OSError, *FAILURES) as error:  # OSError: a process gone from /proc
        why = repr(error)
        # A leader that loses its Lease exits and its pod restarts it: the count says whether leadership moved.
        with contextlib.suppress(OSError, ValueError):
            why += f"; the operator replicas had restarted {sum(r.restarts for r in cluster.replicas())} times"
        result.failures.append(why)
        say(f"leader scale [{result.label} nodes]: failed: {why}")
    finally:
        await probes.close()
        await cluster.close()
    return result


async def run(config: ScaleConfig) -> ScaleReport:
    started = time.perf_counter()
    args, missing = agent_args(config.report_interval)
    report = ScaleReport(config=config, agent_args=args, missing_flags=missing)
    with contextlib.suppress(OSError, ValueError):
        import resource

        report.fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if missing:
        say(f"leader scale: `colocation agent --help` has no {', '.join(missing)}: left out")
    with on_stop_signals():
        for apiserver, nodes in [*((BUILTIN, n) for n in config.sizes), *((KUBE, n) for n in config.kube_sizes)]:
            report.results.append(await _size(config, nodes, args, apiserver))
            report.load.append(os.getloadavg())
    report.seconds = time.perf_counter() - started
    say(f"leader scale: done in {report.seconds / 60:,.1f} min")
    return report


def sizes(text: str) -> tuple[int, ...]:
    return tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    c = ScaleConfig()
    p.add_argument("--scale-nodes", type=sizes, default=c.sizes,
                   help="Node counts on the builtin API server, comma-separated.")
    p.add_argument("--scale-kube-nodes", type=sizes, default=c.kube_sizes,
                   help="Node counts on the real control plane (`--apiserver kube`, kwok nodes), comma-separated; "
                        "\"\": none.")
    p.add_argument("--scale-pods-per-node", type=int, default=c.pods_per_node)
    p.add_argument("--scale-window", type=float, default=c.window, help="Seconds of steady state counted.")
    p.add_argument("--scale-report-interval", type=float, default=c.report_interval,
                   help="Every node reports this often (seconds), changed or not.")
    p.add_argument("--scale-probes", type=int, default=c.probes, help="Probe Nodes for the latency samples.")
    p.add_argument("--scale-latency-samples", type=int, default=c.latency_samples)
    p.add_argument("--scale-kills", type=int, default=c.kills, help="SIGKILLs of the leader per node count.")
    p.add_argument("--scale-stops", type=int, default=c.stops,
                   help="SIGSTOPs of the leader per node count (gone without a restart: the standby waits for the "
                        "Lease to expire); 0: none.")
    p.add_argument("--scale-failover-poll", type=float, default=c.failover_poll,
                   help="Seconds between a failover's polls of the Lease and the new leader's evaluation count.")
    p.add_argument("--scale-failover-profile-seconds", type=float, default=c.failover_profile_seconds,
                   help="py-spy on the standby across one more SIGKILL per node count (not counted); 0: none.")
    p.add_argument("--scale-profile-seconds", type=float, default=c.profile_seconds,
                   help="py-spy of the leader after each window (it splits the leader's CPU); 0: none.")
    p.add_argument("--scale-burst-seconds", type=float, default=c.burst_seconds,
                   help="Seconds of probe reports after the profile, the leader's total at 10,000 nodes' rate "
                        "(its CPU per report there); 0: none.")


def config_from(args: argparse.Namespace, state_dir: Path) -> ScaleConfig:
    return ScaleConfig(sizes=args.scale_nodes, kube_sizes=args.scale_kube_nodes,
                       pods_per_node=args.scale_pods_per_node, window=args.scale_window,
                       report_interval=args.scale_report_interval, probes=args.scale_probes,
                       latency_samples=args.scale_latency_samples, kills=args.scale_kills,
                       stops=args.scale_stops, failover_poll=args.scale_failover_poll,
                       failover_profile_seconds=args.scale_failover_profile_seconds,
                       profile_seconds=args.scale_profile_seconds, burst_seconds=args.scale_burst_seconds,
                       state_dir=state_dir)
