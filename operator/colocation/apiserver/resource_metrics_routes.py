"""`metrics.k8s.io/v1beta1` from the NodeMetric store: `kubectl top` and the HPA without metrics-server.

Opt-in (`colocation operator --serve-resource-metrics`). The objects have the shapes
metrics-server serves: NodeMetrics and PodMetrics with `timestamp`, `window` and `usage` (cpu and
memory only), lists with empty list metadata and items without kind, get and list but no watch,
`creationTimestamp` the time of the request, names in sort order. The figures are
`nodemetrics.resource_metrics_view`'s. Each pod has one container entry, "pod", holding the whole
pod's usage. Only pods that exist, are bound and have not finished are served, with their labels.

Where this differs from metrics-server, and why: docs/metrics-apis.md#serving-kubectl-top
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from aiohttp import web

from colocation.apimachinery import discovery_documents as legacy
from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import FieldSelector, LabelSelector
from colocation.apimachinery.served_apigroups import (
    VERB,
    Authenticate,
    Authorizer,
    Caller,
    Document,
    json_response,
)
from colocation.apimachinery.watch_params import ListOptions, query_flag
from colocation.kube.shared_informer import InformerConsumer
from colocation.nodemetrics.resource_metrics_view import NodeUsage, PodUsage, ResourceMetricsView

GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
BASE_PATH = f"/apis/{GROUP}/{VERSION}"
NODES = "nodes"
PODS = "pods"
POD_CONTAINER_NAME = "pod"



# ---- discovery ---------------------------------------------------------------------------------


def api_resource_list() -> dict[str, Any]:
    return legacy.api_resource_list(GROUP, VERSION, [
        legacy.api_resource(NODES, "NodeMetrics", ("get", "list"), namespaced=False),
        legacy.api_resource(PODS, "PodMetrics", ("get", "list"), namespaced=True),
    ])


# ---- the objects served ------------------------------------------------------------------------


def node_metrics(node: NodeUsage, created: str) -> dict[str, Any]:
    """A NodeMetrics item (list items carry no kind; see `as_object`)."""
    metadata: dict[str, Any] = {"name": node.name, "creationTimestamp": created}
    if node.labels:
        metadata["labels"] = dict(node.labels)
    usage, window = node.served()
    return {"metadata": metadata, "timestamp": node.timestamp, "window": window, "usage": dict(usage)}


def pod_metrics(node: NodeUsage, pod: PodUsage, labels: Mapping[str, str], *, created: str) -> dict[str, Any]:
    """A PodMetrics item: the pod's usage as one container named POD_CONTAINER_NAME."""
    metadata: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace, "creationTimestamp": created}
    if labels:
        metadata["labels"] = dict(labels)
    usage, window = node.served_pod(pod)
    return {"metadata": metadata, "timestamp": node.timestamp, "window": window,
            "containers": [{"name": POD_CONTAINER_NAME, "usage": dict(usage)}]}


def as_object(kind: str, item: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": GROUP_VERSION, **item}


def as_list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    # metrics-server's lists have no resourceVersion: the figures are not versioned objects.
    return {"kind": f"{kind}List", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}


class PodLabels(Protocol):
    def labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The labels of a Pod that exists, else None."""


class PodDirectory:
    """(namespace, name) -> labels of every bound, unfinished Pod: a consumer of the replica's one Pod
    informer (`colocation.kube.shared_informer.bound_pods_informer`). Only such pods have usage in a
    node's report; a pod that finishes leaves the informer's selector, whose watch shows it DELETED,
    and is no longer served, as metrics-server's kubelets no longer report it."""

    def __init__(self) -> None:
        self._labels: dict[tuple[str, str], Mapping[str, str]] = {}

    def labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self._labels.get((namespace, name))

    def __len__(self) -> int:
        return len(self._labels)

    async def on_sync(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self._labels = {_key(item): _labels(item) for item in items}

    async def on_event(self, type_: str, obj: dict[str, Any]) -> None:
        if type_ == "DELETED":
            self._labels.pop(_key(obj), None)
        else:
            self._labels[_key(obj)] = _labels(obj)

    def consumer(self) -> InformerConsumer[dict[str, Any]]:
        return InformerConsumer(name="metric APIs", transform=_kept_of_pod, on_sync=self.on_sync,
                                on_event=self.on_event)


def _kept_of_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """All this directory keeps of a Pod: its name, namespace and labels."""
    metadata = pod.get("metadata") or {}
    return {"metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace", ""),
                         "labels": metadata.get("labels") or {}}}


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    return pod["metadata"].get("namespace", ""), pod["metadata"]["name"]


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return MappingProxyType(dict(pod["metadata"].get("labels") or {}))


# ---- HTTP --------------------------------------------------------------------------------------

class ResourceMetricsApi:
    """The routes of metrics.k8s.io/v1beta1, authorized by SubjectAccessReview like the rest."""

    def __init__(self, view: ResourceMetricsView, authorizer: Authorizer, pods: PodLabels, *,
                 wall: Callable[[], float] = time.time) -> None:
        self.view = view
        self.authorizer = authorizer
        self.pod_labels = pods
        self.wall = wall
        self._authenticate: Authenticate | None = None

    async def _caller(self, request: web.Request) -> Caller:
        assert self._authenticate is not None, "add_routes() first"
        return await self._authenticate(request)

    def discovery_groups(self) -> dict[str, tuple[str, ...]]:
        return {GROUP: (VERSION,)}

    def resource_lists(self) -> dict[str, Document]:
        return {GROUP_VERSION: api_resource_list}

    def openapi(self) -> None:
        return None

    def add_routes(self, router: web.UrlDispatcher, authenticate: Authenticate) -> None:
        self._authenticate = authenticate
        router.add_get(f"{BASE_PATH}/{NODES}", self._list_nodes)
        router.add_get(f"{BASE_PATH}/{NODES}/{{name}}", self._get_node)
        router.add_get(f"{BASE_PATH}/{PODS}", self._list_pods)
        router.add_get(f"{BASE_PATH}/namespaces/{{namespace}}/{PODS}", self._list_pods)
        router.add_get(f"{BASE_PATH}/namespaces/{{namespace}}/{PODS}/{{name}}", self._get_pod)

    async def _authorize(self, request: web.Request, verb: str, resource: str, *, name: str = "",
                         namespace: str = "") -> None:
        request[VERB] = verb
        caller = await self._caller(request)
        await self.authorizer.authorize(caller, verb, resource, name=name, api_group=GROUP, namespace=namespace)

    def _created(self) -> str:
        return format_time(self.wall())

    async def _list_options(self, request: web.Request, resource: str, namespace: str = "") -> ListOptions:
        """A list's options, read and checked as the generic API server does; a watch is refused
        (405) after that, as a storage that lists but does not watch is."""
        watch = query_flag(request.query, "watch")
        await self._authorize(request, "watch" if watch else "list", resource, namespace=namespace)
        options = ListOptions.from_query(request.query)
        options.since()  # metrics are always current: a resourceVersion is only checked
        options.check_unpaged()
        if options.watch:
            raise ApiError.method_not_allowed(f'watch is not supported on resources of kind "{resource}.{GROUP}"')
        return options

    async def _list_nodes(self, request: web.Request) -> web.Response:
        labels, fields = _selectors(await self._list_options(request, NODES))
        created = self._created()
        items = [node_metrics(node, created) for node in self.view.nodes(labels, fields.exact_name())]
        return json_response(as_list("NodeMetrics", [item for item in items if fields.matches(item)]))

    async def _get_node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        await self._authorize(request, "get", NODES, name=name)
        node = self.view.node(name)
        if node is None:
            raise ApiError.not_found(GROUP, NODES, name)
        return json_response(as_object("NodeMetrics", node_metrics(node, self._created())))

    async def _list_pods(self, request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace", "")
        selector, fields = _selectors(await self._list_options(request, PODS, namespace))
        created, items = self._created(), []
        for (pod_namespace, pod_name), (node, pod) in sorted(self.view.pods().items()):
            if namespace and pod_namespace != namespace:
                continue
            labels = self.pod_labels.labels(pod_namespace, pod_name)
            if labels is None or (selector is not None and not selector.matches(labels)):
                continue
            item = pod_metrics(node, pod, labels, created=created)
            if fields.matches(item):
                items.append(item)
        return json_response(as_list("PodMetrics", items))

    async def _get_pod(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self._authorize(request, "get", PODS, name=name, namespace=namespace)
        found = self.view.pods().get((namespace, name))
        labels = self.pod_labels.labels(namespace, name)
        if found is None or labels is None:
            # metrics-server names the pod with its namespace in this one message.
            raise ApiError.not_found(GROUP, PODS, f"{namespace}/{name}")
        return json_response(as_object("PodMetrics", pod_metrics(*found, labels, created=self._created())))


def _selectors(options: ListOptions) -> tuple[LabelSelector | None, FieldSelector]:
    labels = LabelSelector.parse(options.label_selector) if options.label_selector else None
    fields = FieldSelector.parse(options.field_selector)
    return (labels if labels is not None and not labels.empty else None), fields
