"""The synthetic collector: deterministic, plausible, and within the node's bounds."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from colocation.agent.aggregate import Usage, system_usage
from colocation.agent.classify import classify
from colocation.agent.scrape import SCRAPE_ANNOTATION
from colocation.agent.synthetic import (
    CPU_USAGE_ANNOTATION,
    MEMORY_USAGE_ANNOTATION,
    PROFILES,
    SYSTEM_CPU_ANNOTATION,
    SYSTEM_MEMORY_ANNOTATION,
    SyntheticCollector,
    annotated_usage,
    scraped_pod_count,
)
from colocation.apimachinery.quantity import byte_value, cpu_millis

GI = 2**30
T0 = 1_700_000_000.0
NAME_PATTERNS = {
    "Deployment": re.compile(r"^[a-z-]+-[bcdfghjklmnpqrstvwxz2456789]{10}-[bcdfghjklmnpqrstvwxz2456789]{5}$"),
    "DaemonSet": re.compile(r"^(kube-proxy|node-exporter|fluent-bit)-[bcdfghjklmnpqrstvwxz2456789]{5}$"),
    "StatefulSet": re.compile(r"^[a-z-]+-\d+$"),
    "Spark": re.compile(r"^[a-z-]+-[0-9a-f]{16}-exec-\d+$"),
    "CronJob": re.compile(r"^[a-z-]+-\d{8}-[bcdfghjklmnpqrstvwxz2456789]{5}$"),
}


def test_same_seed_same_pods_and_samples_whatever_the_call_order() -> None:
    one = SyntheticCollector("node-7", profile="spiky", seed=42)
    two = SyntheticCollector("node-7", profile="spiky", seed=42)
    assert one.pods() == two.pods()
    later = one.sample(T0 + 100)
    assert two.sample(T0) == one.sample(T0)  # samples depend on `now`, not on how often we asked
    assert two.sample(T0 + 100) == later


def test_seed_and_node_name_change_the_node() -> None:
    base = SyntheticCollector("node-1", seed=1).pods()
    assert SyntheticCollector("node-1", seed=2).pods() != base
    assert SyntheticCollector("node-2", seed=1).pods() != base


def test_pods_look_like_a_colocated_cluster() -> None:
    collector = SyntheticCollector("node-3", pods_per_node=60, seed=5)
    pods = collector.pods()
    assert len(pods) == 60
    names = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
    assert len(set(names)) == 60
    for pod in pods:
        name = pod["metadata"]["name"]
        assert any(pattern.match(name) for pattern in NAME_PATTERNS.values()), name
        assert len(name) <= 63
        assert pod["spec"]["nodeName"] == "node-3"
        assert pod["status"]["phase"] == "Running"
        info = classify(pod)
        assert info.priority == pod["metadata"]["labels"]["koordinator.sh/priority-class"]
        assert info.qos == pod["metadata"]["labels"]["koordinator.sh/qosClass"]
        assert info.kube_qos == pod["status"]["qosClass"]
        if info.priority in ("koord-batch", "koord-free"):  # batch resources only: BestEffort to Kubernetes
            assert (info.kube_qos, info.cpu_request_millis) == ("BestEffort", 0)
            assert int(pod["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"]) > 0
    priorities = Counter(classify(pod).priority for pod in pods)
    assert set(priorities) == {"koord-prod", "koord-mid", "koord-batch", "koord-free"}
    assert priorities["koord-prod"] > priorities["koord-free"]
    assert [p["metadata"]["name"].rsplit("-", 1)[0] for p in pods[:3]] == ["kube-proxy", "node-exporter",
                                                                          "fluent-bit"]
    # Pods of one Deployment share their ReplicaSet's template hash.
    hashes: dict[str, set[str]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        if "pod-template-hash" in labels:
            hashes.setdefault(labels["app.kubernetes.io/name"], set()).add(labels["pod-template-hash"])
    assert hashes and all(len(values) == 1 for values in hashes.values())


def test_requests_fit_the_node() -> None:
    collector = SyntheticCollector("small", pods_per_node=80, seed=3, capacity_cpu_millis=4000,
                                   capacity_memory_bytes=8 * GI)
    infos = [classify(pod) for pod in collector.pods()]
    assert sum(i.cpu_request_millis for i in infos if i.high_priority) <= 0.7 * 4000
    assert sum(i.memory_request_bytes for i in infos if i.high_priority) <= 0.7 * 8 * GI
    node = collector.node()
    assert cpu_millis(node["status"]["allocatable"]["cpu"]) < cpu_millis(node["status"]["capacity"]["cpu"]) == 4000
    assert byte_value(node["status"]["capacity"]["memory"]) == 8 * GI
    assert node["metadata"]["labels"]["colocation.dev/simulated"] == "true"


@pytest.mark.parametrize("profile", PROFILES)
def test_samples_stay_within_the_node(profile: str) -> None:
    collector = SyntheticCollector("busy", pods_per_node=120, profile=profile, seed=9,  # type: ignore[arg-type]
                                   capacity_cpu_millis=8000, capacity_memory_bytes=16 * GI, period_seconds=600)
    uids = {pod["metadata"]["uid"] for pod in collector.pods()}
    for step in range(0, 1200, 7):
        sample = collector.sample(T0 + step)
        assert sample.timestamp == T0 + step
        assert 0 < sample.node_cpu_millis <= 8000
        assert 0 < sample.node_memory_bytes <= 16 * GI
        assert all(p.cpu_millis >= 0 and p.memory_bytes > 0 and p.cpu_measured for p in sample.pods)
        assert {p.uid for p in sample.pods} == uids
        pods = [Usage(p.cpu_millis, p.memory_bytes) for p in sample.pods]
        remainder = system_usage(Usage(sample.node_cpu_millis, sample.node_memory_bytes), pods)
        assert remainder.memory_bytes > 0  # the node always uses something outside pods


def test_diurnal_load_follows_its_period() -> None:
    collector = SyntheticCollector("d", profile="diurnal", seed=1, period_seconds=400)
    totals = [sum(p.cpu_millis for p in collector.sample(T0 + t).pods) for t in range(0, 400, 5)]
    assert max(totals) > 3 * min(totals)  # day and night
    # One period later it is the same time of day.
    assert collector.sample(T0 + 37) .pods[5].cpu_millis == pytest.approx(
        collector.sample(T0 + 437).pods[5].cpu_millis, rel=0.15)


def test_spiky_load_is_steady_load_plus_bursts() -> None:
    steady = SyntheticCollector("s", profile="steady", seed=4, capacity_cpu_millis=1_000_000)
    spiky = SyntheticCollector("s", profile="spiky", seed=4, capacity_cpu_millis=1_000_000)
    ratios = []
    for step in range(0, 3000, 10):
        calm, burst = steady.sample(T0 + step), spiky.sample(T0 + step)
        ratios += [b.cpu_millis / c.cpu_millis for c, b in zip(calm.pods, burst.pods, strict=True) if c.cpu_millis]
    bursts = [ratio for ratio in ratios if ratio > 1.01]
    assert bursts and all(2.9 <= ratio <= 5.1 for ratio in bursts)
    assert 0.01 < len(bursts) / len(ratios) < 0.15  # about 5 % of windows


def test_adopt_takes_the_uids_the_api_server_assigned() -> None:
    collector = SyntheticCollector("n", pods_per_node=4, seed=0)
    created = collector.pods()
    for number, pod in enumerate(created):
        pod["metadata"]["uid"] = f"00000000-0000-4000-8000-00000000000{number}"
    created.append({"metadata": {"namespace": "other", "name": "stranger", "uid": "x"}})
    assert collector.adopt(created) == 4
    assert [p.uid for p in collector.sample(T0).pods] == [p["metadata"]["uid"] for p in created[:4]]
    assert [p["metadata"]["uid"] for p in collector.pods()] == [p["metadata"]["uid"] for p in created[:4]]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown profile"):
        SyntheticCollector("n", profile="chaotic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        SyntheticCollector("n", capacity_cpu_millis=0)
    assert SyntheticCollector("empty", pods_per_node=0).sample(T0).pods == ()
    for share in (-0.1, 1.5):
        with pytest.raises(ValueError, match="scraped_share must be between 0 and 1"):
            SyntheticCollector("n", scraped_share=share)


def _scraped(collector: SyntheticCollector) -> list[str]:
    return [pod["metadata"]["name"] for pod in collector.pods()
            if pod["metadata"]["annotations"].get(SCRAPE_ANNOTATION) == "true"]


def test_a_share_of_the_pods_carries_the_scrape_annotations_the_same_ones_for_a_seed() -> None:
    fifth = _scraped(SyntheticCollector("node-4", pods_per_node=30, seed=9, scraped_share=0.2))
    assert len(fifth) == 6
    assert _scraped(SyntheticCollector("node-4", pods_per_node=30, seed=9, scraped_share=0.2)) == fifth
    # Evenly spread: one in every five pods, the fifth, tenth, ...
    names = [pod["metadata"]["name"] for pod in SyntheticCollector("node-4", pods_per_node=30, seed=9).pods()]
    assert fifth == [names[index] for index in (4, 9, 14, 19, 24, 29)]
    assert _scraped(SyntheticCollector("node-4", pods_per_node=30, seed=9, scraped_share=0.0)) == []
    assert _scraped(SyntheticCollector("node-4", pods_per_node=30, seed=9)) == names  # the default: every pod


def test_the_scraped_pods_are_the_share_of_the_pods_rounded_down() -> None:
    for pods in (0, 1, 7, 10, 30, 100, 110):
        for share in (0.0, 0.1, 0.2, 0.29, 1 / 3, 0.5, 0.7, 1.0):
            scraped = _scraped(SyntheticCollector("n", pods_per_node=pods, scraped_share=share))
            assert len(scraped) == scraped_pod_count(pods, share)
    assert [scraped_pod_count(30, share) for share in (0.2, 1 / 3, 0.5)] == [6, 10, 15]
    assert scraped_pod_count(7, 0.5) == 3
    assert scraped_pod_count(100, 0.29) == 29  # 0.29 * 100 is 28.999999999999996 in floating point


def test_usage_annotations_are_the_usage_once_followed() -> None:
    """The one source kwok's resource metrics and the simulated agents share: what the pods' annotations
    say, the node being the pods plus its system's annotated usage; a pod the watch lacks uses nothing."""
    collector = SyntheticCollector("n", pods_per_node=6, profile="spiky", seed=3)
    pods = collector.pods()
    annotations = collector.usage_annotations()
    watched = [{**pod, "metadata": {**pod["metadata"], "annotations": annotations[
        (pod["metadata"]["namespace"], pod["metadata"]["name"])]}} for pod in pods[:5]]
    watched[0]["metadata"]["annotations"] = {CPU_USAGE_ANNOTATION: "1500m", MEMORY_USAGE_ANNOTATION: "3Gi"}
    usage = [annotated_usage(pod) for pod in watched]
    assert annotated_usage(pods[5]) is None  # pods() carry no usage annotations of their own
    collector.follow_annotations(lambda: {(ns, name): (cpu, memory) for ns, name, cpu, memory in
                                          (u for u in usage if u is not None)})
    for at in (T0, T0 + 1, T0 + 3600):  # no noise, no bursts: the same every second
        sample = collector.sample(at)
        by_name = {p.name: (p.cpu_millis, p.memory_bytes) for p in sample.pods}
        assert by_name[pods[0]["metadata"]["name"]] == (1500, 3 * GI)
        for pod in pods[1:5]:
            given = annotations[(pod["metadata"]["namespace"], pod["metadata"]["name"])]
            assert by_name[pod["metadata"]["name"]] == (cpu_millis(given[CPU_USAGE_ANNOTATION]),
                                                        byte_value(given[MEMORY_USAGE_ANNOTATION]))
        assert by_name[pods[5]["metadata"]["name"]] == (0, 0)
        system = collector.system_annotations()
        assert sample.node_cpu_millis == round(float(system[SYSTEM_CPU_ANNOTATION]) * 1000) + sum(
            cpu for cpu, _ in by_name.values())
        assert sample.node_memory_bytes == int(system[SYSTEM_MEMORY_ANNOTATION]) + sum(
            memory for _, memory in by_name.values())
