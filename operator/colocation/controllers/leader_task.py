"""The controllers, on every replica: the Node, Lease and Pod informers, Kopf's watches and the evaluation loop.

Nodes, the agents' Leases and Pods are followed by informers of our own
(`colocation.kube.informer`); Kopf watches our own resources and the ConfigMap. In the operator
the Pods come from the replica's one Pod informer, shared with the metric APIs and the extender,
which the process runs and which feeds `pod_consumer()` (`own_pod_informer=False`); without it
`run()` runs a Pod informer of its own. `Controllers.run()` starts with the process on every
replica, and a standby computes the formulas again every `PREPARE_EVERY` seconds. Only the
evaluation, which writes, waits for `promote()`, and then evaluates every node at once; the first
evaluation also waits until every pod is listed. With evaluation shards (`shards`), a replica also
evaluates while it holds a shard (`shards_changed()`), and only the nodes of the shards it holds;
NodeSLOs and deleted nodes stay the leader's.
Handlers write nothing, and every write is fenced by the election (`writers`). If Kopf or the
loop fails, `run()` raises and the process stops.

Why: docs/controllers.md and docs/operator.md#warm-standbys
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from colocation.apimachinery.confirmed_clock import ConfirmedClock
from colocation.apimachinery.event_wait import wait_set
from colocation.controllers import kopf_app
from colocation.controllers.cluster import ClusterState, slim_node
from colocation.controllers.configsource import ConfigSource
from colocation.controllers.controller_metrics import ControllerMetrics
from colocation.controllers.evaluation_shards import ShardView
from colocation.controllers.events import EventRecorder
from colocation.controllers.health import NodeHealthTracker
from colocation.controllers.kept_pod import KeptPod
from colocation.controllers.noderesource_controller import NodeResourceReconciler
from colocation.controllers.nodeslo import NodeSLOReconciler
from colocation.controllers.settings import ControllerSettings
from colocation.controllers.writers import KubeWriter
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation.kube.informer import Informer, Transport
from colocation.kube.shared_informer import InformerConsumer, bound_pods_informer
from colocation.kube.transport import kube_transport
from colocation.nodemetrics.storage_interface import NodeMetricReader

log = logging.getLogger(__name__)

_LIST_NODES = permissions.declared(permissions.OPERATOR_API_CALLS,
                                   permissions.ApiCall(group="", resource="nodes", verb="list", namespace=None))
_WATCH_NODES = permissions.declared(permissions.OPERATOR_API_CALLS,
                                    permissions.ApiCall(group="", resource="nodes", verb="watch", namespace=None))
_LIST_LEASES = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall(
    group="coordination.k8s.io", resource="leases", verb="list", namespace=permissions.NODE_LEASE_NAMESPACE))
_WATCH_LEASES = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall(
    group="coordination.k8s.io", resource="leases", verb="watch", namespace=permissions.NODE_LEASE_NAMESPACE))
_LIST_ACCOUNTS = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall(
    group="", resource="serviceaccounts", verb="list", namespace=permissions.OPERATOR_NAMESPACE))
_WATCH_ACCOUNTS = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall(
    group="", resource="serviceaccounts", verb="watch", namespace=permissions.OPERATOR_NAMESPACE))
AGENT_LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{permissions.NODE_LEASE_NAMESPACE}/leases"
MIN_SPACING = 0.5  # seconds between two evaluations, however many changes wake the loop
# Seconds between a standby's passes over the formulas (`NodeResourceReconciler.prepare`): a new
# leader's first evaluation computes at most this much of the reports again.
PREPARE_EVERY = 1.0
# Seconds an agent's write or a standby's feed may wait for a new leader's first evaluation
# (`first_evaluation_done`).
FIRST_EVALUATION_HOLD = 2.0


class Controllers:
    def __init__(self, api: client.ApiClient, store: NodeMetricReader, settings: ControllerSettings, *,
                 namespace: str, identity: str, registry: CollectorRegistry,
                 write_budget: Callable[[], float] | None = None, shards: ShardView | None = None,
                 copy_clock: ConfirmedClock | None = None, own_pod_informer: bool = True) -> None:
        self.api = api
        # False: the process's shared Pod informer feeds `pod_consumer()`, and `run()` opens no pod watch.
        self.own_pod_informer = own_pod_informer
        self.settings = settings
        self.namespace = namespace
        self.metrics = ControllerMetrics(registry)
        self.state = ClusterState()
        self.writer = KubeWriter(api, self.metrics, EventRecorder(time.time, identity),
                                 concurrency=settings.write_concurrency, write_budget=write_budget)
        self.config = ConfigSource(namespace, self.writer.event)
        # With NodeMetrics on NATS, node health runs on the copy's clock: a replica cut off from
        # NATS judges no node silent meanwhile, and once caught up it runs on without a jump.
        self.copy_clock = copy_clock
        self._standing = False  # the copy's clock stands still (logged once)
        self.metrics.track_health_held(copy_clock.standing if copy_clock is not None else lambda: 0.0)
        self.tracker = NodeHealthTracker(
            copy_clock if copy_clock is not None else time.monotonic, grace_period=settings.node_grace_period,
            eviction_timeout=settings.eviction_timeout,
            degrade_after=self.config.parsed.colocation.cluster.degrade_time_minutes * 60.0,
            startup_grace=settings.startup_grace, recovery_renewals=settings.recovery_renewals)
        self.nodeslos = NodeSLOReconciler(self.state, self.config, self.writer)
        self.resources = NodeResourceReconciler(self.state, self.tracker, store, config=self.config, writer=self.writer,
                                                metrics=self.metrics, settings=settings, shards=shards)
        self.shards = shards
        self._kopf_stop = asyncio.Event()
        self._leading = False  # holds the leader Lease
        self._evaluating = asyncio.Event()  # leads, or holds an evaluation shard
        self._first_evaluation = asyncio.Event()
        self._warm = False  # the configuration read and every pod listed: the first evaluation can run

    def _log_health_held(self) -> None:
        standing = self.copy_clock is not None and self.copy_clock.standing() > 0
        if standing and not self._standing:
            log.warning("this replica's NodeMetric copy is not confirmed current: node health stands still until it is")
        elif self._standing and not standing:
            log.info("this replica's NodeMetric copy is current again: node health runs on")
        self._standing = standing

    def promote(self) -> None:
        """This replica leads from now on: the health tracker's startup grace begins (unless it
        was evaluating shards already), and the loop evaluates every node at once."""
        self._leading = True
        self._evaluate_if_due()

    def demote(self) -> None:
        """This replica stopped leading (its Lease could not be renewed) but may lead again: the loop
        goes back to preparing the formulas (or to its shards' nodes), judging no other node and
        writing nothing else. Its writes were fenced already; judging on would take the agents it
        refuses meanwhile for silent."""
        self._leading = False
        self._first_evaluation.clear()
        self._evaluate_if_due()

    def shards_changed(self) -> None:
        """This replica took or gave up an evaluation shard: evaluate now."""
        self._evaluate_if_due()

    def _evaluate_if_due(self) -> None:
        evaluating = self._leading or (self.shards is not None and bool(self.shards.held))
        if evaluating and not self._evaluating.is_set():
            self.tracker.became_leader()
            self._evaluating.set()
        elif not evaluating:
            self._evaluating.clear()
        self.state.wake.set()

    async def first_evaluation_done(self) -> None:
        """Return once this leader's first evaluation has finished, or after FIRST_EVALUATION_HOLD
        seconds at most. After a failover every agent reports at once, and a restarted replica
        lists every NodeMetric from the new leader; served first, they stretched the first
        evaluation (1.7-2.2 s at 2,500 nodes, BENCHMARKS.md), which the formulas computed on the
        standby make a fraction of that. A replica that leads before it is warm (the first leader of
        a new install) holds nothing: its first evaluation waits for every pod to be listed."""
        if self._first_evaluation.is_set() or not self._warm:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_evaluation.wait(), FIRST_EVALUATION_HOLD)

    # ---- the pods -------------------------------------------------------------------------------

    def pod_consumer(self) -> InformerConsumer[KeptPod]:
        """The controllers' share of the Pod informer (bound, unfinished pods): the first evaluation
        waits for its list (`ClusterState.pods_synced`)."""
        return InformerConsumer(name="controllers", transform=self.state.pod_kept,
                                on_sync=self.state.pods_synced_with, on_event=self.state.pod_event)

    # ---- the agents' Leases (an informer's callbacks) ---------------------------------------------

    async def on_leases_listed(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self.state.leases_synced_with(items)
        for lease in items:
            self.resources.observe_lease(lease)

    async def on_lease(self, type_: str, obj: dict[str, Any]) -> None:
        self.state.lease_event(type_, obj)
        if type_ != "DELETED":
            self.resources.observe_lease(obj)

    # ---- Kopf's handlers (kopf_app.Handlers) ------------------------------------------------------

    async def on_config_map(self, type_: str | None, obj: dict[str, Any]) -> None:
        if not self.config.concerns(obj):
            return
        if await self.config.update(None if type_ == "DELETED" else obj):
            self.state.wake.set()

    def on_nodeslo(self, type_: str | None, obj: dict[str, Any]) -> None:
        self.state.nodeslo_event(type_, obj)

    def on_noderesource(self, type_: str | None, obj: dict[str, Any]) -> None:
        self.state.noderesource_event(type_, obj)

    # ---- running -------------------------------------------------------------------------------

    def informers(self, transport: Transport) -> list[Informer[Any]]:
        """What `run()` follows besides Kopf: Nodes, the agents' Leases, the ServiceAccounts, and
        the Pods unless the process's shared Pod informer feeds them (`own_pod_informer`)."""
        informers: list[Informer[Any]] = [
            Informer(transport, "/api/v1/nodes", on_sync=self.state.nodes_synced_with,
                     on_event=self.state.node_changed, name="nodes", transform=slim_node),
            Informer(transport, AGENT_LEASES_PATH, on_sync=self.on_leases_listed, on_event=self.on_lease,
                     name="agent leases"),
            # The agents' ServiceAccounts: a report's token is accepted locally only while its account exists.
            Informer(transport, f"/api/v1/namespaces/{self.namespace}/serviceaccounts",
                     on_sync=self.state.service_accounts_synced_with, on_event=self.state.service_account_changed,
                     name="service accounts"),
        ]
        if self.own_pod_informer:
            informers.insert(0, bound_pods_informer(transport, [self.pod_consumer()]))
        return informers

    async def run(self, restore_signals: Callable[[], None] | None = None) -> None:
        log.info("controllers starting", extra={"evaluation_interval": self.settings.evaluation_interval,
                                                "grace_period": self.settings.node_grace_period,
                                                "eviction_timeout": self.settings.eviction_timeout})
        informers = self.informers(kube_transport(self.api))
        # Created before Kopf starts: Kopf's shutdown cancels every task started after it, not these.
        tasks = [asyncio.create_task(informer.run(), name=f"{informer.name} informer") for informer in informers]
        tasks.append(asyncio.create_task(self._loop(), name="controllers loop"))
        registry = kopf_app.build_registry(self, lambda: kopf_app.connection_info(self.api.configuration),
                                           self.namespace)
        tasks.append(asyncio.create_task(kopf_app.run_kopf(registry, kopf_app.build_settings(), self._kopf_stop,
                                                           namespaces=[self.namespace],
                                                           restore_signals=restore_signals), name="kopf"))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises what ended it
            raise RuntimeError(f"{next(iter(done)).get_name()} ended")
        finally:
            # The flag first: Kopf then knows the stop is intended and arms no SIGKILL of its own.
            self._kopf_stop.set()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _load_config(self) -> None:
        backoff = Backoff(initial=0.5, maximum=10.0, jitter=0.5)
        while not self.config.loaded:
            status, body = await self.writer.get_config_map(self.namespace, self.config.name)
            if status == 200 and isinstance(body, dict):
                await self.config.update(body)
            elif status == 404:
                log.warning("no ConfigMap: using the defaults", extra={"configmap": self.config.name,
                                                                       "namespace": self.namespace})
                await self.config.update(None)
            else:
                await asyncio.sleep(backoff.next_delay())  # retrying a failed read, not synchronisation

    async def _loop(self) -> None:
        await self._load_config()
        await self.state.pods_synced.wait()
        self.metrics.warm.set(1)
        self._warm = True
        interval = self.settings.evaluation_interval
        while True:
            if not self._evaluating.is_set():
                try:
                    await self.resources.prepare()
                except Exception:  # a failed pass leaves work to the first evaluation; the next one tries again
                    log.exception("preparing the evaluation failed")
                await wait_set(self._evaluating, PREPARE_EVERY)
                continue
            self.state.wake.clear()
            started = time.monotonic()
            try:
                await self._evaluate()
            except Exception:  # one failed evaluation must not stop the next one
                log.exception("evaluation failed")
            if self._leading:  # not when demoted meanwhile
                self._first_evaluation.set()
            await wait_set(self.state.wake, max(interval - (time.monotonic() - started), 0))
            # A burst of changes (nodes joining) evaluates at most this often.
            await asyncio.sleep(max(min(interval, MIN_SPACING) - (time.monotonic() - started), 0))

    async def _evaluate(self) -> None:
        self._log_health_held()
        gone, self.state.deleted_nodes = self.state.deleted_nodes, set()
        if self._leading:  # a replica that only holds shards leaves these to the leader
            for name in sorted(gone):
                await self.nodeslos.remove(name)
                await self.resources.remove(name)
            await asyncio.gather(*(self.nodeslos.reconcile(name) for name in self.nodeslos.pending()))
        await self.resources.evaluate()
