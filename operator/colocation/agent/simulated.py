"""Many simulated agents in one process: synthetic load, the real reporter and heartbeat.

Each node has its own token and pod watch; the process shares one leader locator and bounded
pools for Lease renewals and for reports and sample batches, so heartbeats never wait behind
other traffic. `socket_budget` says how many open files that takes; the process raises its
limit to it or refuses to start. The nodes start spread over one heartbeat interval. Simulated
agents watch their pods but not their NodeSLO. `custom_metrics=False` (or a scrape interval of
0) sends no custom metrics.

Why the pools, and the nodes file's format: docs/agent.md#simulated-agents
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import logging
import resource
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import yaml

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.delivery import session_put
from colocation.agent.kubeapi import SessionKube
from colocation.agent.leader_locator import DEFAULT_POLL_INTERVAL, LeaderLocator
from colocation.agent.node_pods import NodePods, PodView
from colocation.agent.runtime import (
    NodeAgent,
    NodeAgentOptions,
    StartupError,
    run_until,
    serve_metrics,
    track_agents,
)
from colocation.agent.samples import MetricSample, SampleSource
from colocation.agent.synthetic import PROFILES, Profile, SyntheticCollector, annotated_usage
from colocation.apimachinery.stop_signals import install_stop_signal_handlers
from colocation.kube import permissions

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 32
# Files the process opens besides its connections: the metrics server and its clients, logs, the
# event loop's own, a restarting leader's extra connections.
_FILE_MARGIN = 64


@dataclass(frozen=True, kw_only=True)
class SimulatedNode:
    node: str
    token: str
    seed: int = 0
    profile: Profile = "steady"
    pods: int = 10
    cpu_millis: int = 16_000
    memory_bytes: int = 64 * 2**30
    usage_annotations: bool = False  # each pod's usage is what its annotations say (synthetic.annotated_usage)
    scraped_share: float = 1.0  # of the pods that carry the scrape annotations (synthetic.is_scraped)

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> SimulatedNode:
        profile = entry.get("profile", "steady")
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r} for node {entry.get('node')!r}; one of {PROFILES}")
        return cls(node=str(entry["node"]), token=str(entry["token"]), seed=int(entry.get("seed", 0)),
                   profile=cast(Profile, profile), pods=int(entry.get("pods", 10)),
                   cpu_millis=int(entry.get("cpuMillis", 16_000)),
                   memory_bytes=int(entry.get("memoryBytes", 64 * 2**30)),
                   usage_annotations=bool(entry.get("usageAnnotations", False)),
                   scraped_share=float(entry.get("scrapedShare", 1.0)))

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "token": self.token, "seed": self.seed, "profile": self.profile,
                "pods": self.pods, "cpuMillis": self.cpu_millis, "memoryBytes": self.memory_bytes,
                "usageAnnotations": self.usage_annotations, "scrapedShare": self.scraped_share}

    def collector(self) -> SyntheticCollector:
        return SyntheticCollector(self.node, self.pods, self.profile, seed=self.seed,
                                  capacity_cpu_millis=self.cpu_millis, capacity_memory_bytes=self.memory_bytes,
                                  scraped_share=self.scraped_share)


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


@dataclass(frozen=True, kw_only=True)
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


def synthetic_source(collector: SyntheticCollector) -> Callable[[NodePods], SampleSource]:
    """The custom metrics of the simulated pods the node's watch shows with the scrape annotation."""

    def source(pods: NodePods) -> SampleSource:
        async def take() -> list[MetricSample]:
            return collector.custom_samples(pods=pods.scrape_targets)

        return take

    return source


def follow_usage_annotations(collector: SyntheticCollector) -> PodView[tuple[str, str, int, int]]:
    """A view of the node's pods' usage annotations, which `collector` then reports as their usage."""
    view = PodView("simulated-usage", annotated_usage)
    collector.follow_annotations(lambda: {(namespace, name): (cpu, memory)
                                          for namespace, name, cpu, memory in view.by_uid.values()})
    return view


def socket_budget(nodes: int, concurrency: int) -> int:
    """Connections the simulation may hold at once: a watch per node, the Lease and request pools."""
    return nodes + concurrency + (2 * concurrency + 1)


def ensure_open_files(needed: int) -> int:
    """Raise the soft open-files limit to `needed` if the hard one allows; the limit now. StartupError if not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard == resource.RLIM_INFINITY or hard >= needed:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
            soft = needed
        else:
            raise StartupError(f"the simulation needs {needed} open files (a connection per node's watch, and "
                               f"the request pools) but the limit is {hard}: run fewer nodes or raise the limit")
    return soft


def start_delays(nodes: int, renew_interval: float) -> list[float]:
    """When each node starts: evenly over one renew interval, so their heartbeats are evenly phased."""
    return [renew_interval * index / nodes for index in range(nodes)]


async def run_simulation(config: SimulationConfig, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    install_stop_signal_handlers(stop.set)
    if not config.nodes:
        log.warning("no simulated nodes to run")
        return 0
    server, tls = cluster_of(config.kubeconfig)
    sockets = socket_budget(len(config.nodes), config.concurrency)
    open_files = ensure_open_files(sockets + _FILE_MARGIN)
    metrics = AgentMetrics()
    # Three pools (see the module's doc): watches, Lease renewals, and everything else. Each bounded
    # pool has a semaphore of its size in front, so requests wait there (in order), not in the pool.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=len(config.nodes))) as watches, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=config.concurrency)) as leases, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2 * config.concurrency + 1)) as requests:
        report_slots = asyncio.Semaphore(config.concurrency)
        apiserver_slots = asyncio.Semaphore(config.concurrency)
        lease_slots = asyncio.Semaphore(config.concurrency)
        first = config.nodes[0]
        locator = LeaderLocator(SessionKube(requests, server, tls, token=_constant(first.token)),
                                config.operator_namespace, poll_interval=config.leader_poll_interval,
                                timeout=config.node.report.request_timeout)
        locator.subscribe(lambda leader: metrics.leader_changes.inc())  # once per process, not per node
        agents: list[NodeAgent] = []
        for spec in config.nodes:
            token = _constant(spec.token)
            kube = SessionKube(requests, server, tls, token=token, watch_session=watches)
            collector = spec.collector()
            views = (follow_usage_annotations(collector),) if spec.usage_annotations else ()
            agent = NodeAgent(spec.node, kube, collector, locator=locator,
                              direct=session_put(requests, kube.bearer_token, learn_replicas=locator.learn_replicas),
                              metrics=metrics,
                              options=config.node, follow_nodeslo=False,
                              report_slots=report_slots, apiserver_slots=apiserver_slots,
                              lease_slots=lease_slots,
                              heartbeat_kube=SessionKube(leases, server, tls, token=token),
                              sample_source=synthetic_source(collector) if config.custom_metrics else None,
                              pod_views=views)
            agents.append(agent)
        # The agents live as long as the process: leave them out of the garbage collector's full
        # collections, which would otherwise walk every simulated pod every few seconds.
        gc.freeze()
        watch_count = sum(len(agent.watches) for agent in agents)
        assert watch_count <= len(config.nodes), "one informer per simulated node: the watch pool has one slot each"
        lag = track_agents(metrics, agents)
        runner = await serve_metrics(metrics, lambda: all(agent.healthy() for agent in agents),
                                     config.metrics_bind_address, port=config.metrics_port)
        delays = start_delays(len(agents), config.node.heartbeat_every)
        log.info("simulated agents started", extra={
            "nodes": len(agents), "sockets": sockets, "open_files_limit": open_files,
            "concurrency": config.concurrency, "start_spread_seconds": round(delays[-1], 2)})
        try:
            with metrics.counting_logged_errors():
                await run_until(stop, locator.run(), lag.run(),
                                *(agent.run(delay) for agent, delay in zip(agents, delays, strict=True)))
        finally:
            if runner is not None:
                with contextlib.suppress(Exception):
                    await runner.cleanup()
    return 0
