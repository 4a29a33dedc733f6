"""Pod arithmetic every component agrees on: effective requests and the Kubernetes QoS class.

Both follow Kubernetes (k8s.io/component-helpers resource.PodRequests, and GetPodQOS), on pod
JSON from the API or a hand-written fixture. A request defaults to its limit, as the API server
defaults it. Effective requests count sidecars, the largest init-phase need, `spec.overhead`
and pod-level `spec.resources`, as upstream does. `status.qosClass`, when set, is authoritative.
A pod as the leader keeps it (`controllers.cluster.slim_pod`) has no containers: its effective
requests are under `KEPT_REQUESTS`, and `pod_requests` returns them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from colocation.apimachinery.quantity import byte_value, cpu_millis

KubeQoSClass = Literal["Guaranteed", "Burstable", "BestEffort"]
KUBE_QOS_CLASSES: tuple[KubeQoSClass, ...] = ("Guaranteed", "Burstable", "BestEffort")
_COMPUTE = ("cpu", "memory")
KEPT_REQUESTS = "keptRequests"  # (cpu millis, memory bytes), in a pod the leader keeps


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = spec.get(key)
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _amounts(values: Mapping[str, Any]) -> dict[str, int]:
    """cpu in millis and memory in bytes of a requests/limits map; malformed values count as 0."""
    amounts: dict[str, int] = {}
    for name, convert in (("cpu", cpu_millis), ("memory", byte_value)):
        if name in values:
            try:
                amounts[name] = convert(values[name])
            except ValueError:
                amounts[name] = 0
    return amounts


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's cpu (millis) and memory (bytes) requests, limits standing in where unset."""
    resources = _mapping(container.get("resources"))
    return {**_amounts(_mapping(resources.get("limits"))), **_amounts(_mapping(resources.get("requests")))}


def _add(total: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    return {name: total.get(name, 0) + more.get(name, 0) for name in _COMPUTE}


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(cpu millis, memory bytes) the scheduler reserves for the pod."""
    kept = pod.get(KEPT_REQUESTS)
    if isinstance(kept, tuple):
        return kept  # only slim_pod writes it: a (cpu, memory) pair
    spec = _mapping(pod.get("spec"))
    total: dict[str, int] = {}
    for container in _containers(spec, "containers"):
        total = _add(total, container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in _containers(spec, "initContainers"):
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, requests)
            need = sidecars  # a sidecar keeps running: it needs itself plus the ones before it
        else:
            need = _add(sidecars, requests)
        init_peak = {name: max(init_peak.get(name, 0), need.get(name, 0)) for name in _COMPUTE}
    total = _add(total, sidecars)
    pod_level = _amounts(_mapping(_mapping(spec.get("resources")).get("requests")))
    effective = {name: pod_level.get(name, max(total.get(name, 0), init_peak.get(name, 0))) for name in _COMPUTE}
    effective = _add(effective, _amounts(_mapping(spec.get("overhead"))))
    return effective["cpu"], effective["memory"]


def _nonzero(values: Mapping[str, Any]) -> dict[str, int]:
    """Upstream's QoS ignores zero quantities: `cpu: 0` is no request at all."""
    return {name: amount for name, amount in _amounts(values).items() if amount > 0}


def qos_class(pod: Mapping[str, Any]) -> KubeQoSClass:
    """status.qosClass when set, else computed from the containers' requests and limits."""
    status_class = _mapping(pod.get("status")).get("qosClass")
    if status_class in KUBE_QOS_CLASSES:
        return status_class  # type: ignore[no-any-return]
    spec = _mapping(pod.get("spec"))
    pod_level = _mapping(spec.get("resources"))
    if pod_level.get("requests") or pod_level.get("limits"):
        groups: Iterable[Mapping[str, Any]] = [{"resources": pod_level}]
    else:
        groups = _containers(spec, "containers") + _containers(spec, "initContainers")
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for container in groups:
        resources = _mapping(container.get("resources"))
        container_limits = _nonzero(_mapping(resources.get("limits")))
        # Requests default to limits, as the API server would have stored them.
        container_requests_ = {**container_limits, **_nonzero(_mapping(resources.get("requests")))}
        requests = _add(requests, container_requests_)
        limits = _add(limits, container_limits)
        if set(container_limits) != set(_COMPUTE):
            guaranteed = False
    if not any(requests.values()) and not any(limits.values()):
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"
