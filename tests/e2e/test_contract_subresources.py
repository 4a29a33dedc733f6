"""Contract: the status subresource is isolated from the main resource; scale reads and writes replicas."""

from __future__ import annotations

import uuid
from typing import Any

from tests.e2e.kube import Kube, Widgets, create, get, pod_manifest

MERGE = "application/merge-patch+json"


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "schedulerName": "e2e-nobody-schedules-this",
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}}


# ---- built-in: pods ------------------------------------------------------------------------------

async def test_put_of_a_pod_ignores_its_status(kube: Kube, namespace: str) -> None:
    created = await create(kube, pod_path(namespace), pod_manifest("quiet"))
    created["status"] = {**(created.get("status") or {}), "phase": "Succeeded", "message": "from the main resource"}
    created["metadata"]["labels"] = {"changed": "yes"}
    status, updated = await kube.request("PUT", pod_path(namespace, "quiet"), created)
    assert status == 200, updated
    assert updated["metadata"]["labels"] == {"changed": "yes"}
    assert updated["status"].get("phase") != "Succeeded"
    assert "message" not in updated["status"]


async def test_put_of_pod_status_ignores_spec_and_owners_but_takes_labels(kube: Kube, namespace: str) -> None:
    # podStatusStrategy keeps the stored spec and ownerReferences; the rest of the metadata is the request's.
    created = await create(kube, pod_path(namespace), pod_manifest("reported", labels={"a": "1"}))
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "6b6c1b1c-0000-4000-8000-000000000001"}
    changed = {**created, "metadata": {**created["metadata"], "labels": {"a": "2"}, "ownerReferences": [owner]},
               "spec": {**created["spec"], "activeDeadlineSeconds": 60},
               "status": {**(created.get("status") or {}), "phase": "Running", "message": "from the status"}}
    status, updated = await kube.request("PUT", pod_path(namespace, "reported") + "/status", changed)
    assert status == 200, updated
    assert (updated["status"]["phase"], updated["status"]["message"]) == ("Running", "from the status")
    assert updated["metadata"]["labels"] == {"a": "2"}
    assert "ownerReferences" not in updated["metadata"]
    assert "activeDeadlineSeconds" not in updated["spec"]
    assert updated["metadata"]["generation"] == created["metadata"]["generation"] == 1
    assert (await get(kube, pod_path(namespace, "reported")))["status"]["message"] == "from the status"


async def test_a_pod_spec_change_bumps_its_generation(kube: Kube, namespace: str) -> None:
    created = await create(kube, pod_path(namespace), pod_manifest("generational"))
    assert created["metadata"]["generation"] == 1
    status, patched = await kube.request("PATCH", pod_path(namespace, "generational"),
                                         {"spec": {"activeDeadlineSeconds": 60}}, content_type=MERGE)
    assert status == 200, patched
    assert patched["metadata"]["generation"] == 2
    status, patched = await kube.request("PATCH", pod_path(namespace, "generational"),
                                         {"metadata": {"labels": {"only": "metadata"}}}, content_type=MERGE)
    assert (status, patched["metadata"]["generation"]) == (200, 2)


# ---- built-in: deployments and namespaces --------------------------------------------------------

async def test_deployment_status_writes_ignore_labels_but_take_annotations(kube: Kube, namespace: str) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    await create(kube, path, deployment("reporting", 0))
    status, patched = await kube.request("PATCH", f"{path}/reporting/status", {
        "metadata": {"labels": {"from": "status"}, "annotations": {"from": "status"}},
        "status": {"observedGeneration": 1}}, content_type=MERGE)
    assert status == 200, patched
    assert "from" not in (patched["metadata"].get("labels") or {})  # deploymentStatusStrategy keeps the labels
    assert patched["metadata"]["annotations"]["from"] == "status"
    assert patched["metadata"]["generation"] == 1


async def test_deployment_annotations_bump_its_generation(kube: Kube, namespace: str) -> None:
    # They are copied to the ReplicaSets, so the deployment controller must see them as a new generation.
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    await create(kube, path, deployment("annotated", 0))
    status, patched = await kube.request("PATCH", f"{path}/annotated", {"metadata": {"annotations": {"a": "b"}}},
                                         content_type=MERGE)
    assert (status, patched["metadata"]["generation"]) == (200, 2)
    status, patched = await kube.request("PATCH", f"{path}/annotated", {"metadata": {"labels": {"a": "b"}}},
                                         content_type=MERGE)
    assert (status, patched["metadata"]["generation"]) == (200, 2)


async def test_namespace_finalizers_change_through_finalize_only(kube: Kube, cluster_cleanup: list[str]) -> None:
    name = f"e2e-finalized-{uuid.uuid4().hex[:6]}"
    created = await create(kube, "/api/v1/namespaces", {"metadata": {"name": name}})
    cluster_cleanup.append(f"/api/v1/namespaces/{name}")
    assert created["spec"]["finalizers"] == ["kubernetes"]
    status, patched = await kube.request("PATCH", f"/api/v1/namespaces/{name}",
                                         {"spec": {"finalizers": ["kubernetes", "example.com/x"]}},
                                         content_type=MERGE)
    assert (status, patched["spec"]["finalizers"]) == (200, ["kubernetes"])
    current = await get(kube, f"/api/v1/namespaces/{name}")
    current["spec"]["finalizers"] = ["kubernetes", "example.com/x"]
    status, finalized = await kube.request("PUT", f"/api/v1/namespaces/{name}/finalize", current)
    assert (status, finalized["spec"]["finalizers"]) == (200, ["kubernetes", "example.com/x"])


# ---- custom resources with a status subresource --------------------------------------------------

async def test_custom_resource_main_writes_ignore_status(kube: Kube, namespace: str, widgets: Widgets) -> None:
    created = await create(kube, widgets.path(namespace), widgets.body("w", status={"phase": "Ignored"}))
    assert (created.get("status") or {}).get("phase") is None

    status, patched = await kube.request("PATCH", widgets.path(namespace, "w"),
                                         {"spec": {"replicas": 2}, "status": {"phase": "Ignored"}},
                                         content_type=MERGE)
    assert status == 200, patched
    assert patched["spec"]["replicas"] == 2
    assert (patched.get("status") or {}).get("phase") is None
    assert patched["metadata"]["generation"] == 2


async def test_custom_resource_status_writes_ignore_spec_and_metadata(kube: Kube, namespace: str,
                                                                      widgets: Widgets) -> None:
    created = await create(kube, widgets.path(namespace), widgets.body("w", {"image": "nginx", "replicas": 1}))
    status, patched = await kube.request("PATCH", widgets.path(namespace, "w") + "/status", {
        "metadata": {"labels": {"sneaky": "yes"}}, "spec": {"replicas": 9}, "status": {"phase": "Ready"}},
        content_type=MERGE)
    assert status == 200, patched
    assert patched["status"] == {"phase": "Ready"}
    assert patched["spec"]["replicas"] == 1
    assert "sneaky" not in (patched["metadata"].get("labels") or {})
    assert patched["metadata"]["generation"] == created["metadata"]["generation"]

    current = await get(kube, widgets.path(namespace, "w"))
    current["status"] = {"phase": "Done"}
    current["spec"]["replicas"] = 5
    status, put = await kube.request("PUT", widgets.path(namespace, "w") + "/status", current)
    assert status == 200, put
    assert (put["status"], put["spec"]["replicas"]) == ({"phase": "Done"}, 1)


async def test_custom_resource_scale_writes_go_through_the_custom_resource_validation(
        kube: Kube, namespace: str, widgets: Widgets) -> None:
    await create(kube, widgets.path(namespace), widgets.body("unscaled"))
    status, body = await kube.request("GET", widgets.path(namespace, "unscaled") + "/scale")
    assert (status, body["reason"]) == (500, "InternalError")
    assert body["message"] == 'Internal error occurred: the spec replicas field ".spec.replicas" does not exist'
    status, scaled = await kube.request("PATCH", widgets.path(namespace, "unscaled") + "/scale",
                                        {"spec": {"replicas": 2}}, content_type=MERGE)
    assert (status, scaled["spec"]) == (200, {"replicas": 2})

    for replicas, fields in ((11, ["spec.replicas"]), (-1, ["spec.replicas", ".spec.replicas"])):
        status, body = await kube.request("PATCH", widgets.path(namespace, "unscaled") + "/scale",
                                          {"spec": {"replicas": replicas}}, content_type=MERGE)
        assert (status, body["details"]["kind"]) == (422, "Widget")  # the schema's maximum, not Scale's
        assert [cause["field"] for cause in body["details"]["causes"]] == fields
    assert (await get(kube, widgets.path(namespace, "unscaled")))["spec"]["replicas"] == 2


async def test_custom_resource_scale_subresource(kube: Kube, namespace: str, widgets: Widgets) -> None:
    await create(kube, widgets.path(namespace), widgets.body("w", {"image": "nginx", "replicas": 3}))
    status, scale = await kube.request("GET", widgets.path(namespace, "w") + "/scale")
    assert status == 200, scale
    assert (scale["kind"], scale["apiVersion"], scale["spec"]["replicas"]) == ("Scale", "autoscaling/v1", 3)
    status, scaled = await kube.request("PATCH", widgets.path(namespace, "w") + "/scale",
                                        {"spec": {"replicas": 4}}, content_type=MERGE)
    assert status == 200, scaled
    assert (await get(kube, widgets.path(namespace, "w")))["spec"]["replicas"] == 4


# ---- scale of a Deployment -----------------------------------------------------------------------

async def test_deployment_scale_reads_and_writes_spec_replicas(kube: Kube, namespace: str) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    created = await create(kube, path, deployment("scaled", 1))
    status, scale = await kube.request("GET", f"{path}/scaled/scale")
    assert status == 200, scale
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["metadata"]["name"] == "scaled"
    assert scale["spec"]["replicas"] == 1
    assert scale["status"]["selector"] == "app=scaled"

    scale["spec"]["replicas"] = 0
    # Without its resourceVersion the write is unconditional: on a real cluster the deployment
    # controller may have written the deployment since the GET (conflicts have their own test).
    del scale["metadata"]["resourceVersion"]
    status, written = await kube.request("PUT", f"{path}/scaled/scale", scale)
    assert status == 200, written
    assert written["spec"] == {}  # autoscaling/v1 ScaleSpec.replicas is omitempty
    assert written["status"]["replicas"] >= 0  # ScaleStatus.replicas is not
    deployment_now = await get(kube, f"{path}/scaled")
    assert deployment_now["spec"]["replicas"] == 0
    assert deployment_now["metadata"]["generation"] == created["metadata"]["generation"] + 1

    status, patched = await kube.request("PATCH", f"{path}/scaled/scale", {"spec": {"replicas": 2}},
                                         content_type=MERGE)
    assert status == 200, patched
    assert (await get(kube, f"{path}/scaled"))["spec"]["replicas"] == 2


async def test_scale_with_a_stale_resource_version_conflicts(kube: Kube, namespace: str) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    await create(kube, path, deployment("contended", 1))
    stale = await get(kube, f"{path}/contended/scale")
    status, _ = await kube.request("PATCH", f"{path}/contended", {"spec": {"replicas": 0}}, content_type=MERGE)
    assert status == 200
    stale["spec"]["replicas"] = 3
    status, body = await kube.request("PUT", f"{path}/contended/scale", stale)
    assert (status, body["reason"]) == (409, "Conflict")
    assert (await get(kube, f"{path}/contended"))["spec"]["replicas"] == 0


async def test_negative_scale_is_invalid(kube: Kube, namespace: str) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    await create(kube, path, deployment("bounded", 1))
    status, body = await kube.request("PATCH", f"{path}/bounded/scale", {"spec": {"replicas": -1}},
                                      content_type=MERGE)
    assert (status, body["reason"]) == (422, "Invalid")
    assert [cause["field"] for cause in body["details"]["causes"]] == ["spec.replicas"]
