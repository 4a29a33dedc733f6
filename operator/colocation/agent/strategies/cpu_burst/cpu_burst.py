"""CPU burst for latency-sensitive pods (NodeSLO cpuBurstStrategy), the arithmetic. Pure.

As koordlet's CPUBurst strategy, for pods whose class (`qos_of`) is neither LSR, LSE nor BE, and
only their containers with a cpu limit. cfs burst gives each such container a burst from its
limit, capped at its quota. Quota burst grows a throttled container's CFS quota and shrinks it
while the node's share pool is overloaded, never below the quota of its limit nor above
`cfsQuotaBurstPercent` of it. The NodeSLO's `policy` picks which (`none`, the default, writes
nothing); the pod's annotation `koordinator.sh/cpuBurst` overrides the node's fields. `plan_pod`
says what to write.

The rules and koordlet's numbers: docs/agent.md#cpu-burst
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal

from colocation.agent.strategies.batch_cgroups.batch_cgroups import (
    UNLIMITED,
    PodResources,
    cfs_quota_us,
    describe_pod,
    kubelet_settings,
)
from colocation.apimachinery.quantity import cpu_millis
from colocation.koordinator.slo_strategies import CPUBurstStrategy

BurstPolicyName = Literal["none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"]
Operation = Literal["scale-up", "scale-down", "remain", "reset"]
NodeState = Literal["overload", "cooling", "idle", "unknown"]

POD_BURST_ANNOTATION = "koordinator.sh/cpuBurst"
BURST_POLICIES: tuple[BurstPolicyName, ...] = ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto")
NOT_BURSTABLE = ("LSR", "LSE", "BE")
BASE_PERIOD_US = 100_000  # cfs burst is counted on the kernel's default period, whatever the cgroup's
SCALE_UP, SCALE_DOWN = 1.2, 0.8
COOLING_RATIO = 0.9  # of the share pool threshold: above it, no quota grows
SPEND_FROM_PERCENT, SAVE_BELOW_PERCENT = 100, 60  # the token bucket's usage bounds (% of the limit)
_DEFAULTS = CPUBurstStrategy()


@dataclass(frozen=True, kw_only=True)
class BurstConfig:
    """What one pod bursts by: the node's configuration, or its own annotation over it."""

    policy: BurstPolicyName = _DEFAULTS.policy
    cpu_burst_percent: int = _DEFAULTS.cpu_burst_percent
    cfs_quota_burst_percent: int = _DEFAULTS.cfs_quota_burst_percent
    cfs_quota_burst_period_seconds: int = _DEFAULTS.cfs_quota_burst_period_seconds

    @property
    def cfs_burst(self) -> bool:
        return self.policy in ("auto", "cpuBurstOnly")

    @property
    def quota_burst(self) -> bool:
        return self.policy in ("auto", "cfsQuotaBurstOnly")


@dataclass(frozen=True)
class BurstStrategy:
    """The node's cpuBurstStrategy."""

    config: BurstConfig = BurstConfig()
    share_pool_threshold_percent: int = _DEFAULTS.share_pool_threshold_percent


# ---- reading the NodeSLO and the pods ------------------------------------------------------------

def _int_within(value: Any, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _merged(config: BurstConfig, fields: Mapping[str, Any]) -> BurstConfig:
    """`config` with each valid field of `fields` (camelCase, NodeSLO's bounds) over it."""
    policy = fields.get("policy")
    update: dict[str, Any] = {"policy": policy} if policy in BURST_POLICIES else {}
    for key, attribute, low in (("cpuBurstPercent", "cpu_burst_percent", 1),
                                ("cfsQuotaBurstPercent", "cfs_quota_burst_percent", 100),
                                ("cfsQuotaBurstPeriodSeconds", "cfs_quota_burst_period_seconds", -1)):
        value = _int_within(fields.get(key), low, 10000 if key == "cpuBurstPercent" else 2**63 - 1)
        if value is not None:
            update[attribute] = value
    return replace(config, **update)


def burst_strategy(nodeslo: Mapping[str, Any] | None) -> BurstStrategy:
    """The strategy of a NodeSLO; absent or unusable fields keep Koordinator's defaults (policy none)."""
    spec = ((nodeslo or {}).get("spec") or {}).get("cpuBurstStrategy")
    if not isinstance(spec, Mapping):
        return BurstStrategy()
    threshold = _int_within(spec.get("sharePoolThresholdPercent"), 0, 100)
    return BurstStrategy(_merged(BurstConfig(), spec), _DEFAULTS.share_pool_threshold_percent
                         if threshold is None else threshold)


@dataclass(frozen=True)
class BurstPod:
    resources: PodResources
    annotation: Mapping[str, Any] | None = None  # the pod's own configuration, when it has a valid one
    overhead_millis: int = 0  # spec.overhead's cpu, which the kubelet adds to the pod's quota

    def config(self, node: BurstConfig) -> BurstConfig:
        return node if self.annotation is None else _merged(node, self.annotation)

    def kubelet_quota_us(self, period_us: int) -> int:
        """The pod cgroup's quota as the kubelet writes it: its containers' limits and its overhead
        (-1: none, as soon as one container has no limit)."""
        limit = self._kubelet_limit_millis
        return cfs_quota_us(limit + self.overhead_millis if limit > 0 else limit, period_us)

    @cached_property
    def _kubelet_limit_millis(self) -> int:
        # Asked for every pod every round, of a pod that changes only when the watch sees a new one.
        return kubelet_settings(self.resources).pod.cpu_limit_millis


def burst_pod(pod: Mapping[str, Any]) -> BurstPod | None:
    """The pod as CPU burst sees it; None when it never bursts (its class, or no CPU limit)."""
    resources = describe_pod(pod)
    if resources.qos in NOT_BURSTABLE or not any((c.cpu_limit or 0) > 0 for c in resources.containers if not c.init):
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        own = json.loads(annotations[POD_BURST_ANNOTATION]) if POD_BURST_ANNOTATION in annotations else None
    except (ValueError, TypeError):
        own = None  # koordlet uses the node's configuration for a pod whose annotation does not parse
    try:
        overhead = cpu_millis(((pod.get("spec") or {}).get("overhead") or {}).get("cpu") or 0)
    except (ValueError, TypeError, AttributeError):
        overhead = 0  # the API server would not have taken it
    return BurstPod(resources, own if isinstance(own, Mapping) else None, max(overhead, 0))


# ---- the node's share pool ----------------------------------------------------------------------

@dataclass(frozen=True)
class PoolPod:
    qos: str
    cpu_request_millis: int
    cpu_usage_millis: int | None  # None: not measured


def share_pool_state(threshold_percent: int, capacity_millis: int, node_usage_millis: int | None,
                     *, pods: Iterable[PoolPod]) -> NodeState:
    if node_usage_millis is None:
        return "unknown"
    total, used = float(capacity_millis), float(node_usage_millis)
    for pod in pods:
        if pod.qos in ("LSE", "LSR"):
            total -= pod.cpu_request_millis
        if pod.qos in NOT_BURSTABLE and pod.cpu_usage_millis is not None:
            used -= pod.cpu_usage_millis
    ratio = used / total if total > 0 else 1.0
    threshold = threshold_percent / 100
    if ratio >= threshold:
        return "overload"
    return "cooling" if ratio >= threshold * COOLING_RATIO else "idle"


# ---- the token bucket of cfsQuotaBurstPeriodSeconds -------------------------------------------------

@dataclass(kw_only=True)
class BurstLimiter:
    """How long a container may still run above its limit (a state machine on an injected clock)."""

    period_seconds: int
    percent: int
    tokens: int
    updated_at: float

    @classmethod
    def start(cls, period_seconds: int, percent: int, now: float, *, fill: float) -> BurstLimiter:
        """`fill`: the share of the bucket it starts with (koordlet: at random, under a half)."""
        return cls(period_seconds=period_seconds, percent=percent, tokens=int(period_seconds * (percent - 100) * fill),
                   updated_at=now)

    @property
    def capacity(self) -> int:
        return self.period_seconds * (self.percent - 100)

    def allow(self, now: float, usage_percent: int) -> bool:
        seconds = int(now - self.updated_at)  # whole seconds, as koordlet counts them
        if usage_percent >= SPEND_FROM_PERCENT:
            self.tokens -= (usage_percent - 100) * seconds
        elif usage_percent < SAVE_BELOW_PERCENT:
            self.tokens += (100 - usage_percent) * seconds
        self.tokens = max(min(self.tokens, self.capacity), -self.capacity)
        self.updated_at = now
        return self.tokens > 0

    def expired(self, now: float) -> bool:
        return now - self.updated_at > 2 * self.period_seconds


# ---- one pod's values ----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ContainerReading:
    """One container as a round finds it."""

    name: str
    limit_millis: int
    quota_us: int  # its quota now (-1: unlimited)
    period_us: int
    throttled: bool | None = None  # throttled since the previous round; None: not known yet
    allowed: bool = True  # by its token bucket (always, without cfsQuotaBurstPeriodSeconds)


@dataclass(frozen=True, kw_only=True)
class ContainerPlan:
    name: str
    base_quota_us: int  # the kubelet's
    quota_us: int
    burst_us: int
    operation: Operation


@dataclass(frozen=True)
class PodPlan:
    quota_us: int  # UNLIMITED: the pod's quota is left as it is (the kubelet set none)
    burst_us: int
    containers: tuple[ContainerPlan, ...]

    @property
    def quota_bursting(self) -> bool:
        return any(c.quota_us > c.base_quota_us for c in self.containers)

    @property
    def cfs_bursting(self) -> bool:
        return self.burst_us > 0 or any(c.burst_us > 0 for c in self.containers)


def container_operation(config: BurstConfig, reading: ContainerReading) -> Operation:
    if not config.quota_burst:
        return "reset"
    if not reading.allowed:
        return "scale-down"
    return "scale-up" if reading.throttled else "remain"


def by_node(state: NodeState, operation: Operation) -> Operation:
    """An overloaded node shrinks what would grow or stay; a cooling or unknown one grows nothing."""
    if state == "overload" and operation in ("scale-up", "remain"):
        return "scale-down"
    if state in ("cooling", "unknown") and operation == "scale-up":
        return "remain"
    return operation


def next_quota(operation: Operation, current: int, base: int, *, ceiling: int) -> int:
    target = {"scale-up": int(current * SCALE_UP), "scale-down": int(current * SCALE_DOWN),
              "reset": base}.get(operation, current)
    return max(base, min(target, ceiling))


def cfs_burst_us(config: BurstConfig, limit_millis: int, quota_us: int) -> int:
    """limit x cpuBurstPercent of the base period, at most the quota (0: no burst)."""
    if not config.cfs_burst or limit_millis <= 0:
        return 0
    burst = limit_millis * config.cpu_burst_percent * BASE_PERIOD_US // 100_000
    return min(burst, quota_us) if quota_us > 0 else burst


def plan_pod(config: BurstConfig, state: NodeState, readings: Iterable[ContainerReading],
             *, kubelet_pod_quota_us: int) -> PodPlan:
    """The values of one pod's cgroups; `kubelet_pod_quota_us` is the pod's own quota as the kubelet
    sets it (-1: none). With policy `none` this is the undo: the kubelet's quotas, no burst."""
    plans = []
    for reading in readings:
        base = cfs_quota_us(reading.limit_millis, reading.period_us)
        ceiling = base * config.cfs_quota_burst_percent // 100 if config.cfs_quota_burst_percent > 100 else base
        operation = by_node(state, container_operation(config, reading))
        quota = next_quota(operation, reading.quota_us, base, ceiling=ceiling)
        plans.append(ContainerPlan(name=reading.name, base_quota_us=base, quota_us=quota,
                                   burst_us=cfs_burst_us(config, reading.limit_millis, quota), operation=operation))
    pod_quota = UNLIMITED
    if kubelet_pod_quota_us > 0:
        pod_quota = kubelet_pod_quota_us + sum(plan.quota_us - plan.base_quota_us for plan in plans)
    pod_burst = sum(plan.burst_us for plan in plans)
    return PodPlan(pod_quota, min(pod_burst, pod_quota) if pod_quota > 0 else pod_burst, tuple(plans))
