"""NodeSLO strategies: Koordinator's slo-controller-config models, their defaults, the NodeSLO spec.

Field names, types and defaults are Koordinator's slo-controller-config ones, so that
configurations carry over; unknown fields inside a strategy are ignored, as Koordinator ignores
them. `enable` of colocation-config defaults to true here (Koordinator: false): installing the
operator is the decision to colocate. See docs/architecture.md, Koordinator's model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from colocation.apimachinery.quantity import parse_quantity
from colocation.koordinator.classes import PriorityClass, QoSClass

_INT64_MAX = 2**63 - 1

Percent = Annotated[int, Field(ge=0, le=100)]
# Koordinator bounds the reclaim and batch-cap percentages only below: a reclaim percentage above
# 100 makes the safety margin negative, so batch pods may be offered more than the node's
# capacity (deliberate overcommitment), and a cap above 100 lets them.
UnboundedPercent = Annotated[int, Field(ge=0, le=_INT64_MAX)]
PositiveInt64 = Annotated[int, Field(ge=1, le=_INT64_MAX)]
# A Go duration as NodeSLO's schema accepts it ("5m", "1h30m", "0.5s").
GoDuration = Annotated[str, Field(pattern=r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")]


# How the agent counts a node's memory usage (page cache left out, its hot part, or all of it).
MemoryCollectPolicy = Literal["usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache"]
MEMORY_COLLECT_POLICIES: tuple[MemoryCollectPolicy, ...] = (
    "usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache")


class Strategy(BaseModel):
    """A strategy of one ConfigMap key: camelCase JSON, strict types, immutable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, strict=True,
                              extra="ignore")

    def to_json(self) -> dict[str, Any]:
        """The fields as they are written in the ConfigMap and the NodeSLO; unset ones left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class AggregatePolicy(Strategy):
    durations: list[GoDuration] = Field(default_factory=lambda: ["5m", "10m", "30m"])


class ColocationStrategy(Strategy):
    """colocation-config: batch resources (NodeResource) and metric collection (NodeSLO)."""

    enable: bool = True
    metric_aggregate_duration_seconds: PositiveInt64 = 300
    metric_report_interval_seconds: PositiveInt64 = 60
    metric_aggregate_policy: AggregatePolicy = Field(default_factory=AggregatePolicy)
    metric_memory_collect_policy: MemoryCollectPolicy = "usageWithoutPageCache"
    cpu_reclaim_threshold_percent: UnboundedPercent = 60
    cpu_calculate_policy: Literal["usage", "maxUsageRequest"] = "usage"
    memory_reclaim_threshold_percent: UnboundedPercent = 65
    memory_calculate_policy: Literal["usage", "request", "maxUsageRequest"] = "usage"
    degrade_time_minutes: PositiveInt64 = 15
    update_time_threshold_seconds: PositiveInt64 = 300
    resource_diff_threshold: float = Field(0.1, gt=0, le=1)
    batch_cpu_threshold_percent: UnboundedPercent | None = Field(None, alias="batchCPUThresholdPercent")
    batch_memory_threshold_percent: UnboundedPercent | None = None
    # Mid-tier resources (colocation.koordinator.mid_formula). Koordinator bounds these percentages
    # to 0..100: mid resources never exceed the node's capacity.
    mid_cpu_threshold_percent: Percent = Field(100, alias="midCPUThresholdPercent")
    mid_memory_threshold_percent: Percent = 100
    mid_unallocated_percent: Percent = 0
    # midReclaimMode "static": mid resources are fixed shares of capacity (these two percentages),
    # whatever prod pods use; absent, the policy above applies. Koordinator names no other mode.
    mid_reclaim_mode: Literal["static"] | None = None
    mid_static_cpu_reserved_percent: Percent = Field(0, alias="midStaticCPUReservedPercent")
    mid_static_memory_reserved_percent: Percent = 0
    # Koordinator's ColocationStrategyExtender: third-party strategies, copied to NodeSLO as given.
    extensions: dict[str, Any] = Field(default_factory=dict)


class ResourceThresholdStrategy(Strategy):
    """resource-threshold-config → NodeSLO spec.resourceUsedThresholdWithBE."""

    enable: bool = False
    cpu_suppress_threshold_percent: Percent = 65
    cpu_suppress_min_percent: Percent | None = None
    cpu_suppress_policy: Literal["cpuset", "cfsQuota"] = "cpuset"
    memory_evict_threshold_percent: Percent = 70
    memory_evict_lower_percent: Percent | None = None
    cpu_evict_be_satisfaction_upper_percent: Percent | None = Field(
        None, alias="cpuEvictBESatisfactionUpperPercent")
    cpu_evict_be_satisfaction_lower_percent: Percent | None = Field(
        None, alias="cpuEvictBESatisfactionLowerPercent")
    cpu_evict_be_usage_threshold_percent: Percent | None = Field(None, alias="cpuEvictBEUsageThresholdPercent")
    cpu_evict_time_window_seconds: PositiveInt64 | None = None
    cpu_evict_policy: Literal["evictByRealLimit", "evictByAllocatable"] | None = None


class CPUBurstStrategy(Strategy):
    """cpu-burst-config → NodeSLO spec.cpuBurstStrategy."""

    policy: Literal["none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"] = "none"
    cpu_burst_percent: Annotated[int, Field(ge=1, le=10000)] = 1000
    cfs_quota_burst_percent: Annotated[int, Field(ge=100, le=_INT64_MAX)] = 300
    cfs_quota_burst_period_seconds: Annotated[int, Field(ge=-1, le=_INT64_MAX)] = -1
    share_pool_threshold_percent: Percent = 50


class SystemStrategy(Strategy):
    """system-config → NodeSLO spec.systemStrategy."""

    min_free_kbytes_factor: PositiveInt64 = 100
    watermark_scale_factor: Annotated[int, Field(ge=1, le=400)] = 150
    memcg_reap_back_ground: Annotated[int, Field(ge=0, le=1)] = 0
    # A quantity in Mbps; unset: the agent reads it from the NIC.
    total_network_bandwidth: str | int | None = None

    @field_validator("total_network_bandwidth")
    @classmethod
    def _quantity(cls, value: str | int | None) -> str | None:
        if value is None:
            return None
        try:
            quantity = parse_quantity(value)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        if quantity < 0:
            raise ValueError("must be greater than or equal to 0")
        return str(value)


class HostCgroupPath(Strategy):
    """Where a host application's cgroup is: under `base`, then parentDir, then relativePath."""

    base: Literal["CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort"] | None = None
    parent_dir: str | None = None
    relative_path: str | None = None

    @field_validator("parent_dir", "relative_path")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        if value is not None and ".." in value.split("/"):
            raise ValueError("may not contain '..'")
        return value


class HostApplicationSpec(Strategy):
    """One process outside Kubernetes the agent measures (Koordinator's HostApplicationSpec)."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    priority: PriorityClass | None = None
    qos: QoSClass | None = None
    cgroup_path: HostCgroupPath | None = None


MAX_HOST_APPLICATIONS = 256  # per NodeSLO, and the most a NodeMetric may report


class HostApplicationStrategy(Strategy):
    """host-application-config → NodeSLO spec.hostApplications. Its ConfigMap shape is
    Koordinator's `{"applications": [...], "nodeConfigs": [{name, nodeSelector, applications}]}`
    (colocation.koordinator.slo_config.parse_applications_key)."""

    applications: Annotated[list[HostApplicationSpec], Field(max_length=MAX_HOST_APPLICATIONS)] = \
        Field(default_factory=list)

    @field_validator("applications")
    @classmethod
    def _unique(cls, value: list[HostApplicationSpec]) -> list[HostApplicationSpec]:
        names = [app.name for app in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"name {repeated[0]!r} is given twice")
        return value


# The keys of Koordinator's slo-controller-config ConfigMap, which ours (colocation-config) keeps.
COLOCATION_KEY = "colocation-config"
RESOURCE_THRESHOLD_KEY = "resource-threshold-config"
CPU_BURST_KEY = "cpu-burst-config"
SYSTEM_KEY = "system-config"
HOST_APPLICATION_KEY = "host-application-config"
STRATEGY_MODELS: dict[str, type[Strategy]] = {
    COLOCATION_KEY: ColocationStrategy,
    RESOURCE_THRESHOLD_KEY: ResourceThresholdStrategy,
    CPU_BURST_KEY: CPUBurstStrategy,
    SYSTEM_KEY: SystemStrategy,
    HOST_APPLICATION_KEY: HostApplicationStrategy,
}


@dataclass(frozen=True, kw_only=True)
class NodeStrategies:
    """The effective strategies of one node, one per ConfigMap key."""

    colocation: ColocationStrategy
    resource_threshold: ResourceThresholdStrategy
    cpu_burst: CPUBurstStrategy
    system: SystemStrategy
    host_applications: HostApplicationStrategy = field(default_factory=HostApplicationStrategy)


def with_node_overrides(strategy: ColocationStrategy, overrides: Mapping[str, Any] | None) -> ColocationStrategy:
    """Apply NodeResource `spec` overrides: disableColocation and the two reclaim percentages.

    The CRD schema has validated them; a value that is not of the right type or is out of range
    (negative; a percentage above 100 is valid, as in the ConfigMap) is ignored.
    """
    overrides = overrides or {}
    update: dict[str, Any] = {}
    if overrides.get("disableColocation") is True:
        update["enable"] = False
    for name, attribute in (("cpuReclaimThresholdPercent", "cpu_reclaim_threshold_percent"),
                            ("memoryReclaimThresholdPercent", "memory_reclaim_threshold_percent")):
        value = overrides.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT64_MAX:
            update[attribute] = value
    return strategy.model_copy(update=update) if update else strategy


def render_nodeslo_spec(strategies: NodeStrategies) -> dict[str, Any]:
    """The NodeSLO spec of a node, as crds/nodeslos.slo.colocation.dev.yaml defines it.

    Always the same dict for the same strategies, so the controller can compare it with the
    stored spec and write only on a difference.
    """
    colocation = strategies.colocation
    host_applications = strategies.host_applications.to_json()["applications"]
    return {
        "metricCollectPolicy": {
            "aggregateDurationSeconds": colocation.metric_aggregate_duration_seconds,
            "reportIntervalSeconds": colocation.metric_report_interval_seconds,
            "nodeAggregatePolicy": {"durations": list(colocation.metric_aggregate_policy.durations)},
            "nodeMemoryCollectPolicy": colocation.metric_memory_collect_policy,
        },
        "resourceUsedThresholdWithBE": strategies.resource_threshold.to_json(),
        "cpuBurstStrategy": strategies.cpu_burst.to_json(),
        "systemStrategy": strategies.system.to_json(),
        "extensions": json.loads(json.dumps(colocation.extensions)),  # a copy the caller may keep
        # Only when there are some: NodeSLOs of clusters without host applications stay as they were.
        **({"hostApplications": host_applications} if host_applications else {}),
    }
