"""PodDisruptionBudgets: how many pods may go now, and whether an eviction may proceed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.selectors import LabelSelector


@dataclass(frozen=True)
class BudgetState:
    expected: int
    healthy: int
    desired_healthy: int

    @property
    def disruptions_allowed(self) -> int:
        return max(self.healthy - self.desired_healthy, 0)


def is_healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def _scaled(value: Any, total: int, field: str) -> int:
    """An int-or-string: a count, or a percentage of `total` rounded up (as the disruption controller does)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * total / 100)
    raise ApiError.invalid("policy", "PodDisruptionBudget", "", causes=[Cause(
        f"spec.{field}", f"Invalid value: {value!r}: must be an integer or a percentage")])


def budget_state(budget: Obj, pods: Iterable[Obj]) -> BudgetState:
    spec = budget.get("spec") or {}
    selector = LabelSelector.from_api(spec.get("selector"))
    matching = [p for p in pods if selector.matches((p.get("metadata") or {}).get("labels") or {})
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    expected = len(matching)
    healthy = sum(1 for p in matching if is_healthy(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(expected - _scaled(spec["maxUnavailable"], expected, "maxUnavailable"), 0)
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, "minAvailable")
    else:
        desired = 0
    return BudgetState(expected, healthy, desired)


def budget_status(budget: Obj, pods: Iterable[Obj], now: str) -> Obj:
    state = budget_state(budget, pods)
    allowed = state.disruptions_allowed
    old_conditions = (budget.get("status") or {}).get("conditions") or []
    status_value = "True" if allowed > 0 else "False"
    previous = next((c for c in old_conditions if c.get("type") == "DisruptionAllowed"), None)
    transition = previous["lastTransitionTime"] if previous and previous.get("status") == status_value else now
    return {"observedGeneration": (budget.get("metadata") or {}).get("generation", 1),
            "disruptionsAllowed": allowed, "currentHealthy": state.healthy,
            "desiredHealthy": state.desired_healthy, "expectedPods": state.expected,
            "conditions": [{"type": "DisruptionAllowed", "status": status_value,
                            "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                            "message": "", "observedGeneration": (budget.get("metadata") or {}).get("generation", 1),
                            "lastTransitionTime": transition}]}


def check_eviction(pod: Obj, pods: Iterable[Obj], budgets: Iterable[Obj]) -> None:
    """Raise 429 TooManyRequests when evicting `pod` now would violate its disruption budget."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed", "Pending"):
        return  # such pods never count towards a budget
    labels = (pod.get("metadata") or {}).get("labels") or {}
    matching = [b for b in budgets
                if LabelSelector.from_api((b.get("spec") or {}).get("selector")).matches(labels)]
    if not matching:
        return
    if len(matching) > 1:
        raise ApiError.internal("This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                "does not support.")
    budget = matching[0]
    state = budget_state(budget, list(pods))
    pod_healthy = is_healthy(pod)
    allowed = state.disruptions_allowed > 0 if pod_healthy else state.healthy >= state.desired_healthy
    if allowed:
        return
    name = budget["metadata"]["name"]
    error = ApiError.too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.")
    error.details["causes"] = [{"reason": "DisruptionBudget",
                                "message": f"The disruption budget {name} needs {state.desired_healthy} healthy "
                                           f"pods and has {state.healthy} currently"}]
    raise error
