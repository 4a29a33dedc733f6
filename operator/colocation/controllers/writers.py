"""Every write the controllers make, through kubernetes-asyncio, each declared in kube.permissions.

Patches are JSON merge patches sent as `application/merge-patch+json` (kubernetes-asyncio would
send a dict as a JSON patch otherwise). Each call is bounded by `timeout`; a failure is returned
as (status, body), never raised, so one node's trouble never stops the evaluation of the others.
Transport errors and timeouts come back as status 0.

Fencing: with a `write_budget` (the leader election's), a write is not sent unless this replica
leads (budget 0: status 0, counted as fenced), and its timeout never exceeds the budget, so no
request of an old leader can still be in flight when a successor may start writing. Reads are
not fenced: a warm standby reads before it leads. With evaluation shards, a node's writes are
fenced by its shard's election instead (`fenced_by`, around everything done for that node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client

from colocation.controllers.controller_metrics import ControllerMetrics
from colocation.controllers.events import Create, EventRecorder, EventType, ObjectRef, Patch
from colocation.kube import permissions
from colocation.kube.client import call_json

log = logging.getLogger(__name__)

MERGE_PATCH: Final = "application/merge-patch+json"
GROUP: Final = permissions.SLO_GROUP
VERSION: Final = "v1alpha1"
NODESLOS: Final = "nodeslos"
NODERESOURCES: Final = "noderesources"

_OP = permissions.OPERATOR_API_CALLS


def _declare(group: str, resource: str, verb: str, *, namespace: str | None = None, subresource: str = "",
             name: str = "") -> permissions.ApiCall:
    return permissions.declared(_OP, permissions.ApiCall(group=group, resource=resource, verb=verb, namespace=namespace,
                                                         subresource=subresource, name=name))


_PATCH_NODE_STATUS = _declare("", "nodes", "patch", subresource="status")
_CREATE_NODESLO = _declare(GROUP, NODESLOS, "create")
_PATCH_NODESLO = _declare(GROUP, NODESLOS, "patch")
_DELETE_NODESLO = _declare(GROUP, NODESLOS, "delete")
_GET_NODESLO = _declare(GROUP, NODESLOS, "get")
_CREATE_NODERESOURCE = _declare(GROUP, NODERESOURCES, "create")
_GET_NODERESOURCE = _declare(GROUP, NODERESOURCES, "get")
_DELETE_NODERESOURCE = _declare(GROUP, NODERESOURCES, "delete")
_PATCH_NODERESOURCE_STATUS = _declare(GROUP, NODERESOURCES, "patch", subresource="status")
_EVICT = _declare("", "pods", "create", subresource="eviction")
_CREATE_EVENT = _declare("", "events", "create")
_PATCH_EVENT = _declare("", "events", "patch")
_GET_CONFIG = _declare("", "configmaps", "get", namespace=permissions.OPERATOR_NAMESPACE)

Result = tuple[int, Any]

# The budget that fences the writes of the task that set it (`fenced_by`), over the writer's own.
_FENCE: ContextVar[Callable[[], float] | None] = ContextVar("colocation_write_fence", default=None)


def active_fence() -> Callable[[], float] | None:
    """The budget `fenced_by` set for this task (None: the writer's own)."""
    return _FENCE.get()


@contextlib.contextmanager
def fenced_by(write_budget: Callable[[], float]) -> Iterator[None]:
    """Within this block (and the tasks it starts), writes are fenced by `write_budget`."""
    token = _FENCE.set(write_budget)
    try:
        yield
    finally:
        _FENCE.reset(token)


def owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """The Node as owner: the garbage collector deletes the dependent when the Node goes.

    No blockOwnerDeletion: setting it needs permission to update the Node's finalizers, and
    nothing needs to block the Node's deletion.
    """
    metadata = node.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Node", "name": metadata.get("name"), "uid": metadata.get("uid")}


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns `old` into `new` (null removes a field)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


class KubeWriter:
    def __init__(self, api: client.ApiClient, metrics: ControllerMetrics, recorder: EventRecorder, *,
                 concurrency: int = 16, timeout: float = 10.0,
                 write_budget: Callable[[], float] | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.metrics = metrics
        self.recorder = recorder
        self.timeout = timeout
        self.write_budget = write_budget
        self._slots = asyncio.Semaphore(concurrency)

    async def _call(self, what: permissions.ApiCall, fn: Callable[..., Awaitable[Any]], *args: Any,
                    fenced: bool = True, **kwargs: Any) -> Result:
        async with self._slots:
            timeout = self.timeout
            write_budget = active_fence() or self.write_budget
            if fenced and write_budget is not None:
                timeout = min(timeout, write_budget())  # read after the wait for a slot
                if timeout <= 0:
                    self.metrics.fenced_calls.inc()
                    log.warning("API call not sent: no longer leading", extra={"call": str(what)})
                    return 0, None
            try:
                return await call_json(fn, *args, timeout=timeout, **kwargs)
            except (TimeoutError, OSError, aiohttp.ClientError, client.ApiException) as error:  # unreachable
                log.warning("API call failed", extra={"call": str(what), "error": str(error) or type(error).__name__})
                return 0, None

    # ---- Nodes ---------------------------------------------------------------------------------

    async def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> Result:
        return await self._call(_PATCH_NODE_STATUS, self.core.patch_node_status, name, dict(patch),
                                _content_type=MERGE_PATCH)

    # ---- NodeSLO and NodeResource ----------------------------------------------------------------

    async def create_cluster_object(self, plural: str, body: Mapping[str, Any]) -> Result:
        call = _CREATE_NODESLO if plural == NODESLOS else _CREATE_NODERESOURCE
        result = await self._call(call, self.custom.create_cluster_custom_object, GROUP, VERSION, plural, dict(body))
        self._count(plural, "create", result[0])
        return result

    async def get_cluster_object(self, plural: str, name: str) -> Result:
        call = _GET_NODESLO if plural == NODESLOS else _GET_NODERESOURCE
        return await self._call(call, self.custom.get_cluster_custom_object, GROUP, VERSION, plural, name,
                                fenced=False)

    async def patch_nodeslo(self, name: str, patch: Mapping[str, Any]) -> Result:
        result = await self._call(_PATCH_NODESLO, self.custom.patch_cluster_custom_object, GROUP, VERSION,
                                  NODESLOS, name, dict(patch), _content_type=MERGE_PATCH)
        self._count(NODESLOS, "patch", result[0])
        return result

    async def delete_cluster_object(self, plural: str, name: str) -> Result:
        call = _DELETE_NODESLO if plural == NODESLOS else _DELETE_NODERESOURCE
        result = await self._call(call, self.custom.delete_cluster_custom_object, GROUP, VERSION, plural, name)
        self._count(plural, "delete", result[0])
        return result

    async def patch_noderesource_status(self, name: str, patch: Mapping[str, Any]) -> Result:
        result = await self._call(_PATCH_NODERESOURCE_STATUS, self.custom.patch_cluster_custom_object_status,
                                  GROUP, VERSION, NODERESOURCES, name, dict(patch), _content_type=MERGE_PATCH)
        self._count(NODERESOURCES, "patchStatus", result[0])
        return result

    def _count(self, resource: str, operation: str, status: int) -> None:
        result = "ok" if 200 <= status < 300 else ("conflict" if status == 409 else "error")
        self.metrics.object_writes.labels(resource, operation, result).inc()

    # ---- the ConfigMap -------------------------------------------------------------------------

    async def get_config_map(self, namespace: str, name: str) -> Result:
        # A read: a warm standby reads the configuration before it leads.
        return await self._call(_GET_CONFIG, self.core.read_namespaced_config_map, name, namespace, fenced=False)

    # ---- evictions -----------------------------------------------------------------------------

    async def evict(self, namespace: str, name: str, uid: str) -> Result:
        """POST pods/{name}/eviction (policy/v1): PodDisruptionBudgets decide; 429 means not now."""
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        if uid:
            # The pod we judged, not a new one of the same name (a StatefulSet's replacement).
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        return await self._call(_EVICT, self.core.create_namespaced_pod_eviction, name, namespace, body)

    # ---- events --------------------------------------------------------------------------------

    async def event(self, ref: ObjectRef, type_: EventType, reason: str, *, message: str) -> None:
        action = self.recorder.record(ref, type_, reason, message=message)
        if isinstance(action, Patch):
            status, _ = await self._call(_PATCH_EVENT, self.core.patch_namespaced_event, action.name,
                                         action.namespace, action.body, _content_type=MERGE_PATCH)
            if status != 404:
                self._count("events", "patch", status)
                return
            self.recorder.forget(action.key)  # expired meanwhile (events live an hour): post it anew
            action = self.recorder.record(ref, type_, reason, message=message)
        assert isinstance(action, Create)
        status, body = await self._call(_CREATE_EVENT, self.core.create_namespaced_event, action.namespace,
                                        action.body)
        self._count("events", "create", status)
        if not 200 <= status < 300:
            log.warning("could not post an event", extra={"reason": reason, "object": ref.name, "status": status,
                                                          "error": _message(body)})


def _message(body: Any) -> str:
    return str(body.get("message")) if isinstance(body, Mapping) else str(body)
