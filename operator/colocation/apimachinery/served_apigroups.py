"""The contract between an aggregated API server and the API groups registered into it.

A group (NodeMetric, metrics.k8s.io, custom and external metrics) says what it serves: its
discovery (its groups and versions, and their resource lists), its OpenAPI documents if it has
any, and its routes; the server adds what
is common (errors as Status, authentication, discovery and OpenAPI endpoints, health, metrics).
Groups authorize their own requests through an `Authorizer`, as the resource they serve decides
the attributes to ask about. The types live here, below both sides, so that neither imports the
other: the operator's manager builds the groups and registers them (docs/architecture.md,
"The API server").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web

from colocation.apimachinery.userinfo import UserInfo

# Who made a request: the same user.Info the sandbox's authenticator produces.
Caller = UserInfo

# The RBAC verb a request was authorized for, kept on the request for the latency histogram.
VERB = web.RequestKey("verb", str)

# The server's authentication of a request, lent to every group for its routes.
Authenticate = Callable[[web.Request], Awaitable[Caller]]

Document = Callable[[], Mapping[str, Any]]


class Authorizer(Protocol):
    async def authorize(self, caller: Caller, verb: str, resource: str, *, subresource: str = "", name: str = "",
                        api_group: str = ..., namespace: str = "") -> None:
        """Return if allowed, else raise ApiError 403."""

    async def authorize_path(self, caller: Caller, verb: str, path: str) -> None:
        """The same for a non-resource URL (/metrics, /openapi/v2, ...)."""


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_identity(self) -> str | None: ...

    @property
    def leader_endpoint(self) -> str:
        """Where the leader serves as it published it ("" when unknown)."""


@dataclass(frozen=True)
class OpenApiDocuments:
    v2: Document
    v3: Mapping[str, Document]  # "apis/GROUP/VERSION" -> the group version's document


class ApiGroup(Protocol):
    def discovery_groups(self) -> Mapping[str, Sequence[str]]:
        """The API groups served, in the order /apis lists them: name -> versions, preferred first."""

    def resource_lists(self) -> Mapping[str, Document]:
        """groupVersion -> its APIResourceList (read at every request: it may change)."""

    def openapi(self) -> OpenApiDocuments | None: ...

    def add_routes(self, router: web.UrlDispatcher, authenticate: Authenticate) -> None: ...


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
