"""The `load-aware-config` key of colocation-config: Koordinator's LoadAwareSchedulingArgs, ours.

Field names, bounds and defaults are Koordinator's where it has the field (usageThresholds,
prodUsageThresholds, resourceWeights, estimatedScalingFactors, nodeMetricExpirationSeconds). The
key is one flat JSON object, as Koordinator's plugin arguments are, not the clusterStrategy /
nodeStrategies shape of the NodeSLO keys: it configures the scheduler, not a node. Unknown fields
are errors, so a misspelt threshold is reported rather than ignored.

Where it departs from Koordinator, on purpose:
- `aggregated` picks one usage figure for both filter and score (Koordinator has separate
  thresholds and types for each); unset, the node's most recent usage is read.
- A node whose NodeMetric is older than `nodeMetricExpirationSeconds`, or has none, is neither
  filtered nor favoured (Koordinator filters it out and scores it 0 by default).
- `batchPods` says how batch pods are judged: `judged` (Koordinator's behaviour: against
  `usageThresholds`, their estimate read from their batch-cpu / batch-memory requests) or `skipped`
  (left to the batch resources, which already follow the node's usage).
- `tentativeHoldSeconds` is ours: how long a pod ranked first counts on its node before a watch
  shows it bound.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from colocation.apimachinery.goduration import parse_go_duration
from colocation.koordinator.slo_config import parse_object_key
from colocation.koordinator.slo_strategies import GoDuration, Percent, Strategy

# What an agent aggregates over each window of its NodeSLO's nodeAggregatePolicy: only what reports carry.
from colocation.nodemetrics.report_schema import AggregationType

LOAD_AWARE_KEY = "load-aware-config"

# The resources our agents report usage of: a threshold, weight or factor of any other is refused.
LoadAwareResource = Literal["cpu", "memory"]
LOAD_AWARE_RESOURCES: tuple[LoadAwareResource, ...] = ("cpu", "memory")
# Koordinator bounds weights and scaling factors to 1..100.
_OneToHundred = Annotated[int, Field(ge=1, le=100)]

DEFAULT_USAGE_THRESHOLDS: dict[LoadAwareResource, int] = {"cpu": 65, "memory": 95}
DEFAULT_RESOURCE_WEIGHTS: dict[LoadAwareResource, int] = {"cpu": 1, "memory": 1}
DEFAULT_SCALING_FACTORS: dict[LoadAwareResource, int] = {"cpu": 85, "memory": 70}


class AggregatedUsage(Strategy):
    """An aggregated figure of the report instead of its most recent usage."""

    model_config = ConfigDict(extra="forbid")

    type: AggregationType
    # One of the windows the agents aggregate over (colocation-config metricAggregatePolicy);
    # unset: the longest window the report carries, as Koordinator defaults it.
    duration: GoDuration | None = None

    @property
    def duration_nanos(self) -> int | None:
        return None if self.duration is None else parse_go_duration(self.duration)


class LoadAwareConfig(Strategy):
    """The value of `load-aware-config`; every field has a default, so `{}` is valid."""

    model_config = ConfigDict(extra="forbid")

    # Percent of allocatable; 0 for a resource turns its check off (Koordinator's convention).
    usage_thresholds: dict[LoadAwareResource, Percent] = Field(
        default_factory=lambda: dict(DEFAULT_USAGE_THRESHOLDS))
    # For prod pods, judged against the usage of prod pods only; empty: prod pods take usageThresholds.
    prod_usage_thresholds: dict[LoadAwareResource, Percent] = Field(default_factory=dict)
    resource_weights: dict[LoadAwareResource, _OneToHundred] = Field(
        default_factory=lambda: dict(DEFAULT_RESOURCE_WEIGHTS))
    estimated_scaling_factors: dict[LoadAwareResource, _OneToHundred] = Field(
        default_factory=lambda: dict(DEFAULT_SCALING_FACTORS))
    node_metric_expiration_seconds: Annotated[int, Field(ge=1, le=86_400)] = 180
    aggregated: AggregatedUsage | None = None
    batch_pods: Literal["judged", "skipped"] = "judged"
    tentative_hold_seconds: Annotated[int, Field(ge=0, le=600)] = 30

    @field_validator("usage_thresholds")
    @classmethod
    def _thresholds_or_defaults(cls, value: dict[LoadAwareResource, int]) -> dict[LoadAwareResource, int]:
        # As Koordinator: an empty map takes the defaults; any other replaces them whole.
        return value or dict(DEFAULT_USAGE_THRESHOLDS)

    @field_validator("resource_weights")
    @classmethod
    def _weights_or_defaults(cls, value: dict[LoadAwareResource, int]) -> dict[LoadAwareResource, int]:
        return value or dict(DEFAULT_RESOURCE_WEIGHTS)

    @field_validator("estimated_scaling_factors")
    @classmethod
    def _factors_for_every_resource(cls, value: dict[LoadAwareResource, int]) -> dict[LoadAwareResource, int]:
        # Koordinator fills the factors left out from its defaults.
        return {**DEFAULT_SCALING_FACTORS, **value}


def parse_load_aware_config(text: str) -> LoadAwareConfig:
    """Parse the key's JSON; raises ConfigError with a one-line message (field, then problem)."""
    return parse_object_key(LoadAwareConfig, text)
