"""When to write batch and Mid-tier resources to a Node, and the patch that writes them. Pure.

The four values (`kubernetes.io/batch-cpu` and `mid-cpu` in milli-cores, `batch-memory` and
`mid-memory` in bytes, plain integers) go in both `status.capacity` and `status.allocatable`, as
Koordinator writes them, and are written and removed together. `decide_node_write` applies
Koordinator's rules (`resourceDiffThreshold`, `updateTimeThresholdSeconds`, a repair of an
inconsistent Node); `node_status_patch` is the merge patch; `shown_batch` is what the
NodeResource status shows. A value equal to the Node's is never written.

The rules: docs/architecture.md#what-the-leader-writes-and-when
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from colocation.apimachinery.quantity import byte_value
from colocation.koordinator.batch_formula import BATCH_CPU, BATCH_MEMORY
from colocation.koordinator.mid_formula import MID_CPU, MID_MEMORY

BATCH_RESOURCES: Final = (BATCH_CPU, BATCH_MEMORY)
MID_RESOURCES: Final = (MID_CPU, MID_MEMORY)
OFFERED_RESOURCES: Final = (*BATCH_RESOURCES, *MID_RESOURCES)

# Why a write is (or is not) made; also the label of the writes counter.
ADD: Final = "add"
REMOVE: Final = "remove"
CHANGE: Final = "change"
REFRESH: Final = "refresh"
REPAIR: Final = "repair"
UNCHANGED: Final = "unchanged"
WITHIN_THRESHOLD: Final = "withinThreshold"
ABSENT: Final = "absent"


# The NodeResource status field of each resource.
STATUS_FIELDS: Final = {BATCH_CPU: "batchCPU", BATCH_MEMORY: "batchMemory", MID_CPU: "midCPU",
                        MID_MEMORY: "midMemory"}


@dataclasses.dataclass(frozen=True, slots=True)
class NodeBatch:
    """The batch and mid resources a Node offers now, as read from its status."""

    values: Mapping[str, int] | None  # the four resources, from allocatable; None unless all are there
    present: bool  # any of their keys in capacity or allocatable
    consistent: bool  # capacity and allocatable hold the same of these keys and values


def _batch_keys(resources: Any) -> dict[str, int | None]:
    if not isinstance(resources, Mapping):
        return {}
    found: dict[str, int | None] = {}
    for key in OFFERED_RESOURCES:
        if key in resources:
            try:
                found[key] = byte_value(resources[key])  # whole units, as Quantity.Value()
            except (TypeError, ValueError):
                found[key] = None  # unreadable: present, and repaired by the next write
    return found


def batch_on_node(node: Mapping[str, Any]) -> NodeBatch:
    status = node.get("status") or {}
    capacity = _batch_keys(status.get("capacity"))
    allocatable = _batch_keys(status.get("allocatable"))
    present = bool(capacity or allocatable)
    complete = all(allocatable.get(key) is not None for key in OFFERED_RESOURCES)
    values = {key: int(allocatable[key] or 0) for key in OFFERED_RESOURCES} if complete else None
    return NodeBatch(values, present, capacity == allocatable)


@dataclasses.dataclass(frozen=True)
class NodeWrite:
    write: bool
    reason: str


def decide_node_write(on_node: NodeBatch, desired: Mapping[str, int] | None, *, last_write: float | None,
                      now: float, diff_threshold: float, update_after: float) -> NodeWrite:
    """Whether to patch the Node so it offers `desired` (the four resources; None: none of them).

    `last_write` and `now` are on one clock (seconds); `last_write` None means unknown, which
    counts as long ago.
    """
    if desired is None:
        return NodeWrite(True, REMOVE) if on_node.present else NodeWrite(False, ABSENT)
    current = on_node.values
    if current is None:
        return NodeWrite(True, ADD)
    if not on_node.consistent:
        return NodeWrite(True, REPAIR)
    if all(current[key] == desired[key] for key in OFFERED_RESOURCES):
        return NodeWrite(False, UNCHANGED)
    if any(abs(desired[key] - current[key]) > current[key] * diff_threshold for key in OFFERED_RESOURCES):
        return NodeWrite(True, CHANGE)
    if last_write is None or now - last_write > update_after:
        return NodeWrite(True, REFRESH)
    return NodeWrite(False, WITHIN_THRESHOLD)


def node_status_patch(desired: Mapping[str, int] | None) -> dict[str, Any]:
    """A JSON merge patch of `nodes/{name}/status`: set the four resources in both lists, or remove them.

    Only their keys are named, so cpu, memory, pods and extended resources the kubelet or
    device plugins own are left alone.
    """
    values: dict[str, str | None] = {key: (str(int(desired[key])) if desired is not None else None)
                                     for key in OFFERED_RESOURCES}
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}


def shown_batch(shown: Mapping[str, Any] | None, on_node: Mapping[str, int] | None,
                diff_threshold: float) -> Mapping[str, int] | None:
    """The values a NodeResource status shows: what the Node offers, by the Node's own rule.

    `shown` is the stored status. Its figures stand while the Node's are within `diff_threshold` of
    them (the refresh that rewrites the Node every updateTimeThresholdSeconds moves it by less),
    so a refresh of the Node is no change of what the status says; a move beyond the threshold,
    an appearance or a removal is.
    """
    if on_node is None or not shown:
        return on_node
    before = {key: shown.get(field) for key, field in STATUS_FIELDS.items()}
    if any(not isinstance(value, int) for value in before.values()):
        return on_node
    if any(abs(on_node[key] - int(before[key] or 0)) > int(before[key] or 0) * diff_threshold
           for key in OFFERED_RESOURCES):
        return on_node
    return {key: int(value or 0) for key, value in before.items()}
