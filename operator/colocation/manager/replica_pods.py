"""The operator's own pods, as their kubelets describe them: how a standby learns that the leader died.

One list-then-watch of the pods in the operator's namespace that carry OPERATOR_POD_SELECTOR
(two or three pods). Only their names and container statuses are kept. The elector asks
`holder_ended` (colocation.kube.lease_holder) before it waits out a lease.
"""

from __future__ import annotations

from collections.abc import Callable

from colocation.apimachinery.objects import Obj
from colocation.kube import permissions
from colocation.kube.informer import Informer, InformerOptions, Transport
from colocation.kube.lease_holder import OPERATOR_POD_SELECTOR, holder_ended, holder_pod_name
from colocation.kube.lease_record import LeaderElectionRecord

_LIST_PODS = permissions.declared(permissions.OPERATOR_API_CALLS,
                                  permissions.ApiCall(group="", resource="pods", verb="list", namespace=None))
_WATCH_PODS = permissions.declared(permissions.OPERATOR_API_CALLS,
                                   permissions.ApiCall(group="", resource="pods", verb="watch", namespace=None))


def _kept(pod: Obj) -> Obj:
    metadata = pod.get("metadata") or {}
    return {"metadata": {"name": metadata.get("name")},
            "status": {"containerStatuses": (pod.get("status") or {}).get("containerStatuses") or []}}


class ReplicaPods:
    """Pod name -> what is kept of it. `on_change(name)` hears of every pod that changed."""

    def __init__(self, namespace: str, on_change: Callable[[str], None] = lambda name: None) -> None:
        self.namespace = namespace
        self._pods: dict[str, Obj] = {}
        self._on_change = on_change

    def holder_ended(self, record: LeaderElectionRecord) -> bool:
        pod = self._pods.get(holder_pod_name(record.holder_identity))
        return pod is not None and holder_ended(record, pod)

    async def on_sync(self, items: list[Obj], resource_version: str) -> None:
        self._pods = {str(item["metadata"]["name"]): item for item in items}
        for name in self._pods:
            self._on_change(name)

    async def on_event(self, type_: str, pod: Obj) -> None:
        name = str(pod["metadata"]["name"])
        if type_ == "DELETED":
            self._pods.pop(name, None)
            return
        self._pods[name] = pod
        self._on_change(name)

    def informer(self, transport: Transport) -> Informer[Obj]:
        # Across namespaces, narrowed by field: the operator's grant on pods is cluster-wide.
        options = InformerOptions(label_selector=OPERATOR_POD_SELECTOR,
                                  field_selector=f"metadata.namespace={self.namespace}")
        return Informer(transport, "/api/v1/pods", on_sync=self.on_sync, on_event=self.on_event, options=options,
                        name="replica-pods", transform=_kept)
