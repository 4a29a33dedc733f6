"""What the aggregator and the special endpoints use of the API server.

The server owns both and routes requests to them; they see it through this Protocol instead of
importing it, so the modules form no cycle and what they may touch is written down in one place.
"""

from __future__ import annotations

from typing import Protocol

from colocation.apimachinery.clock import WallClock
from colocation_sandbox.server.object_store import Store
from colocation_sandbox.server.rbac_authorizer import RbacAuthorizer
from colocation_sandbox.server.resource_types import ResourceType
from colocation_sandbox.server.token_authority import TokenAuthority


class ApiCore(Protocol):
    @property
    def clock(self) -> WallClock: ...

    @property
    def store(self) -> Store: ...

    @property
    def tokens(self) -> TokenAuthority: ...

    @property
    def rbac(self) -> RbacAuthorizer: ...

    @property
    def requests_total(self) -> int:
        """Spreads proxied requests over a Service's ready endpoints."""
        ...

    def rt(self, group: str, resource: str, version: str = "v1") -> ResourceType:
        """The registered type; KeyError when it is not."""
        ...
