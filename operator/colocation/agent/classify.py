"""What the agent keeps of each pod for its reports: identity, Koordinator's classes, requests."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.pods import KubeQoSClass, pod_requests, qos_class
from colocation.apimachinery.quantity import parse_quantity
from colocation.koordinator.batch_formula import BATCH_CPU
from colocation.koordinator.classes import (
    PriorityClass,
    QoSClass,
    is_evictable_best_effort,
    is_high_priority,
    priority_of,
    qos_of,
)


@dataclass(frozen=True, kw_only=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    priority: PriorityClass
    qos: QoSClass
    cpu_request_millis: int
    memory_request_bytes: int
    kube_qos: KubeQoSClass = "BestEffort"
    node_name: str | None = None
    phase: str | None = None
    evictable: bool = False  # memory eviction may pick it (classes.is_evictable_best_effort)
    priority_value: int = 0  # spec.priority (0 when unset): eviction takes the lowest first
    batch_cpu_request_millis: int = 0  # its containers' kubernetes.io/batch-cpu requests (cpu eviction)

    @property
    def high_priority(self) -> bool:
        return is_high_priority(self.priority)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def classify(pod: Mapping[str, Any]) -> PodInfo:
    """Identity, priority, QoS and effective requests of a pod (Kubernetes JSON)."""
    metadata = _mapping(pod.get("metadata"))
    spec = _mapping(pod.get("spec"))
    qos = qos_of(pod)
    cpu, memory = pod_requests(pod)
    node_name = spec.get("nodeName")
    phase = _mapping(pod.get("status")).get("phase")
    priority_value = spec.get("priority")
    return PodInfo(
        uid=str(metadata.get("uid") or ""),
        namespace=str(metadata.get("namespace") or "default"),
        name=str(metadata.get("name") or ""),
        priority=priority_of(pod, qos),
        qos=qos,
        cpu_request_millis=cpu,
        memory_request_bytes=memory,
        kube_qos=qos_class(pod),
        node_name=node_name if isinstance(node_name, str) else None,
        phase=phase if isinstance(phase, str) else None,
        evictable=is_evictable_best_effort(pod),
        priority_value=priority_value if isinstance(priority_value, int) and not isinstance(priority_value, bool)
        else 0,
        batch_cpu_request_millis=batch_cpu_request(spec),
    )


def batch_cpu_request(spec: Mapping[str, Any]) -> int:
    """The sum of the containers' kubernetes.io/batch-cpu requests (Koordinator's unit: milli-cpus),
    a container without a request counted by its limit (the API server's default for it)."""
    total = 0
    for container in spec.get("containers") or []:
        resources = _mapping(_mapping(container).get("resources"))
        value = _mapping(resources.get("requests")).get(BATCH_CPU, _mapping(resources.get("limits")).get(BATCH_CPU))
        try:
            total += max(math.ceil(parse_quantity(str(value))), 0) if value is not None else 0
        except ValueError:
            continue  # not a quantity: the API server would not have taken it
    return total
