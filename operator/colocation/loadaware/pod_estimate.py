"""What a pod will use, before any report shows it: Koordinator's default estimator, and the pod's class.

A pod's estimate of a resource is the larger of its request and its limit times the resource's
scaling factor (percent), rounded half away from zero, and never above its limit. The request read
is the one of the pod's priority class: cpu / memory for prod pods, `kubernetes.io/mid-cpu` /
`mid-memory` for mid pods, `kubernetes.io/batch-cpu` / `batch-memory` for batch pods (all three
count cpu in milli-cores). A pod that requests none of it counts 250 milli-cores and 200 MiB, unscaled,
when it is prod or batch, and 0 when it is mid; a free pod counts 0. These are Koordinator's
constants and rules (its estimator's DefaultMilliCPURequest and DefaultMemoryRequest), so a
BestEffort pod is not taken to use nothing. Koordinator's per-pod estimation annotations are not read.

Requests and limits add up as Kubernetes adds them (containers, sidecars, the largest init step,
pod-level resources, overhead), a request defaulting to its limit as the API server defaults it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.koordinator.batch_formula import BATCH_CPU, BATCH_MEMORY
from colocation.koordinator.classes import LOW_PRIORITY_CLASSES, PriorityClass, priority_of
from colocation.koordinator.mid_formula import MID_CPU, MID_MEMORY
from colocation.loadaware.load_aware_config import LoadAwareConfig, LoadAwareResource

# {"cpu": milli-cores, "memory": bytes}: every amount of this package.
Resources = Mapping[str, int]

DEFAULT_CPU_MILLIS = 250
DEFAULT_MEMORY_BYTES = 200 * 1024 * 1024
_DEFAULTS = {"cpu": DEFAULT_CPU_MILLIS, "memory": DEFAULT_MEMORY_BYTES}

# The request each class of pod makes of cpu and memory; a free pod makes none Koordinator reads.
_REQUESTED_AS: dict[PriorityClass, dict[str, str]] = {
    "koord-prod": {"cpu": "cpu", "memory": "memory"},
    "koord-mid": {"cpu": MID_CPU, "memory": MID_MEMORY},
    "koord-batch": {"cpu": BATCH_CPU, "memory": BATCH_MEMORY},
    "koord-free": {},
}
# Only these classes get the default when they request nothing (Koordinator's estimator switch).
_DEFAULTED: tuple[PriorityClass, ...] = ("koord-prod", "koord-batch")


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgedPod:
    """The pod being scheduled, as the filter and the score read it."""

    estimate: Resources
    prod: bool  # priority class koord-prod: judged against prodUsageThresholds when set
    batch: bool  # koord-batch or koord-free: what `batchPods` applies to
    daemon: bool  # owned by a DaemonSet: never filtered (it must run on its node)


def judged_pod(pod: Mapping[str, Any], *, config: LoadAwareConfig) -> JudgedPod:
    priority = priority_of(pod)
    owners = _mapping(pod.get("metadata")).get("ownerReferences")
    daemon = isinstance(owners, list) and any(_mapping(owner).get("kind") == "DaemonSet" for owner in owners)
    return JudgedPod(estimate=estimate_pod(pod, scaling_factors=config.estimated_scaling_factors, priority=priority),
                     prod=priority == "koord-prod", batch=priority in LOW_PRIORITY_CLASSES, daemon=daemon)


def estimate_pod(pod: Mapping[str, Any], *, scaling_factors: Mapping[LoadAwareResource, int],
                 priority: PriorityClass | None = None) -> dict[str, int]:
    """{"cpu": milli-cores, "memory": bytes} the pod is estimated to use, for each scaled resource."""
    priority = priority or priority_of(pod)
    requested_as = _REQUESTED_AS[priority]
    estimate: dict[str, int] = {}
    for resource, factor in scaling_factors.items():
        name = requested_as.get(resource)
        if name is None:
            estimate[resource] = 0
            continue
        convert = cpu_millis if name == "cpu" else byte_value  # the extended cpus are milli-cores already
        request = _pod_amount(pod, name, section="requests", convert=convert)
        limit = _pod_amount(pod, name, section="limits", convert=convert)
        amount = max(request, limit)
        if amount == 0:
            estimate[resource] = _DEFAULTS[resource] if priority in _DEFAULTED else 0
            continue
        scaled = (2 * amount * factor + 100) // 200  # amount * factor / 100, rounded half up
        estimate[resource] = min(scaled, limit) if limit > 0 else scaled
    return estimate


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _amount(values: Mapping[str, Any], name: str, convert: Callable[[Any], int]) -> int | None:
    if name not in values:
        return None
    try:
        return convert(values[name])
    except (ValueError, TypeError):
        return 0  # malformed counts as none, as pod arithmetic elsewhere counts it


def _container_amount(container: Mapping[str, Any], name: str, *, section: str, convert: Callable[[Any], int]) -> int:
    resources = _mapping(container.get("resources"))
    found = _amount(_mapping(resources.get(section)), name, convert)
    if found is None and section == "requests":
        found = _amount(_mapping(resources.get("limits")), name, convert)
    return found or 0


def _pod_amount(pod: Mapping[str, Any], name: str, *, section: str, convert: Callable[[Any], int]) -> int:
    """One resource's pod-wide request or limit, added up as resource.PodRequests / PodLimits do."""
    spec = _mapping(pod.get("spec"))

    def containers(key: str) -> list[Mapping[str, Any]]:
        value = spec.get(key)
        return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []

    total = sum(_container_amount(container, name, section=section, convert=convert)
                for container in containers("containers"))
    sidecars = init_peak = 0
    for container in containers("initContainers"):
        amount = _container_amount(container, name, section=section, convert=convert)
        if container.get("restartPolicy") == "Always":
            sidecars += amount
            init_peak = max(init_peak, sidecars)  # a sidecar keeps running beside those after it
        else:
            init_peak = max(init_peak, sidecars + amount)
    effective = max(total + sidecars, init_peak)
    pod_level = _amount(_mapping(_mapping(spec.get("resources")).get(section)), name, convert)
    if pod_level is not None:
        effective = pod_level
    if section == "limits" and effective == 0:
        return 0  # PodLimits adds the overhead only to a limit that is set
    return effective + (_amount(_mapping(spec.get("overhead")), name, convert) or 0)
