"""`colocation operator`: one asyncio process with the leader elector, the HTTPS API and its loops.

Every replica serves the NodeMetric API and runs the controllers' watches
(`colocation.controllers.leader_task`), so a new leader acts at once. A replica opens one Pod
list/watch, whatever reads pods: the controllers, the metric APIs' labels and the scheduler
extender are consumers of one shared informer (`replica_pod_informer`). The leader accepts reports,
drops silent nodes, and evaluates and writes; each standby follows the leader's watch and sample
feed. Here the stages meet: the store, the API server and its groups (`api_assembly`), the
controllers and custom metrics; none of them imports another. Losing the lease ends the process
(exit 3); SIGTERM releases the lease first. Every replica with a current copy is ready. Every
write to kube-apiserver is fenced by the election's write budget (`controllers.writers`).

Why: docs/operator.md#failover and docs/operator.md#warm-standbys
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from colocation.apimachinery.event_wait import wait_set
from colocation.apimachinery.stop_signals import install_stop_signal_handlers
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, RequestHeaderConfig
from colocation.apiserver.eviction_routes import EvictionRequestsUpload
from colocation.apiserver.generic_apiserver import ApiRunner
from colocation.apiserver.kube_reviewers import load_request_header_config
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.apiserver.replica_followers import ReplicaFollowers
from colocation.apiserver.resource_metrics_routes import PodDirectory
from colocation.apiserver.tls_read_buffer import bound_tls_read_buffers

# Imported at start, not on promotion: importing Kopf takes the event loop for about a second,
# which a new leader cannot spare while it must renew its Lease.
from colocation.controllers.eviction_requests import EvictionRequestHandler
from colocation.controllers.leader_task import Controllers
from colocation.custommetrics.custom_metrics_routes import CustomMetricsApi
from colocation.custommetrics.sample_follower import SampleFollower
from colocation.jetstream.jetstream_store import JetStreamNodeMetrics
from colocation.jetstream.replica_presence import ReplicaPresence
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation.kube.client import api_client, bound_unacknowledged_sends
from colocation.kube.informer import Informer, Transport
from colocation.kube.leader_connection import LeaderAddress
from colocation.kube.leaderelection import LEADER_CA_ANNOTATION, LEADER_ENDPOINT_ANNOTATION, LeaderElector
from colocation.kube.lease_holder import holder_pod_name
from colocation.kube.lease_record import (
    REPLICAS_ANNOTATION,
    REPORTS_ANNOTATION,
    REPORTS_TO_ANY_REPLICA,
    replicas_annotation,
)
from colocation.kube.nodes import NodeDirectory
from colocation.kube.shared_informer import InformerConsumer, bound_pods_informer
from colocation.kube.transport import kube_transport
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.manager.api_assembly import assemble_api, delegated_auth
from colocation.manager.extender_assembly import SchedulerExtender, assemble_extender
from colocation.manager.heap_trim import HeapTrimmer, libc_malloc_trim
from colocation.manager.leader_versions import LeaderVersions
from colocation.manager.operator_config import OperatorConfig
from colocation.manager.replica_pods import ReplicaPods
from colocation.manager.serving_tls import KubeCaObjects, ServingFiles, ServingTls
from colocation.manager.shard_elections import ShardElections
from colocation.manager.token_pods import ClusterStatePods
from colocation.nodemetrics.consistent_reads import ConsistentReadMetrics, ConsistentReads
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.resource_versions import LogPositions
from colocation.nodemetrics.silent_node_expiry import expire_silent_nodes
from colocation.nodemetrics.standby_follower import LeaderFollower
from colocation.nodemetrics.storage_metrics import StorageMetrics

log = logging.getLogger(__name__)

EXIT_LOST_LEADERSHIP = 3
EXIT_CONTROLLERS_FAILED = 1
SERVICE_NAME = "colocation-operator"
# A standby's read of the most recent data waits at most this long: for a new leader (up to
# leader_versions.NEW_LEADER_WAIT), then for its copy to reach that leader's resourceVersion.
CONSISTENT_READ_TIMEOUT = 3.0
# A standby drops its feed from the leader after this many bookmark intervals without a byte.
FEED_SILENCE_BOOKMARKS = 3
# A leader that could not renew (kube-apiserver or etcd stalled) renews again once the API answers
# and the Lease still names it, for at most this long; then it exits (`LeaderElector.rejoin_after_loss`).
REJOIN_AFTER_LOSS_SECONDS = 300.0
# Meanwhile it holds an agent's write this long before asking for it again (agents wait 5 s).
REJOIN_HOLD_SECONDS = 3.0
DRAIN_LEASE_POLL = 0.25  # seconds between reads of the Lease while a stopping replica looks for its successor


class LeadershipMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.leader = Gauge("colocation_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.leader_transitions = Counter("colocation_leader_transitions_total",
                                          "Times this replica started or stopped leading.", registry=r)
        self.shards_held = Gauge("colocation_evaluation_shards_held",
                                 "Evaluation shards whose Lease this replica holds (--evaluation-shards).", registry=r)


def serving_names(config: OperatorConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(DNS names, IP addresses) of the serving certificate: the Service's names, which
    kube-apiserver verifies, and the addresses agents and standbys dial (the Lease's endpoint)."""
    dns = (SERVICE_NAME, f"{SERVICE_NAME}.{config.namespace}", f"{SERVICE_NAME}.{config.namespace}.svc",
           f"{SERVICE_NAME}.{config.namespace}.svc.cluster.local", "localhost")
    ips = tuple(dict.fromkeys(ip for ip in (config.advertise_address, "127.0.0.1") if _is_ip(ip)))
    return dns, ips


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


async def _retry(what: str, attempt: Callable[[], Awaitable[Any]], stop: asyncio.Event) -> Any:
    backoff = Backoff(initial=0.5, maximum=10.0, jitter=0.5)
    while not stop.is_set():
        try:
            return await attempt()
        except Exception as error:  # keep trying until the API answers; the log says why
            delay = backoff.next_delay()
            log.warning(f"{what} failed, retrying", extra={"error": str(error), "retry_in": round(delay, 2)})
            await wait_set(stop, delay)
    return None


def replica_pod_informer(transport: Transport, *, controllers: Controllers | None, metric_pods: PodDirectory | None,
                         extender: SchedulerExtender | None) -> Informer[tuple[Any, ...]] | None:
    """The replica's one Pod list/watch (bound, unfinished pods), handed to whichever of the
    controllers, the metric APIs' labels and the extender's pods it runs, in that order; None
    without any of them."""
    consumers: list[InformerConsumer[Any]] = []
    if controllers is not None:
        consumers.append(controllers.pod_consumer())
    if metric_pods is not None:
        consumers.append(metric_pods.consumer())
    if extender is not None:
        consumers.append(extender.pod_consumer())
    return bound_pods_informer(transport, consumers) if consumers else None


class OperatorProcess:
    def __init__(self, config: OperatorConfig) -> None:
        self.config = config
        self.metrics = ServerMetrics()
        self.store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic,
                                     ttl_seconds=config.metric_ttl,
                                     versions=LogPositions() if config.nats is not None else None)
        # --store nats: every replica writes reports into the bucket and applies it to `store`.
        self.jetstream = JetStreamNodeMetrics(
            self.store, config.nats, config.nats_log, name=config.identity,
            presence=ReplicaPresence(identity=config.identity, endpoint=self.endpoint, ready=self._takes_reports,
                                     replicas=config.nats_log.replicas)) if config.nats is not None else None
        self.storage_metrics = StorageMetrics(self.metrics.registry)
        self.storage_metrics.track(self.store)
        self.leadership_metrics = LeadershipMetrics(self.metrics.registry)
        self.nodes = NodeDirectory(on_deleted=self._node_deleted)
        # The replicas' pods: a standby takes the Lease once the leader's container is seen to stop.
        self.replica_pods = ReplicaPods(config.namespace, on_change=self._replica_pod_changed)
        self.followers = ReplicaFollowers()  # the standbys following this replica while it leads
        self.stop = asyncio.Event()
        self.stop_now = asyncio.Event()  # a second SIGTERM or SIGINT: no drain
        self.lost_leadership = False
        self.request_header: RequestHeaderConfig | None = None
        # --tls-cert-file: those files, read again when they change (another tool renews them); else
        # a certificate from the shared CA (run() makes it).
        self.tls: ServingTls | ServingFiles | None = None
        if config.tls_cert_file and config.tls_key_file:
            self.tls = ServingFiles(config.tls_cert_file, config.tls_key_file, config.tls_ca_file,
                                    registry=self.metrics.registry)
        self.elector: LeaderElector | None = None
        # --evaluation-shards N > 1: the shards this replica campaigns for (run() makes it).
        self.shard_elections: ShardElections | None = None
        self._leader_tasks: list[asyncio.Task[Any]] = []
        self.api: Any = None  # the ApiClient, while run() holds it
        self.controllers: Controllers | None = None  # with controllers enabled, from the start on every replica
        self.authenticator: DelegatingAuthenticator | None = None
        self.controllers_failed = False
        self.custom_metrics: CustomMetricsApi | None = None
        self.evictions: EvictionRequestsUpload | None = None
        self.nodemetric: NodeMetricGroup | None = None
        self.draining = False  # stopping: not ready, still serving until the server closes
        self._drain_leader: LeaderAddress | None = None  # who took the Lease after us, while draining
        # With --serve-custom-metrics: a standby's copy of the samples; `.synced` while it holds the
        # current leader's (never on the leader itself, which follows nobody).
        self.sample_follower: SampleFollower | None = None

    # ---- leadership callbacks (synchronous, on the election task) ----------------------------

    def _node_deleted(self, name: str) -> None:
        """A deleted Node's NodeMetric goes at once, not after the metric TTL (the leader's decision;
        a standby's copy follows through the leader's DELETED event)."""
        if self.elector is None or not self.elector.is_leader:
            return
        if self.jetstream is not None:
            self._remove_shared(name)
        elif self.store.delete(name) is not None:
            self._dropped_deleted(name)

    def _remove_shared(self, name: str) -> None:
        """Delete a node's NodeMetric from the bucket (--store nats), as a leader's task."""
        jetstream = self.jetstream
        assert jetstream is not None

        async def remove() -> None:
            if await jetstream.remove(name):
                self._dropped_deleted(name)

        task = asyncio.create_task(remove())
        self._leader_tasks.append(task)
        task.add_done_callback(self._forget_leader_task)

    def _forget_leader_task(self, task: asyncio.Task[Any]) -> None:
        if task in self._leader_tasks:
            self._leader_tasks.remove(task)

    def _dropped_deleted(self, name: str) -> None:
        self.storage_metrics.deleted.inc()
        log.info("dropped NodeMetric of a deleted Node", extra={"node": name})

    def _started_leading(self) -> None:
        log.info("started leading", extra={"identity": self.config.identity})
        self.leadership_metrics.leader.set(1)
        self.leadership_metrics.leader_transitions.inc()
        if self.nodes.synced:  # Nodes deleted while the previous leader could not act on it
            if self.jetstream is not None:
                for entry in self.store.list()[0]:
                    if entry.name not in self.nodes:
                        self._remove_shared(entry.name)
            else:
                for name in self.store.keep_only(self.nodes.__contains__):
                    self._dropped_deleted(name)
        self._leader_tasks.append(asyncio.create_task(
            expire_silent_nodes(self.store, self.storage_metrics, self.config.expiry_interval,
                                remove=self.jetstream.remove if self.jetstream is not None else None)))
        if self.controllers is not None:
            self.controllers.promote()

    def _stopped_leading(self) -> None:
        """No writes and no reports from now on (the election fences both); the leader's own tasks stop.
        The process exits when the election ends, or leads again if it renews the lease."""
        log.error("lost the leader lease: no writes and no reports until it is renewed",
                  extra={"identity": self.config.identity})
        self.leadership_metrics.leader.set(0)
        self.leadership_metrics.leader_transitions.inc()
        if self.controllers is not None:
            self.controllers.demote()
        for task in self._leader_tasks:
            task.cancel()
        self._leader_tasks.clear()

    async def _elect(self, elector: LeaderElector) -> None:
        """The election; when it ends (another holder, or no renewal for REJOIN_AFTER_LOSS_SECONDS),
        the process exits to restart as a standby, with nothing stale in memory."""
        await elector.run()
        log.error("lost the leader lease for good; exiting to restart as a standby",
                  extra={"identity": self.config.identity})
        self.lost_leadership = True
        self.stop.set()

    async def _hold_while_rejoining(self) -> bool | None:
        """An agent's write to a leader waiting to renew its Lease waits for it to lead again, up to
        REJOIN_HOLD_SECONDS; whether it leads then. None at once for any other replica."""
        elector = self.elector
        if elector is None or not elector.rejoining:
            return None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(elector.next_transition()), REJOIN_HOLD_SECONDS)
        return elector.is_leader

    def _replica_pod_changed(self, name: str) -> None:
        """The leader's pod changed (its container may have stopped): read the Lease now."""
        elector = self.elector
        if elector is not None and not elector.is_leader and holder_pod_name(elector.leader_identity) == name:
            elector.wake()

    def _shards_changed(self) -> None:
        assert self.shard_elections is not None
        self.leadership_metrics.shards_held.set(len(self.shard_elections.held))
        if self.controllers is not None:
            self.controllers.shards_changed()

    def _new_leader(self, identity: str) -> None:
        log.info("leader observed", extra={"leader": identity or "<none>"})

    @property
    def ca_bundle(self) -> bytes:
        """The PEM CAs that verify this replica's serving certificate (both during a CA rotation)."""
        return self.tls.bundle if self.tls is not None else b""

    @property
    def endpoint(self) -> str:
        """Where this replica serves, as agents and other replicas dial it."""
        return f"https://{self.config.advertise_address}:{self.config.port}"

    def _annotations(self) -> dict[str, str]:
        """What the leader publishes on its Lease (`kube.lease_record`): where it and its standbys
        serve, and with --store nats that each of them takes reports."""
        presence = self.jetstream.presence if self.jetstream is not None else None
        others = presence.endpoints() if presence is not None else self.followers.endpoints()
        annotations = {LEADER_ENDPOINT_ANNOTATION: self.endpoint,
                       LEADER_CA_ANNOTATION: base64.b64encode(self.ca_bundle).decode(),
                       REPLICAS_ANNOTATION: replicas_annotation({**others, self.config.identity: self.endpoint})}
        if presence is not None:
            annotations[REPORTS_ANNOTATION] = REPORTS_TO_ANY_REPLICA
        return annotations

    def _takes_reports(self) -> bool:
        """With --store nats: whether agents may choose this replica (it announces itself)."""
        return not self.draining and self.jetstream is not None and self.jetstream.synced

    def _leader_address(self) -> LeaderAddress | None:
        if self.draining:
            return self._drain_leader
        if self.elector is None or self.elector.is_leader:
            return None
        record = self.elector.observed_record
        if record is None or record.holder_identity in ("", self.config.identity):
            return None
        return LeaderAddress.from_record(record)

    # ---- loops ---------------------------------------------------------------------------------

    def _warm_controllers(self, api: Any) -> Controllers:
        """The controllers of this replica, warm from the start; they write only once it leads."""
        assert self.elector is not None
        shared = self.jetstream
        controllers = Controllers(api, self.store, self.config.controllers, namespace=self.config.namespace,
                                  identity=self.config.identity, registry=self.metrics.registry,
                                  write_budget=self.elector.write_budget, shards=self.shard_elections,
                                  copy_clock=shared.copy_clock if shared is not None else None,
                                  own_pod_informer=False)  # run() feeds them from the replica's one Pod informer
        if self.authenticator is not None and self.authenticator.local is not None:
            # Bound tokens are checked locally once the Pod informer has listed the pods.
            self.authenticator.local.pods = ClusterStatePods(controllers.state, self.config.namespace)
        if self.nodemetric is not None:  # a new leader evaluates before agents' writes and standbys' feeds
            self.nodemetric.first_evaluation_hold = controllers.first_evaluation_done
        if self.evictions is not None:  # agents' eviction requests are judged against the same pods
            self.evictions.handler = EvictionRequestHandler(controllers.state, controllers.writer,
                                                            self.metrics.registry)
        return controllers

    async def _run_controllers(self, controllers: Controllers) -> None:
        """The controllers (Kopf inside); their failure stops the process, and a standby takes over."""
        try:
            await controllers.run(self._install_signal_handlers)
        except Exception:
            log.exception("the controllers failed; exiting so that a standby takes over")
            self.controllers_failed = True
            self.stop.set()

    def _install_signal_handlers(self) -> None:
        """At the start, and again once Kopf has put its own handlers in their place."""
        install_stop_signal_handlers(self._on_stop_signal)

    def _on_stop_signal(self) -> None:
        """The first SIGTERM or SIGINT stops the replica gracefully (the Lease released, then the
        drain); another one while it stops ends the drain at once, as a second Ctrl-C does."""
        if self.stop.is_set():
            self.stop_now.set()
        self.stop.set()

    async def _keep_copy_current(self, follower: LeaderFollower | None) -> None:
        """While standby, the copy of the leader's store (`follower`); with --store nats, on every
        replica, the copy of the stream."""
        if follower is not None:
            await self._follow_while_standby(follower)
        elif self.jetstream is not None:
            await self.jetstream.run(self.stop)

    async def _follow_while_standby(self, follower: LeaderFollower | SampleFollower) -> None:
        """Run the follower until this replica leads; then the store carries on by itself."""
        assert self.elector is not None
        task = asyncio.create_task(follower.run())
        try:
            while not self.elector.is_leader and not task.done():
                await asyncio.wait({task}, timeout=self.config.retry_period / 2)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> int:
        config = self.config
        self._install_signal_handlers()
        async with await api_client(config.kubeconfig) as api:
            # Fencing below TCP: bytes of a write cut off by the network are never retransmitted
            # past its budget (a write sent by the renew deadline then lands within the lease).
            bound_unacknowledged_sends(api, config.lease_duration - config.renew_deadline)
            self.api = api
            self.request_header = await _retry("reading extension-apiserver-authentication",
                                               lambda: load_request_header_config(api), self.stop)
            if self.tls is None:
                dns, ips = serving_names(config)
                managed = ServingTls(KubeCaObjects(api, config.namespace), config.ca_policy,
                                     namespace=config.namespace, service_name=SERVICE_NAME, dns_names=dns,
                                     ip_addresses=ips, registry=self.metrics.registry)
                self.tls = managed
                # Serving needs the CA and a certificate only: the APIServices are patched by the
                # loop (tasks below), so a refused patch never keeps this replica from serving.
                await _retry("setting up the serving certificate", managed.prepare, self.stop)
            if self.stop.is_set():
                return 0
            token = _bearer_token(api)
            authenticator, authorizer = delegated_auth(api, config.service_account_audiences, self.metrics)
            self.authenticator = authenticator
            self.elector = LeaderElector(
                api, config.namespace, permissions.LEADER_LEASE_NAME, identity=config.identity,
                lease_duration=config.lease_duration, renew_deadline=config.renew_deadline,
                retry_period=config.retry_period, annotations_provider=self._annotations,
                on_started_leading=self._started_leading, on_stopped_leading=self._stopped_leading,
                on_new_leader=self._new_leader, is_predecessor=config.is_predecessor,
                holder_ended=self.replica_pods.holder_ended, acquire_after=config.acquire_after,
                rejoin_after_loss=REJOIN_AFTER_LOSS_SECONDS)
            elector = self.elector
            shared = self.jetstream
            if config.evaluation_shards > 1 and config.controllers.enabled and shared is not None \
                    and shared.presence is not None:
                presence = shared.presence
                self.shard_elections = ShardElections(
                    api, namespace=config.namespace, identity=config.identity, shards=config.evaluation_shards,
                    ready_replicas=lambda: presence.endpoints().keys(), on_change=self._shards_changed,
                    lease_duration=config.lease_duration, renew_deadline=config.renew_deadline,
                    retry_period=config.retry_period, holder_ended=self.replica_pods.holder_ended)
            # The in-memory store: a standby follows the leader's feed, and its consistent reads ask
            # the leader. With --store nats every replica follows the stream instead (`shared`).
            follower: LeaderFollower | None = None
            if shared is None:
                follower = LeaderFollower(
                    self.store, self._leader_address, lambda: token, metrics=self.storage_metrics,
                    on_unreachable=elector.suspect_leader, stale_after=2 * config.lease_duration,
                    stream_silence=FEED_SILENCE_BOOKMARKS * config.bookmark_interval,
                    announce=f"{config.identity} {self.endpoint}")
                reads = ConsistentReads(lambda: elector.is_leader,
                                        LeaderVersions(follower, elector.current_record, config.identity),
                                        lambda: self.store.replicated_version,
                                        metrics=ConsistentReadMetrics(self.metrics.registry),
                                        timeout=CONSISTENT_READ_TIMEOUT)
                follower.on_applied = reads.advanced
            served = assemble_api(config, self.store, self.nodes, authenticator=authenticator, authorizer=authorizer,
                                  request_header=lambda: self.request_header, leadership=elector, metrics=self.metrics,
                                  read_barrier=reads.wait if shared is None else shared.read_barrier,
                                  followers=self.followers, shared_writes=shared.put if shared is not None else None,
                                  advertised_replicas=shared.presence.advertised if shared is not None
                                  and shared.presence is not None else None,
                                  stale_warning=shared.stale_warning if shared is not None else None)
            self.custom_metrics = served.custom_metrics
            if shared is not None and served.custom_metrics is not None:  # samples through NATS as well
                shared.follow_samples(served.custom_metrics.apply_shared, retention=config.custom_metrics_retention)
                served.custom_metrics.shared = shared.put_samples
            self.evictions = served.evictions
            self.nodemetric = served.nodemetric
            self.nodemetric.rejoin_hold = self._hold_while_rejoining
            runner = ApiRunner(served.server.application(), access_log=None, handle_signals=False,
                               shutdown_timeout=2.0)
            await runner.setup()
            site = web.TCPSite(runner, config.bind_address, config.port, ssl_context=self._ssl_context())
            await site.start()
            log.info("serving", extra={"address": f"https://{config.bind_address}:{config.port}",
                                       "identity": config.identity})
            served.server.ready_check = lambda: self._ready(follower)
            if config.controllers.enabled:  # before the election starts: a replica that leads promotes them
                self.controllers = self._warm_controllers(api)
            extender = extender_runner = None
            if config.scheduler_extender_port:
                extender = assemble_extender(self.store, self.nodes, config=self._load_aware_config,
                                             ready=lambda: self._ready(follower) and self._config_loaded(),
                                             registry=self.metrics.registry)
                extender_runner = await self._serve_extender(extender)
                # Ready only once the extender answers too: the Service sends the scheduler's calls to
                # Ready replicas, and a 503 makes it place the pod without the load filter.
                served.server.ready_check = extender.routes.ready
            # With --store nats the copy of the stream stays current through the drain (below): a
            # draining replica still serves reads, and a frozen copy would answer with older versions.
            copying = asyncio.create_task(self._keep_copy_current(follower))
            tasks = [asyncio.create_task(self.nodes.informer(kube_transport(api)).run()),
                     asyncio.create_task(self.replica_pods.informer(kube_transport(api)).run()),
                     asyncio.create_task(self._elect(elector))]
            if shared is None:
                tasks.append(copying)
            if self.tls is not None:
                tasks.append(asyncio.create_task(self.tls.run(self.stop)))
            if authenticator.local is not None:  # every replica: a new leader has the keys at once
                tasks.append(asyncio.create_task(authenticator.local.keys.run()))
            # Created before Kopf starts (in the controllers' task): its shutdown cancels the tasks started after it.
            pods = replica_pod_informer(kube_transport(api), controllers=self.controllers, metric_pods=served.pods,
                                        extender=extender)
            if pods is not None:
                tasks.append(asyncio.create_task(pods.run(), name="pods informer"))
            if extender is not None:
                tasks.append(asyncio.create_task(extender.refresh_forever()))
            # The pod webhook answers on every replica, from its own copy of the profiles.
            tasks += [asyncio.create_task(informer.run())
                      for informer in served.pod_webhook.informers(kube_transport(api))]
            if served.custom_metrics is not None:
                tasks += self._custom_metrics_tasks(served.custom_metrics, token)
            if self.controllers is not None:
                tasks.append(asyncio.create_task(self._run_controllers(self.controllers)))
            if self.shard_elections is not None:
                tasks.append(asyncio.create_task(self.shard_elections.run()))
            if (trim := libc_malloc_trim()) is not None:
                tasks.append(asyncio.create_task(HeapTrimmer(trim, self.metrics.registry).run(self.stop)))
            try:
                await self.stop.wait()
            finally:
                for task in tasks + self._leader_tasks:
                    task.cancel()
                for task in tasks + self._leader_tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                if self.shard_elections is not None:  # other replicas evaluate these nodes from now on
                    await self.shard_elections.stop()
                if not self.lost_leadership and await elector.release():
                    log.info("released the leader lease", extra={"identity": config.identity})
                    # Not the leader from here on, though the process drains a while longer: a
                    # scrape now must not count two leaders.
                    self.leadership_metrics.leader.set(0)
                if not self.lost_leadership and config.shutdown_delay > 0:
                    self.draining = True
                    log.info("draining: not ready, still serving reads", extra={"seconds": config.shutdown_delay})
                    if shared is not None and shared.presence is not None:
                        await shared.presence.withdraw()  # agents send their reports elsewhere from now on
                    following = asyncio.create_task(self._follow_while_draining(follower)) \
                        if follower is not None else None
                    # Endpoints drop a replica only once they see it not ready: closing at once would
                    # leave the aggregator dialing a closed port meanwhile.
                    await wait_set(self.stop_now, config.shutdown_delay)
                    if following is not None:
                        following.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await following
                if not copying.done():
                    copying.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await copying
                self.store.close_watchers()
                if extender_runner is not None:
                    await extender_runner.cleanup()
                await runner.cleanup()
        if self.controllers_failed:
            return EXIT_CONTROLLERS_FAILED
        return EXIT_LOST_LEADERSHIP if self.lost_leadership else 0

    async def _follow_while_draining(self, follower: LeaderFollower) -> None:
        """A stopping replica still serves reads: it follows whoever takes the Lease after it, as a
        standby does, so those reads stay consistent (the election loop has stopped: read the Lease)."""
        assert self.elector is not None
        while self._drain_leader is None:
            with contextlib.suppress(OSError):
                record = await self.elector.current_record()
                if record is not None and record.holder_identity not in ("", self.config.identity):
                    self._drain_leader = LeaderAddress.from_record(record)
            if self._drain_leader is None:
                await asyncio.sleep(DRAIN_LEASE_POLL)  # until a standby takes the released Lease
        await follower.run()

    def _ready(self, follower: LeaderFollower | None) -> bool:
        """The leader, and a standby whose copies may be served (the samples' once synced: they
        resync from a snapshot after a failover, and the copy meanwhile is seconds old at most)."""
        if self.draining or self.elector is None:
            return False
        samples_ready = self.sample_follower is None or self.sample_follower.ever_synced
        if self.jetstream is not None:  # every replica reads the streams: current once caught up
            return self.jetstream.synced and self.jetstream.samples_synced
        if self.elector.is_leader or self.elector.rejoining:  # its own store is still the newest data
            return True
        return follower is not None and follower.serving_copy() and samples_ready

    def _load_aware_config(self) -> LoadAwareConfig:
        """The load-aware settings of colocation-config, as the controllers read it (every replica runs
        them); the defaults without controllers."""
        if self.controllers is None:
            return _DEFAULT_LOAD_AWARE
        return self.controllers.config.parsed.load_aware

    def _config_loaded(self) -> bool:
        return self.controllers is None or self.controllers.config.loaded

    async def _serve_extender(self, extender: SchedulerExtender) -> web.AppRunner:
        """The extender's own HTTPS listener, with the serving certificate; with a client CA, a caller
        without a certificate it signed fails the handshake."""
        config = self.config
        assert self.tls is not None
        client_ca = config.scheduler_extender_client_ca_file
        context = self.tls.server_context(client_ca.read_bytes() if client_ca is not None else None)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
        else:
            log.warning("the scheduler extender asks no client certificate: anyone who reaches its port may call it "
                        "(--scheduler-extender-client-ca-file)")
        runner = web.AppRunner(extender.routes.application(), access_log=None, handle_signals=False,
                               shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, config.bind_address, config.scheduler_extender_port, ssl_context=context).start()
        log.info("serving the scheduler extender",
                 extra={"address": f"https://{config.bind_address}:{config.scheduler_extender_port}/scheduler"})
        return runner

    def _custom_metrics_tasks(self, custom_metrics: CustomMetricsApi, token: str) -> list[asyncio.Task[Any]]:
        """Every replica keeps its own samples: housekeeping on its own timer (the built-ins' history
        comes from its NodeMetric copy), and while standby, the leader's feed (with --store nats,
        the samples' stream instead, which `jetstream` follows)."""
        # Expired samples are also cut at read time; the sweep frees their memory.
        sweep = min(10.0, max(0.5, self.config.custom_metrics_retention / 10))
        tasks = [asyncio.create_task(custom_metrics.maintain_forever(sweep))]
        if self.jetstream is None:
            self.sample_follower = SampleFollower(custom_metrics.series, self._leader_address, lambda: token,
                                                  metrics=custom_metrics.metrics)
            tasks.append(asyncio.create_task(self._follow_while_standby(self.sample_follower)))
        return tasks

    def _ssl_context(self) -> ssl.SSLContext:
        client_ca = self.request_header.request_header_ca_pem if self.request_header else None
        # Client certificates are verified against the front-proxy CA only: that is what makes
        # the X-Remote-* identity headers trustworthy (see apiserver.delegated_authentication).
        assert self.tls is not None
        # Renewed certificates are loaded into this context in place.
        return self.tls.server_context(client_ca.encode() if client_ca else None)


_DEFAULT_LOAD_AWARE = LoadAwareConfig()


def _bearer_token(api: Any) -> str:
    """This replica's own token (kubeconfig or mounted ServiceAccount), to read the leader's API."""
    configuration = api.configuration
    key = (configuration.api_key or {}).get("authorization") or (configuration.api_key or {}).get("BearerToken")
    if not key:
        return ""
    prefix = (configuration.api_key_prefix or {}).get("authorization", "")
    text = f"{prefix} {key}".strip() if prefix else str(key)
    return text.removeprefix("Bearer ").strip()


# The leader holds hundreds of thousands of long-lived objects (slim pods, NodeMetric entries,
# Nodes), and evaluations and reports allocate many short-lived ones. At Python's default (a young
# collection every 700 allocations, a full one every 100 of them) an evaluation of 1,000 nodes x 30
# pods took about 350 µs of CPU per node in-process, 190 µs with no collector at all, and about
# 235 µs at this threshold.
# Garbage is still freed at once by reference counting; only cycles wait for a collection.
GC_YOUNG_THRESHOLD = 10_000


def run(config: OperatorConfig) -> int:
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    gc.freeze()  # what the imports built lives as long as the process: out of every collection
    bound_tls_read_buffers()  # every agent's connection: about 60 KiB of RSS instead of 300
    return asyncio.run(OperatorProcess(config).run())
