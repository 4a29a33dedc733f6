"""NodeResource status: conditions with Kubernetes transition semantics, and when to write it. Pure.

Conditions follow the API conventions (metav1.Condition): one entry per type, `status` "True",
"False" or "Unknown", a CamelCase `reason`, a human `message`, and `lastTransitionTime`, which
changes only when `status` flips (a new reason or message alone keeps it, as
meta.SetStatusCondition does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

AGENT_READY: Final = "AgentReady"
METRICS_FRESH: Final = "MetricsFresh"
COLOCATION_READY: Final = "ColocationReady"
EVICTING: Final = "Evicting"
CONDITION_TYPES: Final = (AGENT_READY, METRICS_FRESH, COLOCATION_READY, EVICTING)

# Fields that change with every report or Node refresh: written along with a real change, never on
# their own (10,000 nodes report every 10 s: writing on each would be 1,000 etcd writes a second,
# and a refresh every updateTimeThresholdSeconds would still be 0.2 per node per minute, for
# nothing a user acts on; the NodeMetric API serves the latest updateTime).
VOLATILE_STATUS_FIELDS: Final = frozenset({"leaseRenewTime", "metricUpdateTime", "lastNodeUpdateTime"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str

    @property
    def status_text(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


def merge_conditions(previous: Iterable[Mapping[str, Any]] | None, desired: Sequence[Condition],
                     now: str) -> list[dict[str, Any]]:
    """The conditions to store: `desired`, in its order, with transition times carried over.

    A type whose status is unchanged keeps its previous `lastTransitionTime`; a new type or a
    flipped status gets `now`. Types not in `desired` are dropped.
    """
    before = {str(item.get("type")): item for item in previous or () if isinstance(item, Mapping)}
    merged: list[dict[str, Any]] = []
    for condition in desired:
        old = before.get(condition.type)
        since = now
        if old is not None and old.get("status") == condition.status_text and old.get("lastTransitionTime"):
            since = str(old["lastTransitionTime"])
        merged.append({"type": condition.type, "status": condition.status_text, "reason": condition.reason,
                       "message": condition.message, "lastTransitionTime": since})
    return merged


def transitions(previous: Iterable[Mapping[str, Any]] | None,
                current: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(type, new status) of every condition whose status differs from before (new types included)."""
    before = {str(item.get("type")): item.get("status") for item in previous or () if isinstance(item, Mapping)}
    return [(str(item["type"]), str(item["status"])) for item in current if before.get(item["type"]) != item["status"]]


def status_needs_write(stored: Mapping[str, Any] | None, rendered: Mapping[str, Any]) -> bool:
    """Whether the NodeResource status must be written: when anything but the volatile input
    timestamps differs from the stored status (they are written along with such a change, never
    on their own)."""
    stored = stored or {}

    def stable(status: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in status.items() if key not in VOLATILE_STATUS_FIELDS}

    return stable(stored) != stable(rendered)
