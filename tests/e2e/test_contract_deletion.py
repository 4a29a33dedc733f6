"""Contract: deletion with finalizers, deletecollection, namespace teardown and garbage collection."""

from __future__ import annotations

import uuid
from typing import Any

from tests.e2e.kube import Kube, configmap, create, events_until, get, is_gone
from tests.timing import eventually_async

MERGE = "application/merge-patch+json"
FINALIZER = "example.com/hold"


def cm_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


async def test_finalizers_hold_a_deleted_object_until_the_last_one_is_removed(kube: Kube, namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("held", finalizers=[FINALIZER, "example.com/b"]))
    async with kube.watch(cm_path(namespace), resourceVersion=created["metadata"]["resourceVersion"],
                          fieldSelector="metadata.name=held") as events:
        status, deleting = await kube.request("DELETE", cm_path(namespace, "held"))
        assert status == 200, deleting
        assert deleting["metadata"]["deletionTimestamp"]
        assert deleting["metadata"]["finalizers"] == [FINALIZER, "example.com/b"]

        still_there = await get(kube, cm_path(namespace, "held"))
        assert still_there["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]

        status, again = await kube.request("DELETE", cm_path(namespace, "held"))  # deleting twice is harmless
        assert status == 200, again
        assert again["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]

        status, body = await kube.request("PATCH", cm_path(namespace, "held"),
                                          {"metadata": {"finalizers": ["example.com/b", "example.com/new"]}},
                                          content_type=MERGE)
        assert (status, body["reason"]) == (422, "Invalid")  # no new finalizers once deleting

        status, body = await kube.request("PATCH", cm_path(namespace, "held"),
                                          {"metadata": {"finalizers": ["example.com/b"]}}, content_type=MERGE)
        assert status == 200, body
        assert not await is_gone(kube, cm_path(namespace, "held"))

        status, body = await kube.request("PATCH", cm_path(namespace, "held"),
                                          {"metadata": {"finalizers": None}}, content_type=MERGE)
        assert status == 200, body
        seen = await events_until(events, lambda e: e["type"] == "DELETED")
    assert seen[0]["type"] == "MODIFIED" and seen[0]["object"]["metadata"]["deletionTimestamp"]
    assert await is_gone(kube, cm_path(namespace, "held"))


async def test_delete_with_a_stale_resource_version_precondition_conflicts(kube: Kube, namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("guarded", {"v": "1"}))
    status, _ = await kube.request("PATCH", cm_path(namespace, "guarded"), {"data": {"v": "2"}}, content_type=MERGE)
    assert status == 200
    status, body = await kube.request("DELETE", cm_path(namespace, "guarded"), {
        "apiVersion": "v1", "kind": "DeleteOptions",
        "preconditions": {"resourceVersion": created["metadata"]["resourceVersion"]}})
    assert (status, body["reason"]) == (409, "Conflict")
    assert not await is_gone(kube, cm_path(namespace, "guarded"))


async def test_deleting_something_absent_is_not_found(kube: Kube, namespace: str) -> None:
    status, body = await kube.request("DELETE", cm_path(namespace, "never-was"))
    assert (status, body["reason"]) == (404, "NotFound")


async def test_deletecollection_deletes_only_what_the_selector_matches(kube: Kube, namespace: str) -> None:
    for name, labels in (("a", {"batch": "old"}), ("b", {"batch": "old"}), ("c", {"batch": "new"})):
        await create(kube, cm_path(namespace), configmap(name, labels=labels))
    status, body = await kube.request("DELETE", cm_path(namespace), params={"labelSelector": "batch=old"})
    assert status == 200, body
    status, listed = await kube.request("GET", cm_path(namespace), params={"labelSelector": "batch"})
    assert [item["metadata"]["name"] for item in listed["items"]] == ["c"]


async def test_deleting_a_namespace_removes_its_contents(kube: Kube) -> None:
    name = f"e2e-doomed-{uuid.uuid4().hex[:6]}"
    await create(kube, "/api/v1/namespaces", {"metadata": {"name": name}})
    await create(kube, cm_path(name), configmap("content"))
    await create(kube, cm_path(name), configmap("lingering", finalizers=[FINALIZER]))

    status, body = await kube.request("DELETE", f"/api/v1/namespaces/{name}")
    assert status == 200, body

    async def terminating() -> bool:
        ns = await get(kube, f"/api/v1/namespaces/{name}")
        return (ns.get("status") or {}).get("phase") == "Terminating" and await is_gone(kube, cm_path(name, "content"))

    await eventually_async(terminating, timeout=60)
    status, body = await kube.request("POST", cm_path(name), configmap("latecomer"))
    assert (status, body["reason"]) == (403, "Forbidden")
    assert "being terminated" in body["message"]

    async def lingering_deleted() -> bool:
        # The namespace controller deletes every object of the namespace; which one first is not defined.
        lingering = await get(kube, cm_path(name, "lingering"))
        return bool((lingering.get("metadata") or {}).get("deletionTimestamp"))

    await eventually_async(lingering_deleted, timeout=60)
    status, body = await kube.request("PATCH", cm_path(name, "lingering"), {"metadata": {"finalizers": None}},
                                      content_type=MERGE)
    assert status in (200, 404), body  # 404: it went while we looked

    async def namespace_gone() -> bool:
        return await is_gone(kube, f"/api/v1/namespaces/{name}")

    await eventually_async(namespace_gone, timeout=60)


def owned_by(owner: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
             "uid": owner["metadata"]["uid"]}]


async def test_deleting_an_owner_removes_its_dependents(kube: Kube, namespace: str) -> None:
    owner = await create(kube, cm_path(namespace), configmap("owner"))
    await create(kube, cm_path(namespace), configmap("dependent", ownerReferences=owned_by(owner)))
    await create(kube, cm_path(namespace), configmap("independent"))
    status, _ = await kube.request("DELETE", cm_path(namespace, "owner"))
    assert status == 200

    async def dependent_gone() -> bool:
        return await is_gone(kube, cm_path(namespace, "dependent"))

    await eventually_async(dependent_gone, timeout=30)
    assert not await is_gone(kube, cm_path(namespace, "independent"))


async def test_orphaning_deletion_keeps_dependents_and_drops_the_reference(kube: Kube, namespace: str) -> None:
    owner = await create(kube, cm_path(namespace), configmap("owner"))
    await create(kube, cm_path(namespace), configmap("dependent", ownerReferences=owned_by(owner)))
    status, _ = await kube.request("DELETE", cm_path(namespace, "owner"), params={"propagationPolicy": "Orphan"})
    assert status == 200

    async def released() -> bool:
        return await is_gone(kube, cm_path(namespace, "owner")) and not (
            await get(kube, cm_path(namespace, "dependent")))["metadata"].get("ownerReferences")

    await eventually_async(released, timeout=30)
