"""The `load-aware-config` key: Koordinator's defaults and bounds, one-line errors, its place in colocation-config."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest

from colocation.koordinator.slo_config import ConfigError
from colocation.loadaware.load_aware_config import LoadAwareConfig, parse_load_aware_config
from colocation.nodemetrics.report_schema import AggregationType


def test_the_defaults_are_koordinators() -> None:
    # Koordinator's SetDefaults_LoadAwareSchedulingArgs, plus our own three fields.
    assert parse_load_aware_config("{}").to_json() == {
        "usageThresholds": {"cpu": 65, "memory": 95},
        "prodUsageThresholds": {},
        "resourceWeights": {"cpu": 1, "memory": 1},
        "estimatedScalingFactors": {"cpu": 85, "memory": 70},
        "nodeMetricExpirationSeconds": 180,
        "batchPods": "judged",
        "tentativeHoldSeconds": 30,
    }
    assert LoadAwareConfig() == parse_load_aware_config("{}")


def test_a_threshold_map_replaces_the_defaults_whole_and_an_empty_one_keeps_them() -> None:
    # As Koordinator: {"cpu": 50} checks cpu only; {} is the defaults.
    assert parse_load_aware_config('{"usageThresholds": {"cpu": 50}}').usage_thresholds == {"cpu": 50}
    assert parse_load_aware_config('{"usageThresholds": {}}').usage_thresholds == {"cpu": 65, "memory": 95}
    assert parse_load_aware_config('{"resourceWeights": {}}').resource_weights == {"cpu": 1, "memory": 1}


def test_scaling_factors_left_out_take_the_defaults() -> None:
    config = parse_load_aware_config('{"estimatedScalingFactors": {"cpu": 50}}')
    assert config.estimated_scaling_factors == {"cpu": 50, "memory": 70}


def test_aggregated_names_a_figure_reports_carry() -> None:
    config = parse_load_aware_config('{"aggregated": {"type": "p95", "duration": "5m"}}')
    assert config.aggregated is not None
    assert (config.aggregated.type, config.aggregated.duration_nanos) == ("p95", 300 * 10**9)
    longest = parse_load_aware_config('{"aggregated": {"type": "avg"}}').aggregated
    assert longest is not None and longest.duration_nanos is None
    # Only the aggregations an agent reports are offered.
    assert set(get_args(AggregationType)) == {"avg", "p50", "p90", "p95", "p99"}


@pytest.mark.parametrize(("document", "error"), [
    ({"usageThresholds": {"cpu": 101}}, "usageThresholds.cpu: Input should be less than or equal to 100 (got 101)"),
    ({"usageThresholds": {"gpu": 50}}, "usageThresholds.gpu[key]: Input should be 'cpu' or 'memory' (got \"gpu\")"),
    ({"resourceWeights": {"cpu": 0}}, "resourceWeights.cpu: Input should be greater than or equal to 1 (got 0)"),
    ({"estimatedScalingFactors": {"memory": 110}},
     "estimatedScalingFactors.memory: Input should be less than or equal to 100 (got 110)"),
    ({"nodeMetricExpirationSeconds": "60"},
     "nodeMetricExpirationSeconds: Input should be a valid integer (got \"60\")"),
    ({"nodeMetricExpirationSeconds": 0},
     "nodeMetricExpirationSeconds: Input should be greater than or equal to 1 (got 0)"),
    ({"aggregated": {"type": "p42"}},
     "aggregated.type: Input should be 'avg', 'p50', 'p90', 'p95' or 'p99' (got \"p42\")"),
    ({"batchPods": "ignored"}, "batchPods: Input should be 'judged' or 'skipped' (got \"ignored\")"),
    ({"tentativeHoldSeconds": 601}, "tentativeHoldSeconds: Input should be less than or equal to 600 (got 601)"),
    # A misspelt field is an error, not silently the default.
    ({"usageThreshold": {"cpu": 50}}, "usageThreshold: Extra inputs are not permitted"),
])
def test_an_invalid_value_is_one_line_naming_the_field(document: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_load_aware_config(json.dumps(document))
    assert str(raised.value) == error


@pytest.mark.parametrize(("text", "error"), [
    ("[]", "must be a JSON object, not a list"),
    ('{"usageThresholds": NaN}', "invalid JSON: NaN is not valid JSON"),
])
def test_the_key_must_be_one_json_object(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match="^" + error):
        parse_load_aware_config(text)
