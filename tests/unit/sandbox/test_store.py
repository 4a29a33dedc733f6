"""The sandbox store: resourceVersion, conflicts, generation, finalizers, garbage collection, paging."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import FieldSelector, LabelSelector
from colocation_sandbox.server.builtin_controllers import Controllers
from colocation_sandbox.server.object_store import Store
from colocation_sandbox.server.object_watch_window import WatchFilter
from colocation_sandbox.server.resource_types import Registry, ResourceType
from tests.clock import FakeClock

Obj = dict[str, Any]
WALL = 1_700_000_000.0
EVERYTHING = WatchFilter()


@pytest.fixture
def store() -> Store:
    store = Store(Registry(), clock=FakeClock(WALL).wall, window=50)
    Controllers(store)
    store.create(rt(store, "", "namespaces"), {"metadata": {"name": "default"}})
    return store


def rt(store: Store, group: str, resource: str) -> ResourceType:
    found = store.registry.get(group, "v1", resource)
    assert found is not None
    return found


def configmap(name: str, **data: str) -> Obj:
    return {"metadata": {"name": name, "namespace": "default"}, "data": dict(data)}


def test_every_write_gets_a_larger_resource_version_across_resources(store: Store) -> None:
    cms, secrets = rt(store, "", "configmaps"), rt(store, "", "secrets")
    first = store.create(cms, configmap("a"))
    second = store.create(secrets, {"metadata": {"name": "s", "namespace": "default"}})
    third = store.update(cms, "default", "a", obj={**first, "data": {"k": "v"}})
    versions = [int(o["metadata"]["resourceVersion"]) for o in (first, second, third)]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_resource_versions_continue_above_the_clock_after_a_restart() -> None:
    clock = FakeClock(WALL)
    before = Store(Registry(), clock=clock.wall)
    clock.advance(1)
    after = Store(Registry(), clock=clock.wall)
    assert after.resource_version > before.resource_version


def test_update_with_a_stale_resource_version_conflicts_and_changes_nothing(store: Store) -> None:
    cms = rt(store, "", "configmaps")
    created = store.create(cms, configmap("a", k="1"))
    store.update(cms, "default", "a", obj={**created, "data": {"k": "2"}})
    with pytest.raises(ApiError) as error:
        store.update(cms, "default", "a", obj={**created, "data": {"k": "3"}})
    assert error.value.code == 409 and error.value.reason == "Conflict"
    assert store.get(cms, "default", "a")["data"] == {"k": "2"}


def test_a_no_op_update_keeps_the_resource_version_and_emits_nothing(store: Store) -> None:
    cms = rt(store, "", "configmaps")
    created = store.create(cms, configmap("a", k="1"))
    events_before = len(store.window(cms).events)
    again = store.update(cms, "default", "a", obj=dict(created))
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert len(store.window(cms).events) == events_before


def test_generation_counts_spec_changes_only(store: Store) -> None:
    deployments = rt(store, "apps", "deployments")
    created = store.create(deployments, {"metadata": {"name": "d", "namespace": "default"},
                                         "spec": {"replicas": 1}})
    assert created["metadata"]["generation"] == 1
    current = store.get(deployments, "default", "d")
    labelled = store.update(deployments, "default", "d",
                            obj={**current, "metadata": {**current["metadata"], "labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    scaled = store.update(deployments, "default", "d", obj={**labelled, "spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] == 2


def test_status_and_main_resource_do_not_write_each_other(store: Store) -> None:
    deployments = rt(store, "apps", "deployments")
    store.create(deployments, {"metadata": {"name": "d", "namespace": "default"}, "spec": {"replicas": 1}})
    current = store.get(deployments, "default", "d")
    main = store.update(deployments, "default", "d", obj={**current, "spec": {"replicas": 2}, "status": {"x": 1}})
    assert "x" not in main["status"]
    main = store.get(deployments, "default", "d")  # the deployment controller has written status since
    status = store.update(deployments, "default", "d", obj={**main, "spec": {"replicas": 9}, "status": {"x": 1}},
                          subresource="status")
    assert status["spec"] == {"replicas": 2} and status["status"] == {"x": 1}


def test_objects_need_an_existing_namespace(store: Store) -> None:
    with pytest.raises(ApiError) as error:
        store.create(rt(store, "", "configmaps"), {"metadata": {"name": "a", "namespace": "missing"}})
    assert error.value.code == 404


def test_generate_name_creates_distinct_names(store: Store) -> None:
    cms = rt(store, "", "configmaps")
    names = {store.create(cms, {"metadata": {"generateName": "job-", "namespace": "default"}})["metadata"]["name"]
             for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("job-") and len(n) == 9 for n in names)


def test_finalizers_hold_deletion_until_removed(store: Store) -> None:
    cms = rt(store, "", "configmaps")
    store.create(cms, {**configmap("a"), "metadata": {**configmap("a")["metadata"], "finalizers": ["x/y"]}})
    marked, gone = store.delete(cms, "default", "a")
    assert not gone and marked["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError):
        store.update(cms, "default", "a",
                     obj={**marked, "metadata": {**marked["metadata"], "finalizers": ["x/y", "new/one"]}})
    store.update(cms, "default", "a", obj={**marked, "metadata": {**marked["metadata"], "finalizers": []}})
    assert store.find(cms, "default", "a") is None
    assert store.window(cms).events[-1].type == "DELETED"


def test_deleting_an_owner_deletes_its_dependents(store: Store) -> None:
    nodes, leases = rt(store, "", "nodes"), rt(store, "coordination.k8s.io", "leases")
    node = store.create(nodes, {"metadata": {"name": "n1"}})
    store.create(rt(store, "", "namespaces"), {"metadata": {"name": "kube-node-lease"}})
    store.create(leases, {"metadata": {"name": "n1", "namespace": "kube-node-lease", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": node["metadata"]["uid"]}]}})
    store.delete(nodes, "", "n1")
    assert store.find(leases, "kube-node-lease", "n1") is None


def test_namespace_deletion_empties_it_first(store: Store) -> None:
    namespaces, cms = rt(store, "", "namespaces"), rt(store, "", "configmaps")
    store.create(namespaces, {"metadata": {"name": "team"}, "spec": {"finalizers": ["kubernetes"]}})
    store.create(cms, {"metadata": {"name": "held", "namespace": "team", "finalizers": ["x/y"]}})
    store.delete(namespaces, "", "team")
    assert store.get(namespaces, "", "team")["status"]["phase"] == "Terminating"
    with pytest.raises(ApiError) as error:
        store.create(cms, {"metadata": {"name": "new", "namespace": "team"}})
    assert error.value.code == 403
    held = store.get(cms, "team", "held")
    store.update(cms, "team", "held", obj={**held, "metadata": {**held["metadata"], "finalizers": []}})
    assert store.find(namespaces, "", "team") is None


def test_pagination_returns_every_object_once_in_order(store: Store) -> None:
    cms = rt(store, "", "configmaps")
    for index in range(23):
        store.create(cms, configmap(f"cm-{index:02d}"))
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        items, _, token, remaining = store.list(cms, "default", EVERYTHING, limit=5, continue_token=token)
        seen += [o["metadata"]["name"] for o in items]
        pages += 1
        if not token:
            break
        assert remaining == 23 - len(seen)
    assert seen == [f"cm-{i:02d}" for i in range(23)] and pages == 5


def test_list_filters_by_selectors(store: Store) -> None:
    pods = rt(store, "", "pods")
    for name, node, tier in (("a", "n1", "web"), ("b", "n2", "web"), ("c", "n1", "db")):
        store.create(pods, {"metadata": {"name": name, "namespace": "default", "labels": {"tier": tier}},
                            "spec": {"nodeName": node}})
    on_n1 = WatchFilter("", None, FieldSelector.parse("spec.nodeName=n1", ("spec.nodeName",)))
    assert [o["metadata"]["name"] for o in store.list(pods, "", on_n1)[0]] == ["a", "c"]
    web_on_n1 = WatchFilter("", LabelSelector.parse("tier=web"), on_n1.fields)
    assert [o["metadata"]["name"] for o in store.list(pods, "", web_on_n1)[0]] == ["a"]
