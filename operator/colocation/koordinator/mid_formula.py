"""The Mid-tier resources a node offers: `calculate_mid_resources`, a pure function.

Mid pods (priority koord-mid) run on what prod pods requested but are predicted not to use, and
on a configurable share of what nobody requested; or, in "static" mode, on a fixed share of the
node's capacity. This is Koordinator's Mid-tier model (slo-controller, noderesource plugin
midresource: its default policy and its midReclaimMode "static"), restated in
docs/architecture.md ("Mid-tier resources"). The controller feeds it the same inputs as the batch
formula and writes both results to the Node together (colocation.controllers.nodewrite).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from colocation.apimachinery.pods import pod_requests as requests_of
from colocation.koordinator.amounts import Amount, total

# The batch formula's readings of a NodeMetric and of the reservation annotation: both formulas
# must read the same report the same way (what a time, a resource map, the system usage is).
from colocation.koordinator.batch_formula import (
    COUNTED_PHASES,
    RESERVATION_ANNOTATION,
    node_resources,
    reservation,
    resources_of,
    system_usage,
    usable_metric,
)
from colocation.koordinator.classes import PRIORITY_CLASSES, priority_of
from colocation.koordinator.slo_strategies import ColocationStrategy

MID_CPU = "kubernetes.io/mid-cpu"
MID_MEMORY = "kubernetes.io/mid-memory"


def calculate_mid_resources(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
                            node_metric: Mapping[str, Any] | None,
                            *, strategy: Mapping[str, Any] | ColocationStrategy, now: float,
                            received_at: float | None = None) -> dict[str, int] | None:
    """The Mid-tier resources of a node, or None when they must be removed from it.

    Arguments are those of `calculate_batch_resources` (plain JSON as the API returns it), and
    None is returned in the same cases: colocation disabled (`enable: false`), no metric, a
    metric without status.updateTime or status.nodeMetric, or one older than degradeTimeMinutes
    (judged by `received_at` when given, else by updateTime; exactly at the limit it counts).

    Returns {"kubernetes.io/mid-cpu": milli-cores, "kubernetes.io/mid-memory": bytes}, each

        min(min(prodReclaimable, nodeUnused) floored at 0 + unallocated * midUnallocatedPercent / 100,
            capacity * mid{CPU,Memory}ThresholdPercent / 100)

    where, per resource (cpu in milli-cores, memory in bytes):
    - prodReclaimable is status.prodReclaimableMetric.resource of the NodeMetric: what the
      agent's peak predictor says prod pods requested but will not use. Absent (an agent that
      does not predict, or not yet), it is 0: the node is not degraded, only the unallocated
      share remains.
    - nodeUnused = capacity - status.nodeMetric.nodeUsage, not floored. When nodeUsage lacks
      cpu or memory, nodeUnused is 0 for both (no usage known: nothing predicted is trusted).
    - unallocated = max(capacity - reserved - prodRequests, 0), where reserved is the largest of
      capacity - allocatable (the kubelet's reservation), the reservation annotation
      `node.koordinator.sh/reservation` (read as the batch formula reads it) and systemUsed;
      systemUsed = systemUsage (derived as the batch formula derives it when absent) + the usage
      of host applications of a priority above mid (prod, or, as in the batch formula, none
      stated and not qos BE: our agent states no priority, so they count, on the safe side);
      prodRequests = Σ requests of prod pods (priority koord-prod, by
      colocation.koordinator.classes) in phase Running or Pending (none: Pending).
    - The two products are computed as Koordinator computes them, in binary floating point and
      truncated: int(float(value) * (percent / 100)). The result is exact for any node a
      float holds exactly (below 2^53 bytes); above, it rounds as Koordinator's does.
    - The threshold caps the node's capacity, not its allocatable (Koordinator's code; its
      comments say allocatable).
    Defaults: midCPUThresholdPercent 100, midMemoryThresholdPercent 100, midUnallocatedPercent 0.

    With `midReclaimMode: static` the resources are instead fixed shares of capacity, whatever
    prod pods request or use: per resource

        min(capacity * midStatic{CPU,Memory}ReservedPercent / 100, capacity * mid{CPU,Memory}ThresholdPercent / 100)

    (both products as above; defaults 0, so static mode offers nothing until a share is set). As
    in Koordinator, they are still removed in the cases above: a node without a fresh metric
    gets none.
    """
    usable = usable_metric(node_metric, strategy, now=now, received_at=received_at)
    if usable is None:
        return None
    colocation, status, metric = usable

    capacity, allocatable, annotations = node_resources(node)
    if colocation.mid_reclaim_mode == "static":
        return {MID_CPU: min(_share(capacity.cpu, colocation.mid_static_cpu_reserved_percent),
                             _share(capacity.cpu, colocation.mid_cpu_threshold_percent)),
                MID_MEMORY: min(_share(capacity.memory, colocation.mid_static_memory_reserved_percent),
                                _share(capacity.memory, colocation.mid_memory_threshold_percent))}
    host_applications = status.get("hostApplicationMetric") or []
    above_mid_apps = total(Amount.of(resources_of(app.get("usage"))) for app in host_applications
                           if isinstance(app, Mapping) and _above_mid(app.get("priority"), app.get("qos")))
    system_used = system_usage(metric, status.get("podsMetric") or [], host_applications) + above_mid_apps
    reserved = (capacity - allocatable).floored().max(reservation(annotations.get(RESERVATION_ANNOTATION)))
    reserved = reserved.max(system_used)
    unallocated = (capacity - reserved - _prod_requests(pods)).floored()

    reclaimable = Amount.of(resources_of((status.get("prodReclaimableMetric") or {}).get("resource")))
    unused = _node_unused(capacity, resources_of(metric.get("nodeUsage")))
    cpu = _mid_amount(reclaimable.cpu, unused.cpu, unallocated.cpu,
                      unallocated_percent=colocation.mid_unallocated_percent, capacity=capacity.cpu,
                      threshold_percent=colocation.mid_cpu_threshold_percent)
    memory = _mid_amount(reclaimable.memory, unused.memory, unallocated.memory,
                         unallocated_percent=colocation.mid_unallocated_percent, capacity=capacity.memory,
                         threshold_percent=colocation.mid_memory_threshold_percent)
    return {MID_CPU: cpu, MID_MEMORY: memory}


def _mid_amount(reclaimable: int, unused: int, unallocated: int, *, unallocated_percent: int, capacity: int,
          threshold_percent: int) -> int:
    offered = max(min(reclaimable, unused), 0) + _share(unallocated, unallocated_percent)
    return min(offered, _share(capacity, threshold_percent))


def _share(value: int, percent: int) -> int:
    # Koordinator's float64 arithmetic, bit for bit: the ratio first, then the product, truncated.
    return int(float(value) * (percent / 100))


def _node_unused(capacity: Amount, node_usage: Mapping[str, Any]) -> Amount:
    if "cpu" not in node_usage or "memory" not in node_usage:
        return Amount()
    return capacity - Amount.of(node_usage)


def _above_mid(priority: object, qos: object) -> bool:
    """Whether a host application, as the report states it, has a priority above mid."""
    if priority in PRIORITY_CLASSES:
        return priority == "koord-prod"
    return qos != "BE"


def _prod_requests(pods: Iterable[Mapping[str, Any]]) -> Amount:
    cpu = memory = 0  # plain ints: this runs over every pod of every node whose inputs changed
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in COUNTED_PHASES and priority_of(pod) == "koord-prod":
            pod_cpu, pod_memory = requests_of(pod)
            cpu += pod_cpu
            memory += pod_memory
    return Amount(cpu, memory)
