"""CPU suppress, the arithmetic: how much cpu best-effort pods may use right now. Pure.

As koordlet: best-effort (BE) pods may use what keeps the node under
`cpuSuppressThresholdPercent` of its capacity, after the other pods' and the system's usage
(`be_budget_millis`; the system usage is at least what the node reserves). The budget becomes
the best-effort tier's CFS quota (`target_cfs_quota`) or its number of cpus
(`target_cpuset_size`), with koordlet's floors and damping: it shrinks at once and grows a
little per round. `is_best_effort` says which pods count as BE.

The formula, the floors and why: docs/agent.md#cpu-suppress
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from colocation.agent.cgroups import qos_tier_of_path
from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.apimachinery.quantity import byte_value, parse_quantity
from colocation.koordinator.amounts import Amount
from colocation.koordinator.batch_formula import BATCH_CPU, RESERVATION_ANNOTATION, reservation
from colocation.koordinator.slo_strategies import ResourceThresholdStrategy

SuppressPolicyName = Literal["cpuset", "cfsQuota"]

MIN_CFS_QUOTA_US = 2000  # koordlet's beMinQuota
MIN_CPUSET_CPUS = 2  # koordlet's beMinCPUSetCores
UNLIMITED_QUOTA = -1
_BYPASS_FRACTION = 0.01  # of the node, in quota units: smaller changes are not written
_MAX_INCREASE_FRACTION = 0.1  # of the node per round: scale up slowly

_DEFAULTS = ResourceThresholdStrategy.model_validate({})


@dataclass(frozen=True, kw_only=True)
class SuppressPolicy:
    """The CPU suppress part of a NodeSLO's spec.resourceUsedThresholdWithBE."""

    enabled: bool = False
    threshold_percent: int = _DEFAULTS.cpu_suppress_threshold_percent
    min_percent: int | None = _DEFAULTS.cpu_suppress_min_percent
    policy: SuppressPolicyName = _DEFAULTS.cpu_suppress_policy


@dataclass
class BestEffortLimit:
    """What CPU suppress holds best-effort pods to, for the strategies that read it (batch cgroups,
    cpu eviction); one per node, nothing held while CPU suppress is off."""

    by_tier_quota: bool = False  # enabled with cfsQuota: the tier's quota bounds BE pods, theirs give way
    millicores: int | None = None  # what BE pods may use together now; None: not suppressing


def suppress_policy(nodeslo: Mapping[str, Any] | None) -> SuppressPolicy:
    """The policy of a NodeSLO; absent or unusable fields keep Koordinator's defaults, and a
    NodeSLO without the block (or none at all) disables suppression."""
    spec = ((nodeslo or {}).get("spec") or {}).get("resourceUsedThresholdWithBE") or {}
    defaults = SuppressPolicy()
    threshold = _percent(spec.get("cpuSuppressThresholdPercent"))
    policy = spec.get("cpuSuppressPolicy")
    return SuppressPolicy(
        enabled=spec.get("enable") is True,
        threshold_percent=defaults.threshold_percent if threshold is None else threshold,
        min_percent=_percent(spec.get("cpuSuppressMinPercent")),
        policy=policy if policy in ("cpuset", "cfsQuota") else defaults.policy)


def _percent(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        return None
    return value


@dataclass(frozen=True, kw_only=True)
class CpuUsage:
    """The node's cpu in one sample, split as the formula needs it (milli-cpus)."""

    capacity: int
    node: int
    all_pods: int
    non_be_pods: int
    host_applications: int  # all of them: the system usage leaves them out
    reserved: int = 0  # what the node reserves for the system: a floor under the system usage
    be_host_applications: int = 0  # those of QoS BE in the best-effort tier: BE usage, not a cost to BE

    @property
    def system(self) -> int:
        return max(self.node - self.all_pods - self.host_applications, 0, self.reserved)


def is_best_effort(uid: str, cgroup_path: str, pods: Mapping[str, PodInfo]) -> bool:
    info = pods.get(uid)
    if info is None:
        return qos_tier_of_path(cgroup_path) == "besteffort"
    return info.qos == "BE" or info.kube_qos == "BestEffort"


def node_reserved_cpu(node: Mapping[str, Any] | None) -> int:
    """Milli-cpus a Node reserves: capacity - allocatable, or its reservation annotation if more."""
    status = (node or {}).get("status") or {}
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    try:
        kubelet = (Amount.of(status.get("capacity")) - Amount.of(status.get("allocatable"))).floored()
    except (ValueError, TypeError):  # a quantity that does not parse: no kubelet reservation known
        kubelet = Amount()
    return kubelet.max(reservation(annotations.get(RESERVATION_ANNOTATION))).cpu


def node_memory_capacity(node: Mapping[str, Any] | None) -> int | None:
    """A Node's status.capacity.memory in bytes (None when absent or not a quantity)."""
    memory = (((node or {}).get("status") or {}).get("capacity") or {}).get("memory")
    try:
        capacity = byte_value(memory) if memory is not None else 0
    except (ValueError, TypeError):
        return None
    return capacity if capacity > 0 else None


def node_batch_cpu_allocatable(node: Mapping[str, Any] | None) -> int | None:
    """A Node's allocatable kubernetes.io/batch-cpu (Koordinator's unit, milli-cpus; None when absent or bad)."""
    value = (((node or {}).get("status") or {}).get("allocatable") or {}).get(BATCH_CPU)
    try:
        return max(int(parse_quantity(value)), 0) if value is not None else None
    except (ValueError, TypeError):
        return None


def cpu_usage(sample: Sample, pods: Mapping[str, PodInfo], cpus: int, *, reserved: int = 0) -> CpuUsage:
    """Split one sample's usage into BE and the rest, by the pods the agent knows (UID → PodInfo)."""
    all_pods = sum(pod.cpu_millis for pod in sample.pods)
    non_be = sum(pod.cpu_millis for pod in sample.pods if not is_best_effort(pod.uid, pod.cgroup_path, pods))
    apps = sum(app.cpu_millis for app in sample.host_applications)
    be_apps = sum(app.cpu_millis for app in sample.host_applications
                  if app.qos == "BE" and qos_tier_of_path(app.cgroup_path) == "besteffort")
    return CpuUsage(capacity=cpus * 1000, node=sample.node_cpu_millis, all_pods=all_pods, non_be_pods=non_be,
                    host_applications=apps, reserved=reserved, be_host_applications=be_apps)


def be_budget_millis(usage: CpuUsage, policy: SuppressPolicy) -> int:
    """What BE pods together may use (milli-cpus; may be negative before the policy's floors)."""
    non_be_apps = usage.host_applications - usage.be_host_applications
    budget = usage.capacity * policy.threshold_percent // 100 - usage.non_be_pods - non_be_apps - usage.system
    if policy.min_percent is not None:
        budget = max(budget, usage.capacity * policy.min_percent // 100)
    return budget


def target_cfs_quota(budget_millis: int, current_quota: int, capacity_cores: int, *, period_us: int) -> int | None:
    """The quota (µs per period) to write on the best-effort parent, or None to leave `current_quota`."""
    target = max(budget_millis * period_us // 1000, MIN_CFS_QUOTA_US)
    if target == current_quota:
        return None
    if abs(target - current_quota) < capacity_cores * period_us * _BYPASS_FRACTION and target != MIN_CFS_QUOTA_US:
        return None
    max_increase = int(capacity_cores * period_us * _MAX_INCREASE_FRACTION)
    if current_quota != UNLIMITED_QUOTA and target - current_quota > max_increase:
        target = current_quota + max_increase
    return target


def target_cpuset_size(budget_millis: int, current_size: int, node_cpus: int, *, available: int) -> int:
    """How many cpus the best-effort cpusets keep (never more than are `available` to them)."""
    size = max(math.ceil(budget_millis / 1000), MIN_CPUSET_CPUS)
    max_increase = math.ceil(node_cpus * _MAX_INCREASE_FRACTION)
    if size - current_size > max_increase:
        size = current_size + max_increase
    return min(size, available)


def quota_millis(quota_us: int, period_us: int) -> int:
    """A CFS quota in milli-cpus; -1 (unlimited) stays -1."""
    return UNLIMITED_QUOTA if quota_us < 0 or period_us <= 0 else quota_us * 1000 // period_us
