"""Koordinator's priority and QoS classes: their names, the labels that set them, and how a pod gets them.

QoS: label `koordinator.sh/qosClass`, else the Kubernetes QoS class (Guaranteed → LSR,
Burstable → LS, BestEffort → BE). Priority: label `koordinator.sh/priority-class`, else
`spec.priority` in a band (prod 9000-9999, mid 7000-7999, batch 5000-5999, free 3000-3999),
else by QoS (SYSTEM, LSE, LSR, LS → prod; BE → batch). An unknown label value or a priority
outside every band (0, or system-node-critical's 2000001000) says nothing, and the next rule
decides. High priority (HP) is neither batch nor free (docs/architecture.md, Koordinator's model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from colocation.apimachinery.pods import KubeQoSClass, qos_class

PriorityClass = Literal["koord-prod", "koord-mid", "koord-batch", "koord-free"]
QoSClass = Literal["LSE", "LSR", "LS", "BE", "SYSTEM"]

PRIORITY_LABEL = "koordinator.sh/priority-class"
QOS_LABEL = "koordinator.sh/qosClass"
PRIORITY_CLASSES: tuple[PriorityClass, ...] = ("koord-prod", "koord-mid", "koord-batch", "koord-free")
QOS_CLASSES: tuple[QoSClass, ...] = ("LSE", "LSR", "LS", "BE", "SYSTEM")

# Inclusive spec.priority bands (Koordinator's PriorityProdValueMin..Max and so on).
PRIORITY_BANDS: tuple[tuple[int, int, PriorityClass], ...] = (
    (9000, 9999, "koord-prod"),
    (7000, 7999, "koord-mid"),
    (5000, 5999, "koord-batch"),
    (3000, 3999, "koord-free"),
)
_QOS_FROM_KUBE: dict[KubeQoSClass, QoSClass] = {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}
# A tuple, not a set: membership of any JSON value (a list, a map) is then False, not an error.
LOW_PRIORITY_CLASSES: tuple[PriorityClass, ...] = ("koord-batch", "koord-free")


# In a pod the leader keeps (controllers.cluster.slim_pod): (priority class, QoS class), derived
# from its labels, priority and Kubernetes QoS class when each of its versions arrives (a label
# may change; the Pod informer's transform runs on every event), not at every evaluation.
KEPT_CLASSES = "keptClasses"


def _mapping(value: object) -> Mapping[str, Any]:
    # Pods are JSON: plain dicts, checked first, as the ABC check costs several times more.
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def _label(pod: Mapping[str, Any], name: str) -> Any:
    return _mapping(_mapping(pod.get("metadata")).get("labels")).get(name)


def kept_classes(pod: Mapping[str, Any]) -> tuple[PriorityClass, QoSClass]:
    """(priority class, QoS class) of a pod, as a kept pod carries them (`KEPT_CLASSES`)."""
    kept = pod.get(KEPT_CLASSES)
    if type(kept) is tuple:
        return kept  # only slim_pod writes it
    qos = qos_of(pod)
    return priority_of(pod, qos), qos


def qos_of(pod: Mapping[str, Any]) -> QoSClass:
    """The QoS class of a pod (Kubernetes JSON)."""
    kept = pod.get(KEPT_CLASSES)
    if type(kept) is tuple:
        return kept[1]  # type: ignore[no-any-return]  # only slim_pod writes it
    label = _label(pod, QOS_LABEL)
    if label in QOS_CLASSES:
        return label  # type: ignore[no-any-return]  # narrowed by the membership test
    return _QOS_FROM_KUBE[qos_class(pod)]


def priority_of(pod: Mapping[str, Any], qos: QoSClass | None = None) -> PriorityClass:
    """The priority class of a pod; `qos`, when the caller has it already, spares computing it again."""
    kept = pod.get(KEPT_CLASSES)
    if type(kept) is tuple:
        return kept[0]  # type: ignore[no-any-return]  # only slim_pod writes it
    label = _label(pod, PRIORITY_LABEL)
    if label in PRIORITY_CLASSES:
        return label  # type: ignore[no-any-return]
    priority = _mapping(pod.get("spec")).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        for low, high, name in PRIORITY_BANDS:
            if low <= priority <= high:
                return name
    return "koord-batch" if (qos or qos_of(pod)) == "BE" else "koord-prod"


def is_high_priority(priority: str | None, qos: str | None = None) -> bool:
    """Whether classes as a report states them (any strings, perhaps none) make an HP workload.

    Without a known priority class the QoS class decides as it does for a pod: BE means batch,
    anything else (none included) prod.
    """
    if priority in PRIORITY_CLASSES:
        return priority not in LOW_PRIORITY_CLASSES
    return qos != "BE"


def is_high_priority_pod(pod: Mapping[str, Any]) -> bool:
    return priority_of(pod) not in LOW_PRIORITY_CLASSES


def is_evictable_best_effort(pod: Mapping[str, Any]) -> bool:
    """Whether eviction by node pressure (memory eviction) may pick this pod: labelled BE
    (`koordinator.sh/qosClass`, read as koordlet reads it: the label itself, not a Kubernetes
    BestEffort class without it, so an unlabelled system pod is never taken) and of batch or free
    priority (never prod or mid, whatever the label says)."""
    return _label(pod, QOS_LABEL) == "BE" and priority_of(pod, "BE") in LOW_PRIORITY_CLASSES
