"""The cluster configuration, ConfigMap colocation-config: its keys parsed each on its own.

Each of the five NodeSLO keys holds one strategy with per-node rules
(colocation.koordinator.slo_config); `load-aware-config` holds the scheduler's load-aware
settings, one object for the whole cluster (colocation.loadaware.load_aware_config). A key absent
or blank takes the built-in defaults. Everything here is pure: the controller feeds it the
ConfigMap's data and node labels, keeps the last good value of a key whose new value is invalid
(`ParsedConfig.keeping_last_good`), and posts `ParsedConfig.errors` as Warning events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from colocation.koordinator.slo_config import ConfigError, KeyConfig, parse_applications_key, parse_key
from colocation.koordinator.slo_strategies import (
    COLOCATION_KEY,
    CPU_BURST_KEY,
    HOST_APPLICATION_KEY,
    RESOURCE_THRESHOLD_KEY,
    STRATEGY_MODELS,
    SYSTEM_KEY,
    ColocationStrategy,
    CPUBurstStrategy,
    HostApplicationStrategy,
    NodeStrategies,
    ResourceThresholdStrategy,
    Strategy,
    SystemStrategy,
)
from colocation.loadaware.load_aware_config import LOAD_AWARE_KEY, LoadAwareConfig, parse_load_aware_config

CONFIG_MAP_NAME = "colocation-config"
# Every key the operator reads, with its model: the NodeSLO strategies and the scheduler's settings.
CONFIG_KEY_MODELS: dict[str, type[Strategy]] = {**STRATEGY_MODELS, LOAD_AWARE_KEY: LoadAwareConfig}


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
        return self.keys.get(key) or KeyConfig(CONFIG_KEY_MODELS[key]())

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

    @property
    def host_applications(self) -> KeyConfig[HostApplicationStrategy]:
        return cast(KeyConfig[HostApplicationStrategy], self.key(HOST_APPLICATION_KEY))

    @property
    def load_aware(self) -> LoadAwareConfig:
        """The scheduler's load-aware settings: one value for the cluster, no per-node rules."""
        return cast(LoadAwareConfig, self.key(LOAD_AWARE_KEY).cluster)


def parse_config(data: Mapping[str, str] | None) -> ParsedConfig:
    """Parse the ConfigMap's `data`; every known key independently of the others.

    Keys other than the five strategy keys and `load-aware-config` are ignored. Errors read like
    `colocation-config: clusterStrategy.cpuReclaimThresholdPercent: Input should be greater
    than or equal to 0 (got -1)`: the key, then the field, then the problem.
    """
    keys: dict[str, KeyConfig[Any]] = {}
    errors: dict[str, str] = {}
    for key, model in STRATEGY_MODELS.items():
        text = (data or {}).get(key)
        try:
            parse = parse_applications_key if key == HOST_APPLICATION_KEY else parse_key  # Koordinator's shapes
            keys[key] = parse(model, text) if text and text.strip() else KeyConfig(model())
        except ConfigError as exc:
            errors[key] = f"{key}: {exc}"
    text = (data or {}).get(LOAD_AWARE_KEY)
    try:
        value = parse_load_aware_config(text) if text and text.strip() else LoadAwareConfig()
        keys[LOAD_AWARE_KEY] = KeyConfig(value)  # no per-node rules: `for_labels` gives it to every node
    except ConfigError as exc:
        errors[LOAD_AWARE_KEY] = f"{LOAD_AWARE_KEY}: {exc}"
    return ParsedConfig(keys, errors)


def strategy_for_node(parsed: ParsedConfig, node_labels: Mapping[str, str] | None) -> NodeStrategies:
    """The effective strategies of a node with these labels."""
    return NodeStrategies(
        colocation=parsed.colocation.for_labels(node_labels),
        resource_threshold=parsed.resource_threshold.for_labels(node_labels),
        cpu_burst=parsed.cpu_burst.for_labels(node_labels),
        system=parsed.system.for_labels(node_labels),
        host_applications=parsed.host_applications.for_labels(node_labels),
    )
