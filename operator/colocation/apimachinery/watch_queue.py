"""One watcher's events on their way to its client: a backlog fixed when the watch began, then a
bounded queue of live events.

The backlog (the initial events, possibly rendered lazily from a snapshot) does not count against
the bound, so a watch of more objects than the bound starts fine. A client that stops reading
fills the live queue, and the watcher is then closed without an error; the client resumes from
the last resourceVersion it saw. Items are what a server's encoder turns into lines, so an event
shared by every watcher is encoded once (`event_line`, `encoded_event_line`). Single-threaded.

Why, as kube-apiserver's watch cache: docs/architecture.md#the-nodemetric-store
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import orjson

from colocation.apimachinery.objects import Obj

INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"

T = TypeVar("T")


def event_line(type_: str, obj: Any) -> bytes:
    """One watch event as it goes on the wire: a line of JSON."""
    return orjson.dumps({"type": type_, "object": obj}) + b"\n"


def encoded_event_line(type_: str, body: bytes) -> bytes:
    """The event line of an object already serialized (a store that keeps its objects' JSON)."""
    return b"".join((b'{"type":"', type_.encode(), b'","object":', body, b"}\n"))


@dataclass(frozen=True, slots=True)
class Bookmark:
    """A BOOKMARK among a watcher's items; its object is sent only to clients that allow bookmarks."""

    object: Obj


def bookmark_object(kind: str, api_version: str, resource_version: int | str, *,
                    initial_events_end: bool = False) -> Obj:
    """What a BOOKMARK carries: an object of the watched kind with only a resourceVersion (and the
    annotation that ends the initial events of a sendInitialEvents watch)."""
    metadata: Obj = {"resourceVersion": str(resource_version)}
    if initial_events_end:
        metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
    return {"kind": kind, "apiVersion": api_version, "metadata": metadata}


class WatchQueue(Generic[T]):
    """The items of one watch, read by `serve_watch` (apimachinery.watch_stream).

    `bookmark` gives the object of a periodic BOOKMARK (the store's resourceVersion now), or None
    when there is none to give; it is only asked while nothing is pending, since a bookmark tells
    the client it has seen everything up to its resourceVersion. `on_end` runs once, when the
    watch ends for any reason (a store detaches the watcher there).
    """

    def __init__(self, maxsize: int, *, backlog: Iterable[T | Bookmark] = (),
                 bookmark: Callable[[], Obj | None] | None = None,
                 on_end: Callable[[], None] | None = None) -> None:
        self.maxsize = max(1, maxsize)
        self._backlog: Iterator[T | Bookmark] | None = iter(backlog)
        self._ahead: list[T | Bookmark] = []  # the backlog's next item, read ahead to know it has one
        self._queue: deque[T] = deque()
        self._bookmark = bookmark
        self._on_end = on_end
        self._ended = False
        self._error: Obj | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._read_ahead()

    # -- the store's side -------------------------------------------------------------------------

    def offer(self, item: T) -> None:
        """Queue a live event; a full queue ends the watch instead (its client stopped reading)."""
        if self._ended:
            return
        if len(self._queue) >= self.maxsize:
            self.close()
            return
        self._queue.append(item)
        self._wake()

    def close(self) -> None:
        """End the stream without an error, dropping what was pending: a slow client, a restart."""
        self._end(None)

    def expire(self, status: Obj) -> None:
        """End the stream with an ERROR event carrying `status` (410 Expired for a resourceVersion
        that is no longer known), dropping what was pending."""
        self._end(status)

    # -- the stream's side ------------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """No item will be added any more; `error` says whether the stream ends with one."""
        return self._ended

    @property
    def closed(self) -> bool:
        return self._ended

    @property
    def error(self) -> Obj | None:
        return self._error

    @property
    def pending(self) -> bool:
        return bool(self._ahead) or bool(self._queue)

    def take(self, limit: int) -> list[T | Bookmark]:
        """Up to `limit` pending items, backlog first; never waits."""
        taken: list[T | Bookmark] = []
        while self._ahead and len(taken) < limit:
            taken.append(self._ahead.pop())
            self._read_ahead()
        queue = self._queue
        while queue and len(taken) < limit:
            taken.append(queue.popleft())
        return taken

    async def wait(self, timeout: float | None) -> None:
        """Return once an item is pending or the watch has ended, or after `timeout` seconds."""
        if self.pending or self._ended:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            self._waiter = None

    def bookmark(self) -> Obj | None:
        if self._ended or self.pending or self._bookmark is None:
            return None
        return self._bookmark()

    def stop(self) -> None:
        """The client went away."""
        self._end(None)

    # -- internals --------------------------------------------------------------------------------

    def _read_ahead(self) -> None:
        if self._backlog is None:
            return
        for item in self._backlog:
            self._ahead.append(item)
            return
        self._backlog = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _end(self, error: Obj | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._backlog = None
        self._ahead.clear()
        self._queue.clear()  # free the memory now: the stream ends anyway
        self._wake()
        if self._on_end is not None:
            self._on_end()
