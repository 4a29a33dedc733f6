"""`metrics.k8s.io/v1beta1` from the NodeMetric store: `kubectl top` and the HPA without metrics-server.

Opt-in (`colocation operator --serve-resource-metrics`, with the APIService of the kustomize
component manifests/components/resource-metrics). The objects have the shapes of k8s.io/metrics
as metrics-server serves them: NodeMetrics and PodMetrics with `timestamp`, `window` and `usage`
(cpu and memory only), lists with empty list metadata and items without kind, get and list but
no watch, `creationTimestamp` the time of the request, names in sort order.

Where our data is not metrics-server's, these are the choices (docs/install.md repeats them):
- `timestamp` is the report's `status.updateTime`.
- `window`: an agent's `nodeUsage` is an average over its aggregation duration, which the report
  does not carry; the shortest `aggregatedNodeUsages[].duration` stands for it (5m0s with the
  default policy), and 10s (a report interval) when the report has none.
- PodMetrics: agents measure pods, not containers, so each pod has one container entry named
  "pod" holding the whole pod's usage; `kubectl top pod` and the HPA sum containers, so totals
  are right (a ContainerResource metric for a named container finds nothing).
- Only pods that exist are served (the Pod informer, as metrics-server's pod lister), with the
  Pod's labels, so label selectors work for the HPA; a pod reported by two nodes (it moved) has
  the newer report's figures.

Reading this API is rare next to ingesting reports, so stored bodies are parsed on demand and the
result is cached per entry resourceVersion.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Protocol

import orjson
from aiohttp import web

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import FieldSelector, LabelSelector
from colocation.apiserver.auth import Caller
from colocation.apiserver.authz import DelegatingAuthorizer
from colocation.apiserver.metrics import VERB
from colocation.apiserver.store import Entry, NodeMetricStore
from colocation.kube import permissions
from colocation.kube.informer import Informer, Transport

GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
BASE_PATH = f"/apis/{GROUP}/{VERSION}"
NODES = "nodes"
PODS = "pods"
POD_CONTAINER_NAME = "pod"
FALLBACK_WINDOW = "10s"
SERVED_RESOURCES = ("cpu", "memory")

_LIST_PODS = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall("", "pods", "list", None))
_WATCH_PODS = permissions.declared(permissions.OPERATOR_API_CALLS, permissions.ApiCall("", "pods", "watch", None))

# ---- discovery ---------------------------------------------------------------------------------


def api_group_body() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [version], "preferredVersion": version}


def api_group() -> dict[str, Any]:
    return {"kind": "APIGroup", "apiVersion": "v1", **api_group_body()}


def api_resource_list() -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": [
        {"name": NODES, "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": ["get", "list"]},
        {"name": PODS, "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": ["get", "list"]},
    ]}


# ---- Go durations (metav1.Duration is written with Go's time.Duration.String) -----------------

_DURATION_TERM = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")
_NANOS_PER_UNIT = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
                   "h": 3600 * 10**9}


def parse_go_duration(text: str) -> int | None:
    """Nanoseconds in a Go duration ("5m0s", "1.5h", "300ms"), or None if it is not one."""
    if text == "0":
        return 0
    position, total = 0, Decimal(0)
    while position < len(text):
        match = _DURATION_TERM.match(text, position)
        if match is None or match.group(1) in ("", "."):
            return None
        total += Decimal(match.group(1)) * _NANOS_PER_UNIT[match.group(2)]
        position = match.end()
    return int(total) if position else None


def format_go_duration(nanos: int) -> str:
    """Go's time.Duration.String(): "10s", "5m0s", "1h0m0s", "1m30.5s", "250ms", "0s"."""
    if nanos == 0:
        return "0s"
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    if nanos < 10**9:
        unit, size = ("ns", 1) if nanos < 10**3 else ("µs", 10**3) if nanos < 10**6 else ("ms", 10**6)
        return sign + _decimal(nanos, size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _decimal(rest, 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    return f"{sign}{minutes}m{seconds}" if minutes else sign + seconds


def _decimal(value: int, size: int) -> str:
    whole, fraction = divmod(value, size)
    if not fraction:
        return str(whole)
    digits = str(fraction).rjust(len(str(size)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


# ---- one stored NodeMetric, as this API reads it ---------------------------------------------


@dataclass(frozen=True, slots=True)
class PodUsage:
    namespace: str
    name: str
    usage: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class NodeUsage:
    name: str
    labels: Mapping[str, str]
    timestamp: str  # RFC 3339, the report's updateTime
    window: str  # a Go duration
    usage: Mapping[str, str]
    pods: tuple[PodUsage, ...]


def _served(resource_map: Mapping[str, Any] | None) -> Mapping[str, str]:
    # A resource the report lacks is left out, not zero: the HPA skips a pod without it.
    resources = (resource_map or {}).get("resources") or {}
    return MappingProxyType({name: str(resources[name]) for name in SERVED_RESOURCES if name in resources})


def report_window(node_metric: Mapping[str, Any]) -> str:
    """The window the usage was averaged over: see the module docstring."""
    durations = [nanos for usage in node_metric.get("aggregatedNodeUsages") or ()
                 if (nanos := parse_go_duration(str(usage.get("duration") or ""))) is not None and nanos > 0]
    return format_go_duration(min(durations)) if durations else FALLBACK_WINDOW


def node_usage_of(obj: Mapping[str, Any]) -> NodeUsage:
    """Read a NodeMetric object (already validated when it was stored)."""
    metadata, status = obj["metadata"], obj.get("status") or {}
    node_metric = status.get("nodeMetric") or {}
    pods = tuple(PodUsage(pod["namespace"], pod["name"], _served(pod.get("podUsage")))
                 for pod in status.get("podsMetric") or ())
    return NodeUsage(metadata["name"], MappingProxyType(dict(metadata.get("labels") or {})),
                     str(status.get("updateTime") or ""), report_window(node_metric),
                     _served(node_metric.get("nodeUsage")), pods)


# ---- the objects served ------------------------------------------------------------------------


def node_metrics(node: NodeUsage, created: str) -> dict[str, Any]:
    """A NodeMetrics item (list items carry no kind; see `as_object`)."""
    metadata: dict[str, Any] = {"name": node.name, "creationTimestamp": created}
    if node.labels:
        metadata["labels"] = dict(node.labels)
    return {"metadata": metadata, "timestamp": node.timestamp, "window": node.window, "usage": dict(node.usage)}


def pod_metrics(node: NodeUsage, pod: PodUsage, labels: Mapping[str, str], created: str) -> dict[str, Any]:
    """A PodMetrics item: the pod's usage as one container named POD_CONTAINER_NAME."""
    metadata: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace, "creationTimestamp": created}
    if labels:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata, "timestamp": node.timestamp, "window": node.window,
            "containers": [{"name": POD_CONTAINER_NAME, "usage": dict(pod.usage)}]}


def as_object(kind: str, item: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": GROUP_VERSION, **item}


def as_list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    # metrics-server's lists have no resourceVersion: the figures are not versioned objects.
    return {"kind": f"{kind}List", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}


class PodLabels(Protocol):
    def labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The labels of a Pod that exists, else None."""


class ResourceMetricsView:
    """The store's entries read as NodeUsage, parsed once per entry resourceVersion."""

    def __init__(self, store: NodeMetricStore) -> None:
        self._store = store
        self._parsed: dict[str, tuple[int, NodeUsage]] = {}
        self._index_key: tuple[tuple[str, int], ...] = ()
        self._pod_index: dict[tuple[str, str], tuple[NodeUsage, PodUsage]] = {}

    def _usage(self, entry: Entry) -> NodeUsage:
        cached = self._parsed.get(entry.name)
        if cached is not None and cached[0] == entry.resource_version:
            return cached[1]
        usage = node_usage_of(orjson.loads(entry.body))
        self._parsed[entry.name] = (entry.resource_version, usage)
        return usage

    def node(self, name: str) -> NodeUsage | None:
        entry = self._store.get(name)
        return self._usage(entry) if entry is not None else None

    def nodes(self, selector: LabelSelector | None = None, name: str | None = None) -> list[NodeUsage]:
        """In name order, as the store lists them."""
        entries, _ = self._store.list(selector, name)
        if selector is None and name is None:
            self._forget_all_but(entries)
        return [self._usage(entry) for entry in entries]

    def pods(self) -> Mapping[tuple[str, str], tuple[NodeUsage, PodUsage]]:
        """(namespace, name) -> the pod's figures and the node report they came from."""
        entries, _ = self._store.list()
        key = tuple((entry.name, entry.resource_version) for entry in entries)
        if key != self._index_key:
            index: dict[tuple[str, str], tuple[NodeUsage, PodUsage]] = {}
            for entry in entries:
                node = self._usage(entry)
                for pod in node.pods:
                    seen = index.get((pod.namespace, pod.name))
                    if seen is None or seen[0].timestamp < node.timestamp:  # RFC 3339 UTC sorts as text
                        index[(pod.namespace, pod.name)] = (node, pod)
            self._forget_all_but(entries)
            self._index_key, self._pod_index = key, index
        return self._pod_index

    def _forget_all_but(self, entries: list[Entry]) -> None:
        # Nodes dropped from the store (silent, or deleted) leave the cache too.
        if len(self._parsed) > len(entries):
            live = {entry.name for entry in entries}
            self._parsed = {name: parsed for name, parsed in self._parsed.items() if name in live}


class PodDirectory:
    """(namespace, name) -> labels of every Pod, followed with one list-then-watch of all pods."""

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

    def informer(self, transport: Transport) -> Informer:
        return Informer(transport, "/api/v1/pods", on_sync=self.on_sync, on_event=self.on_event, name="pods")


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    return pod["metadata"].get("namespace", ""), pod["metadata"]["name"]


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return MappingProxyType(dict(pod["metadata"].get("labels") or {}))


# ---- HTTP --------------------------------------------------------------------------------------

Authenticate = Callable[[web.Request], Awaitable[Caller]]


def _json(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


class ResourceMetricsApi:
    """The routes of metrics.k8s.io/v1beta1, authorized by SubjectAccessReview like the rest."""

    def __init__(self, view: ResourceMetricsView, authorizer: DelegatingAuthorizer, pods: PodLabels, *,
                 wall: Callable[[], float] = time.time) -> None:
        self.view = view
        self.authorizer = authorizer
        self.pod_labels = pods
        self.wall = wall
        self._authenticate: Authenticate | None = None

    async def _caller(self, request: web.Request) -> Caller:
        assert self._authenticate is not None, "add_routes() first"
        return await self._authenticate(request)

    def add_routes(self, router: web.UrlDispatcher, authenticate: Authenticate) -> None:
        self._authenticate = authenticate
        router.add_get(f"/apis/{GROUP}", self._discovery(api_group))
        router.add_get(BASE_PATH, self._discovery(api_resource_list))
        router.add_get(f"{BASE_PATH}/{NODES}", self._list_nodes)
        router.add_get(f"{BASE_PATH}/{NODES}/{{name}}", self._get_node)
        router.add_get(f"{BASE_PATH}/{PODS}", self._list_pods)
        router.add_get(f"{BASE_PATH}/namespaces/{{namespace}}/{PODS}", self._list_pods)
        router.add_get(f"{BASE_PATH}/namespaces/{{namespace}}/{PODS}/{{name}}", self._get_pod)

    def _discovery(self, document: Callable[[], Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            await self.authorizer.authorize_path(await self._caller(request), "get", request.path)
            return _json(document())

        return handler

    async def _authorize(self, request: web.Request, verb: str, resource: str, name: str = "",
                         namespace: str = "") -> None:
        request[VERB] = verb
        caller = await self._caller(request)
        await self.authorizer.authorize(caller, verb, resource, name=name, api_group=GROUP, namespace=namespace)

    def _created(self) -> str:
        return format_time(self.wall())

    async def _list_nodes(self, request: web.Request) -> web.Response:
        _refuse_watch(request, NODES)
        await self._authorize(request, "list", NODES)
        labels, fields = _selectors(request)
        created = self._created()
        items = [node_metrics(node, created) for node in self.view.nodes(labels, fields.exact_name())]
        return _json(as_list("NodeMetrics", [item for item in items if fields.matches(item)]))

    async def _get_node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        await self._authorize(request, "get", NODES, name=name)
        node = self.view.node(name)
        if node is None:
            raise ApiError.not_found(GROUP, NODES, name)
        return _json(as_object("NodeMetrics", node_metrics(node, self._created())))

    async def _list_pods(self, request: web.Request) -> web.Response:
        _refuse_watch(request, PODS)
        namespace = request.match_info.get("namespace", "")
        await self._authorize(request, "list", PODS, namespace=namespace)
        selector, fields = _selectors(request)
        created, items = self._created(), []
        for (pod_namespace, pod_name), (node, pod) in sorted(self.view.pods().items()):
            if namespace and pod_namespace != namespace:
                continue
            labels = self.pod_labels.labels(pod_namespace, pod_name)
            if labels is None or (selector is not None and not selector.matches(labels)):
                continue
            item = pod_metrics(node, pod, labels, created)
            if fields.matches(item):
                items.append(item)
        return _json(as_list("PodMetrics", items))

    async def _get_pod(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self._authorize(request, "get", PODS, name=name, namespace=namespace)
        found = self.view.pods().get((namespace, name))
        labels = self.pod_labels.labels(namespace, name)
        if found is None or labels is None:
            # metrics-server names the pod with its namespace in this one message.
            raise ApiError.not_found(GROUP, PODS, f"{namespace}/{name}")
        return _json(as_object("PodMetrics", pod_metrics(*found, labels, self._created())))


def _refuse_watch(request: web.Request, resource: str) -> None:
    if request.query.get("watch", "").lower() not in ("", "0", "false"):
        request[VERB] = "watch"
        raise ApiError.method_not_allowed(f'watch is not supported on resources of kind "{resource}.{GROUP}"')


def _selectors(request: web.Request) -> tuple[LabelSelector | None, FieldSelector]:
    query = request.query
    labels = LabelSelector.parse(query["labelSelector"]) if query.get("labelSelector") else None
    fields = FieldSelector.parse(query.get("fieldSelector") or "")
    return (labels if labels is not None and not labels.empty else None), fields
