"""Watches: resume within the window, 410 beyond it, selector semantics, bounded queues."""

from __future__ import annotations

import pytest

from colocation.apimachinery.selectors import LabelSelector
from colocation.sandbox.server.builtin_controllers import Controllers
from colocation.sandbox.server.object_store import Store
from colocation.sandbox.server.resource_types import Registry, ResourceType
from colocation.sandbox.server.watch_events import Watcher, WatchFilter


@pytest.fixture
def store() -> Store:
    store = Store(Registry(), clock=lambda: 1_700_000_000.0, window=10)
    Controllers(store)
    store.create(configmaps_of(store, "namespaces"), {"metadata": {"name": "default"}})
    return store


def configmaps_of(store: Store, resource: str = "configmaps") -> ResourceType:
    found = store.registry.get("", "v1", resource)
    assert found is not None
    return found


def drain(watcher: Watcher) -> list[tuple[str, str]]:
    events = []
    while not watcher.queue.empty():
        type_, obj, _ = watcher.queue.get_nowait()
        events.append((type_, obj["metadata"]["name"] if type_ not in ("ERROR", "CLOSE") else str(obj)))
    return events


async def test_resume_replays_exactly_what_came_after(store: Store) -> None:
    cms = configmaps_of(store)
    first = store.create(cms, {"metadata": {"name": "a", "namespace": "default"}})
    store.create(cms, {"metadata": {"name": "b", "namespace": "default"}})
    store.delete(cms, "default", "a")
    watcher = store.watch(cms, "", WatchFilter(), resource_version=first["metadata"]["resourceVersion"],
                          send_initial_events=False)
    assert drain(watcher) == [("ADDED", "b"), ("DELETED", "a")]
    store.create(cms, {"metadata": {"name": "c", "namespace": "default"}})
    assert drain(watcher) == [("ADDED", "c")]


async def test_a_resource_version_older_than_the_window_is_expired(store: Store) -> None:
    cms = configmaps_of(store)
    first = store.create(cms, {"metadata": {"name": "a", "namespace": "default"}})
    for index in range(15):
        store.create(cms, {"metadata": {"name": f"x{index}", "namespace": "default"}})
    watcher = store.watch(cms, "", WatchFilter(), resource_version=first["metadata"]["resourceVersion"],
                          send_initial_events=False)
    (type_, status, _), = [watcher.queue.get_nowait()]
    assert type_ == "ERROR" and status["code"] == 410 and status["reason"] == "Expired"


async def test_a_watch_from_now_starts_with_the_current_objects(store: Store) -> None:
    cms = configmaps_of(store)
    store.create(cms, {"metadata": {"name": "b", "namespace": "default"}})
    store.create(cms, {"metadata": {"name": "a", "namespace": "default"}})
    watcher = store.watch(cms, "", WatchFilter(), resource_version="", send_initial_events=False)
    assert drain(watcher) == [("ADDED", "a"), ("ADDED", "b")]


async def test_leaving_a_label_selection_looks_like_a_deletion(store: Store) -> None:
    cms = configmaps_of(store)
    obj = store.create(cms, {"metadata": {"name": "a", "namespace": "default", "labels": {"app": "x"}}})
    watcher = store.watch(cms, "", WatchFilter("", LabelSelector.parse("app=x")),
                          resource_version=obj["metadata"]["resourceVersion"], send_initial_events=False)
    moved = store.update(cms, "default", "a", {**obj, "metadata": {**obj["metadata"], "labels": {"app": "y"}}})
    back = store.update(cms, "default", "a", {**moved, "metadata": {**moved["metadata"], "labels": {"app": "x"}}})
    store.delete(cms, "default", "a")
    assert back["metadata"]["labels"] == {"app": "x"}
    assert drain(watcher) == [("DELETED", "a"), ("ADDED", "a"), ("DELETED", "a")]


async def test_a_watcher_that_stops_reading_is_closed_not_grown(store: Store) -> None:
    cms = configmaps_of(store)
    watcher = store.watch(cms, "", WatchFilter(), resource_version="", send_initial_events=False, queue_size=3)
    for index in range(10):
        store.create(cms, {"metadata": {"name": f"x{index}", "namespace": "default"}})
    assert watcher.closed and watcher.queue.qsize() <= 3
    assert [t for t, _ in drain(watcher)][-1] == "CLOSE"
    assert watcher not in store.window(cms).watchers


async def test_leaving_the_selection_is_a_deletion_of_the_state_that_matched(store: Store) -> None:
    cms = configmaps_of(store)
    store.create(cms, {"metadata": {"name": "m", "namespace": "default", "labels": {"team": "blue"}}})
    watcher = store.watch(cms, "", WatchFilter(labels=LabelSelector.parse("team=blue")), resource_version="",
                          send_initial_events=False)
    watcher.queue.get_nowait()  # the initial ADDED
    moved = store.update(cms, "default", "m", {"metadata": {"name": "m", "labels": {"team": "red"}}})
    type_, obj, _ = watcher.queue.get_nowait()
    assert type_ == "DELETED"
    assert obj["metadata"]["labels"] == {"team": "blue"}
    assert obj["metadata"]["resourceVersion"] == moved["metadata"]["resourceVersion"]


async def test_removing_the_last_finalizer_deletes_the_object_as_it_was_stored(store: Store) -> None:
    cms = configmaps_of(store)
    store.create(cms, {"metadata": {"name": "f", "namespace": "default", "finalizers": ["example.com/x"]},
                       "data": {"v": "1"}})
    deleting, _ = store.delete(cms, "default", "f")
    watcher = store.watch(cms, "", WatchFilter(), resource_version=deleting["metadata"]["resourceVersion"],
                          send_initial_events=False)
    answer = store.update(cms, "default", "f", {**deleting, "metadata": {**deleting["metadata"], "finalizers": []},
                                                "data": {"v": "2"}})
    assert answer["data"] == {"v": "2"}  # the caller gets what it asked for, at the version it had
    assert answer["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    type_, obj, _ = watcher.queue.get_nowait()
    assert type_ == "DELETED"
    assert (obj["metadata"]["finalizers"], obj["data"]) == (["example.com/x"], {"v": "1"})
    assert store.find(cms, "default", "f") is None


def test_every_namespace_gets_the_root_ca_config_map_back() -> None:
    store = Store(Registry(), clock=lambda: 1_700_000_000.0)
    Controllers(store, root_ca_pem=b"-----BEGIN CERTIFICATE-----\n")
    namespaces, cms = configmaps_of(store, "namespaces"), configmaps_of(store)
    store.create(namespaces, {"metadata": {"name": "team"}})
    published = store.get(cms, "team", "kube-root-ca.crt")
    assert published["data"] == {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}
    assert "kubernetes.io/description" in published["metadata"]["annotations"]
    store.delete(cms, "team", "kube-root-ca.crt")
    again = store.get(cms, "team", "kube-root-ca.crt")
    assert again["metadata"]["uid"] != published["metadata"]["uid"]
    store.update(cms, "team", "kube-root-ca.crt", {**again, "data": {"ca.crt": "mine"}}, check_rv=False)
    assert store.get(cms, "team", "kube-root-ca.crt")["data"] == published["data"]
