"""calculate_batch_resources: the batch formula of docs/architecture.md (Koordinator's model), worked by hand.

The reference node: 10 cpus (10000m) and 100Gi of memory, nothing reserved by the kubelet,
default strategy (cpu reclaim 60 %, memory 65 %), so the safety margin is
    cpu    10000m * 40 / 100 = 4000m
    memory 100Gi  * 35 / 100 = 35Gi
The agent reports a system usage of 500m / 4Gi, a prod pod using 1 cpu / 8Gi of its 2 cpu /
10Gi request, and a batch pod (3 cpu / 20Gi) that never counts.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import pytest

from colocation import noderesource
from colocation.koordinator.batch_formula import BATCH_CPU, BATCH_MEMORY, calculate_batch_resources, count_cpus
from colocation.koordinator.slo_strategies import ColocationStrategy

Gi = 2**30
NOW = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=dt.UTC).timestamp()


def _time(seconds_ago: float) -> str:
    return dt.datetime.fromtimestamp(NOW - seconds_ago, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(capacity: tuple[str, str] = ("10", "100Gi"), allocatable: tuple[str, str] | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    allocatable = allocatable or capacity
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "annotations": annotations or {}},
        "status": {"capacity": {"cpu": capacity[0], "memory": capacity[1], "pods": "110"},
                   "allocatable": {"cpu": allocatable[0], "memory": allocatable[1], "pods": "110"}},
    }


def _pod(name: str, cpu: str | None = None, memory: str | None = None, *, phase: str = "Running",
         labels: dict[str, str] | None = None, priority: int | None = None,
         resources: dict[str, Any] | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [
        {"name": "main", "resources": resources if resources is not None else {"requests": requests}}]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": name, "labels": labels or {}},
            "spec": spec, "status": {"phase": phase}}


def _usage(cpu: str, memory: str) -> dict[str, Any]:
    return {"resources": {"cpu": cpu, "memory": memory}}


def _pod_metric(name: str, cpu: str, memory: str, **extra: str) -> dict[str, Any]:
    return {"namespace": "default", "name": name, "podUsage": _usage(cpu, memory), **extra}


def _metric(pods: list[dict[str, Any]] | None = None, *, age: float = 60,
            system: tuple[str, str] | None = ("500m", "4Gi"), node_usage: tuple[str, str] = ("5500m", "36Gi"),
            host_apps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    node_metric: dict[str, Any] = {"nodeUsage": _usage(*node_usage)}
    if system is not None:
        node_metric["systemUsage"] = _usage(*system)
    status: dict[str, Any] = {"updateTime": _time(age), "nodeMetric": node_metric, "podsMetric": pods or []}
    if host_apps is not None:
        status["hostApplicationMetric"] = host_apps
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
            "metadata": {"name": "n1"}, "status": status}


BATCH_LABELS = {"koordinator.sh/priority-class": "koord-batch", "koordinator.sh/qosClass": "BE"}
PROD = _pod("prod", "2", "10Gi")
BATCH = _pod("batch", labels=BATCH_LABELS,
             resources={"requests": {"kubernetes.io/batch-cpu": "3000", "kubernetes.io/batch-memory": "20Gi"}})
PODS = [PROD, BATCH]
POD_METRICS = [_pod_metric("prod", "1", "8Gi"), _pod_metric("batch", "3", "20Gi", priority="koord-batch")]


def _calculate(node: dict[str, Any] | None = None, pods: list[dict[str, Any]] | None = None,
               metric: dict[str, Any] | None = None, **strategy: Any) -> dict[str, int] | None:
    return calculate_batch_resources(node or _node(), PODS if pods is None else pods,
                                     _metric(POD_METRICS) if metric is None else metric, strategy=strategy, now=NOW)


def _expect(cpu_millis: int, memory_gi: float) -> dict[str, int]:
    return {BATCH_CPU: cpu_millis, BATCH_MEMORY: int(memory_gi * Gi)}


# --------------------------------------------------------------------------------------------
# Policies.


def test_usage_policy_reclaims_what_high_priority_pods_do_not_use() -> None:
    # systemUsed = max(500m + 0 host apps, nodeReserved 0) = 500m / 4Gi; HPUsed = 1000m / 8Gi
    # cpu    = 10000 - 4000 - 500 - 1000 = 4500m
    # memory = 100 - 35 - 4 - 8 = 53Gi
    assert _calculate() == _expect(4500, 53)


def test_max_usage_request_policy_never_overcommits_high_priority_requests() -> None:
    # HPMaxUsageRequest = max(2000m, 1000m) / max(10Gi, 8Gi) = 2000m / 10Gi
    # cpu    = 10000 - 4000 - 500 - 2000 = 3500m
    # memory = 100 - 35 - 4 - 10 = 51Gi
    assert _calculate(cpuCalculatePolicy="maxUsageRequest", memoryCalculatePolicy="maxUsageRequest") \
        == _expect(3500, 51)


def test_request_policy_for_memory_ignores_usage() -> None:
    # memory = capacity - margin - nodeReserved - HPRequest = 100 - 35 - 0 - 10 = 55Gi
    # (system usage does not count: only the reservation does); cpu stays by usage: 4500m
    assert _calculate(memoryCalculatePolicy="request") == _expect(4500, 55)


def test_request_policy_subtracts_the_reservation() -> None:
    # kubelet reserves 1 cpu / 10Gi: memory = 100 - 35 - 10 - 10 = 45Gi
    node = _node(allocatable=("9", "90Gi"))
    assert _calculate(node, memoryCalculatePolicy="request")[BATCH_MEMORY] == 45 * Gi  # type: ignore[index]


def test_reclaim_percentages_set_the_safety_margin() -> None:
    # cpu margin 10000 * 50 / 100 = 5000m: 10000 - 5000 - 500 - 1000 = 3500m
    # memory margin 100Gi * 20 / 100 = 20Gi: 100 - 20 - 4 - 8 = 68Gi
    assert _calculate(cpuReclaimThresholdPercent=50, memoryReclaimThresholdPercent=80) == _expect(3500, 68)


def test_a_reclaim_percentage_above_100_overcommits_the_node() -> None:
    # cpu 150 %: margin 10000 * -50 / 100 = -5000m: 10000 + 5000 - 500 - 1000 = 13500m
    # memory 120 %: margin -20Gi: 100 + 20 - 4 - 8 = 108Gi
    assert _calculate(cpuReclaimThresholdPercent=150, memoryReclaimThresholdPercent=120) == _expect(13500, 108)
    # A batch cap above 100 limits the overcommitment: 10000 * 120 / 100 = 12000m
    assert _calculate(cpuReclaimThresholdPercent=150, memoryReclaimThresholdPercent=120,
                      batchCPUThresholdPercent=120) == _expect(12000, 108)


def test_the_safety_margin_rounds_against_batch() -> None:
    # 3333m * 40 / 100 = 1333.2m -> margin 1334m; nothing else on the node: 3333 - 1334 = 1999m
    metric = _metric([], system=("0", "0"))
    result = calculate_batch_resources(_node(("3333m", "1Gi")), [], metric, strategy={}, now=NOW)
    assert result is not None and result[BATCH_CPU] == 1999


def test_results_are_floored_at_zero() -> None:
    # 10000 - 4000 - 500 - 9000 < 0 -> 0; 100 - 35 - 4 - 90 < 0 -> 0
    metric = _metric([_pod_metric("prod", "9", "90Gi")])
    assert _calculate(metric=metric) == _expect(0, 0)


def test_a_strategy_model_is_accepted_too() -> None:
    strategy = ColocationStrategy(cpu_reclaim_threshold_percent=50)
    assert calculate_batch_resources(_node(), PODS, _metric(POD_METRICS), strategy=strategy,
                                     now=NOW) == _expect(3500, 53)


def test_an_invalid_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="cpuReclaimThresholdPercent"):
        _calculate(cpuReclaimThresholdPercent=-1)


# --------------------------------------------------------------------------------------------
# High-priority pods.


def test_an_lse_pod_counts_its_cpu_request_but_its_memory_usage() -> None:
    # LSE cpus are exclusive: HPUsed = 2000m (request) / 8Gi (usage)
    # cpu = 10000 - 4000 - 500 - 2000 = 3500m; memory = 100 - 35 - 4 - 8 = 53Gi
    lse = _pod("prod", "2", "10Gi", labels={"koordinator.sh/qosClass": "LSE"})
    assert _calculate(pods=[lse, BATCH]) == _expect(3500, 53)


def test_a_pod_without_a_metric_counts_its_request() -> None:
    # "new" (Pending, requests 1 cpu / 5Gi, no metric): HPUsed = 1000 + 1000m / 8 + 5Gi
    # usage:           cpu = 10000 - 4000 - 500 - 2000 = 3500m; memory = 100 - 35 - 4 - 13 = 48Gi
    # maxUsageRequest: cpu = 10000 - 4000 - 500 - (2000 + 1000) = 2500m
    new = _pod("new", "1", "5Gi", phase="Pending")
    assert _calculate(pods=[*PODS, new]) == _expect(3500, 48)
    assert _calculate(pods=[*PODS, new], cpuCalculatePolicy="maxUsageRequest")[BATCH_CPU] == 2500  # type: ignore[index]


def test_metrics_of_high_priority_pods_that_are_gone_still_count() -> None:
    # gone-prod (2 cpu / 4Gi, prod) counts, and so does gone-be (1 cpu / 2Gi, qos BE but no
    # priority: only a batch or free priority makes a metric low priority); gone-batch and
    # gone-free do not. HPUsed = 1000 + 2000 + 1000m / 8 + 4 + 2Gi
    # cpu = 10000 - 4000 - 500 - 4000 = 1500m; memory = 100 - 35 - 4 - 14 = 47Gi
    metric = _metric([*POD_METRICS,
                      _pod_metric("gone-prod", "2", "4Gi", priority="koord-prod"),
                      _pod_metric("gone-batch", "3", "3Gi", priority="koord-batch"),
                      _pod_metric("gone-free", "3", "3Gi", priority="koord-free", qos="LS"),
                      _pod_metric("gone-be", "1", "2Gi", qos="BE")])
    assert _calculate(metric=metric) == _expect(1500, 47)
    # With maxUsageRequest a gone pod counts its usage (it has no request any more):
    # cpu = 10000 - 4000 - 500 - (2000 + 2000 + 1000) = 500m
    assert _calculate(metric=metric, cpuCalculatePolicy="maxUsageRequest")[BATCH_CPU] == 500  # type: ignore[index]


def test_a_gone_pods_metric_with_a_malformed_priority_counts() -> None:
    # A priority that is not a string states no class: the usage (1 cpu / 2Gi) counts.
    # cpu = 10000 - 4000 - 500 - 2000 = 3500m; memory = 100 - 35 - 4 - 10 = 51Gi
    metric = _metric([*POD_METRICS, {**_pod_metric("gone", "1", "2Gi"), "priority": ["koord-batch"]}])
    assert _calculate(metric=metric) == _expect(3500, 51)


def test_a_terminated_pods_metric_counts_as_if_the_pod_were_gone() -> None:
    # Succeeded and Failed pods count no request; a metric of one (the report saw it running)
    # counts like a gone pod's: "done" (prod, 4 cpu / 20Gi) counts, "failed-batch" (its metric
    # says koord-batch) does not, and "quiet" (no metric) counts nothing.
    # HPUsed = 1000 + 4000m / 8 + 20Gi: cpu = 10000 - 4000 - 500 - 5000 = 500m; memory = 100 - 35 - 4 - 28 = 33Gi
    done = _pod("done", "4", "20Gi", phase="Succeeded")
    failed = _pod("failed-batch", "4", "20Gi", phase="Failed")
    quiet = _pod("quiet", "4", "20Gi", phase="Succeeded")
    metric = _metric([*POD_METRICS, _pod_metric("done", "4", "20Gi", priority="koord-prod"),
                      _pod_metric("failed-batch", "4", "20Gi", priority="koord-batch")])
    assert _calculate(pods=[*PODS, done, failed, quiet], metric=metric) == _expect(500, 33)


@pytest.mark.parametrize(("pod", "counts"), [
    (_pod("x", "2", "10Gi", priority=5500), False),                       # batch range
    (_pod("x", "2", "10Gi", priority=3500), False),                       # free range
    (_pod("x", "2", "10Gi", priority=7500), True),                        # mid range
    (_pod("x", "2", "10Gi", priority=9500, labels={"koordinator.sh/priority-class": "koord-batch"}), False),
    (_pod("x", "2", "10Gi", labels={"koordinator.sh/qosClass": "BE"}), False),
    (_pod("x", resources={}), False),                                     # Kubernetes BestEffort -> BE
    (_pod("x", "2", "10Gi", priority=0), True),                           # no range: Burstable -> LS -> prod
])
def test_which_pods_are_high_priority(pod: dict[str, Any], counts: bool) -> None:
    # Pod x has no metric: when it is HP its request (2 cpu / 10Gi) counts in HPUsed.
    # cpu = 4500 - 2000 = 2500m; memory = 53 - 10 = 43Gi
    expected = _expect(2500, 43) if counts else _expect(4500, 53)
    assert _calculate(pods=[*PODS, pod]) == expected


def test_init_containers_and_sidecars_count_in_requests() -> None:
    # requests: main 1 cpu / 4Gi + sidecar 500m / 1Gi = 1500m / 5Gi; init 3 cpu / 2Gi + sidecar
    # started before it (none: it comes first) -> peak max(1500m, 3000m) / max(5Gi, 2Gi) = 3000m / 5Gi
    # No metric: HPUsed += 3000m / 5Gi -> cpu = 4500 - 3000 = 1500m; memory = 53 - 5 = 48Gi
    pod = _pod("init", "1", "4Gi")
    pod["spec"]["initContainers"] = [
        {"name": "setup", "resources": {"requests": {"cpu": "3", "memory": "2Gi"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
    ]
    assert _calculate(pods=[*PODS, pod]) == _expect(1500, 48)


# --------------------------------------------------------------------------------------------
# Reservations and system usage.


def test_the_kubelet_reservation_raises_system_used() -> None:
    # nodeReserved = capacity - allocatable = 1000m / 10Gi
    # systemUsed = max(500m, 1000m) / max(4Gi, 10Gi) = 1000m / 10Gi
    # cpu = 10000 - 4000 - 1000 - 1000 = 4000m; memory = 100 - 35 - 10 - 8 = 47Gi
    assert _calculate(_node(allocatable=("9", "90Gi"))) == _expect(4000, 47)


def test_the_reservation_annotation_and_the_kubelet_take_the_larger() -> None:
    # annotation 2 cpu / 6Gi, kubelet 1 cpu / 10Gi -> nodeReserved 2000m / 10Gi
    # cpu = 10000 - 4000 - 2000 - 1000 = 3000m; memory = 100 - 35 - 10 - 8 = 47Gi
    annotation = json.dumps({"resources": {"cpu": "2", "memory": "6Gi"}})
    node = _node(allocatable=("9", "90Gi"), annotations={"node.koordinator.sh/reservation": annotation})
    assert _calculate(node) == _expect(3000, 47)


def test_reserved_cpus_override_the_cpu_quantity() -> None:
    # reservedCPUs "0,2-3" = 3 cpus = 3000m (the "1" of resources is replaced)
    # cpu = 10000 - 4000 - 3000 - 1000 = 2000m; memory by the annotation's 6Gi: 100 - 35 - 6 - 8 = 51Gi
    annotation = json.dumps({"resources": {"cpu": "1", "memory": "6Gi"}, "reservedCPUs": "0,2-3"})
    node = _node(annotations={"node.koordinator.sh/reservation": annotation})
    assert _calculate(node) == _expect(2000, 51)


@pytest.mark.parametrize("annotation", [
    "not json", '["a list"]', '{"resources": {"cpu": "lots"}}', '{"reservedCPUs": "3-1"}', '{"reservedCPUs": 4}'])
def test_a_malformed_reservation_annotation_is_ignored(annotation: str) -> None:
    node = _node(annotations={"node.koordinator.sh/reservation": annotation})
    assert _calculate(node) == _expect(4500, 53)


@pytest.mark.parametrize(("cpuset", "count"), [("0", 1), ("0-3", 4), ("0-3,8,10-11", 7), ("0-3,2", 4)])
def test_cpuset_lists_are_counted(cpuset: str, count: int) -> None:
    assert count_cpus(cpuset) == count


def test_high_priority_host_applications_count_as_system_usage() -> None:
    # nginx (prod) 1 cpu / 2Gi and an app without a priority 500m / 1Gi count; yarn (batch) does not.
    # systemUsed = 500 + 1000 + 500 = 2000m / 4 + 2 + 1 = 7Gi
    # cpu = 10000 - 4000 - 2000 - 1000 = 3000m; memory = 100 - 35 - 7 - 8 = 50Gi
    apps = [{"name": "nginx", "usage": _usage("1", "2Gi"), "priority": "koord-prod"},
            {"name": "yarn", "usage": _usage("2", "10Gi"), "priority": "koord-batch"},
            {"name": "agent", "usage": _usage("500m", "1Gi")}]
    assert _calculate(metric=_metric(POD_METRICS, host_apps=apps)) == _expect(3000, 50)


def test_without_system_usage_it_is_derived_from_node_usage() -> None:
    # systemUsage = nodeUsage - all pods = 5500 - (1000 + 3000) = 1500m / 36 - (8 + 20) = 8Gi
    # cpu = 10000 - 4000 - 1500 - 1000 = 3500m; memory = 100 - 35 - 8 - 8 = 49Gi
    assert _calculate(metric=_metric(POD_METRICS, system=None)) == _expect(3500, 49)


# --------------------------------------------------------------------------------------------
# Caps.


def test_batch_threshold_percentages_cap_the_result() -> None:
    # cpu cap 10000 * 30 / 100 = 3000m < 4500m; memory cap 100Gi * 60 / 100 = 60Gi > 53Gi
    assert _calculate(batchCPUThresholdPercent=30, batchMemoryThresholdPercent=60) == _expect(3000, 53)
    # memory cap 50Gi < 53Gi
    assert _calculate(batchMemoryThresholdPercent=50) == _expect(4500, 50)


# --------------------------------------------------------------------------------------------
# When batch resources are removed.


def test_an_old_metric_removes_batch_resources() -> None:
    assert _calculate(metric=_metric(POD_METRICS, age=15 * 60 + 1)) is None
    assert _calculate(metric=_metric(POD_METRICS, age=15 * 60)) == _expect(4500, 53)  # at the limit: fresh
    assert _calculate(metric=_metric(POD_METRICS, age=61), degradeTimeMinutes=1) is None


@pytest.mark.parametrize("skew", [-3600.0, -15 * 60 - 1, 3600.0, 253402300799.0 - NOW])
def test_with_the_receipt_time_a_skewed_agent_clock_neither_refuses_nor_freezes(skew: float) -> None:
    # updateTime is the agent's clock (an hour behind, an hour ahead, the year 9999): the age is
    # judged by when the operator received the metric, on its own clock.
    metric = _metric(POD_METRICS, age=-skew)
    received_now = calculate_batch_resources(_node(), PODS, metric, strategy={}, now=NOW, received_at=NOW - 60)
    received_long_ago = calculate_batch_resources(_node(), PODS, metric, strategy={}, now=NOW,
                                                  received_at=NOW - 15 * 60 - 1)
    assert (received_now, received_long_ago) == (_expect(4500, 53), None)


def test_disabled_colocation_removes_batch_resources() -> None:
    assert _calculate(enable=False) is None


@pytest.mark.parametrize("metric", [None, {"status": {}}, {"status": {"updateTime": _time(0)}},
                                    {"status": {"updateTime": "yesterday", "nodeMetric": {}}}])
def test_a_missing_or_unusable_metric_removes_batch_resources(metric: dict[str, Any] | None) -> None:
    assert calculate_batch_resources(_node(), PODS, metric, strategy={}, now=NOW) is None


def test_inputs_are_not_modified() -> None:
    node, pods, metric = _node(), copy.deepcopy(PODS), _metric(POD_METRICS)
    before = copy.deepcopy((node, pods, metric))
    calculate_batch_resources(node, pods, metric, strategy={}, now=NOW)
    assert (node, pods, metric) == before


def test_the_formula_keeps_its_public_name() -> None:
    assert noderesource.calculate_batch_resources is calculate_batch_resources
