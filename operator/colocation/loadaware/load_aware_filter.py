"""The filter: which candidate nodes are too loaded for the pod, and why, as Koordinator's plugin judges.

A node is filtered out when, for a resource with a non-zero threshold and a non-zero allocatable,
its load plus the pod's estimate is above the threshold, as a percentage of allocatable rounded
half up (Koordinator's comparison: 65.4 % passes a 65 % threshold). The load is the node's
(`NodeFigures.used`), or for a prod pod, when prodUsageThresholds are set, its prod pods'
(`prod_used`) against those thresholds. cpu is judged before memory; the first resource above
names the reason.

Never filtered: a node without a NodeMetric or whose report is older than the expiration (its
load is unknown: stranding it is the failure Koordinator's users met when an agent died), a
DaemonSet's pod (it must run on its node), and batch pods when `batchPods` is `skipped`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from colocation.loadaware.load_aware_config import LoadAwareConfig, LoadAwareResource
from colocation.loadaware.node_figures import NodeFigures
from colocation.loadaware.pod_estimate import JudgedPod


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterOutcome:
    """The nodes that pass (in the order given), the reason of each that does not, and counters."""

    passed: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    stale: int = 0  # candidates passed because their report is too old
    missing: int = 0  # candidates passed because they have no report


def filter_nodes(names: Sequence[str], figures: Mapping[str, NodeFigures], *, pod: JudgedPod,
                 config: LoadAwareConfig, now: float) -> FilterOutcome:
    """Judge each candidate in `names` (only those); `now` is the server's clock, as receipt times are."""
    judge = _Judgement.of(pod, config)
    expiration = config.node_metric_expiration_seconds
    passed: list[str] = []
    failed: dict[str, str] = {}
    stale = missing = 0
    for name in names:
        node = figures.get(name)
        if node is None or node.received_at is None:
            missing += 1
            passed.append(name)
        elif now - node.received_at >= expiration:
            stale += 1
            passed.append(name)
        else:
            reason = judge.overload_reason(node)
            if reason is None:
                passed.append(name)
            else:
                failed[name] = reason
    return FilterOutcome(passed=tuple(passed), failed=failed, stale=stale, missing=missing)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Judgement:
    """What a request's filter needs of the pod and the configuration, computed once per request.

    A resource's load is too high when round_half_up(100 * load / allocatable) > threshold, which
    for whole numbers is 200 * load >= allocatable * (2 * threshold + 1): no division per node.
    """

    skip: bool  # a DaemonSet's pod, or a batch pod left to the batch resources
    prod: bool  # judged against prod pods' usage and prodUsageThresholds
    # Per resource, cpu then memory: the pod's estimate, 2 * threshold + 1 (0: no check), the reason.
    checks: tuple[tuple[int, int, str], tuple[int, int, str]]

    @classmethod
    def of(cls, pod: JudgedPod, config: LoadAwareConfig) -> _Judgement:
        prod = pod.prod and any(config.prod_usage_thresholds.values())
        thresholds = config.prod_usage_thresholds if prod else config.usage_thresholds

        def check(resource: LoadAwareResource) -> tuple[int, int, str]:
            threshold = thresholds.get(resource, 0)
            reason = f"load-aware: {_figure(prod, config)}{resource} usage above {threshold}% of allocatable"
            return pod.estimate.get(resource, 0), 2 * threshold + 1 if threshold else 0, reason

        return cls(skip=pod.daemon or (pod.batch and config.batch_pods == "skipped"), prod=prod,
                   checks=(check("cpu"), check("memory")))

    def overload_reason(self, node: NodeFigures) -> str | None:
        if self.skip:
            return None
        cpu_total, memory_total, cpu_used, memory_used, prod_cpu_used, prod_memory_used = node.flat
        if self.prod:
            cpu_used, memory_used = prod_cpu_used, prod_memory_used
        (cpu_estimate, cpu_bound, cpu_reason), (memory_estimate, memory_bound, memory_reason) = self.checks
        if cpu_bound and cpu_total > 0 and 200 * (cpu_used + cpu_estimate) >= cpu_total * cpu_bound:
            return cpu_reason
        if memory_bound and memory_total > 0 and 200 * (memory_used + memory_estimate) >= memory_total * memory_bound:
            return memory_reason
        return None


def _figure(prod: bool, config: LoadAwareConfig) -> str:
    # Part of the reason, so that the scheduler's count of nodes per reason stays one line per kind.
    if prod:
        return "prod "
    if config.aggregated is not None:
        return f"{config.aggregated.type} "
    return ""
