"""The informer: pages, resume after a dropped watch, relist on 410, bookmarks, backoff."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from colocation.kube.backoff import Backoff
from colocation.kube.informer import Informer, InformerOptions, describe_error, failure_reason

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


async def run_until_exhausted(server: FakeServer, recorder: Recorder, errors: list[str] | None = None,
                              **options: Any) -> Informer[Any]:
    informer = Informer(server, "/api/v1/nodes", on_sync=recorder.on_sync, on_event=recorder.on_event,
                        options=InformerOptions(**options), backoff=Backoff(initial=0.001, maximum=0.002),
                        on_error=errors.append if errors is not None else None)
    await run_informer_until(informer, server.exhausted)
    return informer


async def run_informer_until(informer: Informer[Any], event: asyncio.Event) -> None:
    """Run the informer until `event` is set (5 s at most), then cancel it."""
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(event.wait(), timeout=5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


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


async def test_a_transform_keeps_only_its_part_of_each_listed_and_watched_object() -> None:
    server = FakeServer([page(["a", "b"], "10", token="t1"), page(["c"], "10"),
                         FakeResponse(200, lines=[event("ADDED", "d", "11", labels={"x": "1"}),
                                                  event("BOOKMARK", "", "12")])])
    kept: list[Obj] = []

    def keep_name(obj: Obj) -> Obj:
        kept.append(obj)
        return {"metadata": {"name": obj["metadata"]["name"].upper()}}

    synced: list[list[Obj]] = []
    seen: list[Obj] = []

    async def on_sync(items: list[Obj], rv: str) -> None:
        synced.append(items)

    async def on_event(type_: str, obj: Obj) -> None:
        seen.append(obj)

    informer = Informer(server, "/api/v1/pods", on_sync=on_sync, on_event=on_event, transform=keep_name,
                        options=InformerOptions(page_size=2))
    await run_informer_until(informer, server.exhausted)
    assert synced == [[{"metadata": {"name": n}} for n in ("A", "B", "C")]]
    assert seen == [{"metadata": {"name": "D"}}]
    assert len(kept) == 4 and informer.resource_version == "12"  # a bookmark is not an object to keep


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


class Failing:
    """Answers nothing: every request fails with `error` (a client-side timeout has no message)."""

    def __init__(self, error: Exception, failures: int) -> None:
        self.error = error
        self.failures = failures
        self.tried = asyncio.Event()

    @contextlib.asynccontextmanager
    async def __call__(self, path: str, params: dict[str, str], stream: bool) -> AsyncIterator[FakeResponse]:
        self.failures -= 1
        if self.failures == 0:
            self.tried.set()
            await asyncio.Event().wait()  # hang on the last request, until the test cancels it
        raise self.error
        yield FakeResponse(200)  # pragma: no cover (unreachable: makes this a generator)


async def test_failures_are_counted_by_reason_logged_with_their_type_and_leave_the_informer_failing(
        caplog: pytest.LogCaptureFixture) -> None:
    server = Failing(TimeoutError(), failures=3)
    errors: list[str] = []
    informer = Informer(server, "/api/v1/pods", on_sync=Recorder().on_sync, on_event=Recorder().on_event,
                        backoff=Backoff(initial=0.001, maximum=0.002), on_error=errors.append, name="pods@n1")
    await run_informer_until(informer, server.tried)
    assert errors == ["timeout", "timeout"] and informer.failures == 2
    assert informer.failing and not informer.synced.is_set()
    logged = [r for r in caplog.records if r.getMessage() == "list/watch failed, retrying"]
    assert [r.__dict__["error"] for r in logged] == ["TimeoutError", "TimeoutError"]


async def test_a_list_that_succeeds_after_failures_clears_failing() -> None:
    server = FakeServer([FakeResponse(503, b"busy"), page(["a"], "5"), FakeResponse(200, lines=[])])
    errors: list[str] = []
    informer = await run_until_exhausted(server, Recorder(), errors)
    assert errors == ["http-503"]
    assert informer.synced.is_set() and not informer.failing


def test_errors_are_described_with_their_type_and_reason() -> None:
    assert describe_error(TimeoutError()) == "TimeoutError"
    assert describe_error(OSError("connection\n refused")) == "OSError: connection refused"
    assert failure_reason(TimeoutError()) == "timeout"
    assert failure_reason(ConnectionResetError()) == "connection"
    assert failure_reason(orjson.JSONDecodeError("bad", "x", 0)) == "decode"
