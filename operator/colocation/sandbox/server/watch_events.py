"""Watches: a bounded window of recent events per resource, and per-watcher bounded queues.

A watcher resumes from any resourceVersion still inside the window; an older one is answered
with an in-stream 410 Expired, which tells an informer to relist. A watcher whose queue fills
(a client that stopped reading) is closed rather than allowed to grow without bound; the client
resumes from the last resourceVersion it saw, as it would after any dropped connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import Obj

if TYPE_CHECKING:
    from colocation.apimachinery.selectors import FieldSelector, LabelSelector
    from colocation.sandbox.server.resource_types import ResourceType



@dataclass(frozen=True)
class WatchFilter:
    """Which objects a list or watch sees: a namespace ("" for all) and optional selectors."""

    namespace: str = ""
    labels: LabelSelector | None = None
    fields: FieldSelector | None = None

    def matches(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace", "") != self.namespace:
            return False
        if self.labels is not None and not self.labels.matches(meta.get("labels") or {}):
            return False
        return self.fields is None or self.fields.matches(obj)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str
    old: Obj | None
    new: Obj
    _lines: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def encoded(self, type_: str) -> bytes:
        """The watch line for `new` as a `type_` event, encoded once for every watcher."""
        line = self._lines.get(type_)
        if line is None:
            line = self._lines[type_] = orjson.dumps({"type": type_, "object": self.new}) + b"\n"
        return line


# What a watcher's queue holds: (type, object, the store event it came from, if any), or a
# terminal ("ERROR", status, None) / ("CLOSE", None, None).
QueueItem = tuple[str, Any, Event | None]


class Watcher:
    def __init__(self, rt: ResourceType, namespace: str, flt: WatchFilter, queue_size: int) -> None:
        self.rt = rt
        self.filter = flt if flt.namespace == namespace else WatchFilter(namespace, flt.labels, flt.fields)
        self.queue: asyncio.Queue[QueueItem] = asyncio.Queue(maxsize=queue_size)
        self.closed = False
        self.window: EventWindow | None = None

    def offer(self, type_: str, obj: Obj, event: Event | None = None) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait((type_, obj, event))
        except asyncio.QueueFull:
            self.close()

    def deliver(self, event: Event) -> None:
        """Translate a store event into what this watcher sees through its filter."""
        now_matches = self.filter.matches(event.new)
        if event.type == "ADDED":
            if now_matches:
                self.offer("ADDED", event.new, event)
            return
        was_matching = event.old is not None and self.filter.matches(event.old)
        if event.type == "DELETED":
            if was_matching or now_matches:
                self.offer("DELETED", event.new, event)
        elif was_matching and now_matches:
            self.offer("MODIFIED", event.new, event)
        elif was_matching:
            # Left the selection: to this watcher it is gone, last seen as it matched (the previous
            # state, at this event's resourceVersion), as the watch cache reports it.
            assert event.old is not None
            self.offer("DELETED", {**event.old, "metadata": {**event.old["metadata"],
                                                              "resourceVersion": str(event.rv)}})
        elif now_matches:
            self.offer("ADDED", event.new, event)

    def expire(self, message: str) -> None:
        self._terminate(("ERROR", ApiError.gone(message).status(), None))

    def close(self) -> None:
        self._terminate(("CLOSE", None, None))

    def _terminate(self, item: QueueItem) -> None:
        if self.closed:
            return
        self.closed = True
        if self.window is not None:
            self.window.detach(self)
        while True:
            try:
                self.queue.put_nowait(item)
                return
            except asyncio.QueueFull:
                self.queue.get_nowait()  # make room for the terminal item; the stream ends anyway

    def stop(self) -> None:
        """The client went away."""
        self.closed = True
        if self.window is not None:
            self.window.detach(self)


class EventWindow:
    """The last `size` events of one resource, and the watchers attached to it."""

    def __init__(self, size: int, start_rv: int) -> None:
        self.events: deque[Event] = deque(maxlen=size)
        # A watch may resume from any resourceVersion at or after this one.
        self.oldest_resumable = start_rv
        self.watchers: set[Watcher] = set()

    def append(self, rv: int, type_: str, old: Obj | None, new: Obj) -> None:
        if self.events.maxlen is not None and len(self.events) == self.events.maxlen:
            self.oldest_resumable = self.events[0].rv
        event = Event(rv, type_, old, new)
        self.events.append(event)
        for watcher in list(self.watchers):
            watcher.deliver(event)

    def replay(self, after_rv: int, watcher: Watcher) -> None:
        for event in self.events:
            if event.rv > after_rv:
                watcher.deliver(event)

    def attach(self, watcher: Watcher) -> None:
        if not watcher.closed:
            watcher.window = self
            self.watchers.add(watcher)

    def detach(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def close_all(self) -> None:
        for watcher in list(self.watchers):
            watcher.close()
