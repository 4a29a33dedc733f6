"""One evaluation of every node, against a recording API and the real in-memory NodeMetric store.

The clocks are fake: the tracker's monotonic clock and the wall clock move only when a test moves
them. The Kubernetes API is a recorder that answers like the API server does (the patched Node
back, 201 for a create, 429 when a PodDisruptionBudget refuses an eviction).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from colocation.apimachinery.merge_patch import json_merge_patch
from colocation.apimachinery.pods import KEPT_REQUESTS
from colocation.controllers.cluster import ClusterState, slim_pod
from colocation.controllers.configsource import ConfigSource
from colocation.controllers.controller_metrics import ControllerMetrics
from colocation.controllers.events import ObjectRef
from colocation.controllers.health import NodeHealthTracker
from colocation.controllers.loop_turns import NODES_PER_TURN
from colocation.controllers.noderesource_controller import NodeResourceReconciler
from colocation.controllers.packed_status import unpacked_status
from colocation.controllers.settings import ControllerSettings
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import validate_report
from tests.clock import FakeClock

CPU, MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
WALL = 1_800_000_000.0


class RecordingApi:
    """The writer's interface, answering as the API server would, and remembering every call."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.calls: list[tuple[str, str]] = []
        self.events: list[tuple[str, str, str]] = []  # (object, type, reason)
        self.refuse_evictions: set[str] = set()
        self.evicted: list[str] = []
        self.node_writes_fail = False  # answer every Node write with a 500, the Node unchanged
        self.during_events: list[Callable[[], None]] = []  # run while an Event is being posted

    async def patch_node_status(self, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        self.calls.append(("patch node", name))
        if self.node_writes_fail:
            return 500, {"kind": "Status", "status": "Failure", "message": "etcdserver: request timed out"}
        node = json_merge_patch(copy.deepcopy(self.state.nodes[name]), patch)
        return 200, node

    async def create_cluster_object(self, plural: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.calls.append((f"create {plural}", body["metadata"]["name"]))
        return 201, {**body, "metadata": {**body["metadata"], "generation": 1, "resourceVersion": "1"}}

    async def get_cluster_object(self, plural: str, name: str) -> tuple[int, Any]:
        return 404, None

    async def patch_noderesource_status(self, name: str, patch: dict[str, Any]) -> tuple[int, Any]:
        self.calls.append(("patch noderesource status", name))
        stored = self.state.noderesources[name]  # as the API server holds it: its status parsed
        whole = {**copy.deepcopy(stored), "status": dict(unpacked_status(stored.get("status")))}
        return 200, json_merge_patch(whole, patch)

    async def delete_cluster_object(self, plural: str, name: str) -> tuple[int, Any]:
        self.calls.append((f"delete {plural}", name))
        return 200, {}

    async def evict(self, namespace: str, name: str, uid: str) -> tuple[int, Any]:
        if name in self.refuse_evictions:
            return 429, {"message": "Cannot evict pod as it would violate the pod's disruption budget."}
        self.evicted.append(name)
        return 201, {}

    async def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        self.events.append((ref.name, type_, reason))
        for action in self.during_events:
            action()


def node(name: str) -> dict[str, Any]:
    resources = {"cpu": "10", "memory": "10Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}", "labels": {}},
            "status": {"capacity": dict(resources), "allocatable": dict(resources)}}


def pod(name: str, node_name: str, priority: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "jobs", "uid": f"uid-{name}",
                         "labels": {"koordinator.sh/priority-class": priority}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


class Harness:
    def __init__(self, nodes: list[str], **settings: Any) -> None:
        self.clock = FakeClock(5000.0, wall=WALL)
        self.monotonic, self.wall = self.clock.monotonic, self.clock.wall
        self.settings = ControllerSettings(**{"node_grace_period": 40.0, "eviction_timeout": 300.0,
                                              "eviction_rate": 100.0, **settings})
        self.state = ClusterState()
        self.api = RecordingApi(self.state)
        self.store = NodeMetricStore(clock_wall=self.wall, clock_monotonic=self.monotonic)
        self.tracker = NodeHealthTracker(self.monotonic, grace_period=self.settings.node_grace_period,
                                         eviction_timeout=self.settings.eviction_timeout)
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)
        self.config = ConfigSource("colocation-system", self.api.event)
        self.config.loaded = True
        self.reconciler = NodeResourceReconciler(self.state, self.tracker, self.store, config=self.config,
                                                 writer=self.api,  # type: ignore[arg-type]
                                                 metrics=self.metrics, settings=self.settings, wall=self.wall)
        self.reports = 0
        for name in nodes:
            self.state.node_event(None, node(name))

    def renew(self, *names: str) -> None:
        for name in names:
            stamp = f"2026-01-01T00:00:{self.reports % 60:02d}.{self.reports:06d}Z"
            self.reports += 1
            self.reconciler.observe_lease({"metadata": {"name": name},
                                           "spec": {"renewTime": stamp, "holderIdentity": name}})

    def report(self, name: str, system_cpu: str = "500m", agent_clock_skew: float = 0.0) -> None:
        usage = {"resources": {"cpu": system_cpu, "memory": "1Gi"}}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall() + agent_clock_skew))
        raw = orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                            "metadata": {"name": name},
                            "status": {"updateTime": stamp, "nodeMetric": {"nodeUsage": usage, "systemUsage": usage},
                                       "podsMetric": []}})
        self.store.put(validate_report(raw, name), {})

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def evaluate(self) -> None:
        await self.reconciler.evaluate()

    def offered(self, name: str) -> tuple[str | None, str | None]:
        status = self.state.nodes[name]["status"]
        assert status["capacity"].get(CPU) == status["allocatable"].get(CPU)
        return status["allocatable"].get(CPU), status["allocatable"].get(MEMORY)

    def resource_status(self, name: str) -> dict[str, Any]:
        return dict(self.state.noderesources[name].get("status") or {})

    def condition(self, name: str, type_: str) -> tuple[str, str]:
        found = next(c for c in self.resource_status(name)["conditions"] if c["type"] == type_)
        return found["status"], found["reason"]


async def healthy_pass(h: Harness, *names: str) -> None:
    """Past the startup grace with every node renewing and reporting."""
    for _ in range(5):
        h.renew(*names)
        h.advance(10)
    for name in names:
        h.report(name)
    await h.evaluate()


async def test_a_healthy_node_gets_its_noderesource_and_batch_resources() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    # 10 cpus, 60 % reclaimable, 500m system: 5500m. 10Gi, 65 %: 10Gi - 3.5Gi - 1Gi.
    assert h.offered("n1") == ("5500", "5905580032")
    assert ("create noderesources", "n1") in h.api.calls
    status = h.resource_status("n1")
    assert (status["batchCPU"], status["healthy"]) == (5500, True)
    assert h.condition("n1", "ColocationReady") == ("True", "BatchResourcesOffered")

    # Nothing changed: the next evaluation writes nothing at all.
    h.api.calls.clear()
    await h.evaluate()
    assert h.api.calls == []


async def test_a_prod_pod_arriving_between_reports_moves_the_batch_figures_from_the_stored_report() -> None:
    """The parsed report is not kept between evaluations (memory); a change of the node's pods
    alone reads the stored report again."""
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    assert h.offered("n1") == ("5500", "5905580032")
    prod = pod("web", "n1", "koord-prod")
    prod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "1Gi"}}
    await h.state.pod_event("ADDED", prod)
    h.renew("n1")
    await h.evaluate()  # no new report: the pod has no metric, so its request counts
    assert h.offered("n1") == ("3500", str(5905580032 - 1024**3))


async def test_an_agent_whose_clock_is_an_hour_behind_still_gets_batch_resources() -> None:
    """Reports are aged by when the leader received them: an updateTime an hour old (beyond
    degradeTimeMinutes, 15) from a skewed agent clock does not make fresh figures outdated."""
    h = Harness(["n1"])
    for _ in range(5):
        h.renew("n1")
        h.advance(10)
    h.report("n1", agent_clock_skew=-3600)
    await h.evaluate()
    assert h.offered("n1") == ("5500", "5905580032")
    assert h.condition("n1", "ColocationReady") == ("True", "BatchResourcesOffered")


async def test_usage_moving_within_the_threshold_writes_neither_the_node_nor_its_noderesource() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    assert h.offered("n1") == ("5500", "5905580032")
    h.api.calls.clear()
    h.advance(10)
    h.renew("n1")
    h.report("n1", system_cpu="700m")  # batch cpu 5500 -> 5300: 3.6 %, under the default 10 %
    await h.evaluate()
    assert h.api.calls == []
    assert (h.offered("n1")[0], h.resource_status("n1")["batchCPU"]) == ("5500", 5500)

    h.report("n1", system_cpu="2500m")  # -> 3500: beyond the threshold, both follow
    await h.evaluate()
    assert h.api.calls == [("patch node", "n1"), ("patch noderesource status", "n1")]
    assert (h.offered("n1")[0], h.resource_status("n1")["batchCPU"]) == ("3500", 3500)
    assert "offering batch cpu 3500m" in h.resource_status("n1")["message"]


async def test_nothing_is_removed_during_the_startup_grace() -> None:
    h = Harness(["n1"])
    h.state.node_event("MODIFIED", {**node("n1"), "status": {
        "capacity": {CPU: "3000", MEMORY: "1000"}, "allocatable": {CPU: "3000", MEMORY: "1000"}}})
    await h.evaluate()  # no metric at all for a new leader: the formula says remove
    assert h.offered("n1") == ("3000", "1000")
    assert ("patch node", "n1") not in h.api.calls
    assert h.condition("n1", "AgentReady") == ("Unknown", "StartupGrace")


async def test_a_silent_agent_loses_batch_resources_then_its_batch_pods() -> None:
    h = Harness(["n1", "n2", "n3"])
    for name, priority in (("batch", "koord-batch"), ("free", "koord-free"), ("prod", "koord-prod"),
                           ("guarded", "koord-batch")):
        await h.state.pod_event("ADDED", pod(name, "n1", priority))
    h.api.refuse_evictions.add("guarded")
    await healthy_pass(h, "n1", "n2", "n3")
    assert h.offered("n1") == ("5500", "5905580032")

    # n1 falls silent; the others go on.
    for _ in range(4):
        h.renew("n2", "n3")
        h.advance(10)
    h.advance(1)
    await h.evaluate()
    assert h.offered("n1") == (None, None)
    assert h.condition("n1", "AgentReady") == ("False", "AgentSilent")
    assert ("n1", "Warning", "ColocationAgentNotReady") in h.api.events
    assert h.api.evicted == []

    for _ in range(30):  # five minutes more
        h.renew("n2", "n3")
        h.advance(10)
    await h.evaluate()
    assert sorted(h.api.evicted) == ["batch", "free"]  # prod stays; guarded was refused (429), retried later
    assert h.condition("n1", "Evicting") == ("True", "EvictingPods")
    assert ("n1", "Warning", "ColocationEvicting") in h.api.events
    assert h.registry.get_sample_value("colocation_evictions_total", {"result": "deferred"}) == 1.0
    assert h.registry.get_sample_value("colocation_evictions_total", {"result": "evicted"}) == 2.0

    # The agent comes back: two renewals in a row, and the resources return.
    h.renew("n1", "n2", "n3")
    h.advance(5)
    h.renew("n1", "n2", "n3")
    h.report("n1")
    await h.evaluate()
    assert h.offered("n1") == ("5500", "5905580032")
    assert ("n1", "Normal", "ColocationRecovered") in h.api.events
    assert h.condition("n1", "Evicting") == ("False", "NotDue")


async def test_when_every_node_falls_silent_nobody_is_evicted() -> None:
    h = Harness(["n1", "n2"])
    await h.state.pod_event("ADDED", pod("batch", "n1", "koord-batch"))
    await healthy_pass(h, "n1", "n2")
    h.advance(400)  # silent for longer than the grace period and the eviction timeout together
    await h.evaluate()
    assert h.api.evicted == []
    assert h.offered("n1") == (None, None) and h.offered("n2") == (None, None)
    assert h.condition("n1", "Evicting") == ("False", "FullDisruption")


def in_zone(h: Harness, zone: str, *names: str) -> None:
    for name in names:
        h.state.node_event(None, {**node(name), "metadata": {**node(name)["metadata"],
                                                               "labels": {"topology.kubernetes.io/zone": zone}}})


async def test_a_zone_that_falls_silent_whole_is_evicted_while_another_zone_is_healthy() -> None:
    h = Harness(["a1", "b1", "b2"])
    in_zone(h, "a", "a1")
    in_zone(h, "b", "b1", "b2")
    await h.state.pod_event("ADDED", pod("batch", "a1", "koord-batch"))
    await healthy_pass(h, "a1", "b1", "b2")
    for _ in range(35):  # zone a silent for the grace period and the eviction timeout; zone b renews
        h.renew("b1", "b2")
        h.advance(10)
    await h.evaluate()
    assert h.api.evicted == ["batch"]
    assert h.condition("a1", "Evicting") == ("True", "EvictingPods")
    assert h.registry.get_sample_value("colocation_zone_state", {"zone": "a", "state": "FullDisruption"}) == 1.0
    assert h.registry.get_sample_value("colocation_zone_state", {"zone": "b", "state": "Normal"}) == 1.0
    assert h.registry.get_sample_value("colocation_zone_unhealthy_nodes", {"zone": "a"}) == 1.0
    assert h.registry.get_sample_value("colocation_zone_eviction_rate", {"zone": "a"}) == 100.0


async def test_a_small_partially_disrupted_zone_evicts_nothing_while_other_zones_do() -> None:
    h = Harness(["a1", "a2", "a3", "a4", "b1", "c1", "c2"])
    in_zone(h, "a", "a1", "a2", "a3", "a4")
    in_zone(h, "b", "b1")
    in_zone(h, "c", "c1", "c2")
    for name in ("a1", "b1"):
        await h.state.pod_event("ADDED", pod(f"batch-{name}", name, "koord-batch"))
    await healthy_pass(h, "a1", "a2", "a3", "a4", "b1", "c1", "c2")
    for _ in range(35):  # a1-a3 (3 of 4 in zone a) and b1 (all of zone b) fall silent
        h.renew("a4", "c1", "c2")
        h.advance(10)
    await h.evaluate()
    assert h.api.evicted == ["batch-b1"]
    assert h.condition("a1", "Evicting") == ("False", "PartialDisruption")
    assert h.registry.get_sample_value("colocation_zone_eviction_rate", {"zone": "a"}) == 0.0


async def test_node_overrides_disable_colocation_on_one_node() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    resource = h.state.noderesources["n1"]
    h.state.noderesource_event("MODIFIED", {**resource, "spec": {"disableColocation": True}})
    h.renew("n1")
    await h.evaluate()
    assert h.offered("n1") == (None, None)
    assert h.condition("n1", "ColocationReady") == ("False", "ColocationDisabled")
    assert "batchCPU" not in h.resource_status("n1")


async def test_a_deleted_node_takes_its_noderesource_along() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    h.state.node_event("DELETED", node("n1"))
    assert h.state.deleted_nodes == {"n1"}
    await h.reconciler.remove("n1")
    assert ("delete noderesources", "n1") in h.api.calls
    assert "n1" not in h.tracker.nodes()


# ---- the cluster state and the configuration -------------------------------------------------------

async def test_pods_are_slimmed_and_follow_their_node() -> None:
    state = ClusterState()
    full = {**pod("p", "n1", "koord-batch"), "spec": {
        "nodeName": "n1", "volumes": [{"name": "v"}], "priority": 5500,
        "containers": [{"name": "c", "image": "x", "env": [{"name": "A"}], "resources": {"requests": {"cpu": "1"}}}]}}
    await state.pod_event("ADDED", state.pod_kept(full))  # as the Pod informer delivers it
    slim = state.pods_on("n1")[0]
    assert slim == slim_pod(full) == slim_pod(slim)  # keeping a kept pod changes nothing
    assert slim["spec"] == {"nodeName": "n1", "priority": 5500}
    assert slim[KEPT_REQUESTS] == (1000, 0) and slim["status"] == {"phase": "Running", "qosClass": "Burstable"}
    version = state.node_versions.get("n1")
    await state.pod_event("DELETED", full)
    assert state.pods_on("n1") == [] and state.node_versions.get("n1") != version


async def test_an_invalid_key_keeps_its_last_good_value_and_warns_once() -> None:
    posted: list[tuple[str, str, str]] = []

    async def post(ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        posted.append((type_, reason, message))

    config = ConfigSource("colocation-system", post)
    config_map = {"metadata": {"name": "colocation-config", "namespace": "colocation-system"},
                  "data": {"colocation-config": '{"clusterStrategy": {"cpuReclaimThresholdPercent": 50}}'}}
    assert await config.update(config_map)
    assert config.parsed.colocation.cluster.cpu_reclaim_threshold_percent == 50
    broken = {**config_map, "data": {"colocation-config": '{"clusterStrategy": {"cpuReclaimThresholdPercent": -1}}'}}
    await config.update(broken)
    assert config.parsed.colocation.cluster.cpu_reclaim_threshold_percent == 50  # the last good value
    assert [(t, r) for t, r, _ in posted] == [("Warning", "InvalidConfiguration")]
    assert posted[0][2].startswith("colocation-config: clusterStrategy.cpuReclaimThresholdPercent")
    assert not await config.update(copy.deepcopy(broken))  # the same data again: nothing new
    assert len(posted) == 1
    await config.update(config_map)
    assert posted[-1][:2] == ("Normal", "ConfigurationApplied")


# ---- when the NodeResource status is written ---------------------------------------------------------
# Every node reports every 10 s with usage that moves each time. The status is written only when
# what it says changes: the batch resources on the Node beyond resourceDiffThreshold, a condition,
# the observed generation. The timestamps (leaseRenewTime, metricUpdateTime, lastNodeUpdateTime)
# go along with such a change, never on their own, and the Node's periodic refresh is no change.

def status_writes(h: Harness) -> int:
    return sum(1 for verb, _ in h.api.calls if verb == "patch noderesource status")


async def steady_reports(h: Harness, count: int, *, system_cpu: int = 500,
                         renewing: tuple[str, ...] = ("n1",)) -> None:
    """`count` evaluations 10 s apart, n1 reporting before each a system cpu 10m..290m above `system_cpu`.

    From 500m, batch cpu moves between 5490m and 5210m: within the 10 % threshold of 5500m, and
    never back to 5500m, so the Node's own refresh comes with the status's (a Node refresh of
    values that differ is a change of what the status shows, and costs a write of its own).
    """
    for i in range(count):
        h.advance(10)
        h.renew(*renewing)
        h.report("n1", system_cpu=f"{system_cpu + 10 + (i * 70) % 280}m")
        await h.evaluate()


async def test_reports_moving_usage_within_the_threshold_never_write_the_status() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    assert status_writes(h) == 1
    h.api.calls.clear()

    await steady_reports(h, 30)  # 300 s: not yet older than updateTimeThresholdSeconds
    assert h.api.calls == []
    assert h.resource_status("n1")["batchCPU"] == 5500  # what the Node offers

    await steady_reports(h, 1)  # 310 s: the Node's drifted values are refreshed, by less than the threshold
    assert h.api.calls == [("patch node", "n1")]
    assert h.resource_status("n1")["batchCPU"] == 5500  # within 10 % of the Node's: the status stands
    assert abs(int(h.offered("n1")[0] or 0) - 5500) <= 550
    h.api.calls.clear()

    await steady_reports(h, 60)  # another refresh of the Node, still no status write
    assert h.api.calls == [("patch node", "n1")]


async def test_each_real_change_costs_exactly_one_status_write() -> None:
    h = Harness(["n1"])
    await healthy_pass(h, "n1")
    h.api.calls.clear()

    # The Node's batch resources change beyond the threshold: one write, then quiet again.
    h.advance(10)
    h.renew("n1")
    h.report("n1", system_cpu="2500m")
    await h.evaluate()
    assert h.api.calls == [("patch node", "n1"), ("patch noderesource status", "n1")]
    assert h.resource_status("n1")["batchCPU"] == 3500
    await steady_reports(h, 5, system_cpu=2500)
    assert status_writes(h) == 1

    # The NodeResource's spec changes (observedGeneration follows): one write.
    resource = h.state.noderesources["n1"]
    h.state.noderesource_event("MODIFIED", {**resource, "metadata": {**resource["metadata"], "generation": 2},
                                            "spec": {"cpuReclaimThresholdPercent": 60}})
    await steady_reports(h, 5, system_cpu=2500)
    assert status_writes(h) == 2
    assert h.resource_status("n1")["observedGeneration"] == 2


async def test_an_unhealthy_node_whose_figures_move_costs_one_status_write() -> None:
    h = Harness(["n1", "n2", "n3"])
    await healthy_pass(h, "n1", "n2", "n3")
    h.api.calls.clear()

    async def silent_n1(count: int, first: int) -> None:
        """n1's agent is silent; n2 and n3 report; a prod pod requesting 100m lands on n1 each time."""
        for i in range(first, first + count):
            h.advance(10)
            h.report("n2")
            h.report("n3")
            busy = pod(f"prod-{i}", "n1", "koord-prod")
            busy["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
            await h.state.pod_event("ADDED", busy)
            await h.evaluate()

    # Silent past the grace period: AgentReady turns False once.
    await silent_n1(5, 0)
    assert h.api.calls == [("patch node", "n1"), ("patch noderesource status", "n1")]
    assert h.condition("n1", "AgentReady") == ("False", "AgentSilent")
    assert "batchCPU" not in h.resource_status("n1")  # removed from the Node, not the formula's figure

    # The formula's figure moves with every pod while the condition stays: no more writes (short of
    # the eviction timeout).
    await silent_n1(20, 5)
    assert status_writes(h) == 1


# ---- the status says what the Node offers while the node is unhealthy (issue 17) ------------------

def shown(h: Harness, name: str) -> tuple[int | None, int | None]:
    status = h.resource_status(name)
    return status.get("batchCPU"), status.get("batchMemory")


def on_node(h: Harness, name: str) -> tuple[int | None, int | None]:
    cpu, memory = h.offered(name)
    return (int(cpu) if cpu is not None else None), (int(memory) if memory is not None else None)


async def n1_silent_past_the_grace_period(h: Harness) -> None:
    for _ in range(4):
        h.renew("n2", "n3")
        h.advance(10)
    h.advance(1)
    await h.evaluate()


async def test_an_unhealthy_nodes_status_shows_no_batch_resources_and_the_written_ones_once_it_recovers() -> None:
    h = Harness(["n1", "n2", "n3"])
    await healthy_pass(h, "n1", "n2", "n3")
    assert shown(h, "n1") == on_node(h, "n1") == (5500, 5905580032)

    await n1_silent_past_the_grace_period(h)
    assert on_node(h, "n1") == (None, None)
    assert shown(h, "n1") == (None, None)
    assert h.resource_status("n1")["healthy"] is False

    # Healthy again (two heartbeats in a row), with new figures: the status shows what was written.
    h.renew("n1", "n2", "n3")
    h.advance(5)
    h.renew("n1", "n2", "n3")
    h.report("n1", system_cpu="1500m")
    await h.evaluate()
    assert on_node(h, "n1") == (4500, 5905580032)
    assert shown(h, "n1") == (4500, 5905580032)
    assert h.condition("n1", "ColocationReady") == ("True", "BatchResourcesOffered")


async def test_a_late_watch_event_of_the_nodes_old_version_puts_no_removed_values_into_the_status() -> None:
    h = Harness(["n1", "n2", "n3"])
    await healthy_pass(h, "n1", "n2", "n3")
    before = copy.deepcopy(h.state.nodes["n1"])  # offering 5500m
    # The watch delivers the Node as it was before our removal while the evaluation posts its Events
    # (the order a busy watch may deliver them in): the removal's own event follows later.
    h.api.during_events.append(lambda: h.state.node_event("MODIFIED", copy.deepcopy(before)))

    await n1_silent_past_the_grace_period(h)
    assert ("patch node", "n1") in h.api.calls
    assert ("n1", "Warning", "ColocationAgentNotReady") in h.api.events
    assert shown(h, "n1") == (None, None)  # what the write left on the Node, not the stale copy
    assert h.condition("n1", "ColocationReady") == ("False", "NodeUnhealthy")


async def test_while_the_removal_fails_the_status_shows_what_the_node_still_offers_and_says_so() -> None:
    h = Harness(["n1", "n2", "n3"])
    await healthy_pass(h, "n1", "n2", "n3")
    h.api.node_writes_fail = True

    await n1_silent_past_the_grace_period(h)
    assert on_node(h, "n1") == (5500, 5905580032)
    assert shown(h, "n1") == (5500, 5905580032)
    status = h.resource_status("n1")
    assert status["healthy"] is False
    assert "not yet removed" in status["message"], status["message"]
    assert h.condition("n1", "ColocationReady") == ("False", "NodeUnhealthy")

    # The next evaluation removes them, and the status follows.
    h.api.node_writes_fail = False
    h.api.calls.clear()
    h.renew("n2", "n3")
    h.advance(5)
    await h.evaluate()
    assert h.api.calls == [("patch node", "n1"), ("patch noderesource status", "n1")]
    assert on_node(h, "n1") == shown(h, "n1") == (None, None)
    assert h.resource_status("n1")["message"].endswith("batch resources removed")


async def test_a_long_evaluation_lets_the_event_loop_read_in_between() -> None:
    # 1,000 nodes whose writes answer at once: started all together, their reconciliations would run
    # in one turn of the loop, and a report or a Lease renewal arriving meanwhile would wait for all.
    names = [f"n{index:04d}" for index in range(1000)]
    h = Harness(names)
    await healthy_pass(h, *names)
    turns = 0

    async def other_work() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    ticker = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    before = turns
    h.advance(5)
    await h.evaluate()
    ticker.cancel()
    assert turns - before >= 1000 // NODES_PER_TURN
    assert all(h.offered(name)[0] == "5500" for name in names)  # every node reconciled all the same
