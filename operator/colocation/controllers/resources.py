"""What the batch formula needs to know about pods: cpu and memory amounts, requests, classes.

Requests and the Kubernetes QoS class come from colocation.apimachinery.pods; the priority and
QoS classes here are Koordinator's, by the conventions of DESIGN.md. Everything is computed from
Kubernetes JSON (dicts), as the API server returns it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery import pods
from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.koordinator.classes import (
    PRIORITY_CLASSES,
    PRIORITY_LABEL,
    QOS_CLASSES,
    QOS_LABEL,
    PriorityClass,
    QoSClass,
)

# spec.priority ranges, inclusive (Koordinator's PriorityProdValueMin..Max and so on).
_PRIORITY_RANGES: tuple[tuple[int, int, PriorityClass], ...] = (
    (9000, 9999, "koord-prod"), (7000, 7999, "koord-mid"),
    (5000, 5999, "koord-batch"), (3000, 3999, "koord-free"))
_KUBERNETES_QOS_TO_KOORDINATOR: dict[str, QoSClass] = {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}
_LOW_PRIORITY: frozenset[str] = frozenset({"koord-batch", "koord-free"})


@dataclass(frozen=True, slots=True)
class Amount:
    """Cpu in milli-cores and memory in bytes: the two resources the batch formula works on."""

    cpu: int = 0
    memory: int = 0

    @classmethod
    def of(cls, resources: Mapping[str, Any] | None) -> Amount:
        """The cpu and memory of a ResourceList ({"cpu": "2", "memory": "1Gi", ...}); others ignored."""
        resources = resources or {}
        cpu, memory = resources.get("cpu"), resources.get("memory")
        return cls(cpu_millis(cpu) if cpu is not None else 0, byte_value(memory) if memory is not None else 0)

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Amount) -> Amount:
        return Amount(self.cpu - other.cpu, self.memory - other.memory)

    def max(self, other: Amount) -> Amount:
        return Amount(max(self.cpu, other.cpu), max(self.memory, other.memory))

    def floored(self) -> Amount:
        """Negative components become 0."""
        return self.max(Amount())


def total(amounts: Iterable[Amount]) -> Amount:
    return sum(amounts, Amount())


# --------------------------------------------------------------------------------------------
# Requests and classes.


def pod_requests(pod: Mapping[str, Any]) -> Amount:
    """The cpu and memory the scheduler reserves for a pod (Kubernetes' PodRequests)."""
    cpu, memory = pods.pod_requests(pod)
    return Amount(cpu, memory)


def qos_class(pod: Mapping[str, Any]) -> QoSClass:
    """Koordinator's QoS class: label koordinator.sh/qosClass, else from the Kubernetes QoS class."""
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(QOS_LABEL)
    if label in QOS_CLASSES:
        return label  # type: ignore[no-any-return]  # narrowed by the membership test
    return _KUBERNETES_QOS_TO_KOORDINATOR[pods.qos_class(pod)]


def priority_class(pod: Mapping[str, Any]) -> PriorityClass:
    """Label koordinator.sh/priority-class, else the spec.priority range, else by QoS class.

    An unknown label value or a priority outside every range (0, or system-node-critical's
    2000001000) says nothing, and the next rule decides. By QoS, BE is batch and the rest
    (SYSTEM, LSE, LSR, LS) is prod.
    """
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(PRIORITY_LABEL)
    if label in PRIORITY_CLASSES:
        return label  # type: ignore[no-any-return]
    priority = (pod.get("spec") or {}).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        for low, high, name in _PRIORITY_RANGES:
            if low <= priority <= high:
                return name
    return "koord-batch" if qos_class(pod) == "BE" else "koord-prod"


def is_high_priority(priority: str | None, qos: str | None = None) -> bool:
    """HP = neither batch nor free. Without a priority class, a BE QoS class means batch."""
    if priority in PRIORITY_CLASSES:
        return priority not in _LOW_PRIORITY
    return qos != "BE"


def is_high_priority_pod(pod: Mapping[str, Any]) -> bool:
    return priority_class(pod) not in _LOW_PRIORITY
