"""One evaluation of every node: health, batch resources, Node and NodeResource writes, evictions.

`NodeResourceReconciler.evaluate()` runs on a timer, and sooner when a node appears or the
configuration changes. Per node: the health tracker judges it; the formulas run on the Node, its
pods and its NodeMetric; the Node is patched when `decide_node_write` says so; the NodeResource
status is written when what it says changed. Across nodes: the guard gives each zone's eviction
rate (`disruption`), the planner which pods go now. On a standby, `prepare()` keeps the formulas'
results current. During the startup grace no node is judged and nobody is evicted. With
evaluation shards (`shards`), every node's health feeds the guard, but only the nodes of the
shards this replica holds are reconciled and evicted, each fenced by its shard's Lease, at the
held shards' share of each zone's rate.

Why on a timer, and what it costs: docs/architecture.md#what-an-evaluation-costs
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import orjson

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.tables import parse_timestamp
from colocation.controllers.cluster import ClusterState, slim_node
from colocation.controllers.conditions import status_needs_write
from colocation.controllers.configsource import ConfigSource
from colocation.controllers.controller_metrics import ControllerMetrics
from colocation.controllers.disruption import DisruptionGuard, GuardDecision, ZoneState, zone_of
from colocation.controllers.evaluation_shards import ShardView
from colocation.controllers.events import NORMAL, WARNING, ObjectRef
from colocation.controllers.eviction import EvictionPlan, EvictionPlanner, PodEviction, evictable
from colocation.controllers.health import NodeHealth, NodeHealthTracker
from colocation.controllers.loop_turns import NODES_PER_TURN, gather_in_turns
from colocation.controllers.node_memo import NodeMemo
from colocation.controllers.nodestatus import (
    DISABLED,
    METRICS_OUTDATED,
    NO_METRICS,
    Evaluation,
    evicting_condition,
    node_offer,
    render_status,
    status_inputs,
)
from colocation.controllers.nodewrite import decide_node_write, node_status_patch, shown_batch
from colocation.controllers.packed_status import unpacked_status
from colocation.controllers.settings import ControllerSettings
from colocation.controllers.writers import NODERESOURCES, KubeWriter, fenced_by, merge_patch, owner_reference
from colocation.koordinator.batch_formula import calculate_batch_resources
from colocation.koordinator.mid_formula import calculate_mid_resources
from colocation.koordinator.slo_strategies import ColocationStrategy
from colocation.nodemetrics.storage_interface import Entry, NodeMetricReader

log = logging.getLogger(__name__)


REASON_AGENT_NOT_READY = "ColocationAgentNotReady"
REASON_METRICS_STALE = "ColocationMetricsStale"
REASON_RECOVERED = "ColocationRecovered"
REASON_EVICTING = "ColocationEvicting"
REASON_EVICTED = "ColocationEvicted"


def noderesource_body(node: Mapping[str, Any]) -> Obj:
    return {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": "NodeResource",
            "metadata": {"name": node["metadata"]["name"], "ownerReferences": [owner_reference(node)],
                         "labels": {"app.kubernetes.io/managed-by": "colocation-operator"}},
            "spec": {}}


@dataclasses.dataclass(slots=True)
class _Computed:
    key: tuple[Any, ...]
    values: Mapping[str, int] | None
    reason: str


def _update_time(entry: Entry) -> str | None:
    """The report's status.updateTime as stored (format_time's form), without parsing the body.

    The store keeps it as seconds (`figures.update_time`); 0 also stands for "unreadable", in a
    body replicated from a leader of another version: that rare one is read from the body.
    """
    if entry.figures.update_time:
        return format_time(entry.figures.update_time)
    update_time = (orjson.loads(entry.body).get("status") or {}).get("updateTime")
    return str(update_time) if update_time else None


def _every_node(name: str) -> bool:
    return True


class NodeResourceReconciler:
    def __init__(self, state: ClusterState, tracker: NodeHealthTracker, store: NodeMetricReader,
                 *, config: ConfigSource, writer: KubeWriter, metrics: ControllerMetrics, settings: ControllerSettings,
                 shards: ShardView | None = None, wall: Callable[[], float] = time.time) -> None:
        self.state = state
        self.tracker = tracker
        self.store = store
        self.config = config
        self.writer = writer
        self.metrics = metrics
        self.settings = settings
        self.shards = shards
        self.wall = wall
        self.guard = DisruptionGuard(unhealthy_zone_threshold=settings.unhealthy_zone_threshold,
                                     min_unhealthy=settings.unhealthy_zone_min_nodes,
                                     eviction_rate=settings.eviction_rate,
                                     secondary_eviction_rate=settings.secondary_eviction_rate,
                                     large_cluster_size_threshold=settings.large_cluster_size_threshold)
        self.planner = EvictionPlanner(time.monotonic, rate=settings.eviction_rate)
        self._metrics: dict[str, tuple[int, str | None]] = {}  # node -> (resourceVersion, its updateTime)
        self._computed: dict[str, _Computed] = {}
        self._memos: dict[str, NodeMemo] = {}
        self._last_write: dict[str, float] = {}  # node -> wall time of our last Node write
        self._previous: dict[str, NodeHealth] = {}
        self._all_down = False
        self._zone_states: dict[str, tuple[ZoneState, float]] = {}

    # ---- inputs --------------------------------------------------------------------------------

    def _observe(self) -> None:
        tracked = set(self.tracker.nodes())
        for name in tracked - self.state.nodes.keys():
            self._forget(name)
        for name in self.state.nodes.keys() - tracked:
            self.tracker.track(name)
        for name in self.state.nodes:
            entry = self.store.get(name)
            if entry is None:
                self._metrics.pop(name, None)
                continue
            cached = self._metrics.get(name)
            if cached is None or cached[0] != entry.resource_version:
                update_time = _update_time(entry)
                self._metrics[name] = (entry.resource_version, update_time)
                # A report is the agent's heartbeat, as of when the store took it in.
                self.tracker.observe_metric(name, update_time=update_time, seen_at=entry.last_seen_monotonic)

    def observe_lease(self, lease: Mapping[str, Any]) -> None:
        spec = lease.get("spec") or {}
        self.tracker.observe_lease(str(lease["metadata"]["name"]), spec.get("renewTime"), spec.get("holderIdentity"))

    def _forget(self, name: str) -> None:
        self.tracker.forget(name)
        self._metrics.pop(name, None)
        self._computed.pop(name, None)
        self._memos.pop(name, None)
        self._last_write.pop(name, None)
        self._previous.pop(name, None)

    def _memo(self, name: str) -> NodeMemo:
        memo = self._memos.get(name)
        if memo is None:
            memo = self._memos[name] = NodeMemo()
        return memo

    def strategy(self, name: str, node: Mapping[str, Any]) -> ColocationStrategy:
        labels = (node.get("metadata") or {}).get("labels")
        overrides = (self.state.noderesources.get(name) or {}).get("spec")
        return self._memo(name).strategy_of(labels, overrides, self.config.parsed)

    def _compute(self, name: str, node: Obj, strategy: ColocationStrategy, *, now: float) -> _Computed:
        """The formulas' result for the node, computed again only when one of their inputs changed.

        The inputs: the Node and its pods (`node_versions`), the report (its resourceVersion),
        the strategy, and whether the report has aged out: the formulas read `now` only to compare
        it with received_at + degradeTimeMinutes (`batch_formula.usable_metric`). The report is
        parsed only here, on a change, and dropped on return: a parsed 30-pod report is about
        37 KiB, and the evaluation of every other node awaits writes in between.
        """
        entry = self.store.get(name)
        # Aged by when the leader received it, never by the agent's clock (a skewed one must
        # neither drop a node's batch resources nor keep them past degradeTimeMinutes).
        aged = entry is not None and now > entry.received_at + strategy.degrade_time_minutes * 60
        key = (self.state.node_versions.get(name), entry.resource_version if entry else None,
               self.config.generation, strategy, aged)
        cached = self._computed.get(name)
        if cached is not None and cached.key == key:
            return cached
        pods = self.state.pods_on(name)
        received_at = entry.received_at if entry else None
        parsed = orjson.loads(entry.body) if entry else None
        batch = calculate_batch_resources(node, pods, parsed, strategy=strategy, now=now, received_at=received_at)
        mid = calculate_mid_resources(node, pods, parsed, strategy=strategy, now=now, received_at=received_at)
        # Both drop their result in the same cases; written and removed together (nodewrite).
        values = {**batch, **mid} if batch is not None and mid is not None else None
        reason = ""
        if values is None:
            reason = DISABLED if not strategy.enable else (NO_METRICS if entry is None else METRICS_OUTDATED)
        computed = self._computed[name] = _Computed(key, values, reason)
        return computed

    # ---- on a standby ---------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Compute the formulas for every node whose inputs changed, as an evaluation would, and
        nothing more: no judgement, no write. A standby does this between its passes, so a new
        leader's first evaluation finds most results computed (`_compute` keeps them)."""
        for name in self._computed.keys() - self.state.nodes.keys():
            del self._computed[name]
        for name in self._memos.keys() - self.state.nodes.keys():
            del self._memos[name]
        now = self.wall()
        for index, name in enumerate(list(self.state.nodes), 1):
            node = self.state.nodes.get(name)  # gone while this pass yielded: nothing to do
            if node is not None:
                self._compute(name, node, self.strategy(name, node), now=now)
            if index % NODES_PER_TURN == 0:
                await asyncio.sleep(0)  # one turn: the standby goes on reading its feeds

    # ---- one evaluation ------------------------------------------------------------------------

    async def evaluate(self) -> None:
        started = time.perf_counter()
        self.tracker.degrade_after = self.config.parsed.colocation.cluster.degrade_time_minutes * 60.0
        await self._evaluate_observed()
        self.metrics.reconcile_duration.observe(time.perf_counter() - started)

    async def _evaluate_observed(self) -> None:
        self._observe()
        healths = {health.node: health for health in self.tracker.evaluate_all()}
        zones = {name: zone_of(self.state.nodes.get(name) or {}) for name in healths}
        decision = self.guard.decide((zones[name], health) for name, health in healths.items())
        if self._all_down and not decision.all_down and not decision.startup:
            # Leaving a disruption of every zone: every eviction timer starts again (see the tracker).
            self.tracker.restart_eviction_timers()
            healths = {health.node: health for health in self.tracker.evaluate_all()}
            decision = self.guard.decide((zones[name], health) for name, health in healths.items())
        self._all_down = decision.all_down
        self._log_zone_changes(decision)
        owns, share = self._owned()
        due = {name: self.state.pods_on(name) for name, health in healths.items() if health.evict and owns(name)}
        plan = self.planner.plan(due, zones=zones, rates={zone: rate * share for zone, rate in decision.rates.items()})
        self.metrics.unhealthy_nodes.set(decision.unhealthy)
        self.metrics.evictions_allowed.set(1 if decision.allowed else 0)
        self.metrics.observe_zones(decision.zones)

        work = [self._fenced(name, self._reconcile(name, healths[name], decision, zone=zones[name], plan=plan,
                                                   due=name in due))
                for name in sorted(healths) if name in self.state.nodes and owns(name)]
        work += [self._fenced(eviction.node, self._evict(eviction)) for eviction in plan.evictions]
        work += [self._fenced(name, self._started_draining(name, healths[name]))
                 for name in plan.started if name in healths]
        await gather_in_turns(work)

    def _owned(self) -> tuple[Callable[[str], bool], float]:
        """Which nodes this replica reconciles, and its share of each zone's eviction rate."""
        if self.shards is None:
            return _every_node, 1.0
        return self.shards.owns, len(self.shards.held) / self.shards.count

    async def _fenced(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        """`work` for node `name`, its writes fenced by the node's shard's Lease (with shards)."""
        if self.shards is None:
            await work
            return
        with fenced_by(self.shards.write_budget_of(name)):
            await work

    def _log_zone_changes(self, decision: GuardDecision) -> None:
        states = {name: (zone.state, zone.rate) for name, zone in decision.zones.items()}
        if states != self._zone_states:
            self._zone_states = states
            log.info("exit process", extra={"allowed": decision.allowed, "all_zones_down": decision.all_down,
                                            "detail": decision.summary})

    async def _reconcile(self, name: str, health: NodeHealth, decision: GuardDecision, *, zone: str,
                         plan: EvictionPlan, due: bool) -> None:
        node = self.state.nodes[name]
        resource = self.state.noderesources.get(name)
        if resource is None:
            resource = await self._create_noderesource(node)
        now = self.wall()
        strategy = self.strategy(name, node)
        computed = self._compute(name, node, strategy, now=now)
        evicting = evicting_condition(due=due, draining=name in plan.draining, waiting=name in plan.waiting,
                                      zone=decision.zones.get(zone), rate=self.settings.eviction_rate,
                                      timeout=self.settings.eviction_timeout)
        # Read before the write's await, as the status then shows what this evaluation judged.
        metric_update_time, lease_renew_time = self._metric_update_time(name), self.state.lease_renew_times.get(name)
        offers = await self._write_node(name, node, node_offer(health, computed.values), judged=health.judged,
                                        strategy=strategy, resource=resource, now=now)
        if resource is not None:
            last = self._last_node_write(name, resource)
            # The status shows what the Node offers after this evaluation's write, as the write's
            # answer (or the Node this evaluation read) says, never the formula's latest figure:
            # that moves with every report (also while an unhealthy node's agent goes on
            # reporting), and writing it would cost a status write per report per node, the very
            # load the thresholds keep off the Node. It moves only as the Node moves beyond the
            # threshold, not with the Node's periodic refresh.
            shown = shown_batch(resource.get("status"), offers, strategy.resource_diff_threshold)
            evaluation = Evaluation(
                health=health, computed=computed.values, no_computation_reason=computed.reason, evicting=evicting,
                grace_period=self.tracker.grace_period, degrade_after=self.tracker.degrade_after,
                metric_update_time=metric_update_time, lease_renew_time=lease_renew_time,
                last_node_update=format_time(last) if last else None,
                generation=resource.get("metadata", {}).get("generation"), on_node=shown)
            await self._write_status(name, resource, evaluation, strategy=strategy, now=now)
        # Events last: while they are posted, the watch may deliver an older copy of the Node.
        await self._post_transitions(name, node, health)

    def _metric_update_time(self, name: str) -> str | None:
        metric = self._metrics.get(name)
        return metric[1] if metric else None

    def _last_node_write(self, name: str, resource: Mapping[str, Any] | None) -> float | None:
        if name in self._last_write:
            return self._last_write[name]
        stored = parse_timestamp(((resource or {}).get("status") or {}).get("lastNodeUpdateTime"))
        return stored.timestamp() if stored else None

    async def _write_node(self, name: str, node: Obj, desired: Mapping[str, int] | None, *, judged: bool,
                          strategy: ColocationStrategy, resource: Mapping[str, Any] | None,
                          now: float) -> Mapping[str, int] | None:
        """Write the Node if it must offer `desired` (`nodestatus.offered`) and does not; the batch
        resources it offers afterwards (None: none).

        That is the write's answer when it succeeded, else the Node as this evaluation read it: a
        failed write left it as it was. Never `state.nodes` re-read later, which a late watch
        event of an older version may have replaced meanwhile.
        """
        before = self._memo(name).batch_on(node)
        if desired is None and not judged:
            return before.values  # startup grace: never remove what we cannot judge yet
        decision = decide_node_write(before, desired, last_write=self._last_node_write(name, resource),
                                     now=now, diff_threshold=strategy.resource_diff_threshold,
                                     update_after=float(strategy.update_time_threshold_seconds))
        if not decision.write:
            return before.values
        status, body = await self.writer.patch_node_status(name, node_status_patch(desired))
        ok = status == 200 and isinstance(body, dict)
        self.metrics.batch_writes.labels(decision.reason, "ok" if ok else "error").inc()
        if not ok:
            log.warning("batch resources not written", extra={"node": name, "status": status,
                                                             "error": body.get("message") if isinstance(body, dict)
                                                             else body})
            return before.values
        self._last_write[name] = now
        # What the Node is now, kept as its watch event will deliver it (the informer's transform):
        # that event then changes nothing, and the whole Node is not held meanwhile.
        self.state.nodes[name] = body = slim_node(body)
        log.info("batch resources written", extra={"node": name, "reason": decision.reason,
                                                   "resources": dict(desired) if desired else None})
        return self._memo(name).batch_on(body).values

    async def _create_noderesource(self, node: Obj) -> Obj | None:
        name = node["metadata"]["name"]
        status, body = await self.writer.create_cluster_object(NODERESOURCES, noderesource_body(node))
        if status == 409:
            status, body = await self.writer.get_cluster_object(NODERESOURCES, name)
        if 200 <= status < 300 and isinstance(body, dict):
            self.state.noderesource_event("MODIFIED", body)
            return body
        log.warning("NodeResource not created", extra={"node": name, "status": status})
        return None

    async def _write_status(self, name: str, resource: Mapping[str, Any], evaluation: Evaluation,
                            *, strategy: ColocationStrategy, now: float) -> None:
        kept = resource.get("status") or {}
        memo = self._memo(name)
        inputs = status_inputs(evaluation)
        if memo.status_settled(kept, inputs):
            return  # the same inputs render the same status over the same stored one: no write
        stored = unpacked_status(kept)
        rendered = render_status(evaluation, stored, format_time(now))
        if not status_needs_write(stored, rendered):
            memo.settle_status(kept, inputs)
            return
        status, body = await self.writer.patch_noderesource_status(name, {"status": merge_patch(stored, rendered)})
        if status == 200 and isinstance(body, dict):
            self.state.noderesource_event("MODIFIED", body)
        elif status == 404:
            self.state.noderesources.pop(name, None)  # deleted by someone: created again next time

    # ---- events --------------------------------------------------------------------------------

    async def _post_transitions(self, name: str, node: Obj, health: NodeHealth) -> None:
        previous = self._previous.get(name)
        self._previous[name] = health
        if not health.judged:
            return
        before_agent = previous.agent_ready if previous and previous.judged else True
        before_metrics = previous.metrics_fresh if previous and previous.judged else True
        before_healthy = previous.healthy if previous and previous.judged else True
        if (before_agent, before_metrics, before_healthy) == (health.agent_ready, health.metrics_fresh, health.healthy):
            return  # no transition: nothing to count, post or log
        ref = ObjectRef.of({"apiVersion": "v1", "kind": "Node", **node})
        for type_, before, now in (("AgentReady", before_agent, health.agent_ready),
                                   ("MetricsFresh", before_metrics, health.metrics_fresh),
                                   ("Healthy", before_healthy, health.healthy)):
            if before != now:
                self.metrics.health_transitions.labels(type_, str(now)).inc()
        if before_agent and not health.agent_ready:
            await self.writer.event(ref, WARNING, REASON_AGENT_NOT_READY,
                                    message=f"{health.message}: batch resources removed")
        if before_metrics and not health.metrics_fresh:
            await self.writer.event(ref, WARNING, REASON_METRICS_STALE,
                                    message=f"{health.message}: batch resources removed")
        if not before_healthy and health.healthy:
            await self.writer.event(ref, NORMAL, REASON_RECOVERED,
                                    message="the agent's Lease and metrics are fresh again: batch resources restored")
        if before_healthy != health.healthy:
            log.info("node health changed", extra={"node": name, "healthy": health.healthy, "reason": health.reason,
                                                   "detail": health.message})

    async def _started_draining(self, name: str, health: NodeHealth) -> None:
        node = self.state.nodes.get(name)
        if node is None:
            return
        count = sum(1 for pod in self.state.pods_on(name) if evictable(pod))
        log.warning("evicting batch and free pods", extra={"node": name, "pods": count, "detail": health.message})
        await self.writer.event(ObjectRef.of({"apiVersion": "v1", "kind": "Node", **node}), WARNING,
                                REASON_EVICTING, message=f"{health.message} (batch and free pods on the node: {count})")

    async def _evict(self, eviction: PodEviction) -> None:
        status, body = await self.writer.evict(eviction.namespace, eviction.name, eviction.uid)
        pod = ObjectRef(api_version="v1", kind="Pod", name=eviction.name, namespace=eviction.namespace,
                        uid=eviction.uid)
        if 200 <= status < 300:
            self.metrics.evictions.labels("evicted").inc()
            log.info("pod evicted", extra={"node": eviction.node, "pod": f"{eviction.namespace}/{eviction.name}",
                                           "priority": eviction.priority})
            await self.writer.event(pod, NORMAL, REASON_EVICTED,
                                    message=f"evicted: node {eviction.node} has been unhealthy for longer than the "
                                            f"eviction timeout and this pod is {eviction.priority}")
        elif status in (404, 409):  # gone, or replaced by a pod of the same name (uid precondition)
            self.metrics.evictions.labels("gone").inc()
        else:
            delay = self.planner.deferred(eviction)
            self.metrics.evictions.labels("deferred").inc()
            log.info("eviction refused for now", extra={
                "pod": f"{eviction.namespace}/{eviction.name}", "status": status, "retry_in": round(delay, 1),
                "error": body.get("message") if isinstance(body, dict) else body})

    # ---- nodes that went -----------------------------------------------------------------------

    async def remove(self, name: str) -> None:
        self._forget(name)
        status, _ = await self.writer.delete_cluster_object(NODERESOURCES, name)
        if status in (200, 202, 404):
            self.state.noderesources.pop(name, None)
