"""`PUT …/nodemetrics/{node}/evictions`: an agent asks the leader to evict best-effort pods of its node.

Served as an upload of the NodeMetric group (`AgentUpload`), so it is authenticated and
authorized exactly as reports are: leader only (a standby answers 503 and names the leader),
RBAC `update` on `nodemetrics/evictions`, and the node rule (a token bound to a pod on another
node gets 403). The body is validated here (colocation.nodemetrics.eviction_request: 400/422);
what is done with it is the controllers' (colocation.controllers.eviction_requests), handed over
by the manager once the controllers run (`handler`); until then the answer is 503.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from colocation.apimachinery.errors import ApiError
from colocation.nodemetrics.eviction_request import (
    SUBRESOURCE,
    EvictionRequest,
    PodOutcome,
    result_body,
    validate_eviction_request,
)

EvictionHandler = Callable[[EvictionRequest], Awaitable[list[PodOutcome]]]


class EvictionRequestsUpload:
    """The NodeMetric group's `AgentUpload` for eviction requests."""

    subresource = SUBRESOURCE
    any_replica = False  # the leader judges them against its pods

    def __init__(self, registry: CollectorRegistry) -> None:
        self.handler: EvictionHandler | None = None
        self._rejected = Counter("colocation_eviction_requests_rejected_total",
                                 "Agents' eviction requests refused before any pod was judged, by reason "
                                 "(not-leader, Forbidden, BadRequest, Invalid, ...).", ["reason"], registry=registry)

    @property
    def rejected(self) -> Any:
        return self._rejected

    def validate(self, raw: bytes, node: str) -> EvictionRequest:
        return validate_eviction_request(raw, node)

    async def accept(self, request: EvictionRequest) -> dict[str, Any]:
        if self.handler is None:
            self._rejected.labels("not-ready").inc()
            raise ApiError.service_unavailable("the leader's controllers are not running yet", retry_after=1)
        try:
            outcomes = await self.handler(request)
        except ApiError as error:
            self._rejected.labels(error.reason or str(error.code)).inc()
            raise
        return result_body(request.node, outcomes)
