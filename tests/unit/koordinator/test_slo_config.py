"""One configuration key on its own: rules per node, JSON merge, and the NodeResource overrides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from colocation.apimachinery.merge_patch import json_merge_patch as json_merge
from colocation.koordinator.slo_config import ConfigError, parse_key
from colocation.koordinator.slo_strategies import (
    ColocationStrategy,
    CPUBurstStrategy,
    ResourceThresholdStrategy,
    Strategy,
    SystemStrategy,
    with_node_overrides,
)


@pytest.mark.parametrize(("base", "patch", "merged"), [
    ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"d": None, "e": 4}}, {"a": 1, "b": {"c": 2, "e": 4}}),
    ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),  # lists replace
    ({"a": {"b": 1}}, {"a": 5}, {"a": 5}),  # a scalar replaces an object
    ({"a": 5}, {"a": {"b": None, "c": 1}}, {"a": {"c": 1}}),  # an object over a scalar starts empty
    ({"a": 1}, ["x"], ["x"]),
    (None, {"a": None}, {}),
])
def test_json_merge(base: Any, patch: Any, merged: Any) -> None:
    assert json_merge(base, patch) == merged


def test_json_merge_leaves_its_arguments_alone() -> None:
    base, patch = {"a": {"b": 1}}, {"a": {"c": 2}}
    json_merge(base, patch)
    assert (base, patch) == ({"a": {"b": 1}}, {"a": {"c": 2}})


def test_a_key_gives_each_node_the_first_matching_rule_or_the_cluster_strategy() -> None:
    config = parse_key(SystemStrategy, json.dumps({
        "clusterStrategy": {"watermarkScaleFactor": 200},
        "nodeStrategies": [
            {"name": "small", "nodeSelector": {"matchLabels": {"size": "s"}}, "minFreeKbytesFactor": 50},
            {"name": "rest", "nodeSelector": {"matchExpressions": [{"key": "size", "operator": "Exists"}]},
             "minFreeKbytesFactor": 300},
        ],
    }))
    assert [rule.name for rule in config.rules] == ["small", "rest"]
    small = config.for_labels({"size": "s"})
    assert (small.watermark_scale_factor, small.min_free_kbytes_factor) == (200, 50)
    assert config.for_labels({"size": "l"}).min_free_kbytes_factor == 300
    assert config.for_labels(None) is config.cluster
    assert config.cluster == SystemStrategy(watermark_scale_factor=200)


def test_an_empty_document_is_the_defaults() -> None:
    config = parse_key(ColocationStrategy, '{"clusterStrategy": null, "nodeStrategies": null}')
    assert (config.cluster, config.rules) == (ColocationStrategy(), ())


def test_an_invalid_key_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^clusterStrategy\.enable: Input should be a valid boolean"):
        parse_key(ColocationStrategy, '{"clusterStrategy": {"enable": "yes"}}')


@pytest.mark.parametrize("overrides", [
    {"disableColocation": "true"},
    {"cpuReclaimThresholdPercent": True},
    {"cpuReclaimThresholdPercent": -1},
    {"memoryReclaimThresholdPercent": "40"},
    {},
])
def test_node_overrides_of_the_wrong_type_or_range_are_ignored(overrides: dict[str, Any]) -> None:
    strategy = ColocationStrategy()
    assert with_node_overrides(strategy, overrides) is strategy


def test_a_node_may_reclaim_more_than_its_capacity() -> None:
    # As in Koordinator (and the ConfigMap), a reclaim percentage above 100 is an overcommitment.
    overridden = with_node_overrides(ColocationStrategy(),
                                     {"cpuReclaimThresholdPercent": 150, "memoryReclaimThresholdPercent": 120})
    assert (overridden.cpu_reclaim_threshold_percent, overridden.memory_reclaim_threshold_percent) == (150, 120)


@pytest.mark.parametrize("field", ["cpuReclaimThresholdPercent", "memoryReclaimThresholdPercent",
                                   "batchCPUThresholdPercent", "batchMemoryThresholdPercent"])
def test_reclaim_and_batch_cap_percentages_are_bounded_only_below(field: str) -> None:
    # Koordinator validates these with a minimum of 0 and no maximum.
    assert ColocationStrategy.model_validate({field: 150}).to_json()[field] == 150
    with pytest.raises(ValueError, match=f"{field}\n  Input should be greater than or equal to 0"):
        ColocationStrategy.model_validate({field: -1})


@pytest.mark.parametrize(("model", "field", "low", "high"), [
    (ResourceThresholdStrategy, "cpuSuppressThresholdPercent", 0, 100),
    (ResourceThresholdStrategy, "cpuSuppressMinPercent", 0, 100),
    (ResourceThresholdStrategy, "memoryEvictThresholdPercent", 0, 100),
    (ResourceThresholdStrategy, "memoryEvictLowerPercent", 0, 100),
    (ResourceThresholdStrategy, "cpuEvictBESatisfactionUpperPercent", 0, 100),
    (ResourceThresholdStrategy, "cpuEvictBESatisfactionLowerPercent", 0, 100),
    (ResourceThresholdStrategy, "cpuEvictBEUsageThresholdPercent", 0, 100),
    (CPUBurstStrategy, "cpuBurstPercent", 1, 10000),
    (CPUBurstStrategy, "sharePoolThresholdPercent", 0, 100),
    (ColocationStrategy, "midCPUThresholdPercent", 0, 100),
    (ColocationStrategy, "midMemoryThresholdPercent", 0, 100),
    (ColocationStrategy, "midUnallocatedPercent", 0, 100),
    (ColocationStrategy, "midStaticCPUReservedPercent", 0, 100),
    (ColocationStrategy, "midStaticMemoryReservedPercent", 0, 100),
])
def test_the_other_percentages_keep_koordinators_bounds(
        model: type[Strategy], field: str, low: int, high: int) -> None:
    assert model.model_validate({field: low}).to_json()[field] == low
    assert model.model_validate({field: high}).to_json()[field] == high
    for outside in (low - 1, high + 1):
        with pytest.raises(ValueError, match=field):
            model.model_validate({field: outside})


def test_mid_tier_keys_default_to_koordinators_values() -> None:
    # Mid resources up to the whole node, and none of the unallocated share, unless configured.
    strategy = ColocationStrategy()
    assert (strategy.mid_cpu_threshold_percent, strategy.mid_memory_threshold_percent,
            strategy.mid_unallocated_percent) == (100, 100, 0)
    assert ColocationStrategy.model_validate({"midCPUThresholdPercent": 40}).mid_cpu_threshold_percent == 40


def test_mid_reclaim_mode_is_static_or_absent() -> None:
    assert ColocationStrategy.model_validate({"midReclaimMode": "static"}).to_json()["midReclaimMode"] == "static"
    assert "midReclaimMode" not in ColocationStrategy.model_validate({}).to_json()
    with pytest.raises(ValueError, match="midReclaimMode"):
        ColocationStrategy.model_validate({"midReclaimMode": "Static"})
