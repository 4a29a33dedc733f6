"""The NodeMetric an agent builds: the shape the leader validates, canonical quantities, pod matching,
and the collection policy read from a NodeSLO."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from colocation.agent.aggregate import AggregatedUsage, Aggregator, Usage
from colocation.agent.classify import PodInfo, classify
from colocation.agent.collector import PodSample, Sample
from colocation.agent.nodemetric import (
    PodUsage,
    build_node_metric,
    go_duration,
    match_pods,
    node_metric_from,
    prod_pods_of,
    prod_requests,
)
from colocation.agent.synthetic import SyntheticCollector
from colocation.koordinator.collect_policy import duration_seconds as parse_go_duration
from colocation.nodemetrics.report_schema import validate_report

MI = 2**20
GI = 2**30
AT = 1795310523.75  # 2026-11-22T01:22:03.75Z


def pod(uid: str, name: str, namespace: str = "default", priority: Any = "koord-prod", qos: Any = "LS") -> PodInfo:
    return PodInfo(uid=uid, namespace=namespace, name=name, priority=priority, qos=qos, cpu_request_millis=0,
                   memory_request_bytes=0)


def test_the_report_has_the_shape_and_quantities_the_leader_accepts() -> None:
    usage = Usage(2500, 1536 * MI)
    aggregated = [AggregatedUsage(duration_seconds=300, avg=Usage(2000, GI), p50=Usage(1900, GI),
                                  p90=Usage(2400, 2 * GI), p95=Usage(2600, 2 * GI), p99=Usage(3000, 3 * GI))]
    pods = [PodUsage(pod("u2", "web-1"), Usage(250, 256 * MI)),
            PodUsage(pod("u1", "job-1", "batch", "koord-batch", "BE"), Usage(1000, 1000))]
    report = build_node_metric("node-a", update_time=AT, node_usage=usage, system_usage=Usage(300, 100 * MI + 1),
                               aggregated=aggregated, pods=pods, host_applications={"nginx": Usage(10, 64 * MI)})
    status = report["status"]
    assert status["updateTime"] == "2026-11-22T01:22:03Z"  # metav1.Time: whole seconds
    assert status["nodeMetric"]["nodeUsage"] == {"resources": {"cpu": "2500m", "memory": "1536Mi"}}
    assert status["nodeMetric"]["systemUsage"] == {"resources": {"cpu": "300m", "memory": str(100 * MI + 1)}}
    assert status["nodeMetric"]["aggregatedNodeUsages"][0]["duration"] == "5m0s"
    assert status["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["p99"] == {
        "resources": {"cpu": "3", "memory": "3Gi"}}
    # Sorted by namespace/name; 1000 bytes is written "1k", as upstream's canonical form does.
    assert status["podsMetric"] == [
        {"namespace": "batch", "name": "job-1", "podUsage": {"resources": {"cpu": "1", "memory": "1k"}},
         "priority": "koord-batch", "qos": "BE"},
        {"namespace": "default", "name": "web-1", "podUsage": {"resources": {"cpu": "250m", "memory": "256Mi"}},
         "priority": "koord-prod", "qos": "LS"}]
    assert status["hostApplicationMetric"] == [{"name": "nginx",
                                                "usage": {"resources": {"cpu": "10m", "memory": "64Mi"}}}]
    validated = validate_report(orjson.dumps(report), "node-a")
    assert validated.figures.cpu_millis == 2500 and validated.figures.memory_bytes == 1536 * MI
    assert validated.figures.pod_count == 2


def test_a_report_without_pods_or_windows_is_still_valid() -> None:
    report = build_node_metric("node-a", update_time=AT, node_usage=Usage(0, 0))
    assert report["status"]["nodeMetric"] == {"nodeUsage": {"resources": {"cpu": "0", "memory": "0"}}}
    assert validate_report(orjson.dumps(report), "node-a").figures.pod_count == 0


@pytest.mark.parametrize(("seconds", "text"), [(300, "5m0s"), (600, "10m0s"), (1800, "30m0s"), (45, "45s"),
                                               (3600, "1h0m0s"), (5430, "1h30m30s")])
def test_durations_are_written_as_go_prints_them(seconds: int, text: str) -> None:
    assert go_duration(seconds) == text
    assert parse_go_duration(text) == seconds


def test_pods_are_matched_by_uid_else_by_name_and_unknown_cgroups_are_left_out() -> None:
    web = pod("api-uid-web", "web-0")
    job = pod("api-uid-job", "job-0", "batch", "koord-batch", "BE")
    latest = Sample(timestamp=AT, node_cpu_millis=0, node_memory_bytes=0, pods=(
        PodSample(uid="synthetic-uid-job", cpu_millis=1, memory_bytes=1, cgroup_path="kubepods/x", namespace="batch",
                  name="job-0"),))
    usages = {"api-uid-web": Usage(100, MI), "synthetic-uid-job": Usage(200, 2 * MI), "orphan-uid": Usage(5, MI)}
    matched = match_pods(usages, {web.uid: web, job.uid: job},
                         {("default", "web-0"): web, ("batch", "job-0"): job}, latest=latest)
    assert sorted((m.info.name, m.usage) for m in matched) == [("job-0", Usage(200, 2 * MI)),
                                                               ("web-0", Usage(100, MI))]


def test_prod_reclaimable_is_reported_when_predicted_and_the_leader_keeps_it() -> None:
    report = build_node_metric("node-a", update_time=AT, node_usage=Usage(0, 0),
                               prod_reclaimable=Usage(1500, 3 * GI))
    assert report["status"]["prodReclaimableMetric"] == {"resource": {"resources": {"cpu": "1500m", "memory": "3Gi"}}}
    stored = orjson.loads(validate_report(orjson.dumps(report), "node-a").status_json)
    assert stored["prodReclaimableMetric"] == report["status"]["prodReclaimableMetric"]
    assert "prodReclaimableMetric" not in build_node_metric("node-a", update_time=AT, node_usage=Usage(0, 0))["status"]


def test_the_predictor_sees_only_prod_pods_by_uid_or_by_name() -> None:
    web = PodInfo(uid="u-web", namespace="shop", name="web", priority="koord-prod", qos="LS",
                  cpu_request_millis=2000, memory_request_bytes=GI)
    cache = PodInfo(uid="u-cache", namespace="shop", name="cache", priority="koord-mid", qos="LS",
                    cpu_request_millis=1000, memory_request_bytes=GI)
    named = PodInfo(uid="", namespace="shop", name="api", priority="koord-prod", qos="LS",
                    cpu_request_millis=500, memory_request_bytes=MI)
    sample = Sample(timestamp=AT, node_cpu_millis=0, node_memory_bytes=0, pods=(
        PodSample(uid="u-web", cpu_millis=700, memory_bytes=100 * MI, cgroup_path="web", cpu_measured=False),
        PodSample(uid="u-cache", cpu_millis=900, memory_bytes=200 * MI, cgroup_path="cache"),
        PodSample(uid="x", cpu_millis=300, memory_bytes=50 * MI, cgroup_path="api", namespace="shop", name="api"),
        PodSample(uid="unknown", cpu_millis=1, memory_bytes=1, cgroup_path="gone")))
    by_uid = {"u-web": web, "u-cache": cache}
    by_name = {("shop", "web"): web, ("shop", "cache"): cache, ("shop", "api"): named}
    assert sorted(prod_pods_of(sample, by_uid, by_name)) == [
        (("shop", "api"), 300, 50 * MI), (("shop", "web"), None, 100 * MI)]  # unmeasured cpu: None
    assert prod_requests(by_name) == {("shop", "web"): Usage(2000, GI), ("shop", "api"): Usage(500, MI)}


def test_recent_usage_is_reported_next_to_koordinators_and_the_leader_keeps_it() -> None:
    web, job = pod("u-web", "web-0"), pod("u-job", "job-0", "batch", "koord-batch", "BE")
    aggregator = Aggregator(window_seconds=300, recent_seconds=10)
    for second in range(1, 301):  # a step from 1 to 3 cores in the last 10 s, all of it web-0's
        cpu = 1000 if second <= 290 else 3000
        aggregator.add(Sample(timestamp=second, node_cpu_millis=cpu, node_memory_bytes=4 * GI, pods=(
            PodSample(uid="u-web", cpu_millis=cpu - 500, memory_bytes=GI, cgroup_path="kubepods/web"),
            PodSample(uid="u-job", cpu_millis=500, memory_bytes=GI, cgroup_path="kubepods/job",
                      cpu_measured=second <= 280))))
    report = node_metric_from(aggregator, "node-a", 300.0, by_uid={web.uid: web, job.uid: job},
                              by_name={("default", "web-0"): web, ("batch", "job-0"): job})
    assert report is not None
    node_metric = report["status"]["nodeMetric"]
    assert node_metric["nodeUsage"] == {"resources": {"cpu": "1067m", "memory": "4Gi"}}  # Koordinator's, unchanged
    assert node_metric["recentUsage"] == {"resources": {"cpu": "3", "memory": "4Gi"}, "windowSeconds": 10}
    by_name = {entry["name"]: entry for entry in report["status"]["podsMetric"]}
    assert by_name["web-0"]["recentUsage"] == {"resources": {"cpu": "2500m", "memory": "1Gi"}}
    assert by_name["web-0"]["podUsage"] == {"resources": {"cpu": "567m", "memory": "1Gi"}}
    assert "recentUsage" not in by_name["job-0"]  # no cpu measured in the last 10 s
    stored = orjson.loads(validate_report(orjson.dumps(report), "node-a").status_json)
    assert stored["nodeMetric"]["recentUsage"] == node_metric["recentUsage"]
    assert [entry.get("recentUsage") for entry in stored["podsMetric"]] == [
        None, {"resources": {"cpu": "2500m", "memory": "1Gi"}}]


def test_a_simulated_nodes_report_carries_the_short_window_too() -> None:
    # Simulated agents build their reports the same way, from the synthetic collector's samples.
    collector = SyntheticCollector("sim-0", pods_per_node=3, profile="steady", clock=lambda: AT)
    infos = [classify(obj) for obj in collector.pods()]
    aggregator = Aggregator()
    for second in range(30):
        aggregator.add(collector.sample(AT + second))
    report = node_metric_from(aggregator, "sim-0", AT + 29, by_uid={info.uid: info for info in infos},
                              by_name={(info.namespace, info.name): info for info in infos})
    assert report is not None
    assert report["status"]["nodeMetric"]["recentUsage"]["windowSeconds"] == 10
    assert len(report["status"]["podsMetric"]) == 3
    assert all("recentUsage" in entry for entry in report["status"]["podsMetric"])
    validate_report(orjson.dumps(report), "sim-0")
