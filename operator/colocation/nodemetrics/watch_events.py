"""Watch events of NodeMetrics: the window of recent events, and their fan-out to open watches.

Every event is serialized once into a shared line; a watcher filtered by a label selector gets
the line as it sees the change (an object leaving its selection is DELETED for it, one entering
ADDED), as kube-apiserver's watch cache does. The window keeps the last events so that a client
can resume after a resourceVersion; one older than the window gets 410 Expired. Every watcher's
live queue is bounded: a reader that falls behind is closed with 410 and dropped.

Serving the lines over HTTP is the API server's; nothing here knows of it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import LabelSelector
from colocation.nodemetrics.report_schema import API_VERSION, KIND
from colocation.nodemetrics.resource_versions import ResourceVersionClock
from colocation.nodemetrics.storage_interface import Entry

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"


@dataclass(frozen=True, slots=True)
class Event:
    resource_version: int
    name: str
    labels: Mapping[str, str]  # of the object after the event (before it, for DELETED)
    line: bytes  # what a watcher that sees the object before and after gets
    # Only when a MODIFIED event changed the labels: the object may leave or enter a selection.
    previous_labels: Mapping[str, str] | None = None
    left_line: bytes | None = None  # DELETED, with the previous content
    joined_line: bytes | None = None  # ADDED


class Watcher:
    """One watch stream: lines of JSON (one event each) to write to the client as they come.

    Lines come first from the backlog fixed when the watch started (current objects, or events
    replayed from the window), then from a bounded queue of live events.
    """

    def __init__(self, window: EventWindow, selector: LabelSelector | None, name: str | None) -> None:
        self._window = window
        self.selector = selector
        self.name = name
        # Backlog items are shared event lines, or entries rendered as ADDED when read.
        self._backlog: deque[bytes | Entry] = deque()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=window.watcher_queue)
        self._closed = False

    @property
    def closed(self) -> bool:
        """No more events will be added; lines already queued (a final ERROR) are still read."""
        return self._closed

    async def next(self, timeout: float | None) -> bytes | None:
        """The next line, or None after `timeout` seconds without one or once the stream ended."""
        if self._backlog:
            item = self._backlog.popleft()
            return item if isinstance(item, bytes) else event_line(ADDED, item.body)
        if self._queue.empty():
            if self._closed:
                return None
            try:
                return await asyncio.wait_for(self._queue.get(), timeout) or None
            except TimeoutError:
                return None
        return self._queue.get_nowait() or None  # b"" only wakes a reader up when closing

    def bookmark_line(self) -> bytes | None:
        """A BOOKMARK at the store's current resourceVersion, or None if it cannot be sent now.

        A bookmark claims the client has seen everything up to its resourceVersion, which is
        only true once every queued line has been read: with lines pending, there is none.
        """
        if self._closed or self._backlog or not self._queue.empty():
            return None
        return bookmark_line(self._window.clock.current, {})

    def stop(self) -> None:
        """The client went away: detach and drop whatever was queued."""
        self.finish(None)

    def start(self, backlog: list[bytes | Entry]) -> None:
        self._backlog.extend(backlog)

    def finish(self, final: bytes | None) -> None:
        """End the stream, after `final` (an ERROR line) if given."""
        if self._closed:
            return
        self._closed = True
        self._window.detach(self)
        self._backlog.clear()
        while not self._queue.empty():  # free the memory at once; the stream ends anyway
            self._queue.get_nowait()
        self._queue.put_nowait(final or b"")

    def deliver(self, event: Event) -> None:
        """Pass an event on as this watcher sees it through its name and label filters."""
        if self.name is not None and event.name != self.name:
            return
        line = line_for(event, self.selector)
        if line is not None:
            self._offer(line)

    def _offer(self, line: bytes) -> None:
        if self._closed:
            return
        try:
            self._queue.put_nowait(line)
        except asyncio.QueueFull:
            self.finish(error_line(ApiError.gone(
                f"the watcher fell behind: more than {self._queue.maxsize} events were waiting to be read")))


class EventWindow:
    """The last `size` events, replayable after a resourceVersion, and the open watches they go to."""

    def __init__(self, clock: ResourceVersionClock, *, size: int, watcher_queue: int) -> None:
        self.clock = clock
        self.watcher_queue = max(1, watcher_queue)
        self._events: deque[Event] = deque(maxlen=max(1, size))
        self._watchers: set[Watcher] = set()
        # Nothing before the store began can be replayed.
        self.oldest_resumable = clock.current

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)

    def append(self, event: Event) -> None:
        if len(self._events) == self._events.maxlen:
            # The oldest event falls out: a client must have seen at least its resourceVersion.
            self.oldest_resumable = max(self.oldest_resumable, self._events[0].resource_version)
        self._events.append(event)
        for watcher in list(self._watchers):
            watcher.deliver(event)

    def replay(self, since: int, selector: LabelSelector | None, name: str | None) -> list[bytes]:
        """The lines of the events after `since`, as a watcher with these filters sees them."""
        return [line for event in self._events if event.resource_version > since
                and (name is None or event.name == name)
                and (line := line_for(event, selector)) is not None]

    def resumable_since(self, resource_version: int) -> None:
        """Nothing before `resource_version` is known here (a history taken over from a list)."""
        self.oldest_resumable = resource_version

    def attach(self, watcher: Watcher) -> None:
        self._watchers.add(watcher)

    def detach(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def close_all(self) -> None:
        for watcher in list(self._watchers):
            watcher.finish(None)


def line_for(event: Event, selector: LabelSelector | None) -> bytes | None:
    if selector is None:
        return event.line
    if event.previous_labels is None:
        return event.line if selector.matches(event.labels) else None
    was, now = selector.matches(event.previous_labels), selector.matches(event.labels)
    if was and now:
        return event.line
    if was:
        return event.left_line
    return event.joined_line if now else None


def event_line(type_: str, body: bytes) -> bytes:
    return b"".join((b'{"type":"', type_.encode(), b'","object":', body, b"}\n"))


def error_line(error: ApiError) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": error.status()}) + b"\n"


def bookmark_line(rv: int, annotations: Mapping[str, str]) -> bytes:
    metadata: dict[str, Any] = {"resourceVersion": str(rv)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return orjson.dumps({"type": "BOOKMARK", "object": {"kind": KIND, "apiVersion": API_VERSION,
                                                        "metadata": metadata}}) + b"\n"
