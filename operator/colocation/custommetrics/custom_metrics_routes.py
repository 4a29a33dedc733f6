"""The HTTP shell: custom.metrics.k8s.io (v1beta2, v1beta1) and external.metrics.k8s.io (v1beta1).

Paths and authorization follow custom-metrics-apiserver: `…/namespaces/NS/pods/NAME/METRIC` is
`get pods/METRIC` on NAME, `…/pods/*/METRIC` is `list pods/METRIC`, root-scoped `…/nodes/NAME/METRIC`
likewise, and `external…/namespaces/NS/METRIC` is `list METRIC`; all by SubjectAccessReview.

Every replica answers from its own memory. The leader also serves its feed of samples to the
standbys here (`watch samplebatches`, `sample_feed`).

How standbys keep up: docs/metrics-apis.md#standbys
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from colocation.apimachinery.errors import ApiError, success_status
from colocation.apimachinery.selectors import LabelSelector
from colocation.apimachinery.served_apigroups import (
    VERB,
    Authenticate,
    Authorizer,
    Caller,
    Document,
    Leadership,
    json_response,
)
from colocation.apimachinery.watch_params import ListOptions, go_parse_int64
from colocation.apimachinery.watch_stream import WatchServing, pre_encoded
from colocation.custommetrics.builtin_metrics import BuiltinMetrics
from colocation.custommetrics.metric_value_shapes import (
    CUSTOM_GROUP,
    CUSTOM_VERSIONS,
    EXTERNAL_GROUP,
    EXTERNAL_VERSION,
    custom_resource_list,
    external_metric_value_list,
    external_resource_list,
    metric_value_list,
)
from colocation.custommetrics.metrics_query import MetricsQuery, metric_not_found
from colocation.custommetrics.sample_batches import ValidatedBatch, validate_batch
from colocation.custommetrics.sample_feed import (
    FEED_PATH,
    HEARTBEAT_SECONDS,
    WATCH_SAMPLE_BATCHES,
    SampleFeed,
    decode_kept,
    encode_kept,
)
from colocation.custommetrics.series_metrics import StoreMetrics
from colocation.custommetrics.series_store import IngestResult, SeriesStore

log = logging.getLogger(__name__)

def _selector(request: web.Request, parameter: str) -> LabelSelector | None:
    text = request.query.get(parameter)
    if not text:
        return None
    try:
        selector = LabelSelector.parse(text)
    except ApiError as error:
        raise ApiError.bad_request(f"invalid {parameter} {text!r}: {error.message}") from None
    return None if selector.empty else selector


class CustomMetricsApi:
    def __init__(self, series: SeriesStore, builtins: BuiltinMetrics, query: MetricsQuery,
                 *, authorizer: Authorizer, leadership: Leadership, metrics: StoreMetrics,
                 feed: SampleFeed | None = None) -> None:
        self.series = series
        self.feed = feed if feed is not None else SampleFeed(series, on_dropped=metrics.feed_dropped.inc)
        metrics.track_feed(lambda: self.feed.followers, lambda: self.feed.held_bytes)
        # Lines of the feed are up to 64 KiB: at most about 1 MiB a write. A standby that does not
        # take one within the write timeout is cut off (it comes back, and resumes or resyncs).
        self.feed_serving = WatchServing(bookmark_interval=HEARTBEAT_SECONDS, batch=16, write_timeout=30.0)
        self.builtins = builtins
        self.query = query
        self.authorizer = authorizer
        self.leadership = leadership
        self.metrics = metrics
        self._authenticate: Authenticate | None = None
        # With --store nats: what a batch kept goes to every other replica through `shared` (node,
        # encoded chunks), and theirs comes back through `apply_shared`; any replica takes a batch.
        self.shared: Callable[[str, list[bytes]], Awaitable[None]] | None = None

    # -- writes (accepted by the NodeMetric API after authentication, the node rule and validation)

    def samples_upload(self) -> SamplesUpload:
        """What the NodeMetric API needs to take `PUT …/nodemetrics/{node}/samples` for us."""
        return SamplesUpload(self)

    def ingest(self, batch: ValidatedBatch) -> dict[str, Any]:
        """Store an agent's batch; the Status to answer with, naming what was not kept."""
        return _success(batch, self._store(batch))

    async def ingest_shared(self, batch: ValidatedBatch) -> dict[str, Any]:
        """`ingest`, then what it kept to every other replica: 503 unless that was taken. The
        batch stays here either way; the agent sends it again, and samples stored twice are one."""
        assert self.shared is not None
        result = self._store(batch)
        if result.kept:
            await self.shared(batch.node, encode_kept(result.kept))
        return _success(batch, result)

    def apply_shared(self, data: bytes) -> None:
        """What another replica kept of a batch (`encode_kept`'s chunk)."""
        try:
            added = sum(self.series.apply(samples) for samples in decode_kept(data))
        except ValueError as error:  # not ours, or a newer version's: skipped, never retried forever
            log.warning("skipped samples another replica wrote", extra={"error": str(error)})
            return
        self.metrics.replica_samples.inc(added)

    def _store(self, batch: ValidatedBatch) -> IngestResult:
        result = self.series.ingest(batch)
        self.feed.append(result.kept)
        self.metrics.batches_accepted.inc()
        self.metrics.samples_accepted.inc(result.accepted)
        for reason, count in result.dropped.items():
            self.metrics.samples_dropped.labels(reason).inc(count)
        return result

    # -- housekeeping, on every replica's own timer ---------------------------------------------

    def maintain(self) -> None:
        """Drop expired samples and series, and sample the built-in metrics' history."""
        self.metrics.gc_series_removed.inc(self.series.collect_garbage())
        self.builtins.history.collect_garbage()
        self.builtins.sample_history()
        self.metrics.gc_runs.inc()

    async def maintain_forever(self, interval: float) -> None:
        while True:
            try:
                self.maintain()
            except Exception:  # keep serving; the next sweep tries again
                log.exception("custom metrics housekeeping failed")
            await asyncio.sleep(interval)

    # -- what the API server serves for the groups ----------------------------------------------

    def discovery_groups(self) -> dict[str, tuple[str, ...]]:
        return {CUSTOM_GROUP: CUSTOM_VERSIONS, EXTERNAL_GROUP: (EXTERNAL_VERSION,)}

    def resource_lists(self) -> dict[str, Document]:
        lists: dict[str, Document] = {
            f"{CUSTOM_GROUP}/{version}": functools.partial(self._custom_resource_list, version)
            for version in CUSTOM_VERSIONS}
        lists[f"{EXTERNAL_GROUP}/{EXTERNAL_VERSION}"] = lambda: external_resource_list(self.query.external_metrics())
        return lists

    def _custom_resource_list(self, version: str) -> dict[str, Any]:
        return custom_resource_list(version, self.query.custom_metrics())

    def openapi(self) -> None:
        return None

    def add_routes(self, router: web.UrlDispatcher, authenticate: Authenticate) -> None:
        self._authenticate = authenticate
        for version in CUSTOM_VERSIONS:
            base = f"/apis/{CUSTOM_GROUP}/{version}"
            router.add_get(base + "/namespaces/{namespace}/metrics/{metric}", self._namespace_metric)
            router.add_get(base + "/namespaces/{namespace}/{resource}/{name}/{metric}", self._custom(version))
            router.add_get(base + "/{resource}/{name}/{metric}", self._custom(version))
        base = f"/apis/{EXTERNAL_GROUP}/{EXTERNAL_VERSION}"
        router.add_get(base + "/namespaces/{namespace}/{metric}", self._external)
        router.add_get(FEED_PATH, self._sample_batches)

    async def _caller(self, request: web.Request) -> Caller:
        assert self._authenticate is not None, "add_routes() first"
        return await self._authenticate(request)

    def _custom(self, version: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            match = request.match_info
            namespace, resource, name, metric = (match.get("namespace", ""), match["resource"], match["name"],
                                                 match["metric"])
            verb = "list" if name == "*" else "get"
            request[VERB] = verb
            await self.authorizer.authorize(await self._caller(request), verb, resource, subresource=metric,
                                            name="" if name == "*" else name, api_group=CUSTOM_GROUP,
                                            namespace=namespace)
            selector, metric_selector = _selector(request, "labelSelector"), _selector(request, "metricLabelSelector")
            values = self.query.custom(resource, namespace, name, metric_name=metric, selector=selector,
                                       metric_selector=metric_selector)
            return json_response(metric_value_list(version, values, metric_selector))

        return handler

    async def _namespace_metric(self, request: web.Request) -> web.Response:
        # Metrics describing a Namespace object itself: none are collected.
        namespace, metric = request.match_info["namespace"], request.match_info["metric"]
        request[VERB] = "get"
        await self.authorizer.authorize(await self._caller(request), "get", "namespaces", subresource=metric,
                                        name=namespace, api_group=CUSTOM_GROUP)
        raise metric_not_found("namespaces", metric)

    async def _external(self, request: web.Request) -> web.Response:
        namespace, metric = request.match_info["namespace"], request.match_info["metric"]
        request[VERB] = "list"
        await self.authorizer.authorize(await self._caller(request), "list", metric, api_group=EXTERNAL_GROUP,
                                        namespace=namespace)
        values = self.query.external(namespace, metric, _selector(request, "labelSelector"))
        return json_response(external_metric_value_list(values))

    async def _sample_batches(self, request: web.Request) -> web.StreamResponse:
        """A standby's replication stream (`sample_feed`); only the leader's copy is the one to follow."""
        call = WATCH_SAMPLE_BATCHES
        request[VERB] = call.verb
        await self.authorizer.authorize(await self._caller(request), call.verb, call.resource, api_group=call.group)
        if not self.leadership.is_leader:
            leader = self.leadership.leader_identity or "unknown"
            raise ApiError.service_unavailable(f"this replica is a standby; follow the leader ({leader})")
        options = ListOptions.from_query(request.query, watch=True)
        after = request.query.get("after")
        try:
            seq = go_parse_int64(after) if after else None
        except ValueError:
            raise ApiError.bad_request(f"invalid after {after!r}: not a sequence number") from None
        cursor = self.feed.open(request.query.get("epoch", ""), seq)
        return await self.feed_serving.serve(request, options, cursor, encoder=pre_encoded())


def _success(batch: ValidatedBatch, result: IngestResult) -> dict[str, Any]:
    causes = [{"reason": reason, "message": f"{count} samples not stored ({reason})"}
              for reason, count in sorted(result.dropped.items())]
    return success_status(message=f"stored {result.accepted} of {batch.sample_count} samples "
                                  f"({result.new_series} new series)",
                          details={"name": batch.node, "group": "metrics.colocation.dev", "kind": "nodemetrics",
                                   "causes": causes})


@dataclass(frozen=True)
class SamplesUpload:
    """An agent's sample batch, as the NodeMetric API takes it (its `AgentUpload`)."""

    api: CustomMetricsApi
    subresource: str = "samples"

    @property
    def rejected(self) -> Any:
        return self.api.metrics.batches_rejected

    def validate(self, raw: bytes, node: str) -> ValidatedBatch:
        return validate_batch(raw, node)

    @property
    def any_replica(self) -> bool:
        return self.api.shared is not None

    def accept(self, batch: ValidatedBatch) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        return self.api.ingest_shared(batch) if self.api.shared is not None else self.api.ingest(batch)
