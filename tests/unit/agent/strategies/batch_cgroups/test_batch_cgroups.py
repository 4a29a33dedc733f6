"""Batch resources into cgroup values: koordlet's BatchResource rules on pod specs."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.agent.strategies.batch_cgroups.batch_cgroups import (
    UNLIMITED,
    CgroupSettings,
    PodResources,
    batch_settings,
    cfs_quota_us,
    kubelet_settings,
    milli_cpu_to_shares,
    pod_resources,
    shares_to_weight,
)

GiB = 1 << 30
FREE = CgroupSettings(UNLIMITED, 2, UNLIMITED)  # what the kubelet gives a BestEffort pod or container


def container(name: str, *, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    resources = {key: value for key, value in (("requests", requests), ("limits", limits)) if value}
    return {"name": name, "resources": resources}


def batch(cpu: str | None = None, memory: str | None = None) -> dict[str, str]:
    named = {"kubernetes.io/batch-cpu": cpu, "kubernetes.io/batch-memory": memory}
    return {key: value for key, value in named.items() if value is not None}


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), labels: dict[str, str] | None = None,
        ) -> PodResources:
    statuses = [{"name": c["name"], "containerID": f"containerd://id-{c['name']}"} for c in containers]
    body = {"metadata": {"uid": "u-1", "namespace": "jobs", "name": "job-1", "labels": labels or {}},
            "spec": {"containers": list(containers), "initContainers": list(init)},
            "status": {"containerStatuses": statuses}}
    resources = pod_resources(body)
    assert resources is not None
    return resources


def test_limits_and_requests_give_quota_shares_and_memory_on_pod_and_containers() -> None:
    resources = pod(container("a", requests=batch("500", "1Gi"), limits=batch("1000", "2Gi")),
                    container("b", requests=batch("250", "1Gi"), limits=batch("500", "1Gi")))
    settings = batch_settings(resources)
    assert settings is not None
    assert settings.pod == CgroupSettings(cpu_limit_millis=1500, cpu_shares=768, memory_limit_bytes=3 * GiB)
    assert dict(settings.containers) == {"a": CgroupSettings(1000, 512, 2 * GiB), "b": CgroupSettings(500, 256, GiB)}
    assert resources.containers[0].container_id == "id-a"


def test_limits_only_default_the_requests_to_them() -> None:
    settings = batch_settings(pod(container("a", limits=batch("500", "1Gi"))))
    assert settings is not None
    assert settings.pod == CgroupSettings(500, 512, GiB)  # the API server's defaulting: request = limit


def test_requests_only_set_shares_and_leave_the_limits_unlimited() -> None:
    settings = batch_settings(pod(container("a", requests=batch("2000", "4Gi"))))
    assert settings is not None
    assert settings.pod == CgroupSettings(UNLIMITED, 2048, UNLIMITED)
    assert dict(settings.containers) == {"a": CgroupSettings(UNLIMITED, 2048, UNLIMITED)}


def test_one_unlimited_container_makes_the_pod_unlimited() -> None:
    settings = batch_settings(pod(container("a", limits=batch("500", "1Gi")),
                                  container("b", requests=batch("500"), limits=batch(memory="1Gi"))))
    assert settings is not None
    assert settings.pod == CgroupSettings(UNLIMITED, 1024, 2 * GiB)
    assert dict(settings.containers)["b"] == CgroupSettings(UNLIMITED, 512, GiB)


def test_a_container_without_batch_resources_is_neither_counted_nor_written() -> None:
    settings = batch_settings(pod(container("a", limits=batch("500")), container("sidecar")))
    assert settings is not None
    assert settings.pod.cpu_limit_millis == 500  # as koordlet: the sidecar shares the pod's limit
    assert [name for name, _ in settings.containers] == ["a"]


def test_init_containers_get_their_own_values_but_do_not_count_for_the_pod() -> None:
    setup = container("setup", limits=batch("2000"))
    settings = batch_settings(pod(container("a", limits=batch("500")), init=(setup,)))
    assert settings is not None
    assert settings.pod.cpu_limit_millis == 500
    assert dict(settings.containers)["setup"].cpu_limit_millis == 2000


def test_pods_without_batch_resources_or_not_best_effort_are_left_alone() -> None:
    assert pod_resources({"metadata": {"uid": "u"}, "spec": {"containers": [container("a", limits={"cpu": "1"})]}}) \
        is None
    labelled_ls = pod(container("a", limits=batch("500")), labels={"koordinator.sh/qosClass": "LS"})
    assert batch_settings(labelled_ls) is None
    labelled_be = pod(container("a", limits={**batch("500"), "cpu": "1"}), labels={"koordinator.sh/qosClass": "BE"})
    assert batch_settings(labelled_be) is not None  # Burstable to the kubelet, BE to Koordinator


def test_cfs_quota_policy_of_cpu_suppress_unsets_every_quota() -> None:
    settings = batch_settings(pod(container("a", requests=batch("500"), limits=batch("1000", "1Gi"))),
                              unlimited_quota=True)
    assert settings is not None
    assert settings.pod == CgroupSettings(UNLIMITED, 512, GiB)
    assert dict(settings.containers)["a"] == CgroupSettings(UNLIMITED, 512, GiB)


def test_quantities_are_whole_units_rounded_up() -> None:
    settings = batch_settings(pod(container("a", limits=batch("0.5", "1.5"))))
    assert settings is not None
    assert settings.pod == CgroupSettings(1, 2, 2)  # batch-cpu "0.5" is half a milli-cpu: 1


@pytest.mark.parametrize(("millis", "period", "quota"), [
    (500, 100_000, 50_000), (2500, 100_000, 250_000), (500, 50_000, 25_000),
    (1, 100_000, 1000),  # the kernel's floor
    (UNLIMITED, 100_000, UNLIMITED), (0, 100_000, UNLIMITED)])
def test_cfs_quota_is_the_limit_over_the_cgroups_period(millis: int, period: int, quota: int) -> None:
    assert cfs_quota_us(millis, period) == quota


def test_shares_and_weight_follow_the_kubelet() -> None:
    assert [milli_cpu_to_shares(m) for m in (0, 1, 500, 1000, 10**6)] == [2, 2, 512, 1024, 262144]
    assert [shares_to_weight(s) for s in (2, 1024, 262144)] == [1, 39, 10000]


def test_undo_puts_back_what_the_kubelet_writes_from_native_resources() -> None:
    best_effort = pod(container("a", limits=batch("500", "1Gi")), container("b"))
    assert kubelet_settings(best_effort).pod == FREE
    assert dict(kubelet_settings(best_effort).containers) == {"a": FREE}  # only what batch values touched
    burstable = pod(container("a", requests={"cpu": "250m"}, limits={**batch("500"), "cpu": "1", "memory": "1Gi"}),
                    labels={"koordinator.sh/qosClass": "BE"})
    assert kubelet_settings(burstable).pod == CgroupSettings(1000, 256, GiB)
