"""CPU suppress arithmetic on fixed usage: the NodeSLO policy, the BE budget, koordlet's floors and damping.

Worked example used throughout: an 8-cpu node (8000m) at 65 % allows 5200m; an LS pod uses
2000m, a BE pod 1500m, the node 4500m, so the system uses 4500 - 3500 = 1000m and BE pods may
use 5200 - 2000 - 1000 = 2200m.
"""

from __future__ import annotations

from colocation.agent.classify import PodInfo
from colocation.agent.collector import HostApplicationSample, PodSample, Sample
from colocation.agent.strategies.cpu_suppress.cpu_suppress import (
    CpuUsage,
    SuppressPolicy,
    be_budget_millis,
    cpu_usage,
    node_reserved_cpu,
    quota_millis,
    suppress_policy,
    target_cfs_quota,
    target_cpuset_size,
)

LS_UID, BE_UID, STRANGER_UID = "11111111-1", "22222222-2", "33333333-3"


def pod(uid: str, qos: str, kube_qos: str) -> PodInfo:
    return PodInfo(uid=uid, namespace="default", name=uid, priority="koord-prod", qos=qos,  # type: ignore[arg-type]
                   cpu_request_millis=0, memory_request_bytes=0, kube_qos=kube_qos)  # type: ignore[arg-type]


PODS = {LS_UID: pod(LS_UID, "LS", "Burstable"), BE_UID: pod(BE_UID, "BE", "BestEffort")}


def sample(*pods: PodSample, node: int = 4500, apps: tuple[HostApplicationSample, ...] = ()) -> Sample:
    return Sample(timestamp=0.0, node_cpu_millis=node, node_memory_bytes=0, pods=pods, host_applications=apps)


def nodeslo(**block: object) -> dict[str, object]:
    return {"spec": {"resourceUsedThresholdWithBE": block}}


def test_policy_is_off_without_a_nodeslo_or_without_enable() -> None:
    assert suppress_policy(None) == SuppressPolicy(enabled=False)
    assert suppress_policy(nodeslo(cpuSuppressThresholdPercent=50)).enabled is False
    assert suppress_policy(nodeslo(enable="true")).enabled is False  # a string is not a yes


def test_policy_takes_koordinators_defaults_and_the_nodeslo_values() -> None:
    assert suppress_policy(nodeslo(enable=True)) == SuppressPolicy(enabled=True, threshold_percent=65, min_percent=None,
                                                                   policy="cpuset")
    assert suppress_policy(nodeslo(enable=True, cpuSuppressThresholdPercent=40, cpuSuppressMinPercent=10,
                                   cpuSuppressPolicy="cfsQuota")) == SuppressPolicy(
        enabled=True, threshold_percent=40, min_percent=10, policy="cfsQuota")
    # Values the schema would refuse fall back to the defaults instead of throttling by garbage.
    assert suppress_policy(nodeslo(enable=True, cpuSuppressThresholdPercent=150, cpuSuppressPolicy="x")) == \
        SuppressPolicy(enabled=True, threshold_percent=65, min_percent=None, policy="cpuset")


def test_usage_splits_pods_by_koordinator_and_kubernetes_qos() -> None:
    usage = cpu_usage(sample(PodSample(uid=LS_UID, cpu_millis=2000, memory_bytes=0,
                                       cgroup_path="kubepods/burstable/pod" + LS_UID),
                             PodSample(uid=BE_UID, cpu_millis=1500, memory_bytes=0,
                                       cgroup_path="kubepods/besteffort/pod" + BE_UID)), PODS, cpus=8)
    assert usage == CpuUsage(capacity=8000, node=4500, all_pods=3500, non_be_pods=2000, host_applications=0)
    assert usage.system == 1000


def test_unknown_pods_are_be_only_in_the_best_effort_tier() -> None:
    usage = cpu_usage(sample(
        PodSample(uid=STRANGER_UID, cpu_millis=700, memory_bytes=0,
                  cgroup_path="kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod3.slice"),
        PodSample(uid="44444444-4", cpu_millis=300, memory_bytes=0, cgroup_path="kubepods/burstable/pod44444444-4"),
        PodSample(uid="55555555-5", cpu_millis=200, memory_bytes=0, cgroup_path="kubepods/pod55555555-5")), {}, cpus=8)
    assert usage.non_be_pods == 500


def test_budget_is_threshold_minus_non_be_and_system_usage() -> None:
    usage = CpuUsage(capacity=8000, node=4500, all_pods=3500, non_be_pods=2000, host_applications=0)
    assert be_budget_millis(usage, SuppressPolicy(enabled=True, threshold_percent=65)) == 2200


def test_host_applications_count_as_non_be_and_not_as_system() -> None:
    app = HostApplicationSample(name="nginx", cpu_millis=400, memory_bytes=0, cgroup_path="system.slice/nginx")
    usage = cpu_usage(sample(PodSample(uid=LS_UID, cpu_millis=2000, memory_bytes=0,
                                       cgroup_path="kubepods/burstable/podx"), node=4500, apps=(app,)),
                      PODS, cpus=8)
    assert (usage.host_applications, usage.system) == (400, 2100)
    assert be_budget_millis(usage, SuppressPolicy(enabled=True, threshold_percent=65)) == 5200 - 2000 - 400 - 2100


def test_a_be_host_application_in_the_best_effort_tier_is_be_usage() -> None:
    batch = HostApplicationSample(name="spark", cpu_millis=600, memory_bytes=0, qos="BE",
                                  cgroup_path="kubepods.slice/kubepods-besteffort.slice/spark")
    elsewhere = HostApplicationSample(name="logs", cpu_millis=300, memory_bytes=0, qos="BE",
                                      cgroup_path="system.slice/logs")  # BE by name only: still a cost to BE
    usage = cpu_usage(sample(PodSample(uid=LS_UID, cpu_millis=2000, memory_bytes=0,
                                       cgroup_path="kubepods/burstable/podx"), node=4500,
                             apps=(batch, elsewhere)), PODS, cpus=8)
    assert (usage.host_applications, usage.be_host_applications, usage.system) == (900, 600, 1600)
    assert be_budget_millis(usage, SuppressPolicy(enabled=True, threshold_percent=65)) == 5200 - 2000 - 300 - 1600


def test_min_percent_is_a_floor_under_the_budget() -> None:
    busy = CpuUsage(capacity=8000, node=7900, all_pods=7000, non_be_pods=6000, host_applications=0)
    assert be_budget_millis(busy, SuppressPolicy(enabled=True, threshold_percent=65)) == 5200 - 6000 - 900
    assert be_budget_millis(busy, SuppressPolicy(enabled=True, threshold_percent=65, min_percent=10)) == 800


def test_quota_is_the_budget_per_period_with_koordlets_floor() -> None:
    assert target_cfs_quota(2200, -1, capacity_cores=8, period_us=100_000) == 220_000
    assert target_cfs_quota(-1700, -1, capacity_cores=8, period_us=100_000) == 2000
    assert target_cfs_quota(10, 220_000, capacity_cores=8, period_us=100_000) == 2000  # shrinks at once


def test_quota_changes_under_one_percent_of_the_node_are_not_written() -> None:
    # 1 % of 8 cores is 8000 µs per 100 ms period.
    assert target_cfs_quota(2270, 220_000, capacity_cores=8, period_us=100_000) is None
    assert target_cfs_quota(2200, 220_000, capacity_cores=8, period_us=100_000) is None
    assert target_cfs_quota(2300, 220_000, capacity_cores=8, period_us=100_000) == 230_000


def test_quota_grows_by_at_most_a_tenth_of_the_node_per_round_once_set() -> None:
    assert target_cfs_quota(6000, 220_000, capacity_cores=8, period_us=100_000) == 300_000
    assert target_cfs_quota(6000, -1, capacity_cores=8, period_us=100_000) == 600_000  # first setting: at once


def test_cpuset_size_rounds_up_with_a_floor_of_two_and_grows_slowly() -> None:
    assert target_cpuset_size(2200, current_size=8, node_cpus=8, available=8) == 3
    assert target_cpuset_size(-500, current_size=8, node_cpus=8, available=8) == 2
    assert target_cpuset_size(8000, current_size=2, node_cpus=8, available=8) == 3  # ceil(0.8) = 1 more
    assert target_cpuset_size(8000, current_size=2, node_cpus=32, available=6) == 6  # never past the pool


def test_quota_in_millicores() -> None:
    assert quota_millis(50_000, 100_000) == 500
    assert quota_millis(-1, 100_000) == -1


def node(capacity: str, allocatable: str, annotation: str | None = None) -> dict[str, object]:
    annotations = {"node.koordinator.sh/reservation": annotation} if annotation else {}
    return {"metadata": {"annotations": annotations},
            "status": {"capacity": {"cpu": capacity}, "allocatable": {"cpu": allocatable}}}


def test_the_node_reserves_the_larger_of_kubelet_and_annotation() -> None:
    assert node_reserved_cpu(node("8", "7500m")) == 500
    assert node_reserved_cpu(node("8", "7500m", '{"resources": {"cpu": "2"}}')) == 2000
    assert node_reserved_cpu(node("8", "7500m", '{"reservedCPUs": "0-2"}')) == 3000
    assert node_reserved_cpu(node("8", "7500m", "not json")) == 500
    assert node_reserved_cpu(node("8", "lots")) == 0
    assert node_reserved_cpu(None) == 0


def test_reserved_cpu_is_a_floor_under_the_system_usage() -> None:
    quiet = CpuUsage(capacity=8000, node=2500, all_pods=2300, non_be_pods=2000, host_applications=0, reserved=1000)
    assert quiet.system == 1000  # measured 200m, reserved 1000m
    assert be_budget_millis(quiet, SuppressPolicy(enabled=True, threshold_percent=65)) == 5200 - 2000 - 1000
    busy = CpuUsage(capacity=8000, node=4500, all_pods=2300, non_be_pods=2000, host_applications=0, reserved=1000)
    assert busy.system == 2200  # measured beyond the reservation: measured
