"""A node's collection policy, read from its NodeSLO, with the defaults of colocation-config."""

from __future__ import annotations

import pytest

from colocation.koordinator.collect_policy import CollectPolicy, collect_policy
from colocation.koordinator.collect_policy import duration_seconds as parse_go_duration


def test_the_policy_defaults_when_the_nodeslo_is_absent_or_silent() -> None:
    assert collect_policy(None) == CollectPolicy(aggregate_duration_seconds=300, report_interval_seconds=None,
                                                 durations=(300, 600, 1800), memory_policy="usageWithoutPageCache")
    assert collect_policy({"spec": {}}) == collect_policy(None)


def test_the_policy_comes_from_the_nodeslo() -> None:
    nodeslo = {"spec": {"metricCollectPolicy": {
        "aggregateDurationSeconds": 60, "reportIntervalSeconds": 20,
        "nodeAggregatePolicy": {"durations": ["10m", "5m", "1h", "bogus", "5m0s"]},
        "nodeMemoryCollectPolicy": "usageWithPageCache"}}}
    assert collect_policy(nodeslo) == CollectPolicy(aggregate_duration_seconds=60, report_interval_seconds=20,
                                                    durations=(300, 600, 3600), memory_policy="usageWithPageCache")


def test_unusable_policy_fields_keep_their_defaults() -> None:
    nodeslo = {"spec": {"metricCollectPolicy": {
        "aggregateDurationSeconds": 0, "reportIntervalSeconds": True,
        "nodeAggregatePolicy": {"durations": ["never"]}, "nodeMemoryCollectPolicy": "everything"}}}
    assert collect_policy(nodeslo) == CollectPolicy()


@pytest.mark.parametrize("text", ["", "5", "m5", "5m5", "-5m", "5d"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)

