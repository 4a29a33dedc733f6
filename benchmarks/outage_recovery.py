"""Control-plane outages (issue 34): kube-apiserver, then etcd, frozen; how soon is every node's data fresh again?

    python -m benchmarks.run --suite outage-recovery [--outage-nodes 100 --outage-freeze-seconds 45 ...]

One `colocation sandbox --apiserver kube` (kube-apiserver, etcd, kwok; 2 operator replicas, the
default lease timings; agents and operator at their defaults unless `--outage-agent-arg` /
`--outage-operator-arg`) with `--outage-nodes` nodes (default 100; the real control plane holds
about 1,000 on a 2-core machine), started afresh for each component. In the steady state (a
leader, every replica alive and ready, the agents' self-check clean over a window), the component
is stopped with SIGSTOP for `--outage-freeze-seconds` (past the 15 s lease duration) and continued
with SIGCONT just after a whole second. Two watches run meanwhile: NodeMetrics through the
aggregated API (what a reader sees) and the Nodes; after the thaw NodeMetrics are also listed
every second until every node is fresh, since a watch made before the freeze can wait on the
frozen connection until its 30 s read timeout. From them, per freeze (outage_recovery_report): seconds
from the thaw until every node's NodeMetric has an updateTime after the thaw, until every Node
offers batch resources again for good; over the recovery and a settle window, batch resources
removed, eviction Events and pods deleted; the verdict "≤ 5 s after the thaw: met / missed", or
inconclusive when the simulated agents' self-check shows problems the freeze does not explain.

The components are found as the sandbox's descendants (benchmarks.processes.descendants) whose
program is kube-apiserver or etcd and whose arguments name the sandbox's state directory.

A sandbox per component, not one for both: the sandbox's kubelet restarts a replica that exited
(the leader that lost its Lease) only once its status write to kube-apiserver and the new token
succeed, and after a 45 s freeze of kube-apiserver it was seen not to restart it at all
(2026-11-28), which leaves no standby for the etcd freeze: each freeze starts from the same state.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from benchmarks import cp_cluster, machine, processes
from benchmarks.client import JSON, Client, Request, say
from benchmarks.cp_cluster import BATCH_CPU, NODEMETRICS, Cluster
from benchmarks.failover_probes import FAILURES, reader_token
from benchmarks.outage_recovery_report import (
    RAW,
    SUITE,
    Freeze,
    OutageConfig,
    OutageReport,
    batch_restored,
    freeze_problems,
    fresh_after,
    removals,
    save_raw,
    write,
)
from benchmarks.polling import eventually_async
from colocation.agent import selfcheck
from colocation.apimachinery.clock import parse_whole_seconds
from colocation.apimachinery.stop_signals import on_stop_signals

__all__ = ["SUITE", "OutageConfig", "add_arguments", "config_from", "run", "run_suite"]

COMPONENTS = ("kube-apiserver", "etcd")
EVICTION_REASONS = ("ColocationEvicting", "ColocationEvicted")
NS = "colocation-system"
HEARTBEAT = 10.0  # the agents' default heartbeat interval (a quarter of --lease-duration 40)
READ_TIMEOUT = 30.0  # a watch silent this long is watched again (bookmarks come every 10 s)
LIST_EVERY = 1.0  # after a thaw, NodeMetrics are also listed this often until every node is fresh
LAG_EVERY = 2.0  # seconds between reads of the agents' self-check during a recovery (event loop lag)
BASELINE_TRIES = 3  # steady-state windows tried for a clean self-check before the freeze (start-up settles)


def component_pid(root: int, state_dir: Path, program: str) -> int:
    """The pid of the sandbox's `program` (kube-apiserver, etcd): a descendant of `root` running that
    binary whose arguments name a file under `state_dir` (its certificates, its etcd data)."""
    under = f"{state_dir.resolve()}{os.sep}"
    found = []
    for pid in processes.descendants(root):
        with contextlib.suppress(OSError):
            args = processes.command_line(pid)
            if args and Path(args[0]).name == program and any(arg.startswith(under) for arg in args[1:]):
                found.append(pid)
    if len(found) != 1:
        raise RuntimeError(f"{program} of the sandbox in {state_dir}: found pids {found}")
    return found[0]


def component_of(args: list[str]) -> str:
    """What a process of the sandbox stands for, from its arguments."""
    program = Path(args[0]).name if args else "?"
    if not program.startswith("python"):
        return program  # kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok
    if "--simulated-nodes" in args:
        return "simulated agents"
    if "operator" in args:
        return "operator replicas"
    if "agent" in args:
        return "node agent"
    return "sandbox"


class CpuUse:
    """CPU seconds used by the sandbox's processes (and this one) since the first `read`, by
    component. Read often: a process that exits (a replica restarting) keeps what was last read of it."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}

    def read(self) -> None:
        initial = not self.last  # a process first seen later started since: from 0
        for pid in {*processes.descendants(self.root), os.getpid()}:
            with contextlib.suppress(OSError, ValueError, IndexError):
                used = processes.cpu_seconds(pid)
                known = self.last.get(pid)
                # The name as first read: an exited child's command line reads empty until it is reaped.
                name = known[0] if known else "benchmark client" if pid == os.getpid() \
                    else component_of(processes.command_line(pid))
                self.first.setdefault(pid, used if initial else 0.0)
                self.last[pid] = (name, used)

    def used(self) -> dict[str, float]:
        by_component: dict[str, float] = {}
        for pid, (name, used) in self.last.items():
            by_component[name] = by_component.get(name, 0.0) + used - self.first.get(pid, 0.0)
        return {name: round(value, 2) for name, value in by_component.items()}


class Observer:
    """Two watches for the whole run, each listed and watched again whenever it ends: every node's
    NodeMetric updateTime through the aggregated API, and whether every Node offers batch resources.
    Each keeps what it saw with when it saw it (the loop's clock)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.reports: dict[str, list[tuple[float, int]]] = {}
        self.offers: dict[str, list[tuple[float, bool]]] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._follow(NODEMETRICS, self._report)),
                      asyncio.create_task(self._follow("/api/v1/nodes", self._node))]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _report(self, obj: dict[str, Any], at: float) -> None:
        name, updated = obj["metadata"]["name"], (obj.get("status") or {}).get("updateTime")
        if updated:
            seen = self.reports.setdefault(name, [])
            value = parse_whole_seconds(updated)
            if not seen or seen[-1][1] != value:
                seen.append((at, value))

    def _node(self, obj: dict[str, Any], at: float) -> None:
        offered = BATCH_CPU in ((obj.get("status") or {}).get("allocatable") or {})
        seen = self.offers.setdefault(obj["metadata"]["name"], [])
        if not seen or seen[-1][1] != offered:
            seen.append((at, offered))

    async def _follow(self, path: str, see: Callable[[dict[str, Any], float], None]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(*FAILURES, KeyError):
                async with self.client.session.get(
                        f"{path}?watch=true&allowWatchBookmarks=true", headers={"Accept": JSON},
                        timeout=aiohttp.ClientTimeout(total=None, sock_read=READ_TIMEOUT)) as response:
                    if response.status == 200:
                        async for line in response.content:
                            event = orjson.loads(line)
                            if event.get("type") in ("ADDED", "MODIFIED"):
                                see(event["object"], loop.time())
            await asyncio.sleep(0.2)  # a reflector's pause before it watches again

    async def list_reports(self) -> None:
        """One list of NodeMetrics through the aggregated API, seen as the watch's events are."""
        listed = await _answer(self.client.json(Request("GET", NODEMETRICS)))
        at = asyncio.get_running_loop().time()
        for item in (listed or {}).get("items") or ():
            self._report(item, at)

    def fresh_nodes(self, names: set[str], since: float) -> set[str]:
        """The nodes whose latest NodeMetric has an updateTime of `since` (whole seconds) or later."""
        return {name for name in names if (self.reports.get(name) or [(0.0, -1)])[-1][1] >= since}

    def offering(self, names: set[str]) -> set[str]:
        return {name for name in names if (self.offers.get(name) or [(0.0, False)])[-1][1]}


async def _answer(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except (*FAILURES, RuntimeError):
        return None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _replicas_ready(cluster: Cluster, operators: int) -> bool:
    """Every replica's process alive and ready (asked directly), and the Service's endpoints all ready."""
    replicas = cluster.replicas()
    if len(replicas) < operators:
        return False
    for replica in replicas:
        answer = await _answer(cluster.replica_client(replica).send(Request("GET", "/readyz")))
        if not _alive(replica.pid) or answer is None or answer[0] != 200:
            return False
    slices = await _answer(cluster.client.json(Request(
        "GET", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
               "?labelSelector=kubernetes.io%2Fservice-name%3Dcolocation-operator")))
    return slices is not None and sum(1 for item in slices["items"] for e in item.get("endpoints") or ()
                                      if (e.get("conditions") or {}).get("ready")) >= operators


async def _read(cluster: Cluster, path: str) -> Any:
    """A GET through kube-apiserver, asked again (as client-go would) while it answers 5xx or fails."""
    for attempt in range(10):
        try:
            return await cluster.client.json(Request("GET", path))
        except (*FAILURES, RuntimeError):
            if attempt == 9:
                raise
            await asyncio.sleep(1.0)  # the client's backoff before it asks again
    raise AssertionError("unreachable")


async def _pods(cluster: Cluster, nodes: set[str]) -> dict[str, str]:
    listed = await _read(cluster, "/api/v1/pods")
    return {p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in listed["items"]
            if p["spec"].get("nodeName") in nodes and not p["metadata"].get("deletionTimestamp")}


async def _eviction_events(cluster: Cluster) -> dict[str, str]:
    found: dict[str, str] = {}
    for reason in EVICTION_REASONS:
        listed = await _read(cluster, f"/api/v1/events?fieldSelector=reason%3D{reason}")
        found |= {e["metadata"]["uid"]: f"{reason}: {e['involvedObject'].get('namespace')}/"
                                        f"{e['involvedObject'].get('name')}" for e in listed["items"]}
    return found


async def _list_version(cluster: Cluster) -> int:
    listed = await _read(cluster, NODEMETRICS)
    return int(listed["metadata"]["resourceVersion"])


async def _steady(cluster: Cluster, observer: Observer, names: set[str], simulated: set[str],
                  operators: int, timeout: float) -> None:
    """A leader, every replica alive and ready (the standby warm), every node's NodeMetric reported
    within a heartbeat and a half, every simulated Node with batch resources."""
    async def ready() -> bool:
        if not await _answer(cluster.leader()) or not await _replicas_ready(cluster, operators):
            return False
        fresh = observer.fresh_nodes(names, int(time.time() - 1.5 * HEARTBEAT))
        return fresh == names and observer.offering(simulated) == simulated

    await eventually_async(ready, timeout, interval=1.0,
                           message="the steady state (a leader, a ready standby, fresh data, batch resources)")


async def _freeze(config: OutageConfig, cluster: Cluster, observer: Observer, component: str, names: set[str],
                  simulated: set[str], operators: int) -> Freeze:
    freeze = Freeze(component, len(names))
    loop = asyncio.get_running_loop()
    for attempt in range(1, BASELINE_TRIES + 1):
        await _steady(cluster, observer, names, simulated, operators, 600.0)
        checks_start = await selfcheck.read_sandbox(cluster.state_dir)
        say(f"outage recovery [{component}]: steady; {config.baseline_seconds:g} s of steady state for the "
            f"agents' self-check ({attempt}/{BASELINE_TRIES})")
        await asyncio.sleep(config.baseline_seconds)  # the steady window the agents' self-check judges
        checks_before = await selfcheck.read_sandbox(cluster.state_dir)
        baseline = selfcheck.sandbox_problems(checks_start, checks_before)
        if not baseline:
            break
        say(f"outage recovery [{component}]: the agents' self-check found {baseline}")
    pods, events = await _pods(cluster, simulated), await _eviction_events(cluster)
    freeze.resource_version_before = await _list_version(cluster)
    freeze.leader_before = (await _answer(cluster.leader()) or "").rpartition("_")[0]
    offered = observer.offering(set(observer.offers))  # every Node offering batch resources now: none may lose them
    pid = component_pid(cluster.server.pid, cluster.state_dir, component)

    say(f"outage recovery [{component}]: SIGSTOP (pid {pid}) for {config.freeze_seconds:g} s")
    os.kill(pid, signal.SIGSTOP)
    stopped = loop.time()
    try:
        await asyncio.sleep(config.freeze_seconds)  # the outage itself
        await asyncio.sleep(1.02 - time.time() % 1)  # thawed just after a whole second: updateTime has whole seconds
    finally:
        os.kill(pid, signal.SIGCONT)
    thawed, thaw_second = loop.time(), int(time.time())
    freeze.seconds = thawed - stopped
    cpu = CpuUse(cluster.server.pid)
    cpu.read()

    lag: dict[str, float] = {}
    last_lag_read = last_list = -math.inf

    async def recovered() -> bool:
        nonlocal last_lag_read, last_list
        cpu.read()
        if math.isnan(freeze.lease_taken) and loop.time() - last_list >= LIST_EVERY:
            with contextlib.suppress(*FAILURES, RuntimeError):
                if await cluster.lease_renewed_since(thaw_second):
                    freeze.lease_taken = loop.time() - thawed
        if loop.time() - last_list >= LIST_EVERY:
            # As `kubectl get` would: the watch made before the freeze may still wait on the frozen
            # kube-apiserver's connection until its read timeout, timing the reader, not the recovery.
            last_list = loop.time()
            await observer.list_reports()
        if loop.time() - last_lag_read >= LAG_EVERY:
            last_lag_read = loop.time()
            with contextlib.suppress(*FAILURES):
                for name, health in (await selfcheck.read_sandbox(cluster.state_dir)).items():
                    lag[name] = max(lag.get(name, 0.0), health.loop_lag)
        return observer.fresh_nodes(names, thaw_second) == names and observer.offering(offered) == offered

    try:
        polled = loop.time()
        await eventually_async(recovered, config.recovery_timeout, interval=0.1,
                               message="every node fresh, every Node with batch")
        took = loop.time() - polled
        say(f"outage recovery [{component}]: thawed; every node fresh and every Node with batch resources after "
            f"{took:.1f} s (as polled); {config.settle_seconds:g} s more")
    except TimeoutError as error:
        say(f"outage recovery [{component}]: {error}")
    cpu.read()
    freeze.cpu, freeze.cpu_window = cpu.used(), loop.time() - thawed
    await asyncio.sleep(config.settle_seconds)  # watching for late removals and evictions
    end = loop.time()

    freeze.fresh = {name: fresh_after(observer.reports.get(name, []), thawed, thaw_second) for name in sorted(names)}
    freeze.batch = {name: batch_restored(observer.offers.get(name, []), thawed, end) for name in sorted(offered)}
    freeze.removed = sorted((name, at - thawed) for name in offered
                            for at in removals(observer.offers.get(name, []), stopped, end))
    after_pods, after_events = await _pods(cluster, simulated), await _eviction_events(cluster)
    freeze.pods_deleted = sorted(name for uid, name in pods.items() if uid not in after_pods)
    freeze.evictions = sorted(what for uid, what in after_events.items() if uid not in events)
    freeze.resource_version_after = await _list_version(cluster)
    freeze.leader_after = (await _answer(cluster.leader()) or "").rpartition("_")[0]
    checks_after = await selfcheck.read_sandbox(cluster.state_dir)
    freeze.agent_checks, _ = selfcheck.sandbox_verdict(checks_before, checks_after, warnings_expected=True)
    freeze.agent_problems = [f"before the freeze: {p}" for p in baseline] + freeze_problems(
        checks_before, checks_after, lag)
    say(f"outage recovery [{component}]: every NodeMetric fresh {freeze.all_fresh:.1f} s after the thaw, every Node "
        f"with batch {freeze.all_batch:.1f} s; {len(freeze.removed)} removals, {len(freeze.evictions)} eviction "
        f"Events, {len(freeze.pods_deleted)} pods deleted; leader {freeze.leader_before} -> {freeze.leader_after}; "
        f"{freeze.verdict}; agents: {freeze.agent_problems or 'no problems'}")
    return freeze


async def run(config: OutageConfig, operators: int = 2) -> OutageReport:
    report = OutageReport(config=config)
    started = time.perf_counter()
    with on_stop_signals():
        for component in config.components:
            report.freezes.append(await _run_component(config, component, operators))
    report.seconds = time.perf_counter() - started
    say(f"outage recovery: {report.verdict} in {report.seconds / 60:,.1f} min")
    return report


async def _run_component(config: OutageConfig, component: str, operators: int) -> Freeze:
    """A fresh sandbox, its steady state, `component` frozen and thawed, and what followed."""
    started = time.perf_counter()
    # Absolute: the components' arguments name it, and that is how they are found.
    state_dir = (config.state_dir / f"outage-recovery-{component}-{config.nodes}").resolve()
    shutil.rmtree(state_dir, ignore_errors=True)  # a fresh etcd: the real one keeps its data there
    say(f"outage recovery [{component}]: starting the real control plane with {config.nodes:,} nodes x "
        f"{config.pods_per_node} pods")
    try:
        cluster = await cp_cluster.start(state_dir, nodes=config.nodes, pods_per_node=config.pods_per_node,
                                         operators=operators, operator_args=config.operator_args,
                                         agent_args=config.agent_args, extra=("--apiserver", "kube"),
                                         start_timeout=1800.0)
    except (TimeoutError, RuntimeError, OSError) as error:  # e.g. no control plane built (`make kube`)
        say(f"outage recovery [{component}]: the sandbox did not start: {error!r}")
        return Freeze(component, config.nodes, failure=f"the sandbox did not start: {error!r}")
    observer = Observer(cluster.client)
    observer.start()
    names: set[str] = set()
    try:
        cluster.replica_token = await reader_token(cluster.client)  # replicas take tokens, not the admin's cert
        polled = time.monotonic()
        await eventually_async(lambda: cluster.complete(), 1800.0, interval=2.0, message="every node reporting")
        waited = time.monotonic() - polled
        names = {item["metadata"]["name"] for item in (await _read(cluster, NODEMETRICS))["items"]}
        simulated = {name for name in names if name.startswith("sim-node-")}
        await eventually_async(lambda: _offering(observer, simulated), 900.0, interval=2.0,
                               message="every Node with batch resources")
        setup = time.perf_counter() - started
        say(f"outage recovery [{component}]: {len(names):,} nodes reporting after {waited:.0f} s; every simulated "
            f"Node with batch resources after {setup:.0f} s")
        freeze = await _freeze(config, cluster, observer, component, names, simulated, operators)
        freeze.setup_seconds = setup
        return freeze
    except (TimeoutError, RuntimeError, OSError, *FAILURES) as error:
        say(f"outage recovery [{component}]: failed: {error!r}")
        return Freeze(component, len(names) or config.nodes, failure=repr(error))
    finally:
        await observer.stop()
        await cluster.close()


async def _offering(observer: Observer, simulated: set[str]) -> bool:
    return observer.offering(simulated) == simulated


def add_arguments(p: argparse.ArgumentParser) -> None:
    c = OutageConfig()
    p.add_argument("--outage-nodes", type=int, default=c.nodes,
                   help="outage-recovery: nodes of the real control plane (about 1,000 at most on 2 cores).")
    p.add_argument("--outage-pods-per-node", type=int, default=c.pods_per_node)
    p.add_argument("--outage-component", action="append", choices=COMPONENTS, default=None,
                   help="outage-recovery: the component frozen, in order (repeatable; default: kube-apiserver, "
                        "then etcd).")
    p.add_argument("--outage-freeze-seconds", type=float, default=c.freeze_seconds,
                   help="outage-recovery: seconds each component stays stopped (SIGSTOP).")
    p.add_argument("--outage-settle-seconds", type=float, default=c.settle_seconds,
                   help="outage-recovery: seconds watched after the recovery for late removals and evictions.")
    p.add_argument("--outage-baseline-seconds", type=float, default=c.baseline_seconds,
                   help="outage-recovery: seconds of steady state before each freeze (the agents' self-check).")
    p.add_argument("--outage-operator-arg", action="append", default=None,
                   help="outage-recovery: an extra argument for the operator replicas (repeatable).")
    p.add_argument("--outage-agent-arg", action="append", default=None,
                   help="outage-recovery: an extra argument for the agents (repeatable; default: "
                        f"{' '.join(c.agent_args)}, replaced by any given).")


def config_from(args: argparse.Namespace, state_dir: Path) -> OutageConfig:
    return OutageConfig(nodes=args.outage_nodes, pods_per_node=args.outage_pods_per_node,
                        components=tuple(args.outage_component or COMPONENTS),
                        freeze_seconds=args.outage_freeze_seconds, settle_seconds=args.outage_settle_seconds,
                        baseline_seconds=args.outage_baseline_seconds,
                        operator_args=tuple(args.outage_operator_arg or ()),
                        agent_args=tuple(args.outage_agent_arg) if args.outage_agent_arg is not None
                        else OutageConfig().agent_args, state_dir=state_dir)


def run_suite(config: OutageConfig, output: Path, command: str, raw: Path = RAW) -> OutageReport:
    where = machine.describe()  # before the run: its outputs (tracked files) would read as "+changes"
    report = asyncio.run(run(config))
    save_raw(report, raw, where)
    write(output, report, where, command)
    say(f"wrote the {SUITE} section of {output} and {raw}")
    return report
