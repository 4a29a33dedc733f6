"""Contract: the storage semantics every client relies on (identity, names, concurrency, generation)."""

from __future__ import annotations

import re

from tests.e2e.kube import Kube, configmap, create, get

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def cm_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


async def test_create_get_list_update_delete(kube: Kube, namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("settings", {"colour": "blue"}))
    meta = created["metadata"]
    assert (created["apiVersion"], created["kind"]) == ("v1", "ConfigMap")
    assert meta["namespace"] == namespace
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", meta["uid"])
    assert RFC3339.match(meta["creationTimestamp"])
    assert meta["resourceVersion"]

    fetched = await get(kube, cm_path(namespace, "settings"))
    assert fetched["data"] == {"colour": "blue"}
    assert fetched["metadata"]["uid"] == meta["uid"]

    status, listed = await kube.request("GET", cm_path(namespace))
    assert status == 200
    assert "settings" in [item["metadata"]["name"] for item in listed["items"]]

    fetched["data"] = {"colour": "green"}
    status, updated = await kube.request("PUT", cm_path(namespace, "settings"), fetched)
    assert status == 200, updated
    assert updated["data"] == {"colour": "green"}
    assert updated["metadata"]["uid"] == meta["uid"]
    assert updated["metadata"]["creationTimestamp"] == meta["creationTimestamp"]
    assert updated["metadata"]["resourceVersion"] != meta["resourceVersion"]

    status, _ = await kube.request("DELETE", cm_path(namespace, "settings"))
    assert status == 200
    status, gone = await kube.request("GET", cm_path(namespace, "settings"))
    assert (status, gone["reason"]) == (404, "NotFound")
    assert gone["details"] == {"name": "settings", "kind": "configmaps"}


async def test_generate_name_appends_a_random_suffix(kube: Kube, namespace: str) -> None:
    body = {"metadata": {"generateName": "job-"}, "data": {}}
    first = await create(kube, cm_path(namespace), body)
    second = await create(kube, cm_path(namespace), body)
    for obj in (first, second):
        assert re.fullmatch(r"job-[a-z0-9]{5}", obj["metadata"]["name"]), obj["metadata"]["name"]
        assert obj["metadata"]["generateName"] == "job-"
    assert first["metadata"]["name"] != second["metadata"]["name"]


async def test_object_in_a_missing_namespace_is_not_found(kube: Kube) -> None:
    status, body = await kube.request("POST", cm_path("e2e-no-such-namespace"), configmap("orphan"))
    assert (status, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    assert body["details"] == {"name": "e2e-no-such-namespace", "kind": "namespaces"}


async def test_creating_a_duplicate_is_already_exists(kube: Kube, namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("twice", {"n": "1"}))
    status, body = await kube.request("POST", cm_path(namespace), configmap("twice", {"n": "2"}))
    assert (status, body["reason"]) == (409, "AlreadyExists")
    assert body["details"] == {"name": "twice", "kind": "configmaps"}
    assert (await get(kube, cm_path(namespace, "twice")))["data"] == {"n": "1"}


async def test_update_with_a_stale_resource_version_conflicts_and_changes_nothing(kube: Kube,
                                                                                    namespace: str) -> None:
    original = await create(kube, cm_path(namespace), configmap("contended", {"owner": "nobody"}))
    first = {**original, "data": {"owner": "first"}}
    status, winner = await kube.request("PUT", cm_path(namespace, "contended"), first)
    assert status == 200, winner

    late = {**original, "data": {"owner": "second"}}  # still carries the original resourceVersion
    status, body = await kube.request("PUT", cm_path(namespace, "contended"), late)
    assert (status, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]
    assert body["details"] == {"name": "contended", "kind": "configmaps"}

    current = await get(kube, cm_path(namespace, "contended"))
    assert current["data"] == {"owner": "first"}
    assert current["metadata"]["resourceVersion"] == winner["metadata"]["resourceVersion"]


async def test_update_that_changes_nothing_keeps_the_resource_version(kube: Kube, namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("steady", {"k": "v"}))
    current = await get(kube, cm_path(namespace, "steady"))
    status, updated = await kube.request("PUT", cm_path(namespace, "steady"), current)
    assert status == 200, updated
    assert updated["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]


async def test_resource_versions_increase_across_resources(kube: Kube, namespace: str) -> None:
    first = await create(kube, cm_path(namespace), configmap("one"))
    second = await create(kube, f"/api/v1/namespaces/{namespace}/secrets",
                          {"metadata": {"name": "two"}, "stringData": {"k": "v"}})
    third = await create(kube, cm_path(namespace), configmap("three"))
    versions = [int(obj["metadata"]["resourceVersion"]) for obj in (first, second, third)]
    assert versions[0] < versions[1] < versions[2]


def deployment(name: str, replicas: int = 1, image: str = "registry.k8s.io/pause:3.9") -> dict[str, object]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"schedulerName": "e2e-nobody-schedules-this",
                                           "containers": [{"name": "main", "image": image}]}}}}


async def test_generation_counts_spec_changes_only(kube: Kube, namespace: str) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    created = await create(kube, path, deployment("web", replicas=0))
    assert created["metadata"]["generation"] == 1

    status, labelled = await kube.request("PATCH", f"{path}/web", {"metadata": {"labels": {"tier": "front"}}},
                                          content_type="application/merge-patch+json")
    assert status == 200, labelled
    assert labelled["metadata"]["generation"] == 1

    # A patch, not a PUT of what was read: on a real cluster the deployment controller writes the
    # status too, so a PUT carrying an earlier resourceVersion may meet a 409.
    status, body = await kube.request("PATCH", f"{path}/web/status",
                                      {"status": {"observedGeneration": 1, "collisionCount": 3}},
                                      content_type="application/merge-patch+json")
    assert status == 200, body
    assert body["metadata"]["generation"] == 1

    status, scaled = await kube.request("PATCH", f"{path}/web", {"spec": {"replicas": 2}},
                                        content_type="application/merge-patch+json")
    assert status == 200, scaled
    assert scaled["metadata"]["generation"] == 2


async def test_lists_carry_kind_and_resource_version(kube: Kube, namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("listed"))
    status, listed = await kube.request("GET", cm_path(namespace))
    assert status == 200
    assert (listed["kind"], listed["apiVersion"]) == ("ConfigMapList", "v1")
    assert int(listed["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])


async def test_invalid_name_is_invalid(kube: Kube, namespace: str) -> None:
    status, body = await kube.request("POST", cm_path(namespace), configmap("Not_A_DNS_Name"))
    assert (status, body["reason"]) == (422, "Invalid")
    assert [cause["field"] for cause in body["details"]["causes"]] == ["metadata.name"]


async def test_invalid_label_keys_and_values_are_invalid(kube: Kube, namespace: str) -> None:
    too_long = "x" * 64  # label values are at most 63 characters
    for labels in ({"app": "has space"}, {"bad key!": "v"}, {"node": too_long}):
        status, body = await kube.request("POST", cm_path(namespace), configmap("labelled", labels=labels))
        assert (status, body["reason"]) == (422, "Invalid"), labels
        assert [cause["field"] for cause in body["details"]["causes"]] == ["metadata.labels"]
    await create(kube, cm_path(namespace), configmap("labelled", labels={"example.com/app": "a-b_c.d", "e": ""}))


async def test_update_of_a_missing_object_is_not_found(kube: Kube, namespace: str) -> None:
    status, body = await kube.request("PUT", cm_path(namespace, "missing"), configmap("missing"))
    assert (status, body["reason"]) == (404, "NotFound")
    status, body = await kube.request("PATCH", cm_path(namespace, "missing"), {"data": {"k": "v"}},
                                      content_type="application/merge-patch+json")
    assert (status, body["reason"]) == (404, "NotFound")


async def test_names_and_namespaces_must_match_the_url(kube: Kube, namespace: str) -> None:
    created = await create(kube, cm_path(namespace), configmap("here"))
    status, body = await kube.request("PUT", cm_path(namespace, "here"),
                                      {**created, "metadata": {**created["metadata"], "name": "there"}})
    assert (status, body["reason"]) == (400, "BadRequest")
    status, body = await kube.request("POST", cm_path(namespace), configmap("elsewhere", namespace="default"))
    assert (status, body["reason"]) == (400, "BadRequest")


async def test_dry_run_create_persists_nothing(kube: Kube, namespace: str) -> None:
    status, body = await kube.request("POST", cm_path(namespace), configmap("imagined"), params={"dryRun": "All"})
    assert status == 201, body
    assert body["metadata"]["name"] == "imagined"
    status, _ = await kube.request("GET", cm_path(namespace, "imagined"))
    assert status == 404


async def test_configmap_update_without_a_resource_version_is_unconditional(kube: Kube, namespace: str) -> None:
    await create(kube, cm_path(namespace), configmap("last-write-wins", {"v": "1"}))
    status, body = await kube.request("PUT", cm_path(namespace, "last-write-wins"),
                                      configmap("last-write-wins", {"v": "2"}))
    assert status == 200, body
    assert body["data"] == {"v": "2"}
