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

from colocation.loadaware.load_aware_config import LOAD_AWARE_RESOURCES, LoadAwareConfig
from colocation.loadaware.node_figures import NodeFigures, freshness
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
    passed: list[str] = []
    failed: dict[str, str] = {}
    counts = {"stale": 0, "missing": 0}
    for name in names:
        node = figures.get(name)
        state = freshness(node, now=now, expiration_seconds=config.node_metric_expiration_seconds)
        reason = overload_reason(node, pod=pod, config=config) if state == "fresh" and node else None
        if state != "fresh":
            counts[state] += 1
        if reason is None:
            passed.append(name)
        else:
            failed[name] = reason
    return FilterOutcome(passed=tuple(passed), failed=failed, stale=counts["stale"], missing=counts["missing"])


def overload_reason(node: NodeFigures, *, pod: JudgedPod, config: LoadAwareConfig) -> str | None:
    """Why a node with a fresh report is too loaded for `pod`, or None if it is not."""
    if pod.daemon or (pod.batch and config.batch_pods == "skipped"):
        return None
    prod = pod.prod and any(config.prod_usage_thresholds.values())
    thresholds = config.prod_usage_thresholds if prod else config.usage_thresholds
    used = node.prod_used if prod else node.used
    for resource in LOAD_AWARE_RESOURCES:
        threshold = thresholds.get(resource, 0)
        total = node.allocatable.get(resource, 0)
        if threshold == 0 or total <= 0:
            continue
        estimated = used.get(resource, 0) + pod.estimate.get(resource, 0)
        percent = (200 * estimated + total) // (2 * total)  # estimated * 100 / total, rounded half up
        if percent > threshold:
            return f"load-aware: {_figure(prod, config)}{resource} usage above {threshold}% of allocatable"
    return None


def _figure(prod: bool, config: LoadAwareConfig) -> str:
    # Part of the reason, so that the scheduler's count of nodes per reason stays one line per kind.
    if prod:
        return "prod "
    if config.aggregated is not None:
        return f"{config.aggregated.type} "
    return ""
