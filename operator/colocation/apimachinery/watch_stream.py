"""Serving a watch over HTTP, as kube-apiserver's WatchServer and watch cache do, for every server.

A 200, chunked, one JSON event per line, what queued up meanwhile in one write. With
`allowWatchBookmarks`, a BOOKMARK about every interval and once more 2 s before the timeout, only
while nothing is pending; without it, no BOOKMARK at all. The stream ends at timeoutSeconds, after
an ERROR event when the source fails (410 Expired), else silently. The source is stopped however
the stream ends. Lines are the encoder's: shared JSON lines (`JsonEvents`) or one-row Tables
(`TableEvents`).

Why: docs/architecture.md#the-nodemetric-store
"""

from __future__ import annotations

import asyncio
import math
import random as _random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from aiohttp import web

from colocation.apimachinery.objects import Obj
from colocation.apimachinery.watch_params import MIN_REQUEST_TIMEOUT, ListOptions
from colocation.apimachinery.watch_queue import Bookmark, event_line

# The WithCacheControl filter gives every kube-apiserver response this Cache-Control.
WATCH_HEADERS = {"Content-Type": "application/json", "Cache-Control": "no-cache, private"}

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class WatchSource(Protocol[T_co]):
    """What a watch streams from; `WatchQueue` is one."""

    @property
    def ended(self) -> bool: ...

    @property
    def error(self) -> Obj | None: ...

    def take(self, limit: int) -> Sequence[T_co | Bookmark]: ...

    async def wait(self, timeout: float | None) -> None: ...

    def bookmark(self) -> Obj | None: ...

    def stop(self) -> None: ...


class EventEncoder(Protocol[T_contra]):
    def event(self, item: T_contra) -> bytes: ...

    def bookmark(self, obj: Obj) -> bytes: ...


class JsonEvents(Generic[T]):
    """JSON watch lines; `line` turns an item into its line, ideally one encoded once per event."""

    def __init__(self, line: Callable[[T], bytes]) -> None:
        self.event = line

    def bookmark(self, obj: Obj) -> bytes:
        return event_line("BOOKMARK", obj)


def pre_encoded() -> JsonEvents[bytes]:
    """For sources whose items are already watch lines."""
    return JsonEvents(_same)


def _same(line: bytes) -> bytes:
    return line


class TableEvents(Generic[T]):
    """Events as kube-apiserver sends them to `Accept: …;as=Table`: each object, bookmarks included,
    as a Table of one row; only the first Table of the stream has column definitions.

    `decode` gives an item's event type and object; `table` builds the Table of some objects, with
    or without column definitions (includeObject and the Table version are the caller's).
    """

    def __init__(self, decode: Callable[[T], tuple[str, Obj]], table: Callable[[list[Obj], bool], Obj]) -> None:
        self._decode = decode
        self._table = table
        self._headers = True

    def event(self, item: T) -> bytes:
        type_, obj = self._decode(item)
        return event_line(type_, self._row(obj))

    def bookmark(self, obj: Obj) -> bytes:
        return event_line("BOOKMARK", self._row(obj))

    def _row(self, obj: Obj) -> Obj:
        table = self._table([obj], self._headers)
        self._headers = False
        return table


class _ClientStuck(Exception):
    """The watch timed out while waiting for the client to read what was written."""


@dataclass(frozen=True, kw_only=True)
class WatchServing:
    """How a server serves its watches; one per server, `serve` once per watch request.

    `min_request_timeout` is kube-apiserver's flag of that name (the length of a watch without
    timeoutSeconds); `batch` bounds the items of one write, so that one busy watch cannot hold the
    loop; `client_check_interval` is how often an idle stream looks whether its client is still
    there (aiohttp does not cancel a handler whose client went away); `write_timeout` is how long
    one write may wait for the client to read (by default the rest of the watch, as kube-apiserver's).
    """

    bookmark_interval: float = 60.0
    min_request_timeout: float = MIN_REQUEST_TIMEOUT
    bookmark_before_timeout: float = 2.0
    batch: int = 500
    client_check_interval: float = 5.0
    write_timeout: float = math.inf
    random: Callable[[], float] = field(default=_random.random, repr=False)

    async def serve(self, request: web.Request, options: ListOptions, source: WatchSource[T],
                    *, encoder: EventEncoder[T]) -> web.StreamResponse:
        """Stream `source` to the client; errors before this (400, 410 at start, 422) are the
        caller's to raise. Returns once the stream has ended, the source stopped."""
        response = web.StreamResponse(headers=WATCH_HEADERS)
        response.enable_chunked_encoding()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + options.watch_seconds(self.min_request_timeout, self.random)
        try:
            await response.prepare(request)
            await self._stream(request, response, options.allow_watch_bookmarks, source=source, encoder=encoder,
                               deadline=deadline)
        except ConnectionResetError:
            if not response.prepared:
                raise
        except _ClientStuck:
            pass
        finally:
            source.stop()
        return response

    def _next_bookmark(self, *, now: float, deadline: float) -> float | None:
        # As the watch cache's nextBookmarkTime: every interval, and shortly before the timeout.
        at = min(now + self.bookmark_interval, deadline - self.bookmark_before_timeout)
        return at if at >= now else None

    async def _stream(self, request: web.Request, response: web.StreamResponse, bookmarks: bool,
                      *, source: WatchSource[T], encoder: EventEncoder[T], deadline: float) -> None:
        loop = asyncio.get_running_loop()
        next_bookmark = self._next_bookmark(now=loop.time(), deadline=deadline) if bookmarks else None
        while (now := loop.time()) < deadline:
            items = source.take(self.batch)
            if items:
                data = b"".join(
                    (encoder.bookmark(item.object) if bookmarks else b"") if isinstance(item, Bookmark)
                    else encoder.event(item) for item in items)
                if data:
                    await self._write(request, response, data, deadline=deadline)
                await asyncio.sleep(0)  # other streams' turn before this one's next batch
                continue
            if source.ended:
                if source.error is not None:
                    await self._write(request, response, event_line("ERROR", source.error), deadline=deadline)
                return
            if next_bookmark is not None and now >= next_bookmark:
                obj = source.bookmark()
                if obj is not None:
                    await self._write(request, response, encoder.bookmark(obj), deadline=deadline)
                next_bookmark = self._next_bookmark(now=loop.time(), deadline=deadline)
                continue
            if request.transport is None or request.transport.is_closing():
                return
            wake = min(deadline, now + self.client_check_interval,
                       next_bookmark if next_bookmark is not None else math.inf)
            await source.wait(wake - now)

    async def _write(self, request: web.Request, response: web.StreamResponse, data: bytes, *, deadline: float) -> None:
        try:
            async with asyncio.timeout_at(min(deadline, asyncio.get_running_loop().time() + self.write_timeout)):
                await response.write(data)
        except TimeoutError:
            # The client stopped reading and the watch is over (or it took too long): drop the
            # connection rather than wait for it to drain (finishing the response would wait too).
            if request.transport is not None:
                request.transport.abort()
            raise _ClientStuck from None
