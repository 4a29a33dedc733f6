"""Prometheus metrics of the controllers, on the operator's registry (served at /metrics)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from colocation.controllers.disruption import ZONE_STATES, ZoneDecision

_RECONCILE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.health_transitions = Counter(
            "colocation_node_health_transitions_total",
            "NodeResource condition transitions, by condition type and new status.", ["type", "status"], registry=r)
        self.evictions = Counter(
            "colocation_evictions_total",
            "Pod evictions by the exit process, by result (evicted, deferred: refused for now by a "
            "PodDisruptionBudget or an error; gone: the pod no longer existed).", ["result"], registry=r)
        self.batch_writes = Counter(
            "colocation_batch_resource_writes_total",
            "Writes of batch resources to Nodes, by reason (add, change, refresh, repair, remove) and result.",
            ["reason", "result"], registry=r)
        self.object_writes = Counter(
            "colocation_controller_writes_total",
            "Writes of NodeSLO and NodeResource objects and Events, by resource, operation and result.",
            ["resource", "operation", "result"], registry=r)
        self.fenced_calls = Counter(
            "colocation_fenced_api_calls_total",
            "API calls of the controllers not sent because this replica did not lead (a standby, or a leader "
            "whose renew deadline passed without a renewal).", registry=r)
        self.warm = Gauge(
            "colocation_controllers_warm",
            "1 once the controllers' configuration is read and their Pod informer has listed every pod: this "
            "replica evaluates every node the moment it leads.", registry=r)
        self.reconcile_duration = Histogram(
            "colocation_reconcile_duration_seconds",
            "Duration of one evaluation of every node (health, batch resources, writes).",
            buckets=_RECONCILE_BUCKETS, registry=r)
        self.health_held = Gauge(
            "colocation_node_health_held_seconds",
            "Seconds node health has stood still because this replica's NodeMetric copy is not confirmed "
            "current (--store nats: cut off from NATS, or behind); 0 while it runs.", registry=r)
        self.unhealthy_nodes = Gauge("colocation_unhealthy_nodes", "Nodes judged unhealthy at the last evaluation.",
                                     registry=r)
        self.evictions_allowed = Gauge(
            "colocation_evictions_allowed",
            "1 when the exit process may evict in some zone, 0 while the guard holds it back everywhere "
            "(startup grace, every zone down, small zones partially disrupted).", registry=r)
        # Per zone (zones are few: their count bounds the label set; "" is the nodes without a zone label).
        self.zone_nodes = Gauge("colocation_zone_nodes", "Nodes in the zone at the last evaluation.", ["zone"],
                                registry=r)
        self.zone_unhealthy_nodes = Gauge("colocation_zone_unhealthy_nodes",
                                          "Unhealthy nodes in the zone at the last evaluation.", ["zone"], registry=r)
        self.zone_state = Gauge("colocation_zone_state",
                                "1 for the zone's disruption state (Normal, PartialDisruption, FullDisruption), 0 "
                                "for the others.", ["zone", "state"], registry=r)
        self.zone_eviction_rate = Gauge("colocation_zone_eviction_rate",
                                        "Nodes per second that may start draining in the zone (0: stopped).", ["zone"],
                                        registry=r)
        self._zones: set[str] = set()

    def track_health_held(self, held: Callable[[], float]) -> None:
        self.health_held.set_function(held)

    def observe_zones(self, zones: Mapping[str, ZoneDecision]) -> None:
        """Set the per-zone gauges; a zone that no longer has nodes loses its series."""
        for zone in self._zones - zones.keys():
            for gauge in (self.zone_nodes, self.zone_unhealthy_nodes, self.zone_eviction_rate):
                gauge.remove(zone)
            for state in ZONE_STATES:
                self.zone_state.remove(zone, state)
        self._zones = set(zones)
        for zone, decision in zones.items():
            self.zone_nodes.labels(zone).set(decision.nodes)
            self.zone_unhealthy_nodes.labels(zone).set(decision.unhealthy)
            self.zone_eviction_rate.labels(zone).set(decision.rate)
            for state in ZONE_STATES:
                self.zone_state.labels(zone, state).set(1 if decision.state == state else 0)
