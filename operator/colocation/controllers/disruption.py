"""The mass-failure guard: how fast each zone's unhealthy nodes may be evicted. Pure.

As kube-controller-manager's node lifecycle controller (`ComputeZoneState`, `setLimiterInZone`):
each zone (`zone_of`) is Normal, PartialDisruption or FullDisruption by its nodes' health, and
gets an eviction rate by that state. A zone whose rate is 0 stops all its evictions, nodes
already draining included. During the startup grace every zone's rate is 0.

The states, the rates and where we differ from upstream: docs/controllers.md#the-exit-process
Why: docs/architecture.md#node-health-and-the-exit-process
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from colocation.controllers.health import NodeHealth

ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"
_BETA_ZONE_LABEL: Final = "failure-domain.beta.kubernetes.io/zone"
_BETA_REGION_LABEL: Final = "failure-domain.beta.kubernetes.io/region"

ZoneState = Literal["Normal", "PartialDisruption", "FullDisruption"]
NORMAL: Final = "Normal"
PARTIAL_DISRUPTION: Final = "PartialDisruption"
FULL_DISRUPTION: Final = "FullDisruption"
ZONE_STATES: Final[tuple[ZoneState, ...]] = ("Normal", "PartialDisruption", "FullDisruption")

# Why a zone's rate is 0 (the Evicting condition's reason on its due nodes).
HELD_STARTUP: Final = "StartupGrace"
HELD_ALL_ZONES_DOWN: Final = "FullDisruption"
HELD_PARTIAL_DISRUPTION: Final = "PartialDisruption"


def zone_of(node: Mapping[str, Any]) -> str:
    """The zone key of a Node object: `region/zone`, `zone`, or "" for a node without labels."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    zone = str(labels.get(ZONE_LABEL, labels.get(_BETA_ZONE_LABEL, "")))
    region = str(labels.get(REGION_LABEL, labels.get(_BETA_REGION_LABEL, "")))
    return f"{region}/{zone}" if region else zone


def zone_display(zone: str) -> str:
    return f"zone {zone!r}" if zone else "the nodes without a zone label"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZoneDecision:
    zone: str
    nodes: int
    unhealthy: int
    state: ZoneState
    rate: float  # nodes per second that may start draining in this zone
    held: str | None  # why `rate` is 0 (HELD_*), None while it is not
    message: str


@dataclasses.dataclass(frozen=True)
class GuardDecision:
    zones: Mapping[str, ZoneDecision]
    startup: bool
    all_down: bool  # every zone fully disrupted: nothing is evicted anywhere

    @property
    def rates(self) -> dict[str, float]:
        return {name: zone.rate for name, zone in self.zones.items()}

    @property
    def unhealthy(self) -> int:
        return sum(zone.unhealthy for zone in self.zones.values())

    @property
    def allowed(self) -> bool:
        """Whether some zone may evict."""
        return any(zone.rate > 0 for zone in self.zones.values())

    @property
    def summary(self) -> str:
        return "; ".join(self.zones[name].message for name in sorted(self.zones)) or "no nodes"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DisruptionGuard:
    unhealthy_zone_threshold: float = 0.55
    min_unhealthy: int = 2
    eviction_rate: float = 0.1
    secondary_eviction_rate: float = 0.01
    large_cluster_size_threshold: int = 50

    def __post_init__(self) -> None:
        if not 0 <= self.unhealthy_zone_threshold <= 1:
            raise ValueError(f"unhealthy_zone_threshold must be within [0, 1], got {self.unhealthy_zone_threshold}")
        if self.min_unhealthy < 0 or self.large_cluster_size_threshold < 0:
            raise ValueError("min_unhealthy and large_cluster_size_threshold must not be negative")
        if self.eviction_rate < 0 or self.secondary_eviction_rate < 0:
            raise ValueError("eviction rates must not be negative")

    def zone_state(self, nodes: int, unhealthy: int) -> ZoneState:
        if nodes and unhealthy == nodes:
            return "FullDisruption"
        if unhealthy > self.min_unhealthy and unhealthy / nodes > self.unhealthy_zone_threshold:
            return "PartialDisruption"
        return "Normal"

    def decide(self, healths: Iterable[tuple[str, NodeHealth]]) -> GuardDecision:
        """Each zone's state and eviction rate, given every node's (zone, health)."""
        counts: dict[str, list[int]] = {}
        startup = False
        for zone, health in healths:
            nodes_unhealthy = counts.setdefault(zone, [0, 0])
            nodes_unhealthy[0] += 1
            nodes_unhealthy[1] += not health.healthy
            startup = startup or not health.judged
        states = {zone: self.zone_state(nodes, unhealthy) for zone, (nodes, unhealthy) in counts.items()}
        all_down = bool(states) and all(state == FULL_DISRUPTION for state in states.values())
        zones = {zone: self._zone(zone, nodes, unhealthy, state=states[zone], startup=startup, all_down=all_down)
                 for zone, (nodes, unhealthy) in counts.items()}
        return GuardDecision(zones, startup, all_down and not startup)

    def _zone(self, zone: str, nodes: int, unhealthy: int, *, state: ZoneState, startup: bool,
              all_down: bool) -> ZoneDecision:
        counts = f"{zone_display(zone)}: {unhealthy} of {nodes} nodes unhealthy"
        if startup:
            return ZoneDecision(zone=zone, nodes=nodes, unhealthy=unhealthy, state=state, rate=0.0, held=HELD_STARTUP,
                                message=f"{counts}, no evictions during the startup grace")
        if all_down:
            return ZoneDecision(zone=zone, nodes=nodes, unhealthy=unhealthy, state=state, rate=0.0,
                                held=HELD_ALL_ZONES_DOWN,
                                message=f"{counts}, every zone fully disrupted: more likely our fault than theirs, "
                                        "no evictions")
        if state == PARTIAL_DISRUPTION:
            if nodes > self.large_cluster_size_threshold and self.secondary_eviction_rate > 0:
                return ZoneDecision(zone=zone, nodes=nodes, unhealthy=unhealthy, state=state,
                                    rate=self.secondary_eviction_rate, held=None,
                                    message=f"{counts}, partially disrupted: slowed to "
                                            f"{self.secondary_eviction_rate:g} nodes/s (--secondary-eviction-rate)")
            why = (f"a zone of at most {self.large_cluster_size_threshold} nodes"
                   if nodes <= self.large_cluster_size_threshold else "--secondary-eviction-rate is 0")
            return ZoneDecision(zone=zone, nodes=nodes, unhealthy=unhealthy, state=state, rate=0.0,
                                held=HELD_PARTIAL_DISRUPTION,
                                message=f"{counts}, partially disrupted (more than "
                                        f"{self.unhealthy_zone_threshold:.0%} and more than {self.min_unhealthy}), "
                                        f"{why}: no evictions")
        note = ", fully disrupted while other zones are not" if state == FULL_DISRUPTION else ""
        return ZoneDecision(zone=zone, nodes=nodes, unhealthy=unhealthy, state=state, rate=self.eviction_rate,
                            held=None, message=f"{counts}{note}: {self.eviction_rate:g} nodes/s (--eviction-rate)")
