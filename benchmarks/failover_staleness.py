"""Staleness: how long a hung agent's node keeps its batch resources.

An agent is stopped with SIGSTOP (the process hangs; nothing is closed or released) and we time,
from the signal, its Node losing its batch resources, relative to the node grace period. First the
real agent (one node, several times), then the simulated-agents process (every other node at once;
each node's delay is a sample). Its own sandbox: agents renewing every grace/4 s cost the API
4N/grace writes/s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import orjson
from pydantic import ConfigDict, Field

from benchmarks import cp_cluster
from benchmarks.client import Request, say
from benchmarks.cp_cluster import Cluster
from benchmarks.polling import eventually_async
from benchmarks.results import CamelRecord
from benchmarks.stats import Latency


@dataclass(frozen=True)
class StalenessConfig:
    nodes: int = 50
    pods_per_node: int = 5
    grace: float = 5.0  # --node-grace-period for the staleness runs
    evaluation_interval: float = 0.5
    repetitions: int = 3
    state_dir: Path = Path(".bench")


class StalenessFigures(CamelRecord):
    """Saved in benchmarks/plots/failover_kills.json, the simulated nodes' samples as `simulated`."""

    model_config = ConfigDict(frozen=True)

    grace: float
    evaluation_interval: float = 0.5
    one_agent: list[float]  # the real agent: seconds from SIGSTOP to its batch resources removed
    # Every simulated node when their process is stopped: seconds to its batch resources removed,
    # for those whose went within the wait.
    simulated_samples: list[float] = Field(default_factory=list, alias="simulated")
    simulated_nodes: int

    @property
    def all_simulated(self) -> Latency:
        return Latency.of(self.simulated_samples)

    @property
    def removed(self) -> int:
        """Simulated nodes whose batch resources went within the wait."""
        return len(self.simulated_samples)


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
    await eventually_async(lambda: _has_batch(cluster, names), 120.0, interval=0.5,
                           message="batch resources on the nodes to stop")
    listed = await cluster.client.json(Request("GET", "/api/v1/nodes?limit=1"))
    t0 = loop.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        return await _batch_removed_times(cluster, names, listed["metadata"]["resourceVersion"], t0, timeout)
    finally:
        os.kill(pid, signal.SIGCONT)


async def _has_batch(cluster: Cluster, names: set[str]) -> bool:
    return names <= await cluster.nodes_with_batch()


async def _staleness(cluster: Cluster, config: StalenessConfig) -> StalenessFigures:
    timeout = config.grace * 3 + 30
    real_pid = cluster.agent_pids(simulated=False)[0]
    nodes = await cluster.client.json(Request("GET", "/api/v1/nodes?labelSelector=colocation.dev/simulated%3Dfalse"))
    real_node = nodes["items"][0]["metadata"]["name"]
    one: list[float] = []
    for i in range(config.repetitions):
        removed = await _stop_and_time(cluster, real_pid, {real_node}, timeout)
        one += removed.values()
        say(f"staleness {i + 1}/{config.repetitions}: the real agent stopped; batch resources gone after "
            + (f"{removed[real_node]:.2f} s" if removed else "more than the wait") + f" (grace {config.grace:g} s)")
    simulated_pid = cluster.agent_pids(simulated=True)[0]
    simulated = {f"sim-node-{i}" for i in range(1, cluster.nodes)}
    say(f"staleness: stopping the simulated agents ({len(simulated):,} nodes) at once")
    removed = await _stop_and_time(cluster, simulated_pid, simulated, timeout)
    latency = Latency.of(list(removed.values()))
    say(f"staleness: {len(removed):,}/{len(simulated):,} simulated nodes lost their batch resources; p50 "
        f"{latency.p50:.2f} s, max {latency.max:.2f} s (grace {config.grace:g} s)")
    return StalenessFigures(grace=config.grace, evaluation_interval=config.evaluation_interval, one_agent=one,
                            simulated_samples=sorted(removed.values()), simulated_nodes=len(simulated))


async def run(config: StalenessConfig) -> StalenessFigures:
    operator_args = (f"--node-grace-period={config.grace:g}", f"--evaluation-interval={config.evaluation_interval:g}")
    # The agents' Lease follows the grace period (renewed every quarter of it), as by default (40 s).
    agent_args = (f"--lease-duration={max(1, round(config.grace))}",)
    say(f"staleness: starting the sandbox with {config.nodes:,} nodes, grace {config.grace:g} s")
    cluster = await cp_cluster.start(config.state_dir / "staleness", nodes=config.nodes,
                                     pods_per_node=config.pods_per_node, operators=2, operator_args=operator_args,
                                     agent_args=agent_args)
    try:
        await eventually_async(cluster.complete, 300.0, interval=1.0, message="every node reporting")
        return await _staleness(cluster, config)
    finally:
        await cluster.close()
