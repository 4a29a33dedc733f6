"""serve_watch over a real aiohttp server: events, batching, bookmarks, timeouts, 410, clients gone."""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.watch_params import ListOptions
from colocation.apimachinery.watch_queue import Bookmark, WatchQueue, bookmark_object, encoded_event_line, event_line
from colocation.apimachinery.watch_stream import EventEncoder, JsonEvents, TableEvents, WatchServing, pre_encoded

PATH = "/apis/example.dev/v1/things"


def line(type_: str, name: str, rv: int) -> bytes:
    return event_line(type_, {"kind": "Thing", "metadata": {"name": name, "resourceVersion": str(rv)}})


class Watches:
    """The app under test: each watch streams a queue the test prepared, or one made on the fly."""

    def __init__(self, serving: WatchServing, encoder: Callable[[], EventEncoder[bytes]] = pre_encoded) -> None:
        self.serving = serving
        self.encoder = encoder
        self.prepared: list[WatchQueue[bytes]] = []
        self.started: asyncio.Queue[WatchQueue[bytes]] = asyncio.Queue()
        self.ended = asyncio.Event()
        self.resource_version = 100

    def queue(self, maxsize: int = 10, backlog: list[bytes | Bookmark] | None = None) -> WatchQueue[bytes]:
        queue: WatchQueue[bytes] = WatchQueue(
            maxsize, backlog=backlog or [], on_end=self.ended.set,
            bookmark=lambda: bookmark_object("Thing", "example.dev/v1", self.resource_version))
        self.prepared.append(queue)
        return queue

    async def handle(self, request: web.Request) -> web.StreamResponse:
        options = ListOptions.from_query(request.query)
        queue = self.prepared.pop(0) if self.prepared else self.queue()
        if queue in self.prepared:  # made on the fly
            self.prepared.remove(queue)
        await self.started.put(queue)
        return await self.serving.serve(request, options, queue, encoder=self.encoder())


@pytest.fixture
async def served() -> AsyncIterator[Callable[..., Any]]:
    clients: list[TestClient[Any, Any]] = []

    async def start(watches: Watches) -> TestClient[Any, Any]:
        app = web.Application()
        app.router.add_get(PATH, watches.handle)
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


async def read_all(response: Any) -> list[dict[str, Any]]:
    return [orjson.loads(raw) for raw in (await asyncio.wait_for(response.read(), 10)).splitlines()]


async def read_until(response: Any, last: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while not events or not last(events[-1]):
        raw = await asyncio.wait_for(response.content.readline(), 10)
        assert raw, f"the stream ended after {events}"
        events.append(orjson.loads(raw))
    return events


async def test_events_go_out_as_they_come_with_kube_apiserver_headers(served: Any) -> None:
    watches = Watches(WatchServing())
    client = await served(watches)
    async with client.get(PATH, params={"watch": "true"}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["Cache-Control"] == "no-cache, private"
        assert response.headers["Transfer-Encoding"] == "chunked"
        queue = await asyncio.wait_for(watches.started.get(), 5)
        queue.offer(line("ADDED", "a", 1))
        assert orjson.loads(await asyncio.wait_for(response.content.readline(), 5))["object"]["metadata"] == {
            "name": "a", "resourceVersion": "1"}
        queue.offer(line("MODIFIED", "a", 2))
        assert orjson.loads(await asyncio.wait_for(response.content.readline(), 5))["type"] == "MODIFIED"


async def test_what_is_pending_goes_out_in_one_write(served: Any) -> None:
    watches = Watches(WatchServing(batch=3))
    watches.queue(backlog=[line("ADDED", name, 1) for name in "abcde"])
    client = await served(watches)
    async with client.get(PATH, params={"watch": "true"}) as response:
        first, _ = await asyncio.wait_for(response.content.readchunk(), 5)
        assert [orjson.loads(raw)["object"]["metadata"]["name"] for raw in first.splitlines()] == ["a", "b", "c"]


async def test_timeout_seconds_ends_the_stream_and_stops_the_source(served: Any) -> None:
    watches = Watches(WatchServing(bookmark_interval=3600))
    client = await served(watches)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with client.get(PATH, params={"watch": "true", "timeoutSeconds": "1"}) as response:
        assert await read_all(response) == []
    assert 0.9 <= loop.time() - started < 5
    assert watches.ended.is_set()


async def test_bookmarks_come_every_interval_only_when_allowed(served: Any) -> None:
    watches = Watches(WatchServing(bookmark_interval=0.05, bookmark_before_timeout=0))
    client = await served(watches)
    async with client.get(PATH, params={"watch": "true", "allowWatchBookmarks": "true"}) as response:
        for _ in range(2):
            event = orjson.loads(await asyncio.wait_for(response.content.readline(), 5))
            assert event == {"type": "BOOKMARK", "object": {
                "kind": "Thing", "apiVersion": "example.dev/v1", "metadata": {"resourceVersion": "100"}}}
    async with client.get(PATH, params={"watch": "true", "timeoutSeconds": "1"}) as response:
        assert await read_all(response) == []  # twenty intervals went by


async def test_one_bookmark_comes_shortly_before_the_timeout(served: Any) -> None:
    watches = Watches(WatchServing(bookmark_interval=3600, bookmark_before_timeout=0.5))
    client = await served(watches)
    async with client.get(PATH, params={"watch": "true", "timeoutSeconds": "1",
                                        "allowWatchBookmarks": "true"}) as response:
        assert [event["type"] for event in await read_all(response)] == ["BOOKMARK"]


async def test_the_end_of_the_initial_events_is_marked_only_for_clients_that_allow_bookmarks(served: Any) -> None:
    end = Bookmark(bookmark_object("Thing", "example.dev/v1", 5, initial_events_end=True))
    watches = Watches(WatchServing(bookmark_interval=3600, bookmark_before_timeout=0))
    client = await served(watches)
    query = {"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    for allowed, expected in ((True, ["ADDED", "BOOKMARK", "ADDED"]), (False, ["ADDED", "ADDED"])):
        watches.queue(backlog=[line("ADDED", "a", 4), end])
        async with client.get(PATH, params={**query, "allowWatchBookmarks": str(allowed)}) as response:
            queue = await asyncio.wait_for(watches.started.get(), 5)
            queue.offer(line("ADDED", "b", 6))
            events = await read_until(response, lambda e: e["object"]["metadata"].get("name") == "b")
        assert [event["type"] for event in events] == expected
        if allowed:
            assert events[1]["object"]["metadata"] == {"resourceVersion": "5",
                                                       "annotations": {"k8s.io/initial-events-end": "true"}}


async def test_an_expired_source_ends_the_stream_with_an_error_event(served: Any) -> None:
    watches = Watches(WatchServing())
    status = ApiError.gone("too old resource version: 3 (50)").status()
    watches.queue().expire(status)
    client = await served(watches)
    async with client.get(PATH, params={"watch": "true"}) as response:
        assert response.status == 200
        assert await read_all(response) == [{"type": "ERROR", "object": status}]


async def test_a_client_that_fell_behind_is_closed_without_an_error(served: Any) -> None:
    watches = Watches(WatchServing())
    client = await served(watches)
    async with client.get(PATH, params={"watch": "true"}) as response:
        queue = await asyncio.wait_for(watches.started.get(), 5)
        for rv in range(11):  # one more than the queue holds, before the stream could read any
            queue.offer(line("ADDED", f"n{rv}", rv))
        assert await read_all(response) == []
    assert watches.ended.is_set()


async def test_a_client_that_goes_away_stops_the_source(served: Any) -> None:
    watches = Watches(WatchServing(client_check_interval=0.02))
    client = await served(watches)
    response = await client.get(PATH, params={"watch": "true"})
    queue = await asyncio.wait_for(watches.started.get(), 5)
    response.close()
    await asyncio.wait_for(watches.ended.wait(), 5)
    assert queue.ended


@pytest.mark.parametrize(("timeout_seconds", "write_timeout"), [(1, math.inf), (300, 0.5)],
                         ids=["at-the-watch-timeout", "at-the-write-timeout"])
async def test_a_client_that_stops_reading_is_dropped(served: Any, timeout_seconds: int, write_timeout: float) -> None:
    # Enough to fill the socket buffers of both ends, so that the server's writes block.
    big = encoded_event_line("ADDED", orjson.dumps({"kind": "Thing", "data": "x" * (1 << 20)}))
    watches = Watches(WatchServing(bookmark_interval=3600, batch=1, write_timeout=write_timeout))
    watches.queue(backlog=[big] * 64)
    client = await served(watches)
    host, port = client.server.host, client.server.port
    assert isinstance(port, int)
    loop = asyncio.get_running_loop()
    with socket.create_connection((host, port)) as stuck:
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.sendall(f"GET {PATH}?watch=true&timeoutSeconds={timeout_seconds} HTTP/1.1\r\nHost: {host}\r\n\r\n"
                      .encode())
        started = loop.time()
        await asyncio.wait_for(watches.ended.wait(), 10)
        assert loop.time() - started < 5


async def test_table_watches_carry_column_definitions_in_their_first_event_only(served: Any) -> None:
    def decode(item: bytes) -> tuple[str, Obj]:
        event = orjson.loads(item)
        return event["type"], event["object"]

    def table(objects: list[Obj], headers: bool) -> Obj:
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": objects[0]["metadata"]["resourceVersion"]},
                "columnDefinitions": [{"name": "Name"}] if headers else None,
                "rows": [{"cells": [o["metadata"].get("name", "")]} for o in objects]}

    watches = Watches(WatchServing(bookmark_interval=0.05), encoder=lambda: TableEvents(decode, table))
    status = ApiError.gone("gone").status()
    client = await served(watches)
    watches.queue(backlog=[line("ADDED", "a", 1), line("DELETED", "a", 2)])
    async with client.get(PATH, params={"watch": "true", "allowWatchBookmarks": "true"}) as response:
        events = await read_until(response, lambda e: e["type"] == "BOOKMARK")
    assert [(e["type"], e["object"]["rows"][0]["cells"], e["object"]["columnDefinitions"]) for e in events] == [
        ("ADDED", ["a"], [{"name": "Name"}]), ("DELETED", ["a"], None), ("BOOKMARK", [""], None)]
    assert events[2]["object"]["metadata"] == {"resourceVersion": "100"}
    watches.queue().expire(status)
    async with client.get(PATH, params={"watch": "true"}) as response:
        assert await read_all(response) == [{"type": "ERROR", "object": status}]  # a Status stays a Status


def test_lines_of_stored_json_are_the_lines_of_the_objects() -> None:
    obj = {"kind": "Thing", "metadata": {"name": "a"}}
    assert encoded_event_line("ADDED", orjson.dumps(obj)) == event_line("ADDED", obj)
    assert orjson.loads(JsonEvents(lambda item: item).bookmark(obj)) == {"type": "BOOKMARK", "object": obj}
