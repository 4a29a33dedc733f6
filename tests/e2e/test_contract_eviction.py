"""Contract: the pods/eviction subresource honours PodDisruptionBudgets."""

from __future__ import annotations

from typing import Any

from tests.e2e.kube import Kube, create, get, is_gone, make_pod_ready, pod_manifest
from tests.timing import eventually_async

PDBS = "/apis/policy/v1/namespaces/{}/poddisruptionbudgets"


def eviction(name: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}


async def evict(kube: Kube, namespace: str, name: str) -> tuple[int, Any]:
    return await kube.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", eviction(name))


async def ready_pod(kube: Kube, namespace: str, name: str) -> None:
    await create(kube, f"/api/v1/namespaces/{namespace}/pods", pod_manifest(name, labels={"app": "guarded"}))
    await make_pod_ready(kube, namespace, name)


async def budget_allows(kube: Kube, namespace: str, name: str, disruptions: int) -> bool:
    budget = await get(kube, f"{PDBS.format(namespace)}/{name}")
    status = budget.get("status") or {}
    return bool(status.get("disruptionsAllowed") == disruptions
                and status.get("observedGeneration") == budget["metadata"]["generation"])


async def test_eviction_without_a_budget_deletes_the_pod(kube: Kube, namespace: str) -> None:
    await create(kube, f"/api/v1/namespaces/{namespace}/pods", pod_manifest("free"))
    status, body = await evict(kube, namespace, "free")
    assert status == 201, body
    assert (body["kind"], body["status"]) == ("Status", "Success")

    async def gone() -> bool:
        return await is_gone(kube, f"/api/v1/namespaces/{namespace}/pods/free")

    await eventually_async(gone, timeout=30)


async def test_eviction_of_a_missing_pod_is_not_found(kube: Kube, namespace: str) -> None:
    status, body = await evict(kube, namespace, "absent")
    assert (status, body["reason"]) == (404, "NotFound")


async def test_budget_refuses_then_allows_eviction(kube: Kube, namespace: str) -> None:
    await ready_pod(kube, namespace, "first")
    await create(kube, PDBS.format(namespace), {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-one"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    await eventually_async(lambda: budget_allows(kube, namespace, "keep-one", 0), timeout=30)

    status, body = await evict(kube, namespace, "first")
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert [cause["reason"] for cause in body["details"]["causes"]] == ["DisruptionBudget"]
    pod = await get(kube, f"/api/v1/namespaces/{namespace}/pods/first")
    assert not pod["metadata"].get("deletionTimestamp")

    await ready_pod(kube, namespace, "second")
    await eventually_async(lambda: budget_allows(kube, namespace, "keep-one", 1), timeout=30)
    status, body = await evict(kube, namespace, "first")
    assert status == 201, body

    async def first_gone() -> bool:
        return await is_gone(kube, f"/api/v1/namespaces/{namespace}/pods/first")

    await eventually_async(first_gone, timeout=30)
    await eventually_async(lambda: budget_allows(kube, namespace, "keep-one", 0), timeout=30)
    status, body = await evict(kube, namespace, "second")
    assert (status, body["reason"]) == (429, "TooManyRequests")


async def test_budget_status_counts_healthy_pods(kube: Kube, namespace: str) -> None:
    await ready_pod(kube, namespace, "a")
    await ready_pod(kube, namespace, "b")
    await create(kube, f"/api/v1/namespaces/{namespace}/pods", pod_manifest("c", labels={"app": "guarded"}))
    await create(kube, PDBS.format(namespace), {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "half"},
        # An integer minAvailable: percentages and maxUnavailable need the pods' controllers' scale.
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})

    async def counted() -> dict[str, Any] | None:
        status = (await get(kube, f"{PDBS.format(namespace)}/half")).get("status") or {}
        return status if status.get("expectedPods") == 3 else None

    status = await eventually_async(counted, timeout=30)
    # 3 pods expected (the unready one too), 2 healthy, 1 must stay: 1 may go.
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (2, 1, 1)
