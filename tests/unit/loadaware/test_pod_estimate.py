"""Koordinator's estimator: max(request, limit) * factor, capped at the limit, defaults for pods that request nothing.

The vectors restate Koordinator's estimator tests (pkg/scheduler/plugins/loadaware/estimator/
default_estimator_test.go, TestDefaultEstimatorEstimatePod), with their factors: cpu in
milli-cores, memory in bytes.
"""

from __future__ import annotations

from typing import Any

import pytest

from colocation.loadaware.load_aware_config import LoadAwareConfig, LoadAwareResource
from colocation.loadaware.pod_estimate import DEFAULT_CPU_MILLIS, DEFAULT_MEMORY_BYTES, estimate_pod, judged_pod

GI = 1024**3
KOORDINATOR_FACTORS: dict[LoadAwareResource, int] = {"cpu": 85, "memory": 70}


def pod(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, *,
        priority: int | None = None, **extra: Any) -> dict[str, Any]:
    resources = {key: value for key, value in (("requests", requests), ("limits", limits)) if value}
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": resources}]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": "p", "namespace": "default", **extra}, "spec": spec}


@pytest.mark.parametrize(("koordinator_case", "the_pod", "factors", "expected"), [
    ("estimate empty pod", pod(), KOORDINATOR_FACTORS, {"cpu": 250, "memory": 200 * 1024 * 1024}),
    ("estimate guaranteed pod", pod({"cpu": "4", "memory": "8Gi"}, {"cpu": "4", "memory": "8Gi"}),
     KOORDINATOR_FACTORS, {"cpu": 3400, "memory": 6012954214}),
    # The limit is the larger: 8 cores * 85 %.
    ("estimate burstable pod", pod({"cpu": "4", "memory": "8Gi"}, {"cpu": "8", "memory": "8Gi"}),
     KOORDINATOR_FACTORS, {"cpu": 6800, "memory": 6012954214}),
    # 110 % of 4 cores is capped at the 4-core limit (Koordinator's test bypasses the 100 % bound).
    ("estimate guaranteed pod and zoomed cpu factors",
     pod({"cpu": "4", "memory": "8Gi"}, {"cpu": "4", "memory": "8Gi"}),
     {"cpu": 110, "memory": 70}, {"cpu": 4000, "memory": 6012954214}),
    # A batch pod's cpu and memory are its batch-cpu (milli-cores) and batch-memory requests.
    ("estimate Batch pod", pod({"kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "8Gi"},
                               {"kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "8Gi"},
                               priority=5000),
     KOORDINATOR_FACTORS, {"cpu": 3400, "memory": 6012954214}),
    ("estimate pod only has request", pod({"cpu": "4", "memory": "8Gi"}, priority=9999),
     {"cpu": 80, "memory": 80}, {"cpu": 3200, "memory": 6871947674}),
])
def test_koordinators_estimates(koordinator_case: str, the_pod: dict[str, Any], factors: dict[LoadAwareResource, int],
                                expected: dict[str, int]) -> None:
    assert estimate_pod(the_pod, scaling_factors=factors) == expected


def test_the_defaults_apply_to_prod_and_batch_pods_only() -> None:
    # Koordinator's estimator gives a request of nothing its defaults only for cpu / memory and
    # batch-cpu / batch-memory: a mid pod without mid requests and a free pod count 0.
    defaults = {"cpu": DEFAULT_CPU_MILLIS, "memory": DEFAULT_MEMORY_BYTES}
    assert estimate_pod(pod(priority=9500), scaling_factors=KOORDINATOR_FACTORS) == defaults
    assert estimate_pod(pod(priority=5500), scaling_factors=KOORDINATOR_FACTORS) == defaults
    assert estimate_pod(pod(priority=7500), scaling_factors=KOORDINATOR_FACTORS) == {"cpu": 0, "memory": 0}
    free = pod({"cpu": "2"}, priority=3500)
    assert estimate_pod(free, scaling_factors=KOORDINATOR_FACTORS) == {"cpu": 0, "memory": 0}


def test_a_mid_pod_is_estimated_from_its_mid_requests() -> None:
    mid = pod({"kubernetes.io/mid-cpu": "12k", "kubernetes.io/mid-memory": "100Gi"}, priority=7999)
    assert estimate_pod(mid, scaling_factors=KOORDINATOR_FACTORS) == {"cpu": 10200, "memory": 70 * GI}


def test_requests_add_up_as_kubernetes_adds_them() -> None:
    # Two containers, an init container larger than both, a sidecar and overhead.
    the_pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default"}, "spec": {
        "priority": 9000,
        "containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"limits": {"cpu": "1"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "5"}}},
                           {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}],
        "overhead": {"cpu": "100m"},
    }}
    # requests: max(1 + 1 + 0.5, 5) + 0.1 = 5.1 cores; limits: 1 + 0.1 (overhead); 85 % of 5.1, capped at 1.1.
    assert estimate_pod(the_pod, scaling_factors={"cpu": 85})["cpu"] == 1100
    the_pod["spec"]["containers"][1]["resources"] = {}
    # No limit now: PodLimits adds the overhead to set limits only, so nothing caps 85 % of 5.1 cores.
    assert estimate_pod(the_pod, scaling_factors={"cpu": 85})["cpu"] == 4335


def test_judged_pod_reads_the_class_and_a_daemonsets_pod() -> None:
    config = LoadAwareConfig()
    prod = judged_pod(pod({"cpu": "1"}, {"cpu": "1"}, priority=9000), config=config)
    assert (prod.prod, prod.batch, prod.daemon) == (True, False, False)
    assert prod.estimate == {"cpu": 850, "memory": DEFAULT_MEMORY_BYTES}
    batch = judged_pod(pod(labels={"koordinator.sh/qosClass": "BE"}), config=config)
    assert (batch.prod, batch.batch) == (False, True)
    daemon = judged_pod(pod(ownerReferences=[{"kind": "DaemonSet", "name": "agent"}]), config=config)
    assert daemon.daemon
