"""Watches: resume within the window, 410 beyond it, selector semantics, bounded queues, and the
watch requests the sandbox serves through apimachinery's parameters and watch serving."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.selectors import LabelSelector
from colocation.apimachinery.watch_queue import Bookmark
from colocation_sandbox.server.api_server import ApiServer
from colocation_sandbox.server.builtin_controllers import Controllers
from colocation_sandbox.server.object_store import Store
from colocation_sandbox.server.object_watch_window import QueueItem, Watcher, WatchFilter
from colocation_sandbox.server.resource_types import Registry, ResourceType


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
    """What is pending, as (type, name), a bookmark as ("BOOKMARK", its annotations)."""
    return [("BOOKMARK", str(item.object["metadata"].get("annotations"))) if isinstance(item, Bookmark)
            else (item[0], item[1]["metadata"]["name"]) for item in watcher.take(1000)]


def next_event(watcher: Watcher) -> QueueItem:
    [item] = watcher.take(1)
    assert not isinstance(item, Bookmark)
    return item


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
    assert watcher.ended and not watcher.pending
    assert watcher.error is not None and (watcher.error["code"], watcher.error["reason"]) == (410, "Expired")


async def test_a_watch_from_now_starts_with_the_current_objects(store: Store) -> None:
    cms = configmaps_of(store)
    store.create(cms, {"metadata": {"name": "b", "namespace": "default"}})
    store.create(cms, {"metadata": {"name": "a", "namespace": "default"}})
    watcher = store.watch(cms, "", WatchFilter(), resource_version="", send_initial_events=None)
    assert drain(watcher) == [("ADDED", "a"), ("ADDED", "b")]


async def test_initial_events_end_with_a_bookmark_and_are_left_out_when_refused(store: Store) -> None:
    cms = configmaps_of(store)
    store.create(cms, {"metadata": {"name": "a", "namespace": "default"}})
    initial = store.watch(cms, "", WatchFilter(), resource_version="", send_initial_events=True)
    without = store.watch(cms, "", WatchFilter(), resource_version="0", send_initial_events=False)
    store.create(cms, {"metadata": {"name": "b", "namespace": "default"}})
    assert drain(initial) == [("ADDED", "a"), ("BOOKMARK", "{'k8s.io/initial-events-end': 'true'}"), ("ADDED", "b")]
    assert drain(without) == [("ADDED", "b")]  # from the most recent version, as the watch cache starts it


async def test_leaving_a_label_selection_looks_like_a_deletion(store: Store) -> None:
    cms = configmaps_of(store)
    obj = store.create(cms, {"metadata": {"name": "a", "namespace": "default", "labels": {"app": "x"}}})
    watcher = store.watch(cms, "", WatchFilter("", LabelSelector.parse("app=x")),
                          resource_version=obj["metadata"]["resourceVersion"], send_initial_events=False)
    moved = store.update(cms, "default", "a", obj={**obj, "metadata": {**obj["metadata"], "labels": {"app": "y"}}})
    back = store.update(cms, "default", "a", obj={**moved, "metadata": {**moved["metadata"], "labels": {"app": "x"}}})
    store.delete(cms, "default", "a")
    assert back["metadata"]["labels"] == {"app": "x"}
    assert drain(watcher) == [("DELETED", "a"), ("ADDED", "a"), ("DELETED", "a")]


async def test_a_watcher_that_stops_reading_is_closed_not_grown(store: Store) -> None:
    cms = configmaps_of(store)
    watcher = store.watch(cms, "", WatchFilter(), resource_version="", send_initial_events=False, queue_size=3)
    for index in range(10):
        store.create(cms, {"metadata": {"name": f"x{index}", "namespace": "default"}})
    # Closed without an error, what was pending dropped: the client resumes from what it read.
    assert watcher.closed and watcher.error is None and drain(watcher) == []
    assert watcher not in store.window(cms).watchers


async def test_leaving_the_selection_is_a_deletion_of_the_state_that_matched(store: Store) -> None:
    cms = configmaps_of(store)
    store.create(cms, {"metadata": {"name": "m", "namespace": "default", "labels": {"team": "blue"}}})
    watcher = store.watch(cms, "", WatchFilter(labels=LabelSelector.parse("team=blue")), resource_version="",
                          send_initial_events=None)
    next_event(watcher)  # the initial ADDED
    moved = store.update(cms, "default", "m", obj={"metadata": {"name": "m", "labels": {"team": "red"}}})
    type_, obj, _ = next_event(watcher)
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
    answer = store.update(cms, "default", "f",
                          obj={**deleting, "metadata": {**deleting["metadata"], "finalizers": []}, "data": {"v": "2"}})
    assert answer["data"] == {"v": "2"}  # the caller gets what it asked for, at the version it had
    assert answer["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    type_, obj, _ = next_event(watcher)
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
    store.update(cms, "team", "kube-root-ca.crt", obj={**again, "data": {"ca.crt": "mine"}}, check_rv=False)
    assert store.get(cms, "team", "kube-root-ca.crt")["data"] == published["data"]


# --------------------------------------------------------------------------------------------
# Watch requests.

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    api = ApiServer(bookmark_interval=0.05)
    api.store.create(api.rt("", "namespaces"), {"metadata": {"name": "default"}})
    api.store.create(api.rt("", "configmaps"), {"metadata": {"name": "a", "namespace": "default"}})
    client: TestClient[Any, Any] = TestClient(TestServer(api.application()),
                                              headers={"Authorization": f"Bearer {api.tokens.admin_token}"})
    await client.start_server()
    yield client
    await client.close()


async def test_a_table_watch_sends_every_event_and_bookmark_as_a_table_of_one_row(
        client: TestClient[Any, Any]) -> None:
    query = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
             "allowWatchBookmarks": "true"}
    async with client.get(CONFIGMAPS, params=query, headers={"Accept": TABLE}) as response:
        assert response.status == 200
        added, end, periodic = [orjson.loads(await asyncio.wait_for(response.content.readline(), 10))
                                for _ in range(3)]
    assert (added["type"], end["type"], periodic["type"]) == ("ADDED", "BOOKMARK", "BOOKMARK")
    assert [c["name"] for c in added["object"]["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert added["object"]["rows"][0]["cells"][0] == "a"
    for bookmark in (end, periodic):  # only the first Table of a stream has column definitions
        table = bookmark["object"]
        assert (table["kind"], table["columnDefinitions"], len(table["rows"])) == ("Table", None, 1)
    assert end["object"]["rows"][0]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_an_unknown_include_object_is_400_before_anything_is_listed(client: TestClient[Any, Any]) -> None:
    for params in ({"includeObject": "Everything"}, {"includeObject": "Everything", "watch": "1"}):
        async with client.get(CONFIGMAPS, params=params, headers={"Accept": TABLE}) as response:
            assert response.status == 400
            assert (await response.json())["message"] == (
                "Unable to convert to Table as requested: includeObject: Invalid value: \"Everything\": "
                "must be 'Metadata', 'Object', 'None', or empty")


@pytest.mark.parametrize(("params", "message"), [
    ({"limit": ""}, 'strconv.ParseInt: parsing "": invalid syntax'),
    ({"watch": "1", "timeoutSeconds": ""}, 'strconv.ParseInt: parsing "": invalid syntax'),
    ({"watch": "1", "resourceVersion": "x"},
     'resourceVersion: Invalid value: "x": strconv.ParseUint: parsing "x": invalid syntax'),
])
async def test_parameters_that_do_not_parse_are_400(client: TestClient[Any, Any], params: dict[str, str],
                                                    message: str) -> None:
    async with client.get(CONFIGMAPS, params=params) as response:
        assert (response.status, (await response.json())["message"]) == (400, message)


async def test_a_watch_of_one_object_refuses_a_selector_naming_another(client: TestClient[Any, Any]) -> None:
    async with client.get("/api/v1/watch/namespaces/default/configmaps/a",
                          params={"fieldSelector": "metadata.name=b"}) as response:
        assert (response.status, (await response.json())["message"]) == (
            400, "fieldSelector metadata.name doesn't match requested name")
    async with client.get("/api/v1/watch/namespaces/default/configmaps/a",
                          params={"fieldSelector": "metadata.name=a", "timeoutSeconds": "1"}) as response:
        assert [orjson.loads(line)["object"]["metadata"]["name"] for line in (await response.read()).splitlines()] \
            == ["a"]
