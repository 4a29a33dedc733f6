"""The operator's API server as the manager assembles it: the groups registered, and what they read.

NodeMetric always (with agents' eviction requests, which the leader's controllers act on), and
the pod webhook of ClusterColocationProfiles;
metrics.k8s.io with --serve-resource-metrics; custom and external metrics with
--serve-custom-metrics, whose samples upload the NodeMetric group accepts for them. Both metric
APIs serve only bound, unfinished pods that exist, with their labels: `PodDirectory`, which the
replica's one Pod informer feeds. Groups are registered in the order /apis lists them. The API
server and custom metrics know nothing of each other; only this module holds both.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.served_apigroups import ApiGroup, Leadership
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, RequestHeaderConfig
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer
from colocation.apiserver.eviction_routes import EvictionRequestsUpload
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.kube_reviewers import kube_issuer_fetcher, kube_subject_access_reviewer, kube_token_reviewer
from colocation.apiserver.local_token_authentication import IssuerKeys, LocalTokenAuthenticator
from colocation.apiserver.nodemetric_routes import ApiOptions, NodeMetricGroup, SharedWrites
from colocation.apiserver.pod_mutation_webhook import PodMutationWebhook, ProfileCache
from colocation.apiserver.replica_followers import ReplicaFollowers
from colocation.apiserver.resource_metrics_routes import PodDirectory, ResourceMetricsApi
from colocation.custommetrics.builtin_metrics import BuiltinMetrics
from colocation.custommetrics.custom_metrics_routes import CustomMetricsApi
from colocation.custommetrics.metrics_query import MetricsQuery
from colocation.custommetrics.series_metrics import StoreMetrics
from colocation.custommetrics.series_store import SeriesStore
from colocation.kube.lease_record import AdvertisedReplicas
from colocation.kube.nodes import NodeDirectory
from colocation.manager.operator_config import OperatorConfig
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.resource_metrics_view import ResourceMetricsView

AUTH_CACHE_SIZE = 100_000  # above the node counts we target (one agent token per node)
# kube-apiserver's webhook defaults: an authenticated token 2 min, an allowed review 5 min, a denial 30 s.
TOKEN_CACHE_SECONDS = 120.0
ALLOWED_CACHE_SECONDS = 300.0
DENIED_CACHE_SECONDS = 30.0


def delegated_auth(api: Any, audiences: tuple[str, ...] = (),
                   metrics: ServerMetrics | None = None) -> tuple[DelegatingAuthenticator, DelegatingAuthorizer]:
    """Authentication and authorization by kube-apiserver, through `api` (an ApiClient).

    Bound ServiceAccount tokens are checked locally once the caller gives the authenticator's
    `local` a pod cache and runs its `keys` (`local.keys.run()`); `audiences` (empty: the issuer)
    are the ones both the local check and TokenReview accept.
    """
    # Cache lifetimes as kube-apiserver's webhook defaults and room for every node: agents report
    # every 10-60 s, so shorter or smaller caches turned nearly every report into a TokenReview
    # and a SubjectAccessReview.
    local = LocalTokenAuthenticator(IssuerKeys(kube_issuer_fetcher(api)), audiences=audiences,
                                    cache_size=AUTH_CACHE_SIZE)
    authenticator = DelegatingAuthenticator(kube_token_reviewer(api, audiences=audiences),
                                            cache_ttl=TOKEN_CACHE_SECONDS, cache_size=AUTH_CACHE_SIZE,
                                            local=local, metrics=metrics)
    authorizer = DelegatingAuthorizer(kube_subject_access_reviewer(api), allowed_ttl=ALLOWED_CACHE_SECONDS,
                                      denied_ttl=DENIED_CACHE_SECONDS, cache_size=AUTH_CACHE_SIZE, metrics=metrics)
    return authenticator, authorizer


@dataclass(frozen=True, kw_only=True)
class ServedApis:
    server: AggregatedApiServer
    pods: PodDirectory | None  # fed by the replica's Pod informer while the metric APIs are served
    custom_metrics: CustomMetricsApi | None  # its housekeeping and a standby's follower run beside it
    evictions: EvictionRequestsUpload  # the leader's controllers take its requests (`handler`) once they run
    pod_webhook: PodMutationWebhook  # every replica runs its cache's informers
    nodemetric: NodeMetricGroup  # the controllers hold the agents' writes back while a new leader evaluates


def assemble_api(config: OperatorConfig, store: NodeMetricStore, nodes: NodeDirectory,
                 *, authenticator: DelegatingAuthenticator, authorizer: DelegatingAuthorizer,
                 request_header: Callable[[], RequestHeaderConfig | None], leadership: Leadership,
                 metrics: ServerMetrics, read_barrier: Callable[[int], Awaitable[None]] | None = None,
                 followers: ReplicaFollowers | None = None, shared_writes: SharedWrites | None = None,
                 advertised_replicas: Callable[[], AdvertisedReplicas | None] | None = None,
                 stale_warning: Callable[[], str | None] | None = None) -> ServedApis:
    pods = PodDirectory() if config.serve_resource_metrics or config.serve_custom_metrics else None
    view = ResourceMetricsView(store)
    extra: list[ApiGroup] = []
    if pods is not None and config.serve_resource_metrics:
        extra.append(ResourceMetricsApi(view, authorizer, pods))
    custom_metrics = None
    if pods is not None and config.serve_custom_metrics:
        custom_metrics = _custom_metrics_api(config, store, view, pods=pods, nodes=nodes, authorizer=authorizer,
                                             leadership=leadership, metrics=metrics)
        extra.append(custom_metrics)
    evictions = EvictionRequestsUpload(metrics.registry)
    uploads: list[Any] = [custom_metrics.samples_upload()] if custom_metrics is not None else []
    uploads.append(evictions)
    nodemetric = NodeMetricGroup(store, authorizer, leadership, known_node=nodes.__contains__, node_labels=nodes.labels,
                                 metrics=metrics, options=ApiOptions(bookmark_interval=config.bookmark_interval),
                                 uploads=uploads,
                                 read_barrier=read_barrier, followers=followers, shared_writes=shared_writes,
                                 advertised_replicas=advertised_replicas, stale_warning=stale_warning)
    pod_webhook = PodMutationWebhook(ProfileCache(), metrics.registry)
    server = AggregatedApiServer(authenticator, authorizer, request_header, leadership=leadership, metrics=metrics,
                                 groups=[nodemetric, *extra, pod_webhook])
    return ServedApis(server=server, pods=pods, custom_metrics=custom_metrics, evictions=evictions,
                      pod_webhook=pod_webhook, nodemetric=nodemetric)


def _custom_metrics_api(config: OperatorConfig, store: NodeMetricStore, view: ResourceMetricsView,
                        *, pods: PodDirectory, nodes: NodeDirectory, authorizer: DelegatingAuthorizer,
                        leadership: Leadership, metrics: ServerMetrics) -> CustomMetricsApi:
    series = SeriesStore(time.time, retention_seconds=config.custom_metrics_retention,
                         max_series=config.custom_metrics_max_series)
    # The built-ins' history: two series per pod and per node, kept as long as the samples.
    history = SeriesStore(time.time, retention_seconds=config.custom_metrics_retention,
                          max_series=config.custom_metrics_max_series)
    builtins = BuiltinMetrics(store, view, history)
    query = MetricsQuery(series, builtins, pods, node_labels=nodes.labels)
    return CustomMetricsApi(series, builtins, query, authorizer=authorizer, leadership=leadership,
                            metrics=StoreMetrics(metrics.registry, series.__len__))
