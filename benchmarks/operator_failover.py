"""Failover without an outage: the leader replica SIGKILLed, again and again, while clients use the API.

Settings: {the builtin sandbox, the real control plane (`--apiserver kube`: kube-apiserver, its
aggregator, etcd, the replicas as pods)} x {2, 3 operator replicas}, the default lease timings
(15 s / 10 s / 2 s). The replica's pod (the sandbox's supervisor or the launcher's kubelet)
restarts a killed process at once; the new process frees its predecessor's Lease and a warm
standby takes it.

While the leader is killed `kills` times, clients run for the whole setting (failover_probes):
lists and gets of NodeMetrics and discovery calls every 200 ms through the APIService, a watch of
NodeMetrics, and a reporter sending one node's report every 100 ms to the leader the Lease names.
Before each kill the system is in steady state: a leader serving every NodeMetric, every replica
alive, ready, behind the Service and holding a complete copy (the restarted one included). Per
kill, from the SIGKILL: the first successful read (0 when no read failed), the first report
accepted by the new leader, the new leader serving complete data (its own list, directly); the
read and discovery retries and failures, the watch's continues and relists, and whether every
list's resourceVersion kept rising. The agents' self-check is read around each setting's kills.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import ConfigDict, Field
from pydantic import dataclasses as pydantic_dataclasses

from benchmarks import cp_cluster, failover_staleness
from benchmarks.client import Client, Request, say
from benchmarks.cp_cluster import NODEMETRICS, Cluster, Replica
from benchmarks.failover_probes import (
    FAILURES,
    REPORTER_NODE,
    Attempted,
    Poller,
    Reporter,
    Watcher,
    WatchEvent,
    agent_token,
    reader_token,
    stop,
)
from benchmarks.failover_staleness import StalenessConfig, StalenessFigures
from benchmarks.polling import eventually_async
from benchmarks.results import CamelRecord, NanFloat
from colocation.agent import selfcheck

TARGETS = ("builtin", "kube")
NS = "colocation-system"
DISCOVERY = ("/apis", "/apis/metrics.colocation.dev/v1alpha1")
LEASE = "15 s / 10 s / 2 s"  # the operator's defaults (duration / renew deadline / retry period)


class FailoverConfig(CamelRecord):
    model_config = ConfigDict(frozen=True)

    nodes: int = 100
    pods_per_node: int = 5
    targets: tuple[str, ...] = TARGETS
    replica_counts: tuple[int, ...] = (2, 3)
    kills: int = 10
    # The pods' crashLoopBackOff.maxContainerRestartPeriod (`--max-container-restart-period`): with the
    # kubelet's default (300 s) a replica killed again within 10 minutes waits 10 s, 20 s, ... to
    # restart, and ten kills of two or three replicas would measure the back-off, not the failover.
    max_restart_period: float = 1.0
    lease: str = LEASE  # saved with the figures: the Lease timings they were measured with
    # How this run went about it, not what it measured: not saved.
    staleness: StalenessConfig = Field(default_factory=StalenessConfig, exclude=True)  # 0 repetitions: none
    state_dir: Path = Field(default=Path(".bench"), exclude=True)


@pydantic_dataclasses.dataclass(config=ConfigDict(extra="forbid"))
class Kill:
    """One SIGKILL of the leader; times in seconds from the signal. A pydantic dataclass: saved, with
    these names, in benchmarks/plots/failover_kills.json (NaN, a time not measured, as null)."""

    target: str
    replicas: int
    index: int
    lease_moved: NanFloat  # the Lease naming another holder
    first_read: NanFloat  # first successful read after one failed; 0 when none failed
    first_report: NanFloat  # first report accepted by the new leader
    complete: NanFloat  # the new leader serving every NodeMetric (its own list)
    recovered: NanFloat  # steady state again: every replica ready with a complete copy
    restarts: int = 0  # the killed replica's restarts before this kill: > 0, its pod restarts it after a back-off
    reads: int = 0  # lists and gets through the APIService in the window
    read_retries: int = 0
    read_failures: int = 0
    discovery: int = 0
    discovery_retries: int = 0
    discovery_failures: int = 0
    watch_continues: int = 0
    watch_relists: int = 0
    watch_lost: list[str] = field(default_factory=list)  # relists or catch-ups that missed data
    rv_monotonic: bool = True
    rv_backwards: list[str] = field(default_factory=list)  # each list whose resourceVersion was below the one before
    errors: list[str] = field(default_factory=list)  # what failed reads and discovery calls answered

    @property
    def setting(self) -> str:
        return setting_name(self.target, self.replicas)


def setting_name(target: str, replicas: int) -> str:
    return f"{'sandbox' if target == 'builtin' else 'real control plane'}, {replicas} replicas"


class FailoverReport(CamelRecord):
    """What benchmarks/plots/failover_kills.json holds; rendered again from it without killing anything."""

    config: FailoverConfig
    seconds: float = 0.0
    # os.getloadavg() at each setting's end
    load: list[tuple[float, float, float]] = Field(default_factory=list, alias="loadAverages")
    failures: list[str] = Field(default_factory=list)  # settings that could not start or finish, and why
    agent_problems: list[str] = Field(default_factory=list)  # heartbeats or informers that failed meanwhile
    agent_checks: dict[str, str] = Field(default_factory=dict)  # selfcheck summary by setting and process
    outside: list[str] = Field(default_factory=list)  # failures of the clients between the kill windows
    kills: list[Kill] = Field(default_factory=list)
    staleness: StalenessFigures | None = None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _is_ready(cluster: Cluster, replica: Replica) -> bool:
    try:
        status, _ = await cluster.replica_client(replica).send(Request("GET", "/readyz"))
    except FAILURES:  # a replica starting or dying: not ready
        return False
    return status == 200


async def _ready_endpoints(cluster: Cluster) -> int:
    """The operator Service's ready endpoints (EndpointSlices where served, else Endpoints)."""
    status, body = await cluster.client.send(Request(
        "GET", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
               "?labelSelector=kubernetes.io%2Fservice-name%3Dcolocation-operator"))
    if status == 200:
        slices = orjson.loads(body)["items"]
        if slices:
            return sum(len(s.get("ports") or [None]) for item in slices for s in item.get("endpoints") or ()
                       if (s.get("conditions") or {}).get("ready"))
    endpoints = await cluster.client.json(Request("GET", f"/api/v1/namespaces/{NS}/endpoints/colocation-operator"))
    return sum(len(s.get("addresses") or ()) * len(s.get("ports") or ()) for s in endpoints.get("subsets") or ())


async def _steady(cluster: Cluster, operators: int, expected: set[str], timeout: float = 180.0) -> tuple[Replica, str]:
    """A leader serving every NodeMetric; every replica alive, ready, behind the Service, with a complete copy."""
    state: dict[str, tuple[Replica, str]] = {}
    seen: list[str] = []

    async def ready() -> bool:
        holder = await cluster.leader()
        leader = cluster.replica_of(holder) if holder else None
        replicas = cluster.replicas()
        if leader is None or len(replicas) < operators:
            seen[:] = [f"holder {holder!r}, {len(replicas)} replicas"]
            return False
        for replica in replicas:
            served = await cluster.served_metrics(cluster.replica_client(replica))
            if not _alive(replica.pid) or not await _is_ready(cluster, replica) or served is None \
                    or not expected <= set(served):
                seen[:] = [f"{replica.identity}: alive {_alive(replica.pid)}, serving "
                           f"{-1 if served is None else len(set(served) & expected)}/{len(expected)}"]
                return False
        endpoints = await _ready_endpoints(cluster)
        seen[:] = [f"{endpoints} ready endpoints"]
        state["leader"] = (leader, holder)
        return endpoints >= operators

    try:
        await eventually_async(ready, timeout, interval=0.25, message="steady state")
    except TimeoutError:
        raise TimeoutError(f"no steady state within {timeout:.0f} s (last: {'; '.join(seen)})") from None
    return state["leader"]


@dataclass
class Probes:
    lists: Poller
    gets: Poller
    discovery: Poller
    watcher: Watcher
    reporter: Reporter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reads(self) -> list[Attempted]:
        return [*self.lists.done, *self.gets.done]

    def dead(self) -> list[str]:
        return [f"a client stopped: {task.exception()!r}" for task in self.tasks
                if task.done() and not task.cancelled() and task.exception() is not None]


def _count(kill: Kill, probes: Probes, t0: float, t1: float, previous_rv: int) -> int:
    """Fill `kill`'s counts from what the clients did in [t0, t1); the last list's resourceVersion."""
    reads = [a for a in probes.reads() if t0 <= a.started < t1]
    calls = [a for a in probes.discovery.done if t0 <= a.started < t1]
    kill.reads, kill.read_retries, kill.read_failures = len(reads), sum(a.retried for a in reads), \
        sum(a.failed for a in reads)
    kill.discovery, kill.discovery_retries, kill.discovery_failures = len(calls), sum(a.retried for a in calls), \
        sum(a.failed for a in calls)
    kill.errors = [f"{a.kind} at +{a.started - t0:.2f} s: {a.detail}" for a in (*reads, *calls) if a.retried][:10]
    troubled = [a.started for a in reads if a.retried]
    if troubled:
        ok = [a.ended for a in reads if not a.failed and a.ended > min(troubled)]
        kill.first_read = (min(ok) - t0) if ok else float("nan")
    lists = [(t0, previous_rv)] + [(a.started, a.resource_version) for a in sorted(
        probes.lists.done, key=lambda a: a.started) if t0 <= a.started < t1 and not a.failed]
    versions = [rv for _, rv in lists]
    kill.rv_backwards = [f"list at +{b[0] - t0:.2f} s: resourceVersion {b[1]} after {a[1]}"
                         for a, b in itertools.pairwise(lists) if b[1] < a[1]]
    kill.rv_monotonic = not kill.rv_backwards
    outcomes = [o for o in probes.watcher.outcomes if t0 <= o.at < t1]
    kill.watch_continues = sum(o.what == "continue" for o in outcomes)
    kill.watch_relists = sum(o.what == "relist" for o in outcomes)
    kill.watch_lost += [o.what for o in outcomes if o.what not in ("continue", "relist")]
    return versions[-1]


async def _kill(cluster: Cluster, probes: Probes, operators: int, expected: set[str], index: int,
                target: str, previous_rv: int) -> tuple[Kill, int]:
    loop = asyncio.get_running_loop()
    old, old_holder = await _steady(cluster, operators, expected)
    t0 = loop.time()
    os.kill(old.pid, signal.SIGKILL)
    marks: dict[str, float] = {}

    async def moved() -> bool:
        holder = await cluster.leader()
        if holder and holder != old_holder:
            marks.setdefault("lease", loop.time() - t0)
            new = cluster.replica_of(holder)
            if new is not None and "complete" not in marks:
                served = await cluster.served_metrics(cluster.replica_client(new))
                if served is not None and expected <= set(served) and await cluster.leader() == holder:
                    marks["complete"] = loop.time() - t0
        accepted = [s.ended for s in probes.reporter.sent
                    if s.started >= t0 and s.status == 200 and s.holder and s.holder != old_holder]
        if accepted:
            marks["report"] = min(accepted) - t0
        return {"lease", "complete", "report"} <= set(marks)

    await eventually_async(moved, 60.0, interval=0.05, message="a new leader taking reports and serving every node")
    await _steady(cluster, operators, expected)
    recovered = loop.time() - t0
    # The watch delivers what was accepted until now (nothing lost across the failover).
    wanted = probes.reporter.accepted
    try:
        await eventually_async(_caught_up(probes.watcher, wanted, expected), 10.0, interval=0.1,
                               message="the watch catching up")
    except TimeoutError:
        probes.watcher.outcomes.append(WatchEvent(
            loop.time(), f"lost: the watch did not deliver report {wanted} within 10 s "
                         f"(saw {probes.watcher.values.get(REPORTER_NODE)})"))
    kill = Kill(target, operators, index, marks["lease"], 0.0, marks["report"], marks["complete"], recovered,
                old.restarts)
    last_rv = _count(kill, probes, t0, loop.time(), previous_rv)
    say(f"failover ({kill.setting}) kill {index + 1} ({old.identity}, restarted {old.restarts} times before): "
        f"lease moved {kill.lease_moved:.2f} s, report accepted "
        f"{kill.first_report:.2f} s, complete {kill.complete:.2f} s, first read {kill.first_read:.2f} s, "
        f"recovered {recovered:.1f} s; reads {kill.reads} ({kill.read_retries} retried, {kill.read_failures} "
        f"failed), discovery {kill.discovery} ({kill.discovery_retries}/{kill.discovery_failures}), watch "
        f"{kill.watch_continues} continues {kill.watch_relists} relists, lost {kill.watch_lost}, "
        f"rv monotonic {kill.rv_monotonic}")
    return kill, last_rv


def _caught_up(watcher: Watcher, wanted: int, expected: set[str]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return watcher.values.get(REPORTER_NODE, 0) >= wanted and expected <= watcher.names
    return probe


async def _run_setting(config: FailoverConfig, target: str, operators: int, report: FailoverReport) -> None:
    label = setting_name(target, operators)
    say(f"failover ({label}): starting {config.nodes:,} nodes x {config.pods_per_node} pods")
    extra = ("--apiserver", "kube") if target == "kube" else ()
    extra = (*extra, f"--max-container-restart-period={config.max_restart_period:g}")
    try:
        cluster = await cp_cluster.start(config.state_dir / f"failover-{target}-{operators}", nodes=config.nodes,
                                         pods_per_node=config.pods_per_node, operators=operators, extra=extra,
                                         start_timeout=900.0)
    except (TimeoutError, RuntimeError, OSError) as error:  # e.g. no control plane built (`make kube`)
        report.failures.append(f"{label}: the sandbox did not start: {error!r}")
        say(f"failover ({label}): the sandbox did not start: {error!r}")
        return
    client = Client(cluster.endpoint, concurrency=16, timeout=5.0)
    probes: Probes | None = None
    try:
        cluster.replica_token = await reader_token(cluster.client)
        reporter = Reporter(client, await agent_token(cluster.client))
        tasks = [asyncio.create_task(reporter.run())]
        await eventually_async(lambda: cluster.complete(config.nodes + 1), 300.0, interval=1.0,
                               message="every node reporting")
        leader = await cluster.leader_replica()
        assert leader is not None
        expected = set(await cluster.served_metrics(cluster.replica_client(leader)) or ())
        some = sorted(expected - {REPORTER_NODE})[0]
        watcher = Watcher(client, lambda: expected, lambda: reporter.accepted)
        probes = Probes(Poller(client, "list", lambda: [NODEMETRICS]),
                        Poller(client, "get", lambda: [f"{NODEMETRICS}/{some}"]),
                        Poller(client, "discovery", lambda: list(DISCOVERY)), watcher, reporter, tasks)
        tasks += [asyncio.create_task(p.run()) for p in (probes.lists, probes.gets, probes.discovery, watcher)]
        agents_before = await selfcheck.read_sandbox(cluster.state_dir)
        started, rv, windows = asyncio.get_running_loop().time(), 0, []
        for index in range(config.kills):
            kill, rv = await _kill(cluster, probes, operators, expected, index, target, rv)
            report.kills.append(kill)
            windows.append(kill)
        summaries, found = selfcheck.sandbox_verdict(agents_before, await selfcheck.read_sandbox(cluster.state_dir),
                                                     warnings_expected=True)
        report.agent_checks |= {f"{label}, {process}": text for process, text in summaries.items()}
        report.agent_problems += [f"{label}: {problem}" for problem in found]
        counted = sum(k.reads + k.discovery for k in windows)
        total = sum(1 for a in (*probes.reads(), *probes.discovery.done) if a.started >= started)
        outside = [a for a in (*probes.reads(), *probes.discovery.done) if a.failed and a.started < started]
        report.outside += [f"{label}: {a.kind} failed before the first kill: {a.detail}" for a in outside[:5]]
        report.outside += [f"{label}: {problem}" for problem in probes.dead()]
        say(f"failover ({label}): {config.kills} kills; {counted:,} of {total:,} client calls in the kill windows; "
            f"agent self-check: {found or 'no problems'}")
    except (TimeoutError, RuntimeError, *FAILURES) as error:
        report.failures.append(f"{label}: {error!r}")
        say(f"failover ({label}): failed: {error!r}")
    finally:
        if probes is not None:
            await stop(probes.tasks)
            await probes.reporter.close()
        await client.close()
        report.load.append(os.getloadavg())
        await cluster.close()


async def run(config: FailoverConfig) -> FailoverReport:
    started = time.perf_counter()
    report = FailoverReport(config=config)
    for target in config.targets:
        for operators in config.replica_counts:
            await _run_setting(config, target, operators, report)
    if config.staleness.repetitions > 0:
        report.staleness = await failover_staleness.run(dataclasses.replace(config.staleness,
                                                                            state_dir=config.state_dir))
    report.seconds = time.perf_counter() - started
    say(f"failover and staleness: done in {report.seconds:,.0f} s")
    return report
