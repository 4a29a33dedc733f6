"""Koordinator's priority and QoS classes: their names and the labels that set them on a pod."""

from __future__ import annotations

from typing import Literal

PriorityClass = Literal["koord-prod", "koord-mid", "koord-batch", "koord-free"]
QoSClass = Literal["LSE", "LSR", "LS", "BE", "SYSTEM"]

PRIORITY_LABEL = "koordinator.sh/priority-class"
QOS_LABEL = "koordinator.sh/qosClass"
PRIORITY_CLASSES: tuple[PriorityClass, ...] = ("koord-prod", "koord-mid", "koord-batch", "koord-free")
QOS_CLASSES: tuple[QoSClass, ...] = ("LSE", "LSR", "LS", "BE", "SYSTEM")
