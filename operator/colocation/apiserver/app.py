"""The HTTP shell of the NodeMetric API: routes, authentication, leadership, Status errors, metrics.

Reads (get, list, watch) are served by every replica from its copy (a standby's copy follows the
leader), so the informers of other components keep working through a failover. Writes (agent
reports) are accepted by the leader only; a standby answers 503 with a Status naming the leader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson
from aiohttp import web

from colocation.apimachinery import certificates
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import FieldSelector, LabelSelector
from colocation.apiserver import discovery, openapi, tables
from colocation.apiserver.auth import Caller, DelegatingAuthenticator, RequestHeaderConfig
from colocation.apiserver.authz import DelegatingAuthorizer, check_node_rule
from colocation.apiserver.metrics import VERB, ServerMetrics
from colocation.apiserver.models import validate_report
from colocation.apiserver.resource_metrics import ResourceMetricsApi, api_group_body
from colocation.apiserver.store import NodeMetricStore
from colocation.custommetrics.routes import CustomMetricsApi
from colocation.custommetrics.samples import validate_batch

log = logging.getLogger(__name__)

MAX_REPORT_BYTES = 1024 * 1024
_UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})
_TABLE_ACCEPT = "as=Table"
_Validated = TypeVar("_Validated")


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_identity(self) -> str | None: ...


@dataclass
class ApiOptions:
    bookmark_interval: float = 60.0
    max_watch_seconds: int = 1800


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _bool_param(value: str | None) -> bool:
    return value is not None and value.lower() not in ("", "0", "false")


class NodeMetricApi:
    def __init__(self, store: NodeMetricStore, authenticator: DelegatingAuthenticator,
                 authorizer: DelegatingAuthorizer, request_header: Callable[[], RequestHeaderConfig | None],
                 leadership: Leadership, known_node: Callable[[str], bool],
                 node_labels: Callable[[str], Any], metrics: ServerMetrics,
                 options: ApiOptions | None = None, *, wall: Callable[[], float] = time.time,
                 resource_metrics: ResourceMetricsApi | None = None,
                 custom_metrics: CustomMetricsApi | None = None) -> None:
        self.store = store
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.request_header = request_header
        self.leadership = leadership
        self.known_node = known_node
        self.node_labels = node_labels
        self.metrics = metrics
        self.options = options or ApiOptions()
        self.wall = wall
        self.resource_metrics = resource_metrics  # metrics.k8s.io, with --serve-resource-metrics
        self.custom_metrics = custom_metrics  # custom and external metrics, with --serve-custom-metrics
        self.ready_check: Callable[[], bool] = lambda: self.leadership.is_leader

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REPORT_BYTES, middlewares=[self._errors])
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/livez", self._ok)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/apis", self._discovery(self._api_group_list))
        app.router.add_get(f"/apis/{discovery.GROUP}", self._discovery(discovery.api_group))
        app.router.add_get(discovery.BASE_PATH, self._discovery(discovery.api_resource_list))
        app.router.add_get("/openapi/v2", self._discovery(openapi.openapi_v2))
        app.router.add_get("/openapi/v3", self._discovery(openapi.openapi_v3_root))
        app.router.add_get(f"/openapi/v3/apis/{discovery.GROUP}/{discovery.VERSION}",
                           self._discovery(openapi.openapi_v3_group_version))
        collection = f"{discovery.BASE_PATH}/{discovery.RESOURCE}"
        app.router.add_get(collection, self._list_or_watch)
        app.router.add_get(collection + "/{name}", self._get)
        app.router.add_get(collection + "/{name}/status", self._get)
        app.router.add_put(collection + "/{name}/status", self._report)
        if self.resource_metrics is not None:
            self.resource_metrics.add_routes(app.router, self._caller)
        if self.custom_metrics is not None:
            app.router.add_put(collection + "/{name}/samples", self._samples)
            self.custom_metrics.add_routes(app.router, self._caller)
        return app

    def _api_group_list(self) -> Any:
        groups = discovery.api_group_list()
        if self.resource_metrics is not None:
            groups["groups"].append(api_group_body())
        if self.custom_metrics is not None:
            groups["groups"].extend(self.custom_metrics.api_groups())
        return groups

    # ---- cross-cutting -------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        started = time.perf_counter()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except ApiError as error:
            code = error.code
            return _json(error.status(), error.code)
        except web.HTTPException as exc:
            code = exc.status
            if exc.status == 413:
                return _json(ApiError.too_large(MAX_REPORT_BYTES).status(), 413)
            if exc.status in (404, 405):
                missing = ApiError(exc.status, "NotFound" if exc.status == 404 else "MethodNotAllowed",
                                   "the server could not find the requested resource" if exc.status == 404
                                   else f"{request.method} is not supported on {request.path}")
                return _json(missing.status(), exc.status)
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # answer with a Status, never drop the connection on a bug
            log.exception("request failed", extra={"path": request.path, "method": request.method})
            return _json(ApiError.internal(f"{type(exc).__name__}: {exc}").status(), 500)
        finally:
            if request.path not in _UNAUTHENTICATED_PATHS:
                self.metrics.requests.labels(request.get(VERB, request.method.lower()), str(code)).observe(
                    time.perf_counter() - started)

    async def _caller(self, request: web.Request) -> Caller:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
        peer = certificates.peer_common_name_and_orgs(ssl_object) if ssl_object is not None else None
        return await self.authenticator.authenticate(request.headers, peer, self.request_header())

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self.ready_check():
            return web.Response(text="ok")
        leader = self.leadership.leader_identity or "unknown"
        return web.Response(status=503, text=f"not ready: this replica is a standby (leader: {leader})")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(), content_type="text/plain", charset="utf-8")

    def _discovery(self, document: Callable[[], Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            caller = await self._caller(request)
            await self.authorizer.authorize_path(caller, "get", request.path)
            return _json(document())

        return handler

    # ---- reads ---------------------------------------------------------------------------------

    async def _authorize_read(self, request: web.Request, verb: str, name: str = "") -> None:
        request[VERB] = verb
        caller = await self._caller(request)
        await self.authorizer.authorize(caller, verb, discovery.RESOURCE, name=name)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        await self._authorize_read(request, "get", name)
        entry = self.store.get(name)
        if entry is None:
            raise ApiError.not_found(discovery.GROUP, discovery.RESOURCE, name)
        if _TABLE_ACCEPT in request.headers.get("Accept", ""):
            return _json(tables.table([entry], self.store.resource_version, self.wall()))
        return web.Response(body=entry.body, content_type="application/json")

    def _selection(self, request: web.Request) -> tuple[LabelSelector | None, str | None]:
        query = request.query
        labels = LabelSelector.parse(query["labelSelector"]) if query.get("labelSelector") else None
        name = None
        if query.get("fieldSelector"):
            fields = FieldSelector.parse(query["fieldSelector"], ("metadata.name",))
            name = fields.exact_name()
            if name is None and not fields.empty:
                raise ApiError.bad_request("only metadata.name=NAME field selectors are supported for nodemetrics")
        return labels, name

    async def _list_or_watch(self, request: web.Request) -> web.StreamResponse:
        if _bool_param(request.query.get("watch")):
            return await self._watch(request)
        await self._authorize_read(request, "list")
        labels, name = self._selection(request)
        if _TABLE_ACCEPT in request.headers.get("Accept", ""):
            entries, rv = self.store.list(labels, name)
            return _json(tables.table(entries, rv, self.wall()))
        return web.Response(body=self.store.list_body(labels, name), content_type="application/json")

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        await self._authorize_read(request, "watch")
        labels, name = self._selection(request)
        query = request.query
        raw_initial = query.get("sendInitialEvents")
        send_initial = None if raw_initial is None else _bool_param(raw_initial)
        bookmarks = _bool_param(query.get("allowWatchBookmarks"))
        if send_initial and (query.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
            raise ApiError(422, "Invalid", "sendInitialEvents requires resourceVersionMatch=NotOlderThan and "
                           "allowWatchBookmarks=true")
        try:
            timeout = min(int(query.get("timeoutSeconds") or self.options.max_watch_seconds),
                          self.options.max_watch_seconds)
        except ValueError:
            raise ApiError.bad_request("timeoutSeconds must be an integer") from None
        watcher = self.store.watch(query.get("resourceVersion", ""), labels, name, send_initial)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + self.options.bookmark_interval
        try:
            while (now := loop.time()) < deadline:
                wait = min(deadline, next_bookmark) - now if bookmarks else deadline - now
                line = await watcher.next(max(wait, 0.001))
                if line is not None:
                    await response.write(line)
                    continue
                if watcher.closed:
                    break
                if bookmarks and loop.time() >= next_bookmark:
                    bookmark = watcher.bookmark_line()  # None while lines are pending: send later
                    if bookmark is not None:
                        await response.write(bookmark)
                        next_bookmark = loop.time() + self.options.bookmark_interval
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watcher.stop()
        return response

    # ---- writes --------------------------------------------------------------------------------

    async def _report(self, request: web.Request) -> web.Response:
        node, report = await self._from_agent(request, "status", validate_report, self.metrics.reports_rejected)
        entry = self.store.put(report, self.node_labels(node) or {})
        self.metrics.reports_accepted.inc()
        return web.Response(body=entry.body, content_type="application/json")

    async def _samples(self, request: web.Request) -> web.Response:
        assert self.custom_metrics is not None, "routed only with custom metrics"
        _, batch = await self._from_agent(request, "samples", validate_batch,
                                          self.custom_metrics.metrics.batches_rejected)
        return _json(self.custom_metrics.ingest(batch))

    async def _from_agent(self, request: web.Request, subresource: str, validate: Callable[[bytes, str], _Validated],
                          rejected: Any) -> tuple[str, _Validated]:
        """An agent's write to nodemetrics/{node}/SUBRESOURCE: leader only, authorized, from that node, valid.

        `rejected` counts refusals by reason (a prometheus_client Counter with one label).
        """
        request[VERB] = "update"
        node = request.match_info["name"]
        if not self.leadership.is_leader:
            leader = self.leadership.leader_identity or "unknown"
            rejected.labels("not-leader").inc()
            raise ApiError.service_unavailable(f"this replica is a standby; send reports to the leader ({leader})")
        try:
            caller = await self._caller(request)
            await self.authorizer.authorize(caller, "update", discovery.RESOURCE, subresource=subresource, name=node)
            check_node_rule(caller, node)
            raw = await self._read_body(request)
            validated = validate(raw, node)
            if not self.known_node(node):
                raise ApiError.not_found("", "nodes", node)
        except ApiError as error:
            rejected.labels(error.reason or str(error.code)).inc()
            raise
        return node, validated

    async def _read_body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > MAX_REPORT_BYTES:
            raise ApiError.too_large(MAX_REPORT_BYTES)
        content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if content_type not in ("application/json", ""):
            raise ApiError.unsupported_media_type(content_type)
        return await request.read()  # client_max_size turns a longer body into 413
