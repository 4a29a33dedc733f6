"""The colocation-config ConfigMap: defaults, merging, errors per key, and the NodeSLO it renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from colocation.controllers.config import ParsedConfig, parse_config, strategy_for_node
from colocation.koordinator.slo_strategies import ColocationStrategy, render_nodeslo_spec, with_node_overrides
from colocation.loadaware.load_aware_config import LOAD_AWARE_KEY, LoadAwareConfig
from colocation_sandbox.server.crd_schema import prune, validate

ROOT = Path(__file__).resolve().parents[3]

DEFAULT_SPEC = {
    "metricCollectPolicy": {
        "aggregateDurationSeconds": 300,
        "reportIntervalSeconds": 60,
        "nodeAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
        "nodeMemoryCollectPolicy": "usageWithoutPageCache",
    },
    "resourceUsedThresholdWithBE": {"enable": False, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
                                    "memoryEvictThresholdPercent": 70},
    "cpuBurstStrategy": {"policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                         "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50},
    "systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 0},
    "extensions": {},
}


def _data(**keys: Any) -> dict[str, str]:
    """ConfigMap data from keyword arguments: colocation_config=... becomes "colocation-config"."""
    return {name.replace("_", "-"): value if isinstance(value, str) else json.dumps(value)
            for name, value in keys.items()}


def _nodeslo_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "nodeslos.slo.colocation.dev.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _assert_valid_nodeslo(spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n1"}, "spec": spec}
    schema = _nodeslo_schema()
    validate(obj, schema, "slo.colocation.dev", kind="NodeSLO", name="n1")  # raises 422 Invalid otherwise
    assert prune(obj, schema) == obj  # nothing the API server would drop


# --------------------------------------------------------------------------------------------
# Defaults.


def test_an_empty_config_map_gives_the_documented_defaults() -> None:
    parsed = parse_config({})
    assert parsed.errors == {}
    strategies = strategy_for_node(parsed, {"kubernetes.io/hostname": "n1"})
    colocation = strategies.colocation
    assert colocation.to_json() == {
        "enable": True, "metricAggregateDurationSeconds": 300, "metricReportIntervalSeconds": 60,
        "metricAggregatePolicy": {"durations": ["5m", "10m", "30m"]},
        "metricMemoryCollectPolicy": "usageWithoutPageCache",
        "cpuReclaimThresholdPercent": 60, "cpuCalculatePolicy": "usage",
        "memoryReclaimThresholdPercent": 65, "memoryCalculatePolicy": "usage",
        "degradeTimeMinutes": 15, "updateTimeThresholdSeconds": 300, "resourceDiffThreshold": 0.1,
        "midCPUThresholdPercent": 100, "midMemoryThresholdPercent": 100, "midUnallocatedPercent": 0,
        "midStaticCPUReservedPercent": 0, "midStaticMemoryReservedPercent": 0, "extensions": {},
    }
    assert render_nodeslo_spec(strategies) == DEFAULT_SPEC


def test_the_shipped_config_map_parses_and_states_the_defaults() -> None:
    documents = yaml.safe_load_all((ROOT / "manifests" / "config.yaml").read_text())
    config_map = next(d for d in documents if d and d.get("kind") == "ConfigMap")
    parsed = parse_config(config_map["data"])
    assert parsed.errors == {}
    assert render_nodeslo_spec(strategy_for_node(parsed, {})) == DEFAULT_SPEC
    assert strategy_for_node(parsed, {}).colocation == ColocationStrategy()


def test_a_blank_key_means_defaults() -> None:
    parsed = parse_config({"cpu-burst-config": "  \n"})
    assert parsed.errors == {}
    assert parsed.cpu_burst.cluster.cpu_burst_percent == 1000


# --------------------------------------------------------------------------------------------
# Merging.


def test_the_cluster_strategy_merges_over_the_defaults() -> None:
    parsed = parse_config(_data(colocation_config={"clusterStrategy": {
        "cpuReclaimThresholdPercent": 50, "metricAggregatePolicy": {"durations": ["1m"]}}}))
    colocation = strategy_for_node(parsed, {}).colocation
    assert colocation.cpu_reclaim_threshold_percent == 50
    assert colocation.metric_aggregate_policy.durations == ["1m"]  # lists replace
    assert colocation.memory_reclaim_threshold_percent == 65  # untouched: default
    assert colocation.degrade_time_minutes == 15


def test_node_strategies_merge_over_the_cluster_strategy() -> None:
    config = {
        "clusterStrategy": {"cpuReclaimThresholdPercent": 50, "batchCPUThresholdPercent": 40,
                            "extensions": {"gpu": {"share": 1, "mode": "a"}}},
        "nodeStrategies": [{"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}},
                            "memoryReclaimThresholdPercent": 70, "batchCPUThresholdPercent": None,
                            "extensions": {"gpu": {"mode": "b"}}}],
    }
    parsed = parse_config(_data(colocation_config=config))
    on_a = strategy_for_node(parsed, {"pool": "a"}).colocation
    assert on_a.cpu_reclaim_threshold_percent == 50  # from the cluster strategy
    assert on_a.memory_reclaim_threshold_percent == 70  # from the node strategy
    assert on_a.batch_cpu_threshold_percent is None  # null removes: back to the default (unset)
    assert on_a.extensions == {"gpu": {"share": 1, "mode": "b"}}  # objects merge field by field
    elsewhere = strategy_for_node(parsed, {"pool": "b"}).colocation
    assert (elsewhere.memory_reclaim_threshold_percent, elsewhere.batch_cpu_threshold_percent) == (65, 40)


def test_the_first_matching_node_strategy_wins_alone() -> None:
    config = {
        "clusterStrategy": {"policy": "none"},
        "nodeStrategies": [
            {"name": "gpu", "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
             "policy": "auto"},
            {"name": "all", "nodeSelector": {}, "policy": "cpuBurstOnly", "cpuBurstPercent": 500},
        ],
    }
    parsed = parse_config(_data(cpu_burst_config=config))
    gpu = strategy_for_node(parsed, {"gpu": "a100"}).cpu_burst
    assert (gpu.policy, gpu.cpu_burst_percent) == ("auto", 1000)  # the second entry is not merged in
    other = strategy_for_node(parsed, {"disk": "ssd"}).cpu_burst
    assert (other.policy, other.cpu_burst_percent) == ("cpuBurstOnly", 500)  # {} selects every node


def test_each_key_merges_on_its_own() -> None:
    parsed = parse_config(_data(
        resource_threshold_config={"clusterStrategy": {"enable": True},
                                   "nodeStrategies": [{"name": "big", "nodeSelector": {"matchLabels": {"size": "l"}},
                                                       "memoryEvictThresholdPercent": 80}]},
        system_config={"clusterStrategy": {"watermarkScaleFactor": 200, "totalNetworkBandwidth": "10G"}},
    ))
    strategies = strategy_for_node(parsed, {"size": "l"})
    assert strategies.resource_threshold.enable is True
    assert strategies.resource_threshold.memory_evict_threshold_percent == 80
    assert strategies.system.watermark_scale_factor == 200
    assert strategies.colocation == ColocationStrategy()


def test_per_node_overrides_win_over_the_config_map() -> None:
    strategy = ColocationStrategy(cpu_reclaim_threshold_percent=50)
    overridden = with_node_overrides(strategy, {"disableColocation": True, "memoryReclaimThresholdPercent": 40})
    assert (overridden.enable, overridden.cpu_reclaim_threshold_percent,
            overridden.memory_reclaim_threshold_percent) == (False, 50, 40)
    assert with_node_overrides(strategy, {"disableColocation": False}) is strategy
    assert with_node_overrides(strategy, None) is strategy


# --------------------------------------------------------------------------------------------
# Errors, per key.


def test_invalid_json_is_an_error_of_that_key_only() -> None:
    parsed = parse_config({"colocation-config": '{"clusterStrategy": {"enable": true,}}',
                           "system-config": json.dumps({"clusterStrategy": {"watermarkScaleFactor": 200}})})
    assert set(parsed.errors) == {"colocation-config"}
    assert parsed.errors["colocation-config"].startswith("colocation-config: invalid JSON: ")
    assert "colocation-config" not in parsed.keys
    assert parsed.system.cluster.watermark_scale_factor == 200  # the other keys are read


def test_an_out_of_range_value_names_the_field() -> None:
    parsed = parse_config(_data(colocation_config={"clusterStrategy": {"cpuReclaimThresholdPercent": -1}}))
    assert parsed.errors == {"colocation-config": "colocation-config: clusterStrategy.cpuReclaimThresholdPercent: "
                                                  "Input should be greater than or equal to 0 (got -1)"}


def test_an_error_in_a_node_strategy_names_the_entry() -> None:
    config = {"nodeStrategies": [
        {"name": "ok", "nodeSelector": {}},
        {"name": "gpu", "nodeSelector": {"matchLabels": {"gpu": "true"}}, "policy": "always"}]}
    message = parse_config(_data(cpu_burst_config=config)).errors["cpu-burst-config"]
    assert message.startswith('cpu-burst-config: nodeStrategies[1] ("gpu").policy: Input should be ')
    assert message.endswith('(got "always")')


@pytest.mark.parametrize(("config", "expected"), [
    ({"clusterStrategy": {"cpuReclaimThresholdPercent": "60"}},
     'clusterStrategy.cpuReclaimThresholdPercent: Input should be a valid integer (got "60")'),
    ({"clusterStrategy": {"resourceDiffThreshold": 0}},
     "clusterStrategy.resourceDiffThreshold: Input should be greater than 0 (got 0)"),
    ({"clusterStrategy": {"memoryCalculatePolicy": "average"}},
     "clusterStrategy.memoryCalculatePolicy: Input should be 'usage', 'request' or 'maxUsageRequest' "
     '(got "average")'),
    ({"clusterStrategy": {"metricAggregatePolicy": {"durations": ["5 minutes"]}}},
     "clusterStrategy.metricAggregatePolicy.durations[0]: String should match pattern"),
    ({"clusterStrategy": []}, "clusterStrategy: must be an object, not a list"),
    ({"nodeStrategies": {}}, "nodeStrategies: must be a list, not an object"),
    ({"nodeStrategies": [{"name": "x", "enable": False}]},
     'nodeStrategies[0] ("x").nodeSelector: Required value'),
    ({"nodeStrategies": [{"nodeSelector": {"matchLabels": {"bad key!": "x"}}}]},
     "nodeStrategies[0].nodeSelector: key: Invalid value"),
    ({"enable": True, "nodeConfigs": []}, 'unknown field "enable": expected {"clusterStrategy"'),
    ([1], "must be a JSON object, not a list"),
    ("NaN", "invalid JSON: NaN is not valid JSON"),
])
def test_invalid_colocation_config(config: Any, expected: str) -> None:
    text = config if isinstance(config, str) else json.dumps(config)
    message = parse_config({"colocation-config": text}).errors["colocation-config"]
    assert message.startswith(f"colocation-config: {expected}"), message


def test_system_config_bandwidth_must_be_a_quantity() -> None:
    message = parse_config(_data(system_config={"clusterStrategy": {"totalNetworkBandwidth": "fast"}})).errors
    assert message["system-config"].startswith("system-config: clusterStrategy.totalNetworkBandwidth: "
                                                "invalid quantity 'fast'")


def test_an_invalid_key_keeps_its_last_good_value() -> None:
    good = parse_config(_data(colocation_config={"clusterStrategy": {"cpuReclaimThresholdPercent": 50}},
                              system_config={"clusterStrategy": {"watermarkScaleFactor": 200}}))
    edited = parse_config({"colocation-config": "{broken",
                           "system-config": json.dumps({"clusterStrategy": {"watermarkScaleFactor": 300}})})
    effective = edited.keeping_last_good(good)
    assert effective.errors == edited.errors  # still reported, so a Warning event can be posted
    assert strategy_for_node(effective, {}).colocation.cpu_reclaim_threshold_percent == 50  # last good
    assert strategy_for_node(effective, {}).system.watermark_scale_factor == 300  # the new, valid value


def test_an_invalid_key_without_a_good_value_takes_the_defaults() -> None:
    effective = parse_config({"colocation-config": "{broken"}).keeping_last_good(ParsedConfig())
    assert strategy_for_node(effective, {}).colocation == ColocationStrategy()


# --------------------------------------------------------------------------------------------
# load-aware-config: one object for the cluster (tests/unit/loadaware tests its fields).


def test_load_aware_config_is_read_beside_the_other_keys() -> None:
    parsed = parse_config({LOAD_AWARE_KEY: '{"usageThresholds": {"cpu": 50}}',
                           "cpu-burst-config": '{"clusterStrategy": {"cpuBurstPercent": 500}}'})
    assert parsed.errors == {}
    assert parsed.load_aware.usage_thresholds == {"cpu": 50}
    assert parsed.cpu_burst.cluster.cpu_burst_percent == 500
    assert parse_config({}).load_aware == LoadAwareConfig()
    assert parse_config({LOAD_AWARE_KEY: " \n"}).load_aware == LoadAwareConfig()


def test_an_invalid_load_aware_config_is_reported_and_keeps_its_last_good_value() -> None:
    good = parse_config({LOAD_AWARE_KEY: '{"usageThresholds": {"cpu": 50}}'})
    edited = parse_config({LOAD_AWARE_KEY: '{"usageThresholds": {"cpu": -5}}'})
    assert edited.errors == {
        LOAD_AWARE_KEY: "load-aware-config: usageThresholds.cpu: Input should be greater than or equal to 0 (got -5)"}
    assert edited.keeping_last_good(good).load_aware.usage_thresholds == {"cpu": 50}
    assert edited.keeping_last_good(ParsedConfig()).load_aware == LoadAwareConfig()


# --------------------------------------------------------------------------------------------
# The NodeSLO.


def test_the_default_nodeslo_spec_is_valid_for_the_crd() -> None:
    _assert_valid_nodeslo(render_nodeslo_spec(strategy_for_node(parse_config({}), {})))


def test_a_fully_specified_nodeslo_spec_is_valid_for_the_crd() -> None:
    parsed = parse_config(_data(
        colocation_config={"clusterStrategy": {
            "metricAggregateDurationSeconds": 120, "metricReportIntervalSeconds": 30,
            "metricAggregatePolicy": {"durations": ["1m", "1h30m"]},
            "metricMemoryCollectPolicy": "usageWithHotPageCache",
            "extensions": {"vendor": {"enabled": True, "ratio": 1.5}}}},
        resource_threshold_config={"clusterStrategy": {
            "enable": True, "cpuSuppressThresholdPercent": 70, "cpuSuppressMinPercent": 10,
            "cpuSuppressPolicy": "cfsQuota", "memoryEvictThresholdPercent": 80, "memoryEvictLowerPercent": 75,
            "cpuEvictBESatisfactionUpperPercent": 60, "cpuEvictBESatisfactionLowerPercent": 40,
            "cpuEvictBEUsageThresholdPercent": 90, "cpuEvictTimeWindowSeconds": 300,
            "cpuEvictPolicy": "evictByAllocatable"}},
        cpu_burst_config={"clusterStrategy": {"policy": "auto", "cpuBurstPercent": 500, "cfsQuotaBurstPercent": 200,
                                              "cfsQuotaBurstPeriodSeconds": 60, "sharePoolThresholdPercent": 80}},
        system_config={"clusterStrategy": {"minFreeKbytesFactor": 200, "watermarkScaleFactor": 400,
                                           "memcgReapBackGround": 1, "totalNetworkBandwidth": "10G"}},
    ))
    assert parsed.errors == {}
    spec = render_nodeslo_spec(strategy_for_node(parsed, {}))
    assert spec["metricCollectPolicy"] == {"aggregateDurationSeconds": 120, "reportIntervalSeconds": 30,
                                           "nodeAggregatePolicy": {"durations": ["1m", "1h30m"]},
                                           "nodeMemoryCollectPolicy": "usageWithHotPageCache"}
    assert spec["resourceUsedThresholdWithBE"]["cpuEvictBESatisfactionUpperPercent"] == 60
    assert spec["systemStrategy"]["totalNetworkBandwidth"] == "10G"
    assert spec["extensions"] == {"vendor": {"enabled": True, "ratio": 1.5}}
    _assert_valid_nodeslo(spec)


def test_rendering_is_stable() -> None:
    parsed = parse_config(_data(colocation_config={"clusterStrategy": {"extensions": {"a": {"b": [1]}}}}))
    first = render_nodeslo_spec(strategy_for_node(parsed, {}))
    first["extensions"]["a"]["b"].append(2)  # the caller's copy: the strategy is untouched
    assert render_nodeslo_spec(strategy_for_node(parsed, {})) == {**DEFAULT_SPEC, "extensions": {"a": {"b": [1]}}}


# --------------------------------------------------------------------------------------------
# host-application-config: Koordinator's shape, lists that replace, and the NodeSLO's hostApplications.

NGINX = {"name": "nginx", "priority": "koord-prod", "qos": "LS",
         "cgroupPath": {"base": "CgroupRoot", "parentDir": "system.slice", "relativePath": "nginx.service"}}


def test_host_applications_render_into_the_nodeslo_and_a_node_config_replaces_them() -> None:
    parsed = parse_config(_data(host_application_config={
        "applications": [NGINX, {"name": "backup", "qos": "BE"}],
        "nodeConfigs": [{"name": "bare", "nodeSelector": {"matchLabels": {"pool": "bare"}}},
                        {"name": "db", "nodeSelector": {"matchLabels": {"pool": "db"}},
                         "applications": [{"name": "mysqld", "qos": "LSR"}]}]}))
    assert parsed.errors == {}
    spec = render_nodeslo_spec(strategy_for_node(parsed, {}))
    assert spec["hostApplications"] == [NGINX, {"name": "backup", "qos": "BE"}]
    assert {key: value for key, value in spec.items() if key != "hostApplications"} == DEFAULT_SPEC
    _assert_valid_nodeslo(spec)
    assert render_nodeslo_spec(strategy_for_node(parsed, {"pool": "db"}))["hostApplications"] == [
        {"name": "mysqld", "qos": "LSR"}]
    # A node config without applications gives its nodes none (as Koordinator), not the cluster's.
    assert "hostApplications" not in render_nodeslo_spec(strategy_for_node(parsed, {"pool": "bare"}))


@pytest.mark.parametrize(("config", "error"), [
    ({"applications": [{"name": "a"}, {"name": "a"}]}, "applications: name 'a' is given twice"),
    ({"applications": [{"name": "a", "qos": "Burstable"}]}, "applications[0].qos: Input should be "),
    ({"applications": [{"name": ""}]}, "applications[0].name: String should have at least 1 character"),
    ({"applications": [{"name": "a", "cgroupPath": {"parentDir": "x/../.."}}]},
     "applications[0].cgroupPath.parentDir: may not contain '..'"),
    ({"applications": [{"name": "a", "cgroupPath": {"base": "Root"}}]}, "applications[0].cgroupPath.base: "),
    ({"applications": [{"name": f"a{n}"} for n in range(257)]}, "applications: List should have at most 256"),
    ({"clusterStrategy": {}}, 'unknown field "clusterStrategy": expected {"applications": [...], "nodeConfigs"'),
    ({"nodeConfigs": [{"name": "x", "applications": []}]}, 'nodeConfigs[0] ("x").nodeSelector: Required value'),
    ({"nodeConfigs": [{"name": "x", "nodeSelector": {}, "applications": [{"qos": "LS"}]}]},
     'nodeConfigs[0] ("x").applications[0].name: Field required'),
])
def test_a_bad_host_application_config_names_the_entry(config: dict[str, Any], error: str) -> None:
    message = parse_config(_data(host_application_config=config)).errors["host-application-config"]
    assert message.startswith(f"host-application-config: {error}"), message
