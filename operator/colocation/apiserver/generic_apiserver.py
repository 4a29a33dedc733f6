"""The HTTP shell of the operator's aggregated API: it serves whichever API groups are registered into it.

What every group shares is here: errors answered as Status (never a dropped connection), the
request latency histogram by verb, authentication, discovery, OpenAPI, health, readiness and
/metrics. A group brings its own routes and authorizes its own requests
(`served_apigroups.ApiGroup`). Readiness is the manager's `ready_check` (by default leadership).
Under `ApiRunner`, a request aiohttp's parser refuses is answered with a Status too: 431 for a
request line or header over its limits, as kube-apiserver answers, 400 for the rest.

Who is ready: docs/operator.md#consistency-across-replicas
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_request import BaseRequest

from colocation.apimachinery import certificates
from colocation.apimachinery import discovery_documents as legacy
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.served_apigroups import (
    VERB,
    ApiGroup,
    Authorizer,
    Caller,
    Document,
    Leadership,
    OpenApiDocuments,
    json_response,
)
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, RequestHeaderConfig

log = logging.getLogger(__name__)

MAX_REPORT_BYTES = 1024 * 1024  # any request body: a NodeMetric report of a full node fits
_UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})


class AggregatedApiServer:
    def __init__(self, authenticator: DelegatingAuthenticator, authorizer: Authorizer,
                 request_header: Callable[[], RequestHeaderConfig | None], *, leadership: Leadership,
                 metrics: ServerMetrics, groups: Sequence[ApiGroup]) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.request_header = request_header
        self.leadership = leadership
        self.metrics = metrics
        self.groups = tuple(groups)
        self.ready_check: Callable[[], bool] = lambda: self.leadership.is_leader

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REPORT_BYTES, middlewares=[self._errors])
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/livez", self._ok)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/apis", self._discovery(self._api_group_list))
        for group in self.groups:
            for name, versions in group.discovery_groups().items():
                api_group = functools.partial(legacy.api_group, name, versions)
                app.router.add_get(f"/apis/{name}", self._discovery(api_group))
            for group_version, resource_list in group.resource_lists().items():
                app.router.add_get(f"/apis/{group_version}", self._discovery(resource_list))
        openapi = [documents for group in self.groups if (documents := group.openapi()) is not None]
        if openapi:
            app.router.add_get("/openapi/v2", self._discovery(functools.cache(lambda: _merged_v2(openapi))))
            app.router.add_get("/openapi/v3", self._discovery(functools.cache(lambda: _v3_root(openapi))))
            for documents in openapi:
                for path, document in documents.v3.items():
                    app.router.add_get(f"/openapi/v3/{path}", self._discovery(document))
        for group in self.groups:
            group.add_routes(app.router, self.authenticate)
        return app

    def _api_group_list(self) -> dict[str, Any]:
        """/apis on the extension server: only the groups it serves."""
        return legacy.api_group_list(legacy.api_group_body(name, versions) for group in self.groups
                                     for name, versions in group.discovery_groups().items())

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
            response = json_response(error.status(), error.code)
            retry_after = error.details.get("retryAfterSeconds")
            if retry_after is not None:
                response.headers["Retry-After"] = str(retry_after)
            return response
        except web.HTTPException as exc:
            code = exc.status
            if exc.status == 413:
                return json_response(ApiError.too_large(MAX_REPORT_BYTES).status(), 413)
            if exc.status in (404, 405):
                missing = ApiError(exc.status, "NotFound" if exc.status == 404 else "MethodNotAllowed",
                                   "the server could not find the requested resource" if exc.status == 404
                                   else f"{request.method} is not supported on {request.path}")
                return json_response(missing.status(), exc.status)
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # answer with a Status, never drop the connection on a bug
            log.exception("request failed", extra={"path": request.path, "method": request.method})
            return json_response(ApiError.internal(f"{type(exc).__name__}: {exc}").status(), 500)
        finally:
            if request.path not in _UNAUTHENTICATED_PATHS:
                self.metrics.child(self.metrics.requests, request.get(VERB, request.method.lower()), str(code)).observe(
                    time.perf_counter() - started)

    async def authenticate(self, request: web.Request) -> Caller:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
        peer = certificates.peer_common_name_and_orgs(ssl_object) if ssl_object is not None else None
        return await self.authenticator.authenticate(request.headers, peer, self.request_header())

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self.ready_check():
            return web.Response(text="ok")
        leader = self.leadership.leader_identity or "unknown"
        return web.Response(status=503, text=f"not ready: this replica is a standby without a current copy of "
                                              f"the leader's data (leader: {leader})")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(), content_type="text/plain", charset="utf-8")

    def _discovery(self, document: Document) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            caller = await self.authenticate(request)
            await self.authorizer.authorize_path(caller, "get", request.path)
            return json_response(document())

        return handler


def _merged_v2(openapi: Sequence[OpenApiDocuments]) -> Mapping[str, Any]:
    """One swagger document: the first group's, with every other group's paths and definitions added."""
    first, *others = (documents.v2() for documents in openapi)
    if not others:
        return first
    merged = {**first, "paths": dict(first.get("paths") or {}), "definitions": dict(first.get("definitions") or {})}
    for other in others:
        merged["paths"].update(other.get("paths") or {})
        merged["definitions"].update(other.get("definitions") or {})
    return merged


def _v3_root(openapi: Sequence[OpenApiDocuments]) -> dict[str, Any]:
    """/openapi/v3: each group version's document, with the hash clients cache it by."""
    paths = {}
    for documents in openapi:
        for path, document in documents.v3.items():
            digest = hashlib.sha512(orjson.dumps(document())).hexdigest().upper()
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


class ApiRunner(web.AppRunner):
    """An AppRunner whose connections answer requests the HTTP parser refuses with a Status."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # aiohttp builds each connection's RequestHandler in Server.__call__, with no hook for the
        # class: a Server of ours, made as the application made its own.
        return _StatusServer(server.request_handler, request_factory=server.request_factory,
                             handler_cancellation=server.handler_cancellation, loop=server._loop, **server._kwargs)


class _StatusServer(web.Server):
    def __call__(self) -> web.RequestHandler:
        return _StatusRequestHandler(self, loop=self._loop, **self._kwargs)


class _StatusRequestHandler(web.RequestHandler):
    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        error = parser_error(exc, self.max_line_size, self.max_field_size) if status == 400 else None
        if error is None:
            return super().handle_error(request, status, exc, message)
        # The client's mistake, refused before anything was read or written: not worth a traceback.
        self.logger.info("refused a request the HTTP parser would not read: %s", error.message)
        response = json_response(error.status(), error.code)
        response.force_close()  # the parser cannot tell where the next request would begin
        return response


def parser_error(exc: BaseException | None, max_line_size: int, max_field_size: int) -> ApiError | None:
    """The Status for what aiohttp's HTTP parser refused, or None if it was not the parser.

    The oversized line itself is not echoed back: it is the client's to know, and may be huge.
    """
    too_large = isinstance(exc, LineTooLong) or (isinstance(exc, BadHttpMessage) and
                                                 exc.message == "Too many headers received")
    if too_large:
        return ApiError(431, "RequestHeaderFieldsTooLarge",
                        f"Request Header Fields Too Large: the request line (the URL with its query) may be at "
                        f"most {max_line_size} bytes, and each header field {max_field_size} bytes")
    if isinstance(exc, BadHttpMessage):
        return ApiError.bad_request(f"malformed HTTP request: {exc.message[:200]}")
    return None
