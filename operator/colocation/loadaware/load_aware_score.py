"""The score: Koordinator's loadAwareScheduling score, on the scheduler extender's 0..10 scale.

Per resource of `resourceWeights`, (allocatable - (load + the pod's estimate)) * 100 / allocatable,
in whole numbers and 0 when the load is above allocatable or allocatable is 0; then the weighted
average, rounded down (Koordinator's 0..100 node score). The extender answers 0..10
(MaxExtenderPriority; the scheduler multiplies it by the extender's weight and by 10), so the
score is divided by 10, rounded half up. The load is the node's usage for every pod, prod pods
included, as Koordinator scores by default.

The neutral score, given to a candidate without a NodeMetric or whose report is too old: the mean
of the fresh candidates' 0..100 scores, on the 0..10 scale; 5 when no candidate is fresh. Its load
is unknown, and the mean puts it below the less loaded half of its peers and above the more
loaded half: it is neither favoured nor punished. A fixed value would be one or the other (0,
Koordinator's, sends it no pods; 5 favours it whenever the others are busy), and a burst of pods
would follow.

With `batchPods: skipped`, every candidate scores 0 for a batch pod: the extender has no say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.node_figures import NodeFigures
from colocation.loadaware.pod_estimate import JudgedPod

MAX_NODE_SCORE = 100  # the scheduler's framework.MaxNodeScore
MAX_EXTENDER_PRIORITY = 10  # the scheduler's extenderv1.MaxExtenderPriority


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreOutcome:
    """A 0..10 score for each candidate, the neutral score the unknown ones got, and counters."""

    scores: Mapping[str, int]
    neutral: int
    stale: int = 0
    missing: int = 0


def score_nodes(names: Sequence[str], figures: Mapping[str, NodeFigures], *, pod: JudgedPod,
                config: LoadAwareConfig, now: float) -> ScoreOutcome:
    """Score each candidate in `names`; `now` is the server's clock, as receipt times are."""
    if pod.batch and config.batch_pods == "skipped":
        return ScoreOutcome(scores=dict.fromkeys(names, 0), neutral=0)
    weigh = _Weighing.of(pod, config)
    expiration = config.node_metric_expiration_seconds
    fresh: dict[str, int] = {}
    stale = missing = 0
    for name in names:
        node = figures.get(name)
        if node is None or node.received_at is None:
            missing += 1
        elif now - node.received_at >= expiration:
            stale += 1
        else:
            fresh[name] = weigh.load_score(node)
    # The mean rounded half up, then on the 0..10 scale.
    mean = (2 * sum(fresh.values()) + len(fresh)) // (2 * len(fresh)) if fresh else MAX_NODE_SCORE // 2
    neutral = extender_score(mean)
    on_scale = _EXTENDER_SCORES
    scores = {name: on_scale[fresh[name]] if name in fresh else neutral for name in names}
    return ScoreOutcome(scores=scores, neutral=neutral, stale=stale, missing=missing)


def load_score(node: NodeFigures, *, pod: JudgedPod, config: LoadAwareConfig) -> int:
    """Koordinator's 0..100 score of a node with a fresh report: the weighted mean of its free shares."""
    return _Weighing.of(pod, config).load_score(node)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Weighing:
    """What a request's scores need of the pod and the configuration, computed once per request."""

    cpu_estimate: int
    memory_estimate: int
    cpu_weight: int  # 0: not weighed
    memory_weight: int
    weights: int

    @classmethod
    def of(cls, pod: JudgedPod, config: LoadAwareConfig) -> _Weighing:
        cpu_weight = config.resource_weights.get("cpu", 0)
        memory_weight = config.resource_weights.get("memory", 0)
        return cls(cpu_estimate=pod.estimate.get("cpu", 0), memory_estimate=pod.estimate.get("memory", 0),
                   cpu_weight=cpu_weight, memory_weight=memory_weight, weights=cpu_weight + memory_weight)

    def load_score(self, node: NodeFigures) -> int:
        if not self.weights:
            return 0
        cpu_total, memory_total, cpu_used, memory_used, _, _ = node.flat
        total = 0
        if self.cpu_weight:
            total += least_used_score(cpu_used + self.cpu_estimate, cpu_total) * self.cpu_weight
        if self.memory_weight:
            total += least_used_score(memory_used + self.memory_estimate, memory_total) * self.memory_weight
        return total // self.weights


def least_used_score(used: int, capacity: int) -> int:
    """The unused share of `capacity`, 0..100, rounded down."""
    if capacity <= 0 or used > capacity:
        return 0
    return (capacity - used) * MAX_NODE_SCORE // capacity


def extender_score(node_score: int) -> int:
    """A 0..100 score on the extender's 0..10 scale, rounded half up."""
    return (node_score * MAX_EXTENDER_PRIORITY * 2 + MAX_NODE_SCORE) // (2 * MAX_NODE_SCORE)


_EXTENDER_SCORES = tuple(extender_score(score) for score in range(MAX_NODE_SCORE + 1))
