"""The informer: pages, resume after a dropped watch, relist on 410, bookmarks, backoff."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from colocation.kube.backoff import Backoff
from colocation.kube.informer import Informer, InformerOptions

Obj = dict[str, Any]


class FakeResponse:
    def __init__(self, status: int, body: bytes = b"", lines: list[bytes] | None = None) -> None:
        self.status = status
        self._body = body
        self._lines = lines or []

    async def read(self) -> bytes:
        return self._body

    async def lines(self) -> AsyncIterator[bytes]:
        for line in self._lines:
            yield line


class FakeServer:
    """Scripted answers, one per request, recording what was asked."""

    def __init__(self, answers: list[FakeResponse]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, dict[str, str], bool]] = []
        self.exhausted = asyncio.Event()

    @contextlib.asynccontextmanager
    async def __call__(self, path: str, params: dict[str, str], stream: bool) -> AsyncIterator[FakeResponse]:
        self.requests.append((path, dict(params), stream))
        if not self.answers:
            self.exhausted.set()
            await asyncio.Event().wait()  # hold the watch open until the test cancels it
        yield self.answers.pop(0)


def page(items: list[str], rv: str, token: str = "") -> FakeResponse:
    body = {"metadata": {"resourceVersion": rv, **({"continue": token} if token else {})},
            "items": [{"metadata": {"name": n, "resourceVersion": rv}} for n in items]}
    return FakeResponse(200, orjson.dumps(body))


def event(type_: str, name: str, rv: str, **extra: Any) -> bytes:
    return orjson.dumps({"type": type_, "object": {"metadata": {"name": name, "resourceVersion": rv, **extra}}})


class Recorder:
    def __init__(self) -> None:
        self.syncs: list[tuple[list[str], str]] = []
        self.events: list[tuple[str, str]] = []

    async def on_sync(self, items: list[Obj], rv: str) -> None:
        self.syncs.append(([i["metadata"]["name"] for i in items], rv))

    async def on_event(self, type_: str, obj: Obj) -> None:
        self.events.append((type_, obj["metadata"]["name"]))


async def run_until_exhausted(server: FakeServer, recorder: Recorder, **options: Any) -> Informer:
    informer = Informer(server, "/api/v1/nodes", on_sync=recorder.on_sync, on_event=recorder.on_event,
                        options=InformerOptions(**options), backoff=Backoff(initial=0.001, maximum=0.002))
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(server.exhausted.wait(), timeout=5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return informer


async def test_lists_in_pages_then_watches_from_the_list_version() -> None:
    server = FakeServer([page(["a", "b"], "10", token="t1"), page(["c"], "10"),
                         FakeResponse(200, lines=[event("ADDED", "d", "11"), event("DELETED", "a", "12")])])
    recorder = Recorder()
    informer = await run_until_exhausted(server, recorder, page_size=2)
    assert recorder.syncs == [(["a", "b", "c"], "10")]
    assert recorder.events == [("ADDED", "d"), ("DELETED", "a")]
    assert server.requests[1][1]["continue"] == "t1"
    watch_params = server.requests[2][1]
    assert watch_params["resourceVersion"] == "10" and watch_params["allowWatchBookmarks"] == "true"
    assert informer.resource_version == "12"


async def test_a_dropped_watch_resumes_from_the_last_version_seen_bookmarks_included() -> None:
    bookmark = orjson.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}})
    server = FakeServer([page([], "10"), FakeResponse(200, lines=[event("ADDED", "a", "11"), bookmark]),
                         FakeResponse(200, lines=[])])
    recorder = Recorder()
    await run_until_exhausted(server, recorder)
    assert recorder.events == [("ADDED", "a")]  # a bookmark is not an event
    assert [r[1].get("resourceVersion") for r in server.requests[1:]] == ["10", "20", "20"]
    assert len(recorder.syncs) == 1  # resumed, not relisted


async def test_an_expired_watch_relists() -> None:
    expired = orjson.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})
    server = FakeServer([page(["a"], "10"), FakeResponse(200, lines=[expired]), page(["b"], "30"),
                         FakeResponse(200, lines=[])])
    recorder = Recorder()
    await run_until_exhausted(server, recorder)
    assert recorder.syncs == [(["a"], "10"), (["b"], "30")]
    assert server.requests[-1][1]["resourceVersion"] == "30"


async def test_server_errors_are_retried_with_backoff_and_selectors_kept() -> None:
    server = FakeServer([FakeResponse(500, b"boom"), FakeResponse(503, b"busy"), page(["a"], "5"),
                         FakeResponse(200, lines=[])])
    recorder = Recorder()
    await run_until_exhausted(server, recorder, field_selector="spec.nodeName=n1")
    assert recorder.syncs == [(["a"], "5")]
    assert all(r[1]["fieldSelector"] == "spec.nodeName=n1" for r in server.requests)


@pytest.mark.parametrize("status", [403, 404])
async def test_a_refused_list_is_retried_not_fatal(status: int) -> None:
    server = FakeServer([FakeResponse(status, b"no"), page([], "1"), FakeResponse(200, lines=[])])
    recorder = Recorder()
    await run_until_exhausted(server, recorder)
    assert recorder.syncs == [([], "1")]
