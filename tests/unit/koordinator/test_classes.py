"""Koordinator's classes of a pod and of a reported workload, beyond the agent's classification table."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from colocation.koordinator.classes import (
    PRIORITY_BANDS,
    PRIORITY_CLASSES,
    is_high_priority,
    is_high_priority_pod,
    priority_of,
    qos_of,
)


def _pod(priority: int | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": "p", "labels": labels or {}}, "spec": spec}


def test_every_priority_class_has_one_band_and_the_bands_do_not_overlap() -> None:
    assert sorted(name for _, _, name in PRIORITY_BANDS) == sorted(PRIORITY_CLASSES)
    edges = sorted((low, high) for low, high, _ in PRIORITY_BANDS)
    assert all(high < next_low for (_, high), (next_low, _) in pairwise(edges))


@pytest.mark.parametrize(("priority", "qos", "high"), [
    ("koord-prod", None, True),
    ("koord-mid", "BE", True),  # a known priority class wins over the QoS class
    ("koord-batch", "LSR", False),
    ("koord-free", None, False),
    (None, None, True),  # a host application that states nothing is HP, as in Koordinator
    (None, "BE", False),
    ("gold", "BE", False),  # an unknown priority says nothing
    ("gold", "LS", True),
])
def test_reported_classes_decide_high_priority(priority: str | None, qos: str | None, high: bool) -> None:
    assert is_high_priority(priority, qos) is high


@pytest.mark.parametrize(("pod", "high"), [
    (_pod(9500), True),
    (_pod(7500), True),
    (_pod(5500), False),
    (_pod(3500), False),
    (_pod(labels={"koordinator.sh/qosClass": "LSE"}), True),
    (_pod(), False),  # no requests: BestEffort, so BE, so batch
])
def test_a_pod_is_high_priority_by_its_priority_class(pod: dict[str, Any], high: bool) -> None:
    assert is_high_priority_pod(pod) is high
    assert is_high_priority(priority_of(pod)) is high


def test_a_qos_class_the_caller_has_is_taken_as_given() -> None:
    assert priority_of(_pod(), qos="LS") == "koord-prod"
    assert priority_of(_pod(), qos=None) == "koord-batch"


@pytest.mark.parametrize("pod", [
    {"metadata": {"labels": ["not", "a", "map"]}, "spec": "not a map"},
    {"metadata": None, "spec": {"priority": "9500"}},
    {},
])
def test_malformed_pods_read_as_best_effort_batch(pod: dict[str, Any]) -> None:
    assert (priority_of(pod), qos_of(pod)) == ("koord-batch", "BE")
