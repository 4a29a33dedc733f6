"""The extender's answers to the scheduler's filter and prioritize calls, from cached figures. No I/O.

Filter: the candidates the load-aware filter passes, and the others as
`FailedAndUnresolvableNodes`, never `FailedNodes`: the scheduler's preemption then never
nominates a node filtered for its load (evicting lower-priority pods would not lower the load the
report shows soon enough to matter). Prioritize: each candidate's 0..10 score, and the best fresh
one (the first of equals) takes the pod as a tentative placement, so that the next pods of a burst
see it there before the pod watch does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.loadaware.extender_wire import ExtenderArgs, filter_result, host_priority_list
from colocation.loadaware.load_aware_config import LoadAwareConfig
from colocation.loadaware.load_aware_filter import FilterOutcome, filter_nodes
from colocation.loadaware.load_aware_score import ScoreOutcome, score_nodes
from colocation.loadaware.node_figure_cache import NodeFigureCache
from colocation.loadaware.node_figures import AssignedPod, NodeFigures, freshness
from colocation.loadaware.pod_estimate import judged_pod
from colocation.loadaware.tentative_placements import TentativePlacements


@dataclass(frozen=True, slots=True, kw_only=True)
class PrioritizeAnswer:
    body: list[dict[str, Any]]
    outcome: ScoreOutcome
    placed_on: str | None  # the node the pod was placed on tentatively


class LoadAwareExtender:
    def __init__(self, cache: NodeFigureCache, tentatives: TentativePlacements, *,
                 config: Callable[[], LoadAwareConfig], clock: Callable[[], float]) -> None:
        self._cache = cache
        self._tentatives = tentatives
        self._config = config
        self._clock = clock  # the wall clock, as NodeMetric receipt times are

    def filter(self, args: ExtenderArgs) -> tuple[dict[str, Any], FilterOutcome]:
        config = self._current_config()
        figures = self._cache.figures(config)
        outcome = filter_nodes(args.names, figures, pod=judged_pod(args.pod, config=config), config=config,
                               now=self._clock())
        return filter_result(args, passed=outcome.passed, unresolvable=outcome.failed), outcome

    def prioritize(self, args: ExtenderArgs) -> PrioritizeAnswer:
        config = self._current_config()
        figures = self._cache.figures(config)
        pod = judged_pod(args.pod, config=config)
        now = self._clock()
        outcome = score_nodes(args.names, figures, pod=pod, config=config, now=now)
        best = _best_fresh(args.names, outcome.scores, figures, now=now, config=config)
        metadata = args.pod.get("metadata") or {}
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        skipped = pod.batch and config.batch_pods == "skipped"
        if best is not None and uid and not skipped:
            self._tentatives.place(str(uid), node=best, pod=AssignedPod(
                namespace=str(metadata.get("namespace") or ""), name=str(metadata.get("name") or ""),
                estimate=pod.estimate, prod=pod.prod, assigned_at=None))
        else:
            best = None
        return PrioritizeAnswer(body=host_priority_list(outcome.scores, args.names), outcome=outcome, placed_on=best)

    def _current_config(self) -> LoadAwareConfig:
        config = self._config()
        self._tentatives.hold_seconds = config.tentative_hold_seconds
        return config


def _best_fresh(names: tuple[str, ...], scores: Mapping[str, int], figures: Mapping[str, NodeFigures], *,
                now: float, config: LoadAwareConfig) -> str | None:
    """The first fresh candidate of the highest score: the scores in one pass, freshness only for those."""
    for score in sorted(set(scores.values()), reverse=True):
        for name in names:
            if scores[name] == score and freshness(figures.get(name), now=now,
                                                   expiration_seconds=config.node_metric_expiration_seconds) == "fresh":
                return name
    return None
