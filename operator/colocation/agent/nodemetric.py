"""The NodeMetric an agent reports, built from the aggregator's figures and the node's pods.

The shape is the one the leader validates (colocation.nodemetrics.report_schema), quantities in
canonical text ("2500m", "1536Mi"). Pure functions. Pods are matched to their usage by UID, else
by namespace and name (the synthetic collector knows pods by name). A cgroup of an unknown pod,
and a known pod without usage, are left out: the leader counts the latter's request instead.
`recentUsage` is our short-window extension; `prodReclaimableMetric` comes from the peak
predictor and is left out while it has no history.

The short window: docs/agent.md#the-short-window
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from colocation.agent.aggregate import AggregatedUsage, Aggregator, RecentUsage, Usage
from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.peak_predictor import ProdPodKey
from colocation.apimachinery.clock import format_time
from colocation.apimachinery.goduration import format_go_duration
from colocation.apimachinery.quantity import format_bytes, format_millis

API_VERSION = "metrics.colocation.dev/v1alpha1"
KIND = "NodeMetric"


@dataclass(frozen=True)
class PodUsage:
    info: PodInfo
    usage: Usage
    recent: Usage | None = None  # over the short window, when the pod has samples in it


def resource_map(usage: Usage) -> dict[str, Any]:
    return {"resources": {"cpu": format_millis(max(usage.cpu_millis, 0)),
                          "memory": format_bytes(max(usage.memory_bytes, 0))}}


def go_duration(seconds: int) -> str:
    """Seconds as Go's time.Duration prints them: "5m0s", "1h0m0s", "45s"."""
    return format_go_duration(seconds * 10**9)


def build_node_metric(node: str, *, update_time: float, node_usage: Usage, system_usage: Usage | None = None,
                      aggregated: Sequence[AggregatedUsage] = (), pods: Iterable[PodUsage] = (),
                      host_applications: Mapping[str, Usage] | None = None,
                      host_classes: Mapping[str, tuple[str | None, str | None]] | None = None,
                      prod_reclaimable: Usage | None = None, recent: RecentUsage | None = None) -> dict[str, Any]:
    """The NodeMetric JSON for `PUT …/nodemetrics/{node}/status`. Pods are sorted by namespace/name.

    `recent.node` and `recent.window_seconds` make `nodeMetric.recentUsage`; each pod's own
    `recent` its `recentUsage` (`recent.pods`, keyed by UID, is matched by the caller). A host
    application's priority and qos (`host_classes`, by name) are reported where the NodeSLO set them."""
    node_metric: dict[str, Any] = {"nodeUsage": resource_map(node_usage)}
    if recent is not None:
        node_metric["recentUsage"] = {**resource_map(recent.node), "windowSeconds": recent.window_seconds}
    if system_usage is not None:
        node_metric["systemUsage"] = resource_map(system_usage)
    if aggregated:
        node_metric["aggregatedNodeUsages"] = [
            {"usage": {"avg": resource_map(entry.avg), "p50": resource_map(entry.p50),
                       "p90": resource_map(entry.p90), "p95": resource_map(entry.p95),
                       "p99": resource_map(entry.p99)},
             "duration": go_duration(entry.duration_seconds)}
            for entry in aggregated]
    status: dict[str, Any] = {
        "updateTime": format_time(update_time),
        "nodeMetric": node_metric,
        "podsMetric": [_pod_metric(pod) for pod in sorted(pods, key=lambda p: (p.info.namespace, p.info.name))],
    }
    if host_applications:
        status["hostApplicationMetric"] = [_host_application_metric(name, usage, (host_classes or {}).get(name))
                                           for name, usage in sorted(host_applications.items())]
    if prod_reclaimable is not None:
        status["prodReclaimableMetric"] = {"resource": resource_map(prod_reclaimable)}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": node}, "status": status}


def _host_application_metric(name: str, usage: Usage,
                             classes: tuple[str | None, str | None] | None) -> dict[str, Any]:
    metric: dict[str, Any] = {"name": name, "usage": resource_map(usage)}
    priority, qos = classes or (None, None)
    if priority:
        metric["priority"] = priority
    if qos:
        metric["qos"] = qos
    return metric


def _pod_metric(pod: PodUsage) -> dict[str, Any]:
    metric: dict[str, Any] = {"namespace": pod.info.namespace, "name": pod.info.name,
                              "podUsage": resource_map(pod.usage), "priority": pod.info.priority, "qos": pod.info.qos}
    if pod.recent is not None:
        metric["recentUsage"] = resource_map(pod.recent)
    return metric


def match_pods(usages: Mapping[str, Usage], by_uid: Mapping[str, PodInfo],
               by_name: Mapping[tuple[str, str], PodInfo], *, latest: Sample | None) -> list[PodUsage]:
    """Pair each measured pod (UID → usage) with what the API says about it; unknown ones are dropped."""
    names = {pod.uid: (pod.namespace, pod.name) for pod in (latest.pods if latest else ())
             if pod.namespace and pod.name}
    matched: dict[tuple[str, str], PodUsage] = {}
    for uid, usage in usages.items():
        info = by_uid.get(uid)
        if info is None and uid in names:
            info = by_name.get(names[uid])
        if info is not None:
            matched[(info.namespace, info.name)] = PodUsage(info, usage)  # one entry per pod, whatever the UIDs
    return list(matched.values())


def prod_pods_of(sample: Sample, by_uid: Mapping[str, PodInfo],
                 by_name: Mapping[tuple[str, str], PodInfo]) -> list[tuple[ProdPodKey, int | None, int]]:
    """The prod pods of a sample, for the peak predictor: (pod, cpu millis or None if unmeasured, memory)."""
    found: dict[ProdPodKey, tuple[ProdPodKey, int | None, int]] = {}
    for pod in sample.pods:
        info = by_uid.get(pod.uid)
        if info is None and pod.namespace and pod.name:
            info = by_name.get((pod.namespace, pod.name))
        if info is not None and info.priority == "koord-prod":
            key = (info.namespace, info.name)
            found[key] = (key, pod.cpu_millis if pod.cpu_measured else None, pod.memory_bytes)
    return list(found.values())


def prod_requests(by_name: Mapping[tuple[str, str], PodInfo]) -> dict[ProdPodKey, Usage]:
    """What each prod pod the node runs requests (terminated pods are not in the directory)."""
    return {key: Usage(info.cpu_request_millis, info.memory_request_bytes)
            for key, info in by_name.items() if info.priority == "koord-prod"}


def node_metric_from(aggregator: Aggregator, node: str, now: float, *, by_uid: Mapping[str, PodInfo],
                     by_name: Mapping[tuple[str, str], PodInfo],
                     prod_reclaimable: Usage | None = None) -> dict[str, Any] | None:
    """The report from the aggregator's current windows; None while there is nothing to report."""
    node_usage = aggregator.node_usage(now)
    if node_usage is None:
        return None
    latest = aggregator.latest()
    pods = match_pods(aggregator.pod_usages(now), by_uid, by_name, latest=latest)
    recent = aggregator.recent(now)
    if recent is not None:
        recent_by_name = {(pod.info.namespace, pod.info.name): pod.usage
                          for pod in match_pods(recent.pods, by_uid, by_name, latest=latest)}
        pods = [PodUsage(pod.info, pod.usage, recent_by_name.get((pod.info.namespace, pod.info.name)))
                for pod in pods]
    return build_node_metric(node, update_time=now, node_usage=node_usage,
                             system_usage=aggregator.system_usage(now), aggregated=aggregator.aggregated(now),
                             pods=pods, host_applications=aggregator.host_application_usages(now),
                             host_classes={app.name: (app.priority, app.qos)
                                           for app in (latest.host_applications if latest else ())},
                             prod_reclaimable=prod_reclaimable, recent=recent)
