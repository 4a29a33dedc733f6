"""`colocation agent`: one node's collect, aggregate, report and heartbeat stages, as asyncio tasks.

`NodeAgent` is one node, measured by the real collector or the synthetic one. Its stages are
separate tasks, so none waits for another: collection only appends to the aggregator, the
reporter reads the latest windows when it checks, and the heartbeat renews the Lease whatever
the reports do. Custom metrics add a task that takes samples and one that sends them. On a real
node, enforcement adds a task per NodeSLO strategy (colocation.agent.strategies). The heartbeat
may have a client of its own (`heartbeat_kube`), as simulated agents use.

More: docs/agent.md
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.aggregate import Aggregator, Usage
from colocation.agent.api_connection import agent_api
from colocation.agent.collector import Collector, RealCollector, Sample
from colocation.agent.delivery import Delivery, DirectPut, session_put
from colocation.agent.enforcement import EnforcementOptions, NodeEnforcement, node_enforcement
from colocation.agent.heartbeat import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_REGISTRATION_INTERVAL,
    RENEW_FRACTION,
    NodeHeartbeat,
)
from colocation.agent.host_applications import follow_host_applications
from colocation.agent.kubeapi import KubeApi
from colocation.agent.leader_locator import DEFAULT_POLL_INTERVAL, LeaderLocator
from colocation.agent.node_pods import NodePods, PodView
from colocation.agent.nodemetric import node_metric_from, prod_pods_of, prod_requests
from colocation.agent.peak_predictor import PredictorOptions, ProdPeakPredictor
from colocation.agent.psi_metrics import PsiMetrics
from colocation.agent.report import Reporter, ReportOptions, Snapshot
from colocation.agent.samples import CustomMetrics, SampleBuffer, SampleSender, SampleSource, SendOptions
from colocation.agent.scrape import PodScraper, ScrapeOptions
from colocation.agent.strategies.strategy import NodeStrategy, Round
from colocation.apimachinery.stop_signals import install_stop_signal_handlers
from colocation.koordinator.collect_policy import CollectPolicy, collect_policy
from colocation.kube import permissions
from colocation.kube.informer import Informer, InformerOptions

log = logging.getLogger(__name__)

for _resource, _group in (("pods", ""), ("nodeslos", permissions.SLO_GROUP)):
    for _verb in ("list", "watch"):
        permissions.declared(permissions.AGENT_API_CALLS,
                             permissions.ApiCall(group=_group, resource=_resource, verb=_verb, namespace=None))

@dataclass(frozen=True, kw_only=True)
class NodeAgentOptions:
    collect_interval: float = 1.0
    report: ReportOptions = field(default_factory=ReportOptions)
    lease_namespace: str = permissions.NODE_LEASE_NAMESPACE
    lease_duration: int = DEFAULT_LEASE_DURATION
    heartbeat_interval: float | None = None  # reports (else Lease renewals); default: a quarter of the duration
    lease_registration_interval: float = DEFAULT_REGISTRATION_INTERVAL
    scrape: ScrapeOptions = field(default_factory=ScrapeOptions)
    prediction: PredictorOptions = field(default_factory=PredictorOptions)  # prod pods' peak (Mid-tier)

    @property
    def heartbeat_every(self) -> float:
        return self.heartbeat_interval or self.lease_duration * RENEW_FRACTION


class NodeAgent:
    def __init__(self, node: str, kube: KubeApi, collector: Collector, *, locator: LeaderLocator,
                 direct: DirectPut, metrics: AgentMetrics, options: NodeAgentOptions | None = None,
                 watch_pods: bool = True, follow_nodeslo: bool = True,
                 report_slots: asyncio.Semaphore | None = None, apiserver_slots: asyncio.Semaphore | None = None,
                 lease_slots: asyncio.Semaphore | None = None, heartbeat_kube: KubeApi | None = None,
                 sample_source: Callable[[NodePods], SampleSource] | None = None,
                 enforcement: NodeEnforcement | None = None, wall: Callable[[], float] = time.time,
                 pod_views: Sequence[PodView[Any]] = ()) -> None:
        self.node = node
        self.kube = kube
        self.collector = collector
        self.options = options or NodeAgentOptions()
        self.metrics = metrics
        self.watch_pods = watch_pods
        self.follow_nodeslo = follow_nodeslo
        self.enforcement = enforcement or NodeEnforcement(node)
        self.pods = NodePods((*self.enforcement.pod_views(), *pod_views))
        self.policy = CollectPolicy()
        self.aggregator = Aggregator(self.policy.aggregate_duration_seconds, self.policy.durations,
                                     sample_interval_seconds=self.options.collect_interval)
        self.predictor = ProdPeakPredictor(self.options.prediction)
        self.prod_reclaimable: Usage | None = None  # as the latest snapshot says
        # Reports and sample batches take the same way to the leader, and share its bound on requests.
        self.delivery = Delivery(kube, locator, direct, timeout=self.options.report.request_timeout,
                                 slots=report_slots, apiserver_slots=apiserver_slots)
        self.enforcement.connect(self.delivery)  # evictions ask the leader the way reports go
        self.reporter = Reporter(node, self.delivery, self.snapshot, metrics=metrics, on_accepted=self._report_accepted,
                                 options=dataclasses.replace(self.options.report,
                                                             heartbeat_interval=self.options.heartbeat_every))
        self.custom_metrics: CustomMetrics | None = None
        if sample_source is not None and self.options.scrape.interval > 0:
            buffer = SampleBuffer(
                dropped=lambda reason, count: metrics.custom_samples_dropped.labels(reason).inc(count))
            sender = SampleSender(node, self.delivery, buffer, metrics=metrics, options=SendOptions(
                interval=self.options.scrape.interval, request_timeout=self.options.report.request_timeout))
            self.custom_metrics = CustomMetrics(sample_source(self.pods), sender, metrics)
        self.heartbeat = NodeHeartbeat(heartbeat_kube or kube, node, namespace=self.options.lease_namespace,
                                       lease_duration_seconds=self.options.lease_duration,
                                       renew_interval=self.options.heartbeat_every,
                                       registration_interval=self.options.lease_registration_interval,
                                       reports=self.reporter.age, metrics=metrics, slots=lease_slots, wall=wall)
        self.last_sample_at: float | None = None  # monotonic
        self.last_sample: Sample | None = None
        self._wall = wall
        self.watches = self.informers()

    # ---- stages ------------------------------------------------------------------------------------

    def _report_accepted(self) -> None:
        self.heartbeat.heard()

    def collect_once(self) -> None:
        sample = self.collector.sample(self._wall())
        self.aggregator.add(sample)
        self.predictor.observe(sample.timestamp, prod_pods_of(sample, self.pods.by_uid, self.pods.by_name))
        self.metrics.samples.inc()
        self.last_sample_at = time.monotonic()
        self.last_sample = sample

    def run_once(self, strategy: NodeStrategy) -> None:
        """One round of a strategy on the latest sample (none older than two collections) and the pods
        the watch last saw."""
        self.enforcement.run_once(strategy, Round(None if self._stale() else self.last_sample, self.pods.by_uid))

    def _stale(self) -> bool:
        return self.last_sample_at is None or \
            time.monotonic() - self.last_sample_at > 2 * max(self.options.collect_interval, 0.5)

    async def _collect_loop(self) -> None:
        await self._every(self.options.collect_interval, self.collect_once, "sampling failed")

    async def _every(self, interval: float, action: Callable[[], None], failure: str) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                action()
            except Exception:  # a bug in one round must not end the loop
                log.exception(failure, extra={"node": self.node})
            # A fixed rate; after a stall, skip the missed ticks instead of bursting to catch up.
            next_at = max(next_at + interval, loop.time())
            await asyncio.sleep(next_at - loop.time())

    def snapshot(self) -> Snapshot | None:
        now = self._wall()
        reclaimable = self.prod_reclaimable = self.predictor.reclaimable(now, prod_requests(self.pods.by_name))
        body = node_metric_from(self.aggregator, self.node, now, by_uid=self.pods.by_uid, by_name=self.pods.by_name,
                                prod_reclaimable=reclaimable)
        return Snapshot.of(body) if body is not None else None

    def apply_policy(self, policy: CollectPolicy) -> None:
        if policy == self.policy:
            return
        log.info("collection policy changed", extra={"node": self.node, "policy": str(policy)})
        self.policy = policy
        self.aggregator.configure(window_seconds=policy.aggregate_duration_seconds, durations=policy.durations)
        if isinstance(self.collector, RealCollector):
            self.collector.memory_policy = policy.memory_policy
        self.reporter.max_interval = float(policy.report_interval_seconds or self.options.report.max_interval)

    async def _nodeslo_sync(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self._nodeslo_changed(items[0] if items else None, listed=True)

    async def _nodeslo_event(self, type_: str, obj: dict[str, Any]) -> None:
        self._nodeslo_changed(None if type_ == "DELETED" else obj)

    def _nodeslo_changed(self, nodeslo: dict[str, Any] | None, *, listed: bool = False) -> None:
        self.apply_policy(collect_policy(nodeslo))
        if isinstance(self.collector, RealCollector):  # simulated nodes have no host applications
            self.collector.host_applications = follow_host_applications(self.collector.host_applications, nodeslo,
                                                                        self.node)
        self.enforcement.nodeslo_changed(nodeslo, listed=listed)

    def _count_failure(self, resource: str) -> Callable[[str], None]:
        return lambda reason: self.metrics.informer_failures.labels(resource, reason).inc()

    def informers(self) -> list[Informer[Any]]:
        transport = self.kube.transport()
        informers = []
        if self.watch_pods:
            informers.append(Informer(transport, "/api/v1/pods", on_sync=self.pods.on_sync,
                                      on_event=self.pods.on_event, name=f"pods@{self.node}",
                                      options=InformerOptions(field_selector=f"spec.nodeName={self.node}"),
                                      on_error=self._count_failure("pods")))
        if self.follow_nodeslo:
            informers.append(Informer(transport, f"/apis/{permissions.SLO_GROUP}/v1alpha1/nodeslos",
                                      on_sync=self._nodeslo_sync, on_event=self._nodeslo_event,
                                      name=f"nodeslo@{self.node}",
                                      options=InformerOptions(field_selector=f"metadata.name={self.node}"),
                                      on_error=self._count_failure("nodeslos")))
        return informers

    def healthy(self) -> bool:
        """Collection is alive: a sample within ten intervals (at least 30 s)."""
        if self.last_sample_at is None:
            return True  # starting
        return time.monotonic() - self.last_sample_at < max(10 * self.options.collect_interval, 30.0)

    async def run(self, start_delay: float = 0.0) -> None:
        """Run every stage until cancelled, after `start_delay` seconds (simulated nodes start spread out)."""
        if start_delay > 0:
            await asyncio.sleep(start_delay)
        tasks = [asyncio.create_task(self._collect_loop(), name=f"collect@{self.node}"),
                 asyncio.create_task(self.reporter.run(), name=f"report@{self.node}"),
                 asyncio.create_task(self.heartbeat.run(), name=f"heartbeat@{self.node}")]
        tasks += [asyncio.create_task(informer.run(), name=informer.name) for informer in self.watches]
        if self.custom_metrics is not None:
            tasks.append(asyncio.create_task(self.custom_metrics.run(), name=f"custom-metrics@{self.node}"))
        tasks += [asyncio.create_task(self._every(strategy.interval, functools.partial(self.run_once, strategy),
                                                  strategy.failure), name=f"{strategy.name}@{self.node}")
                  for strategy in self.enforcement.strategies if strategy.interval is not None]
        tasks += [asyncio.create_task(coroutine, name=f"{name}@{self.node}")
                  for name, coroutine in self.enforcement.background()]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


# ---- the process ---------------------------------------------------------------------------------

def track_agents(metrics: AgentMetrics, agents: Sequence[NodeAgent]) -> LoopLag:
    """The process's metrics that read its agents at scrape time (report ages, Leases, informers), and
    the event loop's lag: run the LoopLag returned alongside the agents."""
    lag = LoopLag()
    metrics.loop_lag.set_function(lag.largest)
    metrics.nodes.set(len(agents))
    metrics.track_report_age(lambda: [agent.reporter.age() for agent in agents])
    metrics.prod_reclaimable.labels("cpu").set_function(
        lambda: sum(usage.cpu_millis for agent in agents if (usage := agent.prod_reclaimable)) / 1000)
    metrics.prod_reclaimable.labels("memory").set_function(
        lambda: sum(usage.memory_bytes for agent in agents if (usage := agent.prod_reclaimable)))
    metrics.track_heartbeats(lambda: [agent.heartbeat for agent in agents])
    metrics.track_informers(lambda: [informer.synced.is_set() and not informer.failing
                                     for agent in agents for informer in agent.watches])
    return lag


class LoopLag:
    """How late the event loop wakes a timer: the largest delay of the last `window / tick` ticks (at
    least `window` seconds). A process short of CPU (simulated agents, too many of them) shows here first."""

    def __init__(self, tick: float = 0.1, window: float = 10.0) -> None:
        self.tick = tick
        self._lags: deque[float] = deque(maxlen=max(1, round(window / tick)))

    def largest(self) -> float:
        return max(self._lags, default=0.0)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.tick)
            self._lags.append(max(0.0, loop.time() - before - self.tick))


class StartupError(Exception):
    """The agent cannot start; the message is one line, fit for a CLI."""


async def serve_metrics(metrics: AgentMetrics, healthy: Callable[[], bool], host: str,
                        *, port: int) -> web.AppRunner | None:
    """Plain HTTP /healthz and /metrics (port 0: none)."""
    if not port:
        return None

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok") if healthy() else web.Response(status=500, text="collection stalled")

    async def exposition(request: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", exposition)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as error:
        await runner.cleanup()
        raise StartupError(f"cannot serve metrics on {host}:{port}: {error.strerror}") from None
    log.info("serving metrics", extra={"address": f"http://{host}:{port}"})
    return runner


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    node_name: str
    kubeconfig: Path | None = None
    proc_root: Path = Path("/proc")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    node: NodeAgentOptions = field(default_factory=NodeAgentOptions)
    metrics_bind_address: str = "0.0.0.0"
    metrics_port: int = 0  # none; the command line's default is colocation.agent.agent_command.DEFAULT_METRICS_PORT
    operator_namespace: str = permissions.OPERATOR_NAMESPACE
    leader_poll_interval: float = DEFAULT_POLL_INTERVAL
    enforcement: EnforcementOptions = field(default_factory=EnforcementOptions)


async def run_until(stop: asyncio.Event, *coroutines: Any) -> None:
    """Run the coroutines as tasks until `stop` is set (or one of them ends), then cancel them all."""
    tasks = [asyncio.create_task(coroutine) for coroutine in coroutines]
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in [*tasks, stopper]:
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)


async def run_agent(config: AgentConfig, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    install_stop_signal_handlers(stop.set)
    metrics = AgentMetrics()
    scrape = config.node.scrape
    async with agent_api(config.kubeconfig) as kube, aiohttp.ClientSession() as session, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=scrape.concurrency)) as scrape_session:
        locator = LeaderLocator(kube, config.operator_namespace, poll_interval=config.leader_poll_interval,
                                timeout=config.node.report.request_timeout)
        locator.subscribe(lambda leader: metrics.leader_changes.inc())
        collector = RealCollector(config.proc_root, config.cgroup_root)
        enforcement = node_enforcement(config.node_name, config.cgroup_root, config.proc_root,
                                       options=config.enforcement, kube=kube, metrics=metrics,
                                       cpus=lambda: collector.cpu_count,
                                       timeout=config.node.report.request_timeout)
        agent = NodeAgent(config.node_name, kube, collector, locator=locator,
                          direct=session_put(session, kube.bearer_token, learn_replicas=locator.learn_replicas),
                          metrics=metrics, options=config.node,
                          enforcement=enforcement,
                          sample_source=lambda pods: PodScraper(
                              scrape_session, lambda: pods.scrape_targets.values(), scrape, metrics=metrics,
                              node=config.node_name).scrape_all)
        lag = track_agents(metrics, [agent])
        PsiMetrics(lambda: agent.last_sample.psi if agent.last_sample else {}).register(metrics.registry)
        runner = await serve_metrics(metrics, agent.healthy, config.metrics_bind_address, port=config.metrics_port)
        log.info("agent started", extra={"node": config.node_name, "proc_root": str(config.proc_root),
                                         "cgroup_root": str(config.cgroup_root),
                                         "scrape_interval": scrape.interval or "off",
                                         "enforcement": str(config.enforcement)})
        try:
            with metrics.counting_logged_errors():
                try:
                    await run_until(stop, locator.run(), lag.run(), agent.run())
                finally:
                    if config.enforcement.restore_on_exit:
                        await enforcement.restore(config.node.report.request_timeout)
        finally:
            if runner is not None:
                with contextlib.suppress(Exception):
                    await runner.cleanup()
    return 0


def run(config: AgentConfig) -> int:
    return asyncio.run(run_agent(config))
