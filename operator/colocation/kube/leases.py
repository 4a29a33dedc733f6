"""One Lease in the API, the I/O of leader election: get, create and replace with plain JSON bodies."""

from __future__ import annotations

from typing import Any, Protocol

from kubernetes_asyncio.client import ApiClient, CoordinationV1Api

from colocation.kube import permissions
from colocation.kube.client import call_json
from colocation.kube.permissions import OPERATOR_API_CALLS, ApiCall

# The calls made here, on the operator's own Lease (see colocation.kube.permissions).
for _verb, _name in (("get", permissions.LEADER_LEASE_NAME), ("create", ""), ("update", permissions.LEADER_LEASE_NAME)):
    permissions.declared(OPERATOR_API_CALLS, ApiCall(group="coordination.k8s.io", resource="leases", verb=_verb,
                                                     namespace=permissions.OPERATOR_NAMESPACE, name=_name))


class LeaseError(Exception):
    """The API answered a Lease call with an error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class LeaseConflict(LeaseError):
    """409: someone else wrote (or created) the Lease since we read it."""


class LeaseStore(Protocol):
    """One Lease; bodies are plain JSON objects exactly as sent and received."""

    async def get(self, timeout: float) -> dict[str, Any] | None: ...  # None: it does not exist
    async def create(self, body: dict[str, Any], timeout: float) -> dict[str, Any]: ...
    async def replace(self, body: dict[str, Any], timeout: float) -> dict[str, Any]: ...


class KubernetesLeases:
    """A Lease through kubernetes-asyncio, with dict bodies so MicroTime goes out as `format_micro_time` wrote it."""

    def __init__(self, api: ApiClient, namespace: str, name: str) -> None:
        self._api = CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name

    async def get(self, timeout: float) -> dict[str, Any] | None:
        status, body = await call_json(self._api.read_namespaced_lease, self.name, self.namespace, timeout=timeout)
        return None if status == 404 else _lease_or_raise(status, body)

    async def create(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        status, answer = await call_json(self._api.create_namespaced_lease, self.namespace, body, timeout=timeout)
        return _lease_or_raise(status, answer)

    async def replace(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        status, answer = await call_json(self._api.replace_namespaced_lease, self.name, self.namespace, body,
                                         timeout=timeout)
        return _lease_or_raise(status, answer)


def _lease_or_raise(status: int, body: Any) -> dict[str, Any]:
    if 200 <= status < 300 and isinstance(body, dict):
        return body
    message = body.get("message", "") if isinstance(body, dict) else str(body or "")
    raise (LeaseConflict if status == 409 else LeaseError)(status, message or "unexpected answer")
