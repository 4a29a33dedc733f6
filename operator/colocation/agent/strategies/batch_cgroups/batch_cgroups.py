"""Batch resources into cgroups, the arithmetic: from a pod's spec to its cgroups' values. Pure.

The kubelet knows nothing of `kubernetes.io/batch-cpu` and `kubernetes.io/batch-memory`, so a
pod that asks only for them gets unlimited cgroups. As koordlet's BatchResource hook,
`batch_settings` gives a BE pod's cgroup and its containers that name a batch resource the cpu
shares, CFS quota and memory limit those resources call for (every quota unlimited while CPU
suppress holds the tier by `cfsQuota`). `kubelet_settings` is what the kubelet would write from
the pod's native resources: what undoing puts back.

The rules and units: docs/agent.md#batch-resources-into-cgroups
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.pods import KubeQoSClass, qos_class
from colocation.apimachinery.quantity import byte_value, cpu_millis, parse_quantity
from colocation.koordinator.batch_formula import BATCH_CPU, BATCH_MEMORY
from colocation.koordinator.classes import QoSClass, qos_of

UNLIMITED = -1
MIN_SHARES, MAX_SHARES = 2, 262144  # the kernel's range, and the kubelet's
SHARES_PER_CPU = 1024
MIN_CFS_QUOTA_US = 1000  # the kernel refuses less
MIN_WEIGHT, MAX_WEIGHT = 1, 10000  # cgroup v2 cpu.weight


@dataclass(frozen=True, kw_only=True)
class ContainerResources:
    """What one container asks for: batch resources (Koordinator's units) and native ones (milli-cpus,
    bytes; requests already defaulted to limits). None: not named."""

    name: str
    container_id: str | None  # the runtime's id, from the pod's status (no "containerd://")
    init: bool = False
    batch_cpu_request: int | None = None
    batch_cpu_limit: int | None = None
    batch_memory_request: int | None = None
    batch_memory_limit: int | None = None
    cpu_request: int | None = None
    cpu_limit: int | None = None
    memory_limit: int | None = None

    @property
    def names_batch(self) -> bool:
        return any(value is not None for value in (self.batch_cpu_request, self.batch_cpu_limit,
                                                   self.batch_memory_request, self.batch_memory_limit))


@dataclass(frozen=True, kw_only=True)
class PodResources:
    uid: str
    namespace: str
    name: str
    qos: QoSClass
    kube_qos: KubeQoSClass
    containers: tuple[ContainerResources, ...]


@dataclass(frozen=True)
class CgroupSettings:
    """One cgroup's values: cpu limit in milli-cpus and memory in bytes, -1 for unlimited."""

    cpu_limit_millis: int
    cpu_shares: int
    memory_limit_bytes: int


@dataclass(frozen=True)
class PodSettings:
    pod: CgroupSettings
    containers: tuple[tuple[str, CgroupSettings], ...]  # (container name, its values), spec order


# ---- reading the pod ---------------------------------------------------------------------------------

def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _value(values: Mapping[str, Any], name: str, convert: Any) -> int | None:
    if name not in values:
        return None
    try:
        return int(convert(values[name]))
    except (ValueError, TypeError):
        return None  # a quantity that does not parse names nothing (the API server would refuse it)


def _whole_units(quantity: Any) -> int:
    """Quantity.Value(): whole units, rounded up ("500" → 500, "0.5" → 1)."""
    return math.ceil(parse_quantity(quantity))


def _container(container: Mapping[str, Any], ids: Mapping[str, str], init: bool) -> ContainerResources:
    resources = _mapping(container.get("resources"))
    limits, requests = _mapping(resources.get("limits")), _mapping(resources.get("requests"))
    with_defaults = {**limits, **requests}  # the API server defaults a request to its limit
    name = str(container.get("name") or "")
    return ContainerResources(
        name=name, container_id=ids.get(name), init=init,
        batch_cpu_request=_value(with_defaults, BATCH_CPU, _whole_units),
        batch_cpu_limit=_value(limits, BATCH_CPU, _whole_units),
        batch_memory_request=_value(with_defaults, BATCH_MEMORY, _whole_units),
        batch_memory_limit=_value(limits, BATCH_MEMORY, _whole_units),
        cpu_request=_value(with_defaults, "cpu", cpu_millis), cpu_limit=_value(limits, "cpu", cpu_millis),
        memory_limit=_value(limits, "memory", byte_value))


def _container_ids(statuses: Iterable[Any]) -> dict[str, str]:
    ids = {}
    for status in statuses:
        status = _mapping(status)
        container_id = str(status.get("containerID") or "")
        if status.get("name") and container_id:
            ids[str(status["name"])] = container_id.partition("://")[2] or container_id
    return ids


def pod_resources(pod: Mapping[str, Any]) -> PodResources | None:
    """What the pod's containers ask for; None when none names a batch resource."""
    resources = describe_pod(pod)
    return resources if any(container.names_batch for container in resources.containers) else None


def describe_pod(pod: Mapping[str, Any]) -> PodResources:
    """What the pod's containers ask for, batch resources or not (CPU burst reads the native ones)."""
    spec, status = _mapping(pod.get("spec")), _mapping(pod.get("status"))
    ids = _container_ids([*_list(status.get("initContainerStatuses")), *_list(status.get("containerStatuses"))])
    containers = tuple(_container(container, ids, init)
                       for key, init in (("initContainers", True), ("containers", False))
                       for container in _list(spec.get(key)) if isinstance(container, Mapping))
    metadata = _mapping(pod.get("metadata"))
    return PodResources(uid=str(metadata.get("uid") or ""), namespace=str(metadata.get("namespace") or "default"),
                        name=str(metadata.get("name") or ""), qos=qos_of(pod), kube_qos=qos_class(pod),
                        containers=containers)


# ---- the values ------------------------------------------------------------------------------------

def milli_cpu_to_shares(millis: int) -> int:
    """The kubelet's conversion: 1024 shares a cpu, within the kernel's range."""
    return min(max(millis * SHARES_PER_CPU // 1000, MIN_SHARES), MAX_SHARES)


def shares_to_weight(shares: int) -> int:
    """cgroup v2's cpu.weight for cpu.shares, as the kubelet maps [2, 262144] onto [1, 10000]."""
    return min(max(1 + (shares - MIN_SHARES) * 9999 // (MAX_SHARES - MIN_SHARES), MIN_WEIGHT), MAX_WEIGHT)


def cfs_quota_us(limit_millis: int, period_us: int) -> int:
    """The CFS quota of a cpu limit over `period_us`; -1 (unlimited) for no limit."""
    quota = limit_millis * period_us // 1000
    return UNLIMITED if limit_millis <= 0 or quota <= 0 else max(quota, MIN_CFS_QUOTA_US)


def _positive(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


def _limited(value: int | None) -> int:
    return value if value is not None and value > 0 else UNLIMITED


def _sum_or_unlimited(values: Iterable[int | None]) -> int:
    """The sum, or unlimited as soon as one value is missing (or there is none)."""
    total = 0
    for value in values:
        if value is None:
            return UNLIMITED
        total += value
    return _limited(total)


def batch_settings(pod: PodResources, *, unlimited_quota: bool = False) -> PodSettings | None:
    """What the pod's and its containers' cgroups get from its batch resources; None when the agent
    leaves the pod alone (not BE, or no container names a batch resource)."""
    named = [container for container in pod.containers if container.names_batch]
    if pod.qos != "BE" or not named:
        return None

    def cpu_limit(value: int) -> int:
        return UNLIMITED if unlimited_quota else value

    regular = [container for container in named if not container.init]
    pod_level = CgroupSettings(
        cpu_limit_millis=cpu_limit(_sum_or_unlimited(_positive(c.batch_cpu_limit) for c in regular)),
        cpu_shares=milli_cpu_to_shares(sum(_positive(c.batch_cpu_request) or 0 for c in regular)),
        memory_limit_bytes=_sum_or_unlimited(_positive(c.batch_memory_limit) for c in regular))
    containers = tuple((c.name, CgroupSettings(
        cpu_limit_millis=cpu_limit(_limited(c.batch_cpu_limit)),
        cpu_shares=milli_cpu_to_shares(_positive(c.batch_cpu_request) or 0),
        memory_limit_bytes=_limited(c.batch_memory_limit))) for c in named)
    return PodSettings(pod_level, containers)


def kubelet_settings(pod: PodResources) -> PodSettings:
    """What the kubelet writes from the native resources: the values an undo puts back on the
    cgroups `batch_settings` wrote (its containers, and the pod)."""
    regular = [container for container in pod.containers if not container.init]
    init = [container for container in pod.containers if container.init]

    def pod_limit(values: list[int | None], init_values: list[int | None]) -> int:
        if any(value is None for value in values + init_values):
            return UNLIMITED
        return _limited(max(sum(v or 0 for v in values), max((v or 0 for v in init_values), default=0)))

    requests = sum(c.cpu_request or 0 for c in regular)
    pod_level = CgroupSettings(
        cpu_limit_millis=pod_limit([c.cpu_limit for c in regular], [c.cpu_limit for c in init]),
        cpu_shares=milli_cpu_to_shares(max(requests, max((c.cpu_request or 0 for c in init), default=0))),
        memory_limit_bytes=pod_limit([c.memory_limit for c in regular], [c.memory_limit for c in init]))
    containers = tuple((c.name, CgroupSettings(cpu_limit_millis=_limited(c.cpu_limit),
                                               cpu_shares=milli_cpu_to_shares(c.cpu_request or 0),
                                               memory_limit_bytes=_limited(c.memory_limit)))
                       for c in pod.containers if c.names_batch)
    return PodSettings(pod_level, containers)
