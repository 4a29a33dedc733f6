"""The batch resources a node offers: `calculate_batch_resources`, a pure function.

It is Koordinator's batch-resource model (slo-controller, noderesource plugin batchresource),
restated in docs/architecture.md ("Koordinator's model", the batch formula). The controller feeds
it the Node, its pods and the in-memory NodeMetric, and writes the result to the Node. Users
import it as `colocation.noderesource.calculate_batch_resources`, its public name.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from colocation.apimachinery.pods import pod_requests as requests_of
from colocation.koordinator.amounts import Amount, cpu_and_memory, total
from colocation.koordinator.classes import LOW_PRIORITY_CLASSES, is_high_priority, kept_classes
from colocation.koordinator.slo_strategies import ColocationStrategy

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
RESERVATION_ANNOTATION = "node.koordinator.sh/reservation"

COUNTED_PHASES = frozenset({"Running", "Pending", None, ""})


def calculate_batch_resources(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
                              node_metric: Mapping[str, Any] | None,
                              *, strategy: Mapping[str, Any] | ColocationStrategy, now: float,
                              received_at: float | None = None) -> dict[str, int] | None:
    """The batch resources of a node, or None when they must be removed from it.

    Arguments, all plain JSON as the API returns it:
      node         the Node (status.capacity, status.allocatable, metadata.annotations).
      pods         the pods bound to the node, in any phase.
      node_metric  the node's NodeMetric (metrics.colocation.dev), or None if there is none.
      strategy     colocation-config fields (camelCase, e.g. {"cpuReclaimThresholdPercent": 50});
                   missing fields take the defaults; or a ColocationStrategy. An invalid value
                   raises pydantic.ValidationError (a ValueError).
      now          the current wall-clock time in seconds since the epoch (time.time()).
      received_at  when the caller received the metric, on the same clock as `now`; its age is
                   judged by it. Without it, by status.updateTime, as Koordinator does.

    Returns {"kubernetes.io/batch-cpu": milli-cores, "kubernetes.io/batch-memory": bytes}, or
    None when colocation is disabled (`enable: false`), there is no usable metric (None, no
    status.updateTime or status.nodeMetric), or the metric is older than degradeTimeMinutes
    (now > received_at, else updateTime, + degradeTimeMinutes; exactly at the limit it still
    counts).

    Why `received_at`: updateTime is the agent's wall clock. Compared with ours, an agent whose
    clock lags by more than degradeTimeMinutes would never get batch resources however often it
    reports, and one set far ahead would never age. The operator passes the time its store took
    the report in; the value of updateTime then only has to be an RFC 3339 time.

    The formula, per resource (cpu in milli-cores, memory in bytes), every result floored at 0:

        safetyMargin  = capacity * (100 - reclaimThresholdPercent) / 100, rounded up
                        (negative above 100 %: batch pods may be offered more than capacity)
        nodeReserved  = max(capacity - allocatable, reservation annotation)
        systemUsed    = max(systemUsage + usage of HP host applications, nodeReserved)
        byUsage       = capacity - safetyMargin - systemUsed - HPUsed
        byRequest     = capacity - safetyMargin - nodeReserved - HPRequest
        byMaxUsageReq = capacity - safetyMargin - systemUsed - HPMaxUsageRequest

    cpu is byUsage (cpuCalculatePolicy `usage`) or byMaxUsageReq (`maxUsageRequest`); memory is
    byUsage, byRequest or byMaxUsageReq (memoryCalculatePolicy `usage`, `request`,
    `maxUsageRequest`). batchCPUThresholdPercent / batchMemoryThresholdPercent, when set, cap
    the result at capacity * percent / 100 (rounded down).

    Decisions, checked against Koordinator where it has one:
    - capacity, allocatable: node.status cpu and memory. A missing value is 0.
    - The reservation annotation `node.koordinator.sh/reservation` is
      {"resources": {"cpu": "2", "memory": "4Gi"}, "reservedCPUs": "0-3"}; reservedCPUs (cpuset
      list syntax) replaces the cpu quantity by its number of CPUs (1000m each). An annotation
      that does not parse (JSON, quantities or cpuset) is ignored as a whole, as Koordinator does.
    - Usages are the NodeMetric's latest figures: status.nodeMetric.systemUsage and each
      status.podsMetric[].podUsage (already averaged over the agent's aggregation window), not
      aggregatedNodeUsages, as Koordinator does. When systemUsage is absent it is derived as
      nodeUsage - Σ podUsage - Σ host application usage (floored at 0), which is how the agent
      computes it.
    - HP (high priority) pods are those neither batch nor free, by colocation.koordinator.classes
      (label koordinator.sh/priority-class, else spec.priority band, else QoS class; BE is
      batch). Only HP pods count in HPUsed, HPRequest and HPMaxUsageRequest.
    - Only pods in phase Running or Pending count (a pod without a phase is Pending: the API
      server sets it on creation). A pod in any other phase (Succeeded, Failed, Unknown) counts
      no request, and its metric, if the report has one, is treated like that of a pod that is
      gone (below), as Koordinator does: the report may have measured it still running, and
      its memory may not be freed yet.
    - HPUsed: an HP pod with a metric counts its usage, except that an LSE pod (label
      koordinator.sh/qosClass=LSE) counts its cpu request instead of its cpu usage (its cpus
      are exclusive, so what it leaves idle cannot be reclaimed); an HP pod without a metric
      (new since the last report) counts its request.
    - HPMaxUsageRequest: Σ max(request, usage) per HP pod; a pod without a metric counts its
      request (Koordinator's node-level sum skips such pods; counting them is the safe side,
      and what its NUMA-level sum does).
    - Metrics of pods that are not in `pods` (deleted since the report, or not yet in the
      caller's cache) or not Running or Pending count their usage in HPUsed and
      HPMaxUsageRequest unless the metric's priority is koord-batch or koord-free (its qos is
      not read, as in Koordinator: the agent states every pod's priority); they have no request.
    - Host applications (status.hostApplicationMetric) count in systemUsed when HP by
      colocation.koordinator.classes.is_high_priority: a batch or free priority, or else qos BE,
      makes them low priority; one that states neither counts. (Koordinator counts only prod
      and mid ones; our agent reports host applications without a priority, so that they
      count, on the safe side.)
    - Pod requests: containers and sidecars summed, regular init containers as a peak, plus
      overhead (Kubernetes' PodRequests); a container limit without a request counts as the
      request (API defaulting).
    """
    usable = usable_metric(node_metric, strategy, now=now, received_at=received_at)
    if usable is None:
        return None
    colocation, status, metric = usable

    capacity, allocatable, annotations = node_resources(node)
    node_reserved = (capacity - allocatable).floored().max(reservation(annotations.get(RESERVATION_ANNOTATION)))

    hp = _high_priority_pods(pods, status.get("podsMetric") or [])
    host_applications = status.get("hostApplicationMetric") or []
    host_hp_used = total(Amount.of(resources_of(app.get("usage"))) for app in host_applications
                         if is_high_priority(app.get("priority"), app.get("qos")))
    measured_system = system_usage(metric, status.get("podsMetric") or [], host_applications)
    system_used = (measured_system + host_hp_used).max(node_reserved)

    margin = Amount(_ceil_percent(capacity.cpu, 100 - colocation.cpu_reclaim_threshold_percent),
                    _ceil_percent(capacity.memory, 100 - colocation.memory_reclaim_threshold_percent))
    by_usage = (capacity - margin - system_used - hp.used).floored()
    by_request = (capacity - margin - node_reserved - hp.request).floored()
    by_max_usage_request = (capacity - margin - system_used - hp.max_usage_request).floored()

    cpu = (by_max_usage_request if colocation.cpu_calculate_policy == "maxUsageRequest" else by_usage).cpu
    memory = {"usage": by_usage, "request": by_request,
              "maxUsageRequest": by_max_usage_request}[colocation.memory_calculate_policy].memory
    if colocation.batch_cpu_threshold_percent is not None:
        cpu = min(cpu, capacity.cpu * colocation.batch_cpu_threshold_percent // 100)
    if colocation.batch_memory_threshold_percent is not None:
        memory = min(memory, capacity.memory * colocation.batch_memory_threshold_percent // 100)
    return {BATCH_CPU: max(cpu, 0), BATCH_MEMORY: max(memory, 0)}


class _HighPriority(NamedTuple):
    used: Amount
    request: Amount
    max_usage_request: Amount


def _high_priority_pods(pods: Iterable[Mapping[str, Any]], pod_metrics: list[Any]) -> _HighPriority:
    # The hottest loop of the leader (every pod of every node whose inputs changed): sums in plain
    # ints, the pod's classes and requests as a kept pod carries them, no Amount per pod.
    metrics = {(m.get("namespace"), m.get("name")): m for m in pod_metrics
               if type(m) is dict or isinstance(m, Mapping)}
    used_cpu = used_memory = request_cpu = request_memory = peak_cpu = peak_memory = 0
    for pod in pods:
        if (pod.get("status") or {}).get("phase") not in COUNTED_PHASES:
            continue  # its metric, if any, stays in `metrics`, as if the pod were gone
        meta = pod.get("metadata") or {}
        metric = metrics.pop((meta.get("namespace"), meta.get("name")), None)
        priority, qos = kept_classes(pod)  # a kept pod carries its classes and requests
        if priority in LOW_PRIORITY_CLASSES:
            continue
        cpu, memory = requests_of(pod)
        request_cpu += cpu
        request_memory += memory
        if metric is None:
            used_cpu += cpu
            used_memory += memory
            peak_cpu += cpu
            peak_memory += memory
            continue
        usage_cpu, usage_memory = cpu_and_memory(resources_of(metric.get("podUsage")))
        used_cpu += cpu if qos == "LSE" else usage_cpu
        used_memory += usage_memory
        peak_cpu += cpu if cpu > usage_cpu else usage_cpu
        peak_memory += memory if memory > usage_memory else usage_memory
    for metric in metrics.values():  # pods gone, not yet known, or no longer running
        if metric.get("priority") not in LOW_PRIORITY_CLASSES:
            usage_cpu, usage_memory = cpu_and_memory(resources_of(metric.get("podUsage")))
            used_cpu += usage_cpu
            used_memory += usage_memory
            peak_cpu += usage_cpu
            peak_memory += usage_memory
    return _HighPriority(Amount(used_cpu, used_memory), Amount(request_cpu, request_memory),
                         Amount(peak_cpu, peak_memory))


def node_resources(node: Mapping[str, Any]) -> tuple[Amount, Amount, Mapping[str, Any]]:
    """(capacity, allocatable, annotations) of a Node, as both formulas read them."""
    node_status = node.get("status") or {}
    return (Amount.of(node_status.get("capacity")), Amount.of(node_status.get("allocatable")),
            (node.get("metadata") or {}).get("annotations") or {})


def usable_metric(node_metric: Mapping[str, Any] | None, strategy: Mapping[str, Any] | ColocationStrategy,
                  *, now: float, received_at: float | None) -> tuple[ColocationStrategy, Mapping[str, Any],
                                                                  Mapping[str, Any]] | None:
    """(the strategy, the report's status, its nodeMetric), or None when the formulas offer
    nothing: colocation disabled, no metric, no updateTime or nodeMetric, or older than
    degradeTimeMinutes (by `received_at` when given, else updateTime)."""
    colocation = strategy if isinstance(strategy, ColocationStrategy) else ColocationStrategy.model_validate(strategy)
    if not colocation.enable or node_metric is None:
        return None
    status = node_metric.get("status") or {}
    updated = metric_time(status.get("updateTime"))
    metric = status.get("nodeMetric")
    if updated is None or not isinstance(metric, Mapping):
        return None
    if now > (updated if received_at is None else received_at) + colocation.degrade_time_minutes * 60:
        return None
    return colocation, status, metric


def system_usage(metric: Mapping[str, Any], pod_metrics: list[Any], host_applications: list[Any]) -> Amount:
    if metric.get("systemUsage") is not None:
        return Amount.of(resources_of(metric.get("systemUsage")))
    node_usage = Amount.of(resources_of(metric.get("nodeUsage")))
    pods_usage = total(Amount.of(resources_of(m.get("podUsage"))) for m in pod_metrics if isinstance(m, Mapping))
    apps_usage = total(Amount.of(resources_of(a.get("usage"))) for a in host_applications)
    return (node_usage - pods_usage - apps_usage).floored()


def resources_of(resource_map: Any) -> Mapping[str, Any]:
    """The ResourceList of a NodeMetric ResourceMap ({"resources": {...}})."""
    if type(resource_map) is not dict and not isinstance(resource_map, Mapping):  # dict first: cheaper
        return {}
    return resource_map.get("resources") or {}


def _ceil_percent(value: int, percent: int) -> int:
    return -(-value * percent // 100)


def metric_time(value: Any) -> float | None:
    """An RFC 3339 time (metav1.Time or MicroTime) as seconds since the epoch."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


# --------------------------------------------------------------------------------------------
# The reservation annotation.

_CPU_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")


def reservation(annotation: str | None) -> Amount:
    """What `node.koordinator.sh/reservation` reserves; nothing when absent or malformed."""
    if not annotation:
        return Amount()
    try:
        document = json.loads(annotation)
        if not isinstance(document, Mapping):
            return Amount()
        resources = document.get("resources") or {}
        if not isinstance(resources, Mapping):
            return Amount()
        reserved = Amount.of(resources)
        cpus = document.get("reservedCPUs")
        if cpus:
            if not isinstance(cpus, str):
                return Amount()
            reserved = Amount(1000 * count_cpus(cpus), reserved.memory)
    except ValueError:
        return Amount()
    return reserved.floored()


def count_cpus(cpuset: str) -> int:
    """The number of CPUs in a cpuset list ("0-3,8,10-11" → 7); raises ValueError if malformed."""
    cpus: set[int] = set()
    for part in cpuset.split(","):
        match = _CPU_RANGE.match(part.strip())
        if match is None:
            raise ValueError(f"invalid cpuset {cpuset!r}: {part!r} is not a CPU or a range")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"invalid cpuset {cpuset!r}: range {part!r} is reversed")
        if last - first > 1 << 16:
            raise ValueError(f"invalid cpuset {cpuset!r}: range {part!r} is too large")
        cpus.update(range(first, last + 1))
    return len(cpus)

