"""Failover and staleness: how long the system takes to react when an operator or an agent goes.

Failover: the leader replica is sent SIGKILL (a crash: its Lease must expire) or SIGTERM (a
rolling update: it releases the Lease), and we time, from the signal, (1) the Lease naming another
holder, (2) that replica, now ready (its /readyz answers only on the leader), serving every node's
NodeMetric directly, (3) the APIService serving all of them through the sandbox from the new
leader (the aggregation layer routes to the Service's ready endpoints, probed every second as a
readiness probe would be: we count from the moment the Endpoints no longer list the old leader). The
replicas run under the sandbox's supervisor, which restarts a dead one after the kubelet's
back-off (10 s, doubling), so we run three: a warm standby is always there.

Staleness: an agent is stopped with SIGSTOP (the process hangs; nothing is closed or released) and
we time, from the signal, its Node losing its batch resources, relative to the node grace period.
First the real agent (one node, several times), then the simulated-agents process (every other
node at once; each node's delay is a sample).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from benchmarks import cp_cluster
from benchmarks.client import Request, say
from benchmarks.cp_cluster import NODEMETRICS, Cluster, Replica, wait_until
from benchmarks.stats import Latency
from colocation.agent import selfcheck

OPERATOR_ENDPOINTS = "/api/v1/namespaces/colocation-system/endpoints/colocation-operator"


@dataclass(frozen=True)
class LeaseSettings:
    name: str
    duration: float
    renew_deadline: float
    retry_period: float

    @property
    def args(self) -> tuple[str, ...]:
        return (f"--lease-duration={self.duration:g}", f"--renew-deadline={self.renew_deadline:g}",
                f"--retry-period={self.retry_period:g}")

    def describe(self) -> str:
        return f"{self.duration:g} s / {self.renew_deadline:g} s / {self.retry_period:g} s"


DEFAULT_LEASE = LeaseSettings("default", 15.0, 10.0, 2.0)
SHORT_LEASE = LeaseSettings("short", 2.0, 1.5, 0.25)


@dataclass(frozen=True)
class FailoverConfig:
    nodes: int = 1000
    pods_per_node: int = 10
    operators: int = 3
    repetitions: int = 2
    lease_settings: tuple[LeaseSettings, ...] = (DEFAULT_LEASE, SHORT_LEASE)
    staleness_nodes: int = 50  # its own sandbox: agents renewing every grace/4 s cost the API 4N/grace writes/s
    grace: float = 5.0  # --node-grace-period for the staleness runs
    evaluation_interval: float = 0.5
    staleness_repetitions: int = 3
    state_dir: Path = Path(".bench")


@dataclass(frozen=True)
class Takeover:
    settings: str
    signal: str
    lease_moved: float  # seconds from the signal
    direct: float  # the new leader ready and serving all N NodeMetrics
    apiservice: float  # the APIService serving all N from the new leader


@dataclass(frozen=True)
class StalenessFigures:
    grace: float
    evaluation_interval: float
    one_agent: list[float]  # the real agent: seconds from SIGSTOP to its batch resources removed
    all_simulated: Latency  # every simulated node when their process is stopped
    simulated_nodes: int
    removed: int  # simulated nodes whose batch resources went within the wait
    simulated_samples: list[float] = field(default_factory=list)


@dataclass
class FailoverReport:
    config: FailoverConfig
    takeovers: list[Takeover] = field(default_factory=list)
    staleness: StalenessFigures | None = None
    list_seconds: float = math.nan  # one full NodeMetric list from the leader, for scale
    failures: list[str] = field(default_factory=list)  # runs that could not start or finish, and why
    agent_problems: list[str] = field(default_factory=list)  # heartbeats or informers that failed meanwhile
    agent_checks: dict[str, str] = field(default_factory=dict)  # selfcheck summary by lease setting and process
    seconds: float = 0.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _not_ready(cluster: Cluster, replica: Replica) -> bool:
    """Whether the operator Service's Endpoints no longer list this replica as ready."""
    endpoints = await cluster.client.json(Request("GET", OPERATOR_ENDPOINTS))
    ready = {port["port"] for subset in endpoints.get("subsets") or () if subset.get("addresses")
             for port in subset.get("ports") or ()}
    return replica.port not in ready


async def _leader_replica(cluster: Cluster) -> Replica | None:
    holder = await cluster.leader()
    return cluster.replica_of(holder) if holder else None


async def _steady(cluster: Cluster, timeout: float = 120.0) -> Replica:
    """Wait for a leader serving all N NodeMetrics and a standby with a complete copy."""
    state: dict[str, object] = {}
    served_counts: dict[str, int] = {}

    async def ready() -> bool:
        leader = await _leader_replica(cluster)
        if leader is None or not _alive(leader.pid):
            return False
        served = await cluster.served_metrics(cluster.replica_client(leader))
        served_counts[f"{leader.identity} (leader)"] = -1 if served is None else len(served)
        if served is None or len(served) < cluster.nodes:
            return False
        for standby in cluster.replicas():
            if standby.identity != leader.identity and _alive(standby.pid):
                copy = await cluster.served_metrics(cluster.replica_client(standby))
                served_counts[standby.identity] = -1 if copy is None else len(copy)
                if copy is not None and len(copy) >= cluster.nodes:
                    state["leader"] = leader
                    return True
        return False

    try:
        await wait_until(ready, timeout, 1.0, "a leader with every NodeMetric and a warm standby")
    except TimeoutError:
        counts = ", ".join(f"{name}: {count:,}" for name, count in served_counts.items())
        raise TimeoutError(f"no leader serving all {cluster.nodes:,} NodeMetrics with a warm standby within "
                           f"{timeout:.0f} s (NodeMetrics served: {counts or 'no leader'})") from None
    return state["leader"]  # type: ignore[return-value]


async def _is_ready(cluster: Cluster, replica: Replica) -> bool:
    try:
        status, _ = await cluster.replica_client(replica).send(Request("GET", "/readyz"))
    except Exception:  # a replica starting or dying: not ready
        return False
    return status == 200


async def _takeover(cluster: Cluster, settings: LeaseSettings, sig: signal.Signals) -> Takeover:
    old = await _steady(cluster)
    loop = asyncio.get_running_loop()
    n = cluster.nodes
    t0 = loop.time()
    os.kill(old.pid, sig)
    # (1) the Lease moves.
    new: Replica | None = None
    while new is None:
        holder = await cluster.leader()
        if holder and not holder.startswith(old.identity + "_"):
            new = cluster.replica_of(holder)
        else:
            await asyncio.sleep(0.05)  # polling the Lease
        if loop.time() - t0 > settings.duration + 60:
            raise TimeoutError("the Lease did not move to another replica")
    lease_moved = loop.time() - t0

    async def direct() -> float:
        assert new is not None
        while True:
            if await _is_ready(cluster, new):
                served = await cluster.served_metrics(cluster.replica_client(new))
                if served is not None and len(served) >= n:
                    return loop.time() - t0
            await asyncio.sleep(0.05)

    async def apiservice() -> float:
        assert new is not None
        # Until then, a 200 may still come from the old leader: a SIGTERM'd one serves while it shuts down.
        await wait_until(lambda: _not_ready(cluster, old), 120.0, 0.05, "the old leader's endpoint gone")
        while True:
            status, body = await cluster.client.send(Request("GET", NODEMETRICS))
            if status == 200 and len(orjson.loads(body)["items"]) >= n:
                return loop.time() - t0
            await asyncio.sleep(0.1)

    direct_s, apiservice_s = await asyncio.wait_for(asyncio.gather(direct(), apiservice()), 120.0)
    say(f"failover ({settings.name} lease, {sig.name}): lease moved {lease_moved:.2f} s, new leader serving all "
        f"{n:,} {direct_s:.2f} s, via the APIService {apiservice_s:.2f} s")
    return Takeover(settings.name, sig.name, lease_moved, direct_s, apiservice_s)


async def _list_seconds(cluster: Cluster) -> float:
    leader = await _leader_replica(cluster)
    if leader is None:
        return math.nan
    started = time.perf_counter()
    await cluster.served_metrics(cluster.replica_client(leader))
    return time.perf_counter() - started


# ---- staleness ---------------------------------------------------------------------------------

async def _batch_removed_times(cluster: Cluster, names: set[str], rv: str, t0: float,
                               timeout: float) -> dict[str, float]:
    """Watch the Nodes from `rv`: for each of `names`, seconds from `t0` to its batch resources going."""
    loop = asyncio.get_running_loop()
    removed: dict[str, float] = {}
    path = f"/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds={int(timeout) + 5}"
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            async with cluster.client.session.get(path, headers={"Accept": "application/json"}) as response:
                async for line in response.content:
                    event = orjson.loads(line)
                    node = event.get("object") or {}
                    name = (node.get("metadata") or {}).get("name")
                    if name in names and name not in removed and cp_cluster.BATCH_CPU not in (
                            (node.get("status") or {}).get("allocatable") or {}):
                        removed[name] = loop.time() - t0
                        if len(removed) == len(names):
                            break
    return removed


async def _stop_and_time(cluster: Cluster, pid: int, names: set[str], timeout: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    await wait_until(lambda: _has_batch(cluster, names), 120.0, 0.5, "batch resources on the nodes to stop")
    listed = await cluster.client.json(Request("GET", "/api/v1/nodes?limit=1"))
    t0 = loop.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        return await _batch_removed_times(cluster, names, listed["metadata"]["resourceVersion"], t0, timeout)
    finally:
        os.kill(pid, signal.SIGCONT)


async def _has_batch(cluster: Cluster, names: set[str]) -> bool:
    return names <= await cluster.nodes_with_batch()


async def _staleness(cluster: Cluster, config: FailoverConfig) -> StalenessFigures:
    timeout = config.grace * 3 + 30
    real_pid = cluster.agent_pids(simulated=False)[0]
    nodes = await cluster.client.json(Request("GET", "/api/v1/nodes?labelSelector=colocation.dev/simulated%3Dfalse"))
    real_node = nodes["items"][0]["metadata"]["name"]
    one: list[float] = []
    for i in range(config.staleness_repetitions):
        removed = await _stop_and_time(cluster, real_pid, {real_node}, timeout)
        one += removed.values()
        say(f"staleness {i + 1}/{config.staleness_repetitions}: the real agent stopped; batch resources gone after "
            + (f"{removed[real_node]:.2f} s" if removed else "more than the wait") + f" (grace {config.grace:g} s)")
    simulated_pid = cluster.agent_pids(simulated=True)[0]
    simulated = {f"sim-node-{i}" for i in range(1, cluster.nodes)}
    say(f"staleness: stopping the simulated agents ({len(simulated):,} nodes) at once")
    removed = await _stop_and_time(cluster, simulated_pid, simulated, timeout)
    latency = Latency.of(list(removed.values()))
    say(f"staleness: {len(removed):,}/{len(simulated):,} simulated nodes lost their batch resources; p50 "
        f"{latency.p50:.2f} s, max {latency.max:.2f} s (grace {config.grace:g} s)")
    return StalenessFigures(config.grace, config.evaluation_interval, one, latency, len(simulated), len(removed),
                            sorted(removed.values()))


# ---- the runs ----------------------------------------------------------------------------------

async def _run_settings(config: FailoverConfig, settings: LeaseSettings, report: FailoverReport) -> None:
    say(f"failover ({settings.name} lease {settings.describe()}): starting the sandbox with {config.nodes:,} nodes, "
        f"{config.operators} operator replicas")
    cluster = await cp_cluster.start(config.state_dir / f"failover-{settings.name}", nodes=config.nodes,
                                     pods_per_node=config.pods_per_node, operators=config.operators,
                                     operator_args=settings.args)
    try:
        try:
            waited = await wait_until(lambda: _complete(cluster), 240.0, 1.0, "every node reporting")
        except TimeoutError as error:
            why = f"{error}; leaders that gave up the Lease (renew deadline missed): {_lost_leases(cluster)}"
            report.failures.append(f"{settings.name} lease, start: {why}")
            say(f"failover ({settings.name} lease): {why}")
            return
        say(f"failover: all {config.nodes:,} nodes reported after {waited:.0f} s")
        if math.isnan(report.list_seconds):
            report.list_seconds = await _list_seconds(cluster)
        agents_before = await selfcheck.read_sandbox(cluster.state_dir)
        for sig in (signal.SIGKILL, signal.SIGTERM):
            for run in range(config.repetitions):
                try:
                    report.takeovers.append(await _takeover(cluster, settings, sig))
                except TimeoutError as error:
                    # The cluster did not recover from the previous run: say so in the report and go on.
                    why = (f"{error or 'a request to the sandbox timed out'}; leaders that gave up the Lease "
                           f"(renew deadline missed) so far: {_lost_leases(cluster)}")
                    report.failures.append(f"{settings.name} lease, {sig.name}, run {run + 1}: {why}")
                    say(f"failover ({settings.name} lease, {sig.name}): {why}")
                    return
        # Killing leaders must not disturb what agents do against the API server: their Leases and informers.
        summaries, found = selfcheck.sandbox_verdict(agents_before, await selfcheck.read_sandbox(cluster.state_dir),
                                                     warnings_expected=True)
        report.agent_checks |= {f"{settings.name} lease, {process}": text for process, text in summaries.items()}
        report.agent_problems += [f"{settings.name} lease: {problem}" for problem in found]
        for problem in found:
            say(f"failover ({settings.name} lease): agent self-check: {problem}")
    finally:
        await cluster.close()


async def _run_staleness(config: FailoverConfig, report: FailoverReport) -> None:
    operator_args = (f"--node-grace-period={config.grace:g}", f"--evaluation-interval={config.evaluation_interval:g}")
    # The agents' Lease follows the grace period (renewed every quarter of it), as by default (40 s).
    agent_args = (f"--lease-duration={max(1, round(config.grace))}",)
    say(f"staleness: starting the sandbox with {config.staleness_nodes:,} nodes, grace {config.grace:g} s")
    cluster = await cp_cluster.start(config.state_dir / "staleness", nodes=config.staleness_nodes,
                                     pods_per_node=config.pods_per_node, operators=2, operator_args=operator_args,
                                     agent_args=agent_args)
    try:
        await wait_until(lambda: _complete(cluster), 300.0, 1.0, "every node reporting")
        report.staleness = await _staleness(cluster, config)
    finally:
        await cluster.close()


def _lost_leases(cluster: Cluster) -> int:
    """How many times a leader gave up the Lease because it could not renew it in time (from the replicas' logs)."""
    return sum(path.read_text(errors="replace").count("lost the leader lease")
               for path in cluster.state_dir.glob("colocation-operator-*.log"))


async def _complete(cluster: Cluster) -> bool:
    leader = await _leader_replica(cluster)
    if leader is None:
        return False
    served = await cluster.served_metrics(cluster.replica_client(leader))
    return served is not None and len(served) >= cluster.nodes


async def run(config: FailoverConfig) -> FailoverReport:
    started = time.perf_counter()
    report = FailoverReport(config)
    for settings in config.lease_settings:
        await _run_settings(config, settings, report)
    if config.staleness_repetitions > 0:
        await _run_staleness(config, report)
    report.seconds = time.perf_counter() - started
    say(f"failover and staleness: done in {report.seconds:,.0f} s")
    return report
