"""Contract: the status subresource is isolated from the main resource; scale reads and writes replicas."""

from __future__ import annotations

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


async def test_put_of_pod_status_ignores_spec_and_metadata(kube: Kube, namespace: str) -> None:
    created = await create(kube, pod_path(namespace), pod_manifest("reported", labels={"a": "1"}))
    changed = {**created, "metadata": {**created["metadata"], "labels": {"a": "2"}},
               "spec": {**created["spec"], "activeDeadlineSeconds": 60},
               "status": {**(created.get("status") or {}), "phase": "Running", "message": "from the status"}}
    status, updated = await kube.request("PUT", pod_path(namespace, "reported") + "/status", changed)
    assert status == 200, updated
    assert (updated["status"]["phase"], updated["status"]["message"]) == ("Running", "from the status")
    assert updated["metadata"]["labels"] == {"a": "1"}
    assert "activeDeadlineSeconds" not in updated["spec"]
    assert (await get(kube, pod_path(namespace, "reported")))["status"]["message"] == "from the status"


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
    status, written = await kube.request("PUT", f"{path}/scaled/scale", scale)
    assert status == 200, written
    assert written["spec"]["replicas"] == 0
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
