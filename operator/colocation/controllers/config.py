"""The cluster configuration (ConfigMap colocation-config): strategy models, parsing, merging, NodeSLO.

Each key of the ConfigMap holds `{"clusterStrategy": {...}, "nodeStrategies": [{"name",
"nodeSelector", ...fields}]}`. The effective strategy of a node, per key, is the built-in
defaults, then `clusterStrategy` merged over them, then the first node strategy whose
nodeSelector (a metav1.LabelSelector) matches the node's labels, merged over that. Merging is
JSON merge (RFC 7386): objects merge field by field, a null removes a field (back to its
default), anything else replaces.

Field names, types and defaults are Koordinator's slo-controller-config ones, so that
configurations carry over; unknown fields inside a strategy are ignored, as Koordinator ignores
them. `enable` of colocation-config defaults to true here (Koordinator: false): installing the
operator is the decision to colocate.

Everything here is pure: the controller feeds it the ConfigMap's data and node labels, keeps
the last good value of a key whose new value is invalid (`ParsedConfig.keeping_last_good`), and
posts `ParsedConfig.errors` as Warning events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.quantity import parse_quantity
from colocation.apimachinery.selectors import LabelSelector

_INT64_MAX = 2**63 - 1

Percent = Annotated[int, Field(ge=0, le=100)]
PositiveInt64 = Annotated[int, Field(ge=1, le=_INT64_MAX)]
# A Go duration as NodeSLO's schema accepts it ("5m", "1h30m", "0.5s").
GoDuration = Annotated[str, Field(pattern=r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")]


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
    metric_memory_collect_policy: Literal["usageWithoutPageCache", "usageWithHotPageCache",
                                          "usageWithPageCache"] = "usageWithoutPageCache"
    cpu_reclaim_threshold_percent: Percent = 60
    cpu_calculate_policy: Literal["usage", "maxUsageRequest"] = "usage"
    memory_reclaim_threshold_percent: Percent = 65
    memory_calculate_policy: Literal["usage", "request", "maxUsageRequest"] = "usage"
    degrade_time_minutes: PositiveInt64 = 15
    update_time_threshold_seconds: PositiveInt64 = 300
    resource_diff_threshold: float = Field(0.1, gt=0, le=1)
    batch_cpu_threshold_percent: Percent | None = Field(None, alias="batchCPUThresholdPercent")
    batch_memory_threshold_percent: Percent | None = None
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
    cpu_burst_percent: Annotated[int, Field(ge=0, le=10000)] = 1000
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


CONFIG_MAP_NAME = "colocation-config"
COLOCATION_KEY = "colocation-config"
RESOURCE_THRESHOLD_KEY = "resource-threshold-config"
CPU_BURST_KEY = "cpu-burst-config"
SYSTEM_KEY = "system-config"
STRATEGY_MODELS: dict[str, type[Strategy]] = {
    COLOCATION_KEY: ColocationStrategy,
    RESOURCE_THRESHOLD_KEY: ResourceThresholdStrategy,
    CPU_BURST_KEY: CPUBurstStrategy,
    SYSTEM_KEY: SystemStrategy,
}

S = TypeVar("S", bound=Strategy)


# --------------------------------------------------------------------------------------------
# Parsed configuration.


@dataclass(frozen=True)
class NodeRule(Generic[S]):
    """One entry of nodeStrategies, with the effective strategy of the nodes it selects."""

    name: str
    selector: LabelSelector
    strategy: S  # defaults <- clusterStrategy <- this entry


@dataclass(frozen=True)
class KeyConfig(Generic[S]):
    """The parsed value of one ConfigMap key."""

    cluster: S  # defaults <- clusterStrategy
    rules: tuple[NodeRule[S], ...] = ()

    def for_labels(self, labels: Mapping[str, str] | None) -> S:
        """The strategy of a node with these labels: the first matching rule's, else the cluster's."""
        for rule in self.rules:
            if rule.selector.matches(labels or {}):
                return rule.strategy
        return self.cluster


@dataclass(frozen=True)
class ParsedConfig:
    """The ConfigMap, key by key: the valid keys' values, and why the others are invalid.

    A key absent from the ConfigMap (or blank) takes the built-in defaults. A key in `errors`
    has no value here; `keeping_last_good` fills it from the previous configuration, and a key
    that never had a good value takes the defaults.
    """

    keys: Mapping[str, KeyConfig[Any]] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)

    def keeping_last_good(self, previous: ParsedConfig) -> ParsedConfig:
        keys = dict(self.keys)
        for key in self.errors:
            if key in previous.keys:
                keys[key] = previous.keys[key]
        return ParsedConfig(keys, self.errors)

    def key(self, key: str) -> KeyConfig[Any]:
        return self.keys.get(key) or KeyConfig(STRATEGY_MODELS[key]())

    @property
    def colocation(self) -> KeyConfig[ColocationStrategy]:
        return cast(KeyConfig[ColocationStrategy], self.key(COLOCATION_KEY))

    @property
    def resource_threshold(self) -> KeyConfig[ResourceThresholdStrategy]:
        return cast(KeyConfig[ResourceThresholdStrategy], self.key(RESOURCE_THRESHOLD_KEY))

    @property
    def cpu_burst(self) -> KeyConfig[CPUBurstStrategy]:
        return cast(KeyConfig[CPUBurstStrategy], self.key(CPU_BURST_KEY))

    @property
    def system(self) -> KeyConfig[SystemStrategy]:
        return cast(KeyConfig[SystemStrategy], self.key(SYSTEM_KEY))


@dataclass(frozen=True)
class NodeStrategies:
    """The effective strategies of one node, one per ConfigMap key."""

    colocation: ColocationStrategy
    resource_threshold: ResourceThresholdStrategy
    cpu_burst: CPUBurstStrategy
    system: SystemStrategy


class ConfigError(ValueError):
    """A key's value is invalid; the message names the field and the problem."""


def parse_config(data: Mapping[str, str] | None) -> ParsedConfig:
    """Parse the ConfigMap's `data`; every known key independently of the others.

    Keys other than the four strategy keys are ignored. Errors read like
    `colocation-config: clusterStrategy.cpuReclaimThresholdPercent: Input should be less than
    or equal to 100 (got 150)`: the key, then the field, then the problem.
    """
    keys: dict[str, KeyConfig[Any]] = {}
    errors: dict[str, str] = {}
    for key, model in STRATEGY_MODELS.items():
        text = (data or {}).get(key)
        try:
            keys[key] = parse_key(model, text) if text and text.strip() else KeyConfig(model())
        except ConfigError as exc:
            errors[key] = f"{key}: {exc}"
    return ParsedConfig(keys, errors)


def parse_key(model: type[S], text: str) -> KeyConfig[S]:
    """Parse one key's JSON; raises ConfigError."""
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ConfigError(f"invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"must be a JSON object, not {_json_type(document)}")
    unknown = sorted(set(document) - {"clusterStrategy", "nodeStrategies"})
    if unknown:
        # Most likely Koordinator's flat colocation-config: say what shape is expected.
        raise ConfigError(f'unknown field "{unknown[0]}": expected '
                          '{"clusterStrategy": {...}, "nodeStrategies": [...]}')
    cluster_json = document.get("clusterStrategy")
    if cluster_json is None:
        cluster_json = {}
    if not isinstance(cluster_json, dict):
        raise ConfigError(f"clusterStrategy: must be an object, not {_json_type(cluster_json)}")
    cluster = _validate(model, cluster_json, "clusterStrategy")
    entries = document.get("nodeStrategies")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise ConfigError(f"nodeStrategies: must be a list, not {_json_type(entries)}")
    rules = tuple(_node_rule(model, cluster_json, entry, f"nodeStrategies[{index}]")
                  for index, entry in enumerate(entries))
    return KeyConfig(cluster, rules)


def _node_rule(model: type[S], cluster_json: dict[str, Any], entry: Any, path: str) -> NodeRule[S]:
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: must be an object, not {_json_type(entry)}")
    fields = dict(entry)
    name = fields.pop("name", "")
    if not isinstance(name, str):
        raise ConfigError(f"{path}.name: must be a string")
    if name:
        path = f'{path} ("{name}")'
    if "nodeSelector" not in fields or fields["nodeSelector"] is None:
        # A nil selector matches no node: an entry without one can only be a mistake.
        raise ConfigError(f"{path}.nodeSelector: Required value (use {{}} to select every node)")
    try:
        selector = LabelSelector.from_api(fields.pop("nodeSelector"))
    except ApiError as exc:
        raise ConfigError(f"{path}.nodeSelector: {exc.message}") from None
    strategy = _validate(model, json_merge(cluster_json, fields), path)
    return NodeRule(name, selector, strategy)


def _validate(model: type[S], document: dict[str, Any], path: str) -> S:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(error, path) for error in exc.errors())) from None


def _describe(error: Any, path: str) -> str:
    location = ".".join([path, *(f"[{part}]" if isinstance(part, int) else str(part) for part in error["loc"])])
    location = location.replace(".[", "[")
    message = str(error["msg"]).removeprefix("Value error, ")
    shown = error.get("input")
    if error["type"] == "missing" or isinstance(shown, (dict, list)):
        return f"{location}: {message}"
    return f"{location}: {message} (got {json.dumps(shown)})"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def json_merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge: objects merge field by field, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(base) if isinstance(base, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = json_merge(merged.get(name), value)
    return merged


# --------------------------------------------------------------------------------------------
# Per node.


def strategy_for_node(parsed: ParsedConfig, node_labels: Mapping[str, str] | None) -> NodeStrategies:
    """The effective strategies of a node with these labels."""
    return NodeStrategies(
        colocation=parsed.colocation.for_labels(node_labels),
        resource_threshold=parsed.resource_threshold.for_labels(node_labels),
        cpu_burst=parsed.cpu_burst.for_labels(node_labels),
        system=parsed.system.for_labels(node_labels),
    )


def with_node_overrides(strategy: ColocationStrategy, overrides: Mapping[str, Any] | None) -> ColocationStrategy:
    """Apply NodeResource `spec` overrides: disableColocation and the two reclaim percentages.

    The CRD schema has validated them; a value that is not of the right type is ignored.
    """
    overrides = overrides or {}
    update: dict[str, Any] = {}
    if overrides.get("disableColocation") is True:
        update["enable"] = False
    for name, attribute in (("cpuReclaimThresholdPercent", "cpu_reclaim_threshold_percent"),
                            ("memoryReclaimThresholdPercent", "memory_reclaim_threshold_percent")):
        value = overrides.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100:
            update[attribute] = value
    return strategy.model_copy(update=update) if update else strategy


def render_nodeslo_spec(strategies: NodeStrategies) -> dict[str, Any]:
    """The NodeSLO spec of a node, as crds/nodeslos.slo.colocation.dev.yaml defines it.

    Always the same dict for the same strategies, so the controller can compare it with the
    stored spec and write only on a difference.
    """
    colocation = strategies.colocation
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
    }
