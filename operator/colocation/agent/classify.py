"""A pod's priority class and QoS class, by the conventions the colocation ecosystem shares.

Priority: label `koordinator.sh/priority-class`, else `spec.priority` in a band (prod 9000-9999,
mid 7000-7999, batch 5000-5999, free 3000-3999), else derived from the QoS class (SYSTEM, LSE,
LSR, LS → prod; BE → batch). QoS: label `koordinator.sh/qosClass`, else the Kubernetes QoS class
(Guaranteed → LSR, Burstable → LS, BestEffort → BE).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.pods import KubeQoSClass, pod_requests, qos_class
from colocation.koordinator.classes import (
    PRIORITY_CLASSES,
    PRIORITY_LABEL,
    QOS_CLASSES,
    QOS_LABEL,
    PriorityClass,
    QoSClass,
)

# Inclusive spec.priority bands; a priority outside every band says nothing.
PRIORITY_BANDS: tuple[tuple[int, int, PriorityClass], ...] = (
    (9000, 9999, "koord-prod"),
    (7000, 7999, "koord-mid"),
    (5000, 5999, "koord-batch"),
    (3000, 3999, "koord-free"),
)
_QOS_FROM_KUBE: dict[KubeQoSClass, QoSClass] = {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}


@dataclass(frozen=True)
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

    @property
    def high_priority(self) -> bool:
        """HP = neither batch nor free (DESIGN.md)."""
        return self.priority in ("koord-prod", "koord-mid")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def qos_of(pod: Mapping[str, Any]) -> QoSClass:
    """The label when it names a known class, else the Kubernetes QoS class mapped."""
    label = _mapping(_mapping(pod.get("metadata")).get("labels")).get(QOS_LABEL)
    if label in QOS_CLASSES:
        return label  # type: ignore[no-any-return]
    return _QOS_FROM_KUBE[qos_class(pod)]


def priority_of(pod: Mapping[str, Any], qos: QoSClass | None = None) -> PriorityClass:
    """The label, else the spec.priority band, else from the QoS class (BE → batch, others → prod)."""
    label = _mapping(_mapping(pod.get("metadata")).get("labels")).get(PRIORITY_LABEL)
    if label in PRIORITY_CLASSES:
        return label  # type: ignore[no-any-return]
    priority = _mapping(pod.get("spec")).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        for low, high, name in PRIORITY_BANDS:
            if low <= priority <= high:
                return name
    return "koord-batch" if (qos or qos_of(pod)) == "BE" else "koord-prod"


def classify(pod: Mapping[str, Any]) -> PodInfo:
    """Identity, priority, QoS and effective requests of a pod (Kubernetes JSON)."""
    metadata = _mapping(pod.get("metadata"))
    spec = _mapping(pod.get("spec"))
    qos = qos_of(pod)
    cpu, memory = pod_requests(pod)
    node_name = spec.get("nodeName")
    phase = _mapping(pod.get("status")).get("phase")
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
    )
