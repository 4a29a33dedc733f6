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

# Fields that change with every heartbeat or report: written along with a real change, or when
# the status has not been written for a while, never on their own (10,000 nodes renew a Lease
# every 10 s: writing on each would be 1,000 writes a second for nothing a user acts on).
VOLATILE_STATUS_FIELDS: Final = frozenset({"leaseRenewTime", "metricUpdateTime"})


@dataclasses.dataclass(frozen=True)
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


def status_needs_write(stored: Mapping[str, Any] | None, rendered: Mapping[str, Any], *,
                       last_write: float | None, now: float, refresh_after: float) -> bool:
    """Whether the NodeResource status must be written.

    Yes when anything but the volatile input timestamps differs from the stored status, and when
    the timestamps differ and the last write is older than `refresh_after` (or unknown).
    """
    stored = stored or {}

    def stable(status: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in status.items() if key not in VOLATILE_STATUS_FIELDS}

    if stable(stored) != stable(rendered):
        return True
    if all(stored.get(key) == rendered.get(key) for key in VOLATILE_STATUS_FIELDS):
        return False
    return last_write is None or now - last_write > refresh_after
