"""A node's load as a scheduling request reads it: its reported usage plus what its reports do not show yet.

`reported_load` reads a NodeMetric `status` once, when the report arrives. `node_figures` adds the
pods bound to the node (and those placed there tentatively) as Koordinator's plugin does: a pod
counts its estimate, less the usage the report shows for it, when the report does not list it or
when it was bound less than one report interval before the report (the report's averages barely
include it). The prod figure is the usage of pods that are prod both in the report and in their
spec, plus the same estimates for prod pods. Times are the server's: the report's receipt time,
and PodScheduled's lastTransitionTime.

Which usage: unset `aggregated`, the report's short window (`recentUsage`, 10 s), else its
`nodeUsage`; with `aggregated`, that aggregation over that window (the longest the report has,
when no window is named), else `nodeUsage`: a report without the figure is still judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from colocation.apimachinery.goduration import parse_go_duration
from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.loadaware.load_aware_config import LOAD_AWARE_RESOURCES, LoadAwareConfig
from colocation.loadaware.pod_estimate import Resources

PodKey = tuple[str, str]  # (namespace, name), as a report names its pods
Freshness = Literal["fresh", "stale", "missing"]
DEFAULT_REPORT_INTERVAL_SECONDS = 60.0  # colocation-config metricReportIntervalSeconds, Koordinator's too


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportedLoad:
    """What one report says, in numbers."""

    received_at: float  # when this server received it (seconds since the epoch, its own clock)
    node_usage: Resources
    pod_usages: Mapping[PodKey, Resources] = field(default_factory=dict)
    prod_pods: frozenset[PodKey] = frozenset()  # the pods it reports as koord-prod
    report_interval_seconds: float = DEFAULT_REPORT_INTERVAL_SECONDS


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignedPod:
    """A pod bound to the node, or placed there tentatively."""

    namespace: str
    name: str
    estimate: Resources  # pod_estimate.estimate_pod
    prod: bool
    assigned_at: float | None  # PodScheduled's lastTransitionTime; None: not bound yet, always estimated


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFigures:
    """A node's allocatable and load, ready for the filter and the score."""

    allocatable: Resources
    received_at: float | None  # None: the node has no NodeMetric
    used: Resources = field(default_factory=dict)
    prod_used: Resources = field(default_factory=dict)
    # The same numbers as one tuple, (allocatable, used, prod used) of cpu then memory: a request
    # reads them for thousands of candidates, and unpacking a tuple costs less than six dict reads.
    flat: tuple[int, int, int, int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        allocatable, used, prod_used = self.allocatable, self.used, self.prod_used
        object.__setattr__(self, "flat", (allocatable.get("cpu", 0), allocatable.get("memory", 0),
                                          used.get("cpu", 0), used.get("memory", 0),
                                          prod_used.get("cpu", 0), prod_used.get("memory", 0)))


def reported_load(status: Mapping[str, Any], *, received_at: float, config: LoadAwareConfig,
                  report_interval_seconds: float = DEFAULT_REPORT_INTERVAL_SECONDS) -> ReportedLoad:
    """The numbers of a NodeMetric `status` (report_schema's shape) for this configuration."""
    node = _mapping(status.get("nodeMetric"))
    recent = _resources(_mapping(node.get("recentUsage")))
    if config.aggregated is not None:
        usage = _aggregated(node, config) or _resources(_mapping(node.get("nodeUsage")))
        short_window = False
    else:
        short_window = bool(recent)
        usage = recent or _resources(_mapping(node.get("nodeUsage")))
    figures: dict[PodKey, Mapping[str, Any]] = {}
    prod_pods: set[PodKey] = set()
    pods = status.get("podsMetric")
    for pod in pods if isinstance(pods, list) else []:
        pod = _mapping(pod)
        key = (str(pod.get("namespace", "")), str(pod.get("name", "")))
        # The pod's figure over the node's window, so that the two subtract meaningfully.
        figure = _mapping(_mapping(pod.get("recentUsage")).get("resources")) if short_window else {}
        if not _has_usage(figure):
            figure = _mapping(_mapping(pod.get("podUsage")).get("resources"))
        if _has_usage(figure):
            figures[key] = figure
            if pod.get("priority") == "koord-prod":
                prod_pods.add(key)
    return ReportedLoad(received_at=received_at, node_usage=usage, pod_usages=PodUsages(figures),
                        prod_pods=frozenset(prod_pods), report_interval_seconds=report_interval_seconds)


class PodUsages(Mapping[PodKey, Resources]):
    """Each reported pod's usage, its quantities parsed when first read: a report lists every pod,
    and a node's figures read the usage of only some (parsing them all cost most of a report)."""

    __slots__ = ("_figures", "_parsed")

    def __init__(self, figures: Mapping[PodKey, Mapping[str, Any]]) -> None:
        self._figures = figures  # the pod's `resources` map, which names cpu or memory
        self._parsed: dict[PodKey, Resources] = {}

    def __getitem__(self, key: PodKey) -> Resources:
        parsed = self._parsed.get(key)
        if parsed is None:
            parsed = self._parsed[key] = _quantities(self._figures[key])
        return parsed

    def __contains__(self, key: object) -> bool:
        return key in self._figures

    def __iter__(self) -> Iterator[PodKey]:
        return iter(self._figures)

    def __len__(self) -> int:
        return len(self._figures)


def _has_usage(resources: Mapping[str, Any]) -> bool:
    return "cpu" in resources or "memory" in resources


def node_figures(*, allocatable: Resources, report: ReportedLoad | None,
                 assigned: Iterable[AssignedPod] = (), prod_usage: bool = True) -> NodeFigures:
    """The node's load: reported usage plus the estimates of pods its report does not show yet.
    `prod_usage` False leaves the prod figure at 0 (no prodUsageThresholds read it), and so
    parses the usage of only the pods bound within the report's interval."""
    if report is None:
        return NodeFigures(allocatable=allocatable, received_at=None)
    used: dict[str, int] = {name: report.node_usage.get(name, 0) for name in LOAD_AWARE_RESOURCES}
    prod_used: dict[str, int] = dict.fromkeys(LOAD_AWARE_RESOURCES, 0)
    settled_before = report.received_at - report.report_interval_seconds
    usages = report.pod_usages
    for pod in assigned:
        key = (pod.namespace, pod.name)
        reported = key in usages
        recent = pod.assigned_at is None or pod.assigned_at > settled_before
        if not reported or recent:
            _add_excess(used, pod.estimate, usages[key] if reported else None)
        if not (prod_usage and pod.prod):
            continue
        reported_prod = reported and key in report.prod_pods
        if reported_prod:
            _add(prod_used, usages[key])
        if not reported or recent or not reported_prod:
            # A prod pod the report does not call prod is not in prod usage: its whole estimate counts.
            _add_excess(prod_used, pod.estimate, usages[key] if reported_prod else None)
    return NodeFigures(allocatable=allocatable, received_at=report.received_at, used=used, prod_used=prod_used)


def freshness(figures: NodeFigures | None, *, now: float, expiration_seconds: float) -> Freshness:
    """Whether the node's report is usable: received less than `expiration_seconds` before `now`."""
    if figures is None or figures.received_at is None:
        return "missing"
    return "fresh" if now - figures.received_at < expiration_seconds else "stale"


def _aggregated(node: Mapping[str, Any], config: LoadAwareConfig) -> dict[str, int]:
    assert config.aggregated is not None
    wanted = config.aggregated.duration_nanos
    best: tuple[int, dict[str, int]] | None = None
    entries = node.get("aggregatedNodeUsages")
    for entry in entries if isinstance(entries, list) else []:
        entry = _mapping(entry)
        duration = entry.get("duration")
        nanos = parse_go_duration(duration) if isinstance(duration, str) else None
        figure = _resources(_mapping(_mapping(entry.get("usage")).get(config.aggregated.type)))
        if nanos is None or not figure or (wanted is not None and nanos != wanted):
            continue
        if best is None or nanos > best[0]:
            best = (nanos, figure)
    return best[1] if best else {}


def _resources(resource_map: Mapping[str, Any]) -> dict[str, int]:
    return _quantities(_mapping(resource_map.get("resources")))


def _quantities(values: Mapping[str, Any]) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, convert in (("cpu", cpu_millis), ("memory", byte_value)):
        if name in values:
            try:
                found[name] = convert(values[name])
            except (ValueError, TypeError):
                continue  # a report that passed validation has none; a hand-built one may
    return found


def _add(total: dict[str, int], more: Resources) -> None:
    for name in total:
        total[name] += more.get(name, 0)


def _add_excess(total: dict[str, int], estimate: Resources, usage: Resources | None) -> None:
    """total += max(0, estimate - usage) per resource: the part of the estimate the report misses."""
    for name in total:
        total[name] += max(0, estimate.get(name, 0) - (usage or {}).get(name, 0))


def _mapping(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # what orjson gives: spares the slower ABC check, 12 times per pod
        return value
    return value if isinstance(value, Mapping) else _NOTHING


_NOTHING: Mapping[str, Any] = MappingProxyType({})
