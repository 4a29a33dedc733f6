"""Many simulated agents in one process: synthetic load, the real reporter and heartbeat.

Each simulated node has a token of its own (bound to a pod on that node, so the leader's node
rule holds for it as for a real agent), but all of them share one aiohttp session, one leader
locator (one read of the leader Lease per interval for the whole process, not one per node) and
two semaphores that bound how many reports and Lease renewals are in flight at once, so a
failover that makes every node report at the same moment queues here instead of piling on the
new leader.

Like real agents, simulated ones watch their pods (the synthetic collector names them; the watch
says which of them the cluster really has on the node) but not their NodeSLO: they use the
default collection policy. Every scrape interval each simulated node sends the custom metrics
of its pods that carry the scrape annotation (synthetic series, not fetched over HTTP) through
the same sample sender as a real agent; `custom_metrics=False` (or a scrape interval of 0) turns
that off, which load tests of NodeMetric reports alone want: it is one more PUT per node per
scrape interval.

The nodes file is JSON: `[{"node": NAME, "token": TOKEN, "seed": 0, "profile": "steady",
"pods": 10, "cpuMillis": 16000, "memoryBytes": 68719476736}, ...]`; only node and token are required.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import yaml

from colocation.agent.delivery import session_put
from colocation.agent.kubeapi import SessionKube
from colocation.agent.leader import DEFAULT_POLL_INTERVAL, LeaderLocator
from colocation.agent.metrics import AgentMetrics
from colocation.agent.runtime import (
    NodeAgent,
    NodeAgentOptions,
    PodDirectory,
    install_signal_handlers,
    run_until,
    serve_metrics,
)
from colocation.agent.samples import MetricSample, SampleSource
from colocation.agent.synthetic import PROFILES, Profile, SyntheticCollector
from colocation.kube import permissions

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 32


@dataclass(frozen=True)
class SimulatedNode:
    node: str
    token: str
    seed: int = 0
    profile: Profile = "steady"
    pods: int = 10
    cpu_millis: int = 16_000
    memory_bytes: int = 64 * 2**30

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> SimulatedNode:
        profile = entry.get("profile", "steady")
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r} for node {entry.get('node')!r}; one of {PROFILES}")
        return cls(str(entry["node"]), str(entry["token"]), int(entry.get("seed", 0)), cast(Profile, profile),
                   int(entry.get("pods", 10)), int(entry.get("cpuMillis", 16_000)),
                   int(entry.get("memoryBytes", 64 * 2**30)))

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "token": self.token, "seed": self.seed, "profile": self.profile,
                "pods": self.pods, "cpuMillis": self.cpu_millis, "memoryBytes": self.memory_bytes}

    def collector(self) -> SyntheticCollector:
        return SyntheticCollector(self.node, self.pods, self.profile, seed=self.seed,
                                  capacity_cpu_millis=self.cpu_millis, capacity_memory_bytes=self.memory_bytes)


def load_simulated_nodes(path: Path) -> list[SimulatedNode]:
    entries = orjson.loads(path.read_bytes())
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of nodes")
    return [SimulatedNode.from_json(entry) for entry in entries]


def cluster_of(kubeconfig: Path) -> tuple[str, ssl.SSLContext]:
    """The API server URL and a TLS context trusting its CA, from a kubeconfig's current context."""
    config = yaml.safe_load(kubeconfig.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    if cluster.get("certificate-authority-data"):
        tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
    else:
        tls = ssl.create_default_context()
    return str(cluster["server"]), tls


@dataclass(frozen=True)
class SimulationConfig:
    nodes: tuple[SimulatedNode, ...]
    kubeconfig: Path
    node: NodeAgentOptions = field(default_factory=NodeAgentOptions)
    metrics_bind_address: str = "0.0.0.0"
    metrics_port: int = 0
    operator_namespace: str = permissions.OPERATOR_NAMESPACE
    leader_poll_interval: float = DEFAULT_POLL_INTERVAL
    concurrency: int = DEFAULT_CONCURRENCY
    custom_metrics: bool = True  # pods expose synthetic custom metrics (every node.scrape.interval)


def _constant(token: str) -> Callable[[], str]:
    return lambda: token


def synthetic_source(collector: SyntheticCollector) -> Callable[[PodDirectory], SampleSource]:
    """The custom metrics of the simulated pods the node's watch shows with the scrape annotation."""

    def source(pods: PodDirectory) -> SampleSource:
        async def take() -> list[MetricSample]:
            return collector.custom_samples(pods=pods.scrape_targets)

        return take

    return source


async def run_simulation(config: SimulationConfig, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    install_signal_handlers(stop)
    server, tls = cluster_of(config.kubeconfig)
    metrics = AgentMetrics()
    connector = aiohttp.TCPConnector(limit=2 * config.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        report_slots = asyncio.Semaphore(config.concurrency)
        lease_slots = asyncio.Semaphore(config.concurrency)
        agents: list[NodeAgent] = []
        locator: LeaderLocator | None = None
        for spec in config.nodes:
            kube = SessionKube(session, server, tls, _constant(spec.token))
            if locator is None:
                locator = LeaderLocator(kube, config.operator_namespace, poll_interval=config.leader_poll_interval,
                                        timeout=config.node.report.request_timeout)
                locator.subscribe(lambda leader: metrics.leader_changes.inc())  # once per process, not per node
            collector = spec.collector()
            agent = NodeAgent(spec.node, kube, collector, locator=locator,
                              direct=session_put(session, kube.bearer_token), metrics=metrics,
                              options=config.node, follow_nodeslo=False,
                              report_slots=report_slots, lease_slots=lease_slots,
                              sample_source=synthetic_source(collector) if config.custom_metrics else None)
            agents.append(agent)
        if locator is None:
            log.warning("no simulated nodes to run")
            return 0
        metrics.track_report_age(lambda: [agent.reporter.age() for agent in agents])
        runner = await serve_metrics(metrics, lambda: all(agent.healthy() for agent in agents),
                                     config.metrics_bind_address, config.metrics_port)
        log.info("simulated agents started", extra={"nodes": len(agents)})
        try:
            await run_until(stop, locator.run(), *(agent.run() for agent in agents))
        finally:
            if runner is not None:
                with contextlib.suppress(Exception):
                    await runner.cleanup()
    return 0
