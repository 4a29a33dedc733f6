"""A NodeResource's status from one evaluation of its node. Pure.

Messages name the cause and the threshold, never an age, so an unchanged situation renders an
unchanged status. Only the volatile timestamps (`conditions.VOLATILE_STATUS_FIELDS`) move with
every report, and they are written only along with a real change. The batch and mid figures and
the ColocationReady message show what the Node offers (`Evaluation.on_node`, held by
`nodewrite.shown_batch`), never the formulas' latest figures; absent when the Node offers
nothing. A node whose removal failed shows what its Node still offers, and says so.

Why: docs/architecture.md#what-the-leader-writes-and-when
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from colocation.apimachinery import human_units
from colocation.apimachinery.quantity import format_bytes, format_millis
from colocation.apimachinery.tables import human_duration
from colocation.controllers import health as health_reasons
from colocation.controllers.conditions import (
    AGENT_READY,
    COLOCATION_READY,
    EVICTING,
    METRICS_FRESH,
    Condition,
    merge_conditions,
)
from colocation.controllers.disruption import PARTIAL_DISRUPTION, ZoneDecision
from colocation.controllers.health import NodeHealth
from colocation.koordinator.batch_formula import BATCH_CPU, BATCH_MEMORY
from colocation.koordinator.mid_formula import MID_CPU, MID_MEMORY

# Why a node offers no batch resources (ColocationReady=False), besides being unhealthy.
DISABLED: Final = "ColocationDisabled"
NO_METRICS: Final = "NoMetrics"
METRICS_OUTDATED: Final = "MetricsOutdated"
UNHEALTHY: Final = "NodeUnhealthy"
OFFERED: Final = "BatchResourcesOffered"
PENDING: Final = "BatchResourcesPending"  # computed for a healthy node, not (yet) on the Node

# Evicting=False reasons, besides the guard's when it stops a zone (`disruption.HELD_*`:
# StartupGrace, FullDisruption for every zone down, PartialDisruption for a small zone).
NOT_DUE: Final = "NotDue"
RATE_LIMITED: Final = "RateLimited"  # waiting for its zone's token at --eviction-rate
SECONDARY_RATE_LIMITED: Final = "SecondaryRateLimited"  # ... at --secondary-eviction-rate (partial disruption)
EVICTIONS_DISABLED: Final = "EvictionsDisabled"
EVICTING_PODS: Final = "EvictingPods"

# Batch resources that must go but are still on the Node: the write that removes them failed.
NOT_REMOVED: Final = "not yet removed from the Node: the write failed and is retried"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Evaluation:
    """Everything one evaluation found about a node."""

    health: NodeHealth
    computed: Mapping[str, int] | None  # the formula's result (None: remove)
    no_computation_reason: str  # DISABLED, NO_METRICS or METRICS_OUTDATED when `computed` is None
    evicting: Condition
    grace_period: float
    degrade_after: float
    metric_update_time: str | None
    lease_renew_time: str | None
    last_node_update: str | None  # RFC 3339
    generation: int | None
    on_node: Mapping[str, int] | None  # what the Node offers after this evaluation's write (None: nothing)


def offered(evaluation: Evaluation) -> Mapping[str, int] | None:
    """What the Node should offer: the formula's result while the node is healthy."""
    return node_offer(evaluation.health, evaluation.computed)


def node_offer(health: NodeHealth, computed: Mapping[str, int] | None) -> Mapping[str, int] | None:
    """`offered`, before the evaluation is complete (the Node is written before its status)."""
    return computed if health.healthy else None


def _health_conditions(evaluation: Evaluation, previous: Mapping[str, Mapping[str, Any]]) -> list[Condition]:
    health = evaluation.health
    if not health.judged:
        # Startup grace: nothing is known yet; what was stored stands (or Unknown).
        kept = []
        for type_ in (AGENT_READY, METRICS_FRESH):
            old = previous.get(type_)
            if old is not None:
                status = {"True": True, "False": False}.get(str(old.get("status")))
                kept.append(Condition(type=type_, status=status,
                                      reason=str(old.get("reason") or health_reasons.REASON_STARTUP),
                                      message=str(old.get("message") or "")))
            else:
                kept.append(Condition(type=type_, status=None, reason=health_reasons.REASON_STARTUP,
                                      message="the operator became leader recently; nodes are judged after a grace "
                                              "period"))
        return kept
    grace = human_duration(evaluation.grace_period)
    if health.agent_ready:
        agent = Condition(type=AGENT_READY, status=True, reason="AgentHeard",
                          message=f"the agent reports (or renews its Lease) within the grace period {grace}")
    elif health.reason == health_reasons.REASON_AGENT_UNSTABLE:
        agent = Condition(type=AGENT_READY, status=False, reason=health_reasons.REASON_AGENT_UNSTABLE,
                          message="the agent is heard again, but not yet steadily")
    else:
        agent = Condition(type=AGENT_READY, status=False, reason=health_reasons.REASON_AGENT_SILENT,
                          message=f"no report and no Lease renewal from the agent within the grace period {grace}")
    degrade = human_duration(evaluation.degrade_after)
    if health.metrics_fresh:
        metrics = Condition(type=METRICS_FRESH, status=True, reason="MetricsReported",
                            message=f"a new NodeMetric report came within {degrade}")
    else:
        metrics = Condition(type=METRICS_FRESH, status=False, reason=health_reasons.REASON_METRICS_STALE,
                            message=f"no new NodeMetric report for longer than degradeTimeMinutes ({degrade})")
    return [agent, metrics]


def _removal(evaluation: Evaluation) -> str:
    """What became of an unhealthy node's batch resources: the write that removes them may fail."""
    return "batch resources removed" if evaluation.on_node is None else f"batch resources {NOT_REMOVED}"


def _colocation_condition(evaluation: Evaluation) -> tuple[Condition, str]:
    health = evaluation.health
    if offered(evaluation) is not None:
        values = evaluation.on_node
        if values is None:
            text = "batch resources computed, not yet written to the Node"
            return Condition(type=COLOCATION_READY, status=False, reason=PENDING, message=text), text
        text = (f"offering batch cpu {format_millis(values[BATCH_CPU])} and "
                f"memory {format_bytes(values[BATCH_MEMORY])}, mid cpu {format_millis(values[MID_CPU])} "
                f"and memory {format_bytes(values[MID_MEMORY])}")
        return Condition(type=COLOCATION_READY, status=True, reason=OFFERED, message=text), text
    if not health.healthy:
        text = f"the node is unhealthy: {_removal(evaluation)}"
        return Condition(type=COLOCATION_READY, status=False, reason=UNHEALTHY, message=text), text
    reason = evaluation.no_computation_reason or NO_METRICS
    text = {
        DISABLED: "colocation is disabled for this node: no batch resources",
        NO_METRICS: "no NodeMetric report from the node's agent yet: no batch resources",
        METRICS_OUTDATED: "the last NodeMetric report is older than degradeTimeMinutes: no batch resources",
    }.get(reason, "no batch resources")
    if not health.judged:
        text += " (kept as they are on the Node until the startup grace ends)"
    elif evaluation.on_node is not None:
        text += " (" + NOT_REMOVED + ")"
    return Condition(type=COLOCATION_READY, status=False, reason=reason, message=text), text


def status_inputs(evaluation: Evaluation) -> tuple[Any, ...]:
    """All that `render_status` reads of an evaluation, for the controller to skip rendering again.

    Equal inputs over the same stored status render the same status. `now` dates only a condition
    whose status differs from the stored one, and such a status is always written; so an
    evaluation whose rendering needed no write needs none later with equal inputs either. Not
    read: the health's message and timestamps (conditions name thresholds, not ages), and the
    formulas' figures beyond whether there are any (the status shows `on_node`).
    """
    health = evaluation.health
    return (health.healthy, health.agent_ready, health.metrics_fresh, health.judged, health.reason,
            offered(evaluation) is not None, evaluation.no_computation_reason, evaluation.evicting,
            evaluation.grace_period, evaluation.degrade_after, evaluation.metric_update_time,
            evaluation.lease_renew_time, evaluation.last_node_update, evaluation.generation, evaluation.on_node)


def render_status(evaluation: Evaluation, stored: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The NodeResource status for this evaluation, transition times carried over from `stored`."""
    stored = stored or {}
    previous = {str(c.get("type")): c for c in stored.get("conditions") or () if isinstance(c, Mapping)}
    colocation, message = _colocation_condition(evaluation)
    conditions = [*_health_conditions(evaluation, previous), colocation, evaluation.evicting]
    if not evaluation.health.healthy and evaluation.health.judged:
        message = "; ".join(c.message for c in conditions[:2] if c.status is False) + f": {_removal(evaluation)}"
    if evaluation.evicting.status:
        message += "; " + evaluation.evicting.message
    status: dict[str, Any] = {}
    values = evaluation.on_node
    if values is not None:
        status["batchCPU"] = int(values[BATCH_CPU])
        status["batchMemory"] = int(values[BATCH_MEMORY])
        status["midCPU"] = int(values[MID_CPU])
        status["midMemory"] = int(values[MID_MEMORY])
        # For the printer columns, which show fields as stored: the same figures, read at a glance.
        status["display"] = {"batchCPU": human_units.cores(status["batchCPU"]),
                             "batchMemory": human_units.memory(status["batchMemory"]),
                             "midCPU": human_units.cores(status["midCPU"]),
                             "midMemory": human_units.memory(status["midMemory"])}
    status["healthy"] = evaluation.health.healthy
    status["message"] = message[:1024]
    if evaluation.generation is not None:
        status["observedGeneration"] = evaluation.generation
    for key, value in (("metricUpdateTime", evaluation.metric_update_time),
                       ("leaseRenewTime", evaluation.lease_renew_time),
                       ("lastNodeUpdateTime", evaluation.last_node_update)):
        if value:
            status[key] = value
    status["conditions"] = merge_conditions(stored.get("conditions"), conditions, now)
    return status


def evicting_condition(*, due: bool, draining: bool, waiting: bool, zone: ZoneDecision | None, rate: float,
                       timeout: float) -> Condition:
    """The Evicting condition of a node, from the exit process's view of it and of its zone."""
    if draining:
        return Condition(type=EVICTING, status=True, reason=EVICTING_PODS,
                         message=f"unhealthy for longer than the eviction timeout {human_duration(timeout)}: "
                                 "evicting its batch and free pods")
    if not due:
        return Condition(type=EVICTING, status=False, reason=NOT_DUE,
                         message="no eviction: the node is healthy or within the eviction timeout")
    if rate <= 0:
        return Condition(type=EVICTING, status=False, reason=EVICTIONS_DISABLED,
                         message="evictions are disabled (--eviction-rate=0)")
    if zone is not None and zone.held:
        return Condition(type=EVICTING, status=False, reason=zone.held, message=f"evictions held back: {zone.message}")
    if waiting:
        slowed = zone is not None and zone.state == PARTIAL_DISRUPTION
        return Condition(type=EVICTING, status=False, reason=SECONDARY_RATE_LIMITED if slowed else RATE_LIMITED,
                         message="due for eviction, waiting for its turn" + (f" ({zone.message})" if zone else ""))
    return Condition(type=EVICTING, status=False, reason=NOT_DUE, message="due for eviction")
