"""Watches of stored objects: a bounded window of recent events per resource, and the watchers on it.

A watcher resumes from any resourceVersion still inside the window; an older one is answered
with an in-stream 410 Expired, which tells an informer to relist. Each watcher is a
`WatchQueue`: what the watch starts with (the current objects, or the events replayed from the
window) is its backlog, live events go to its bounded queue, and a client that stops reading is
closed rather than allowed to grow without bound; it resumes from the last resourceVersion it
saw, as after any dropped connection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from colocation.apimachinery.objects import Obj
from colocation.apimachinery.watch_queue import Bookmark, WatchQueue

if TYPE_CHECKING:
    from colocation.apimachinery.selectors import FieldSelector, LabelSelector


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


@dataclass(frozen=True, kw_only=True)
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


# What a watcher's queue holds: (type, object, the store event it came from, if any). The event
# lets every watcher that sees an object as stored share one encoded line.
QueueItem = tuple[str, Obj, Event | None]


def seen_through(flt: WatchFilter, event: Event) -> QueueItem | None:
    """A store event as a watcher with this filter sees it, or None if it sees nothing."""
    now_matches = flt.matches(event.new)
    if event.type == "ADDED":
        return ("ADDED", event.new, event) if now_matches else None
    was_matching = event.old is not None and flt.matches(event.old)
    if event.type == "DELETED":
        return ("DELETED", event.new, event) if was_matching or now_matches else None
    if was_matching and now_matches:
        return "MODIFIED", event.new, event
    if was_matching:
        # Left the selection: to this watcher it is gone, last seen as it matched (the previous
        # state, at this event's resourceVersion), as the watch cache reports it.
        assert event.old is not None
        return "DELETED", {**event.old, "metadata": {**event.old["metadata"], "resourceVersion": str(event.rv)}}, None
    return ("ADDED", event.new, event) if now_matches else None


def initial_events(flt: WatchFilter, objects: Iterable[Obj]) -> Iterator[QueueItem]:
    """The current objects as ADDED, rendered as the stream reads them."""
    return (("ADDED", obj, None) for obj in objects if flt.matches(obj))


def replayed_events(flt: WatchFilter, events: Iterable[Event]) -> Iterator[QueueItem]:
    return (item for event in events if (item := seen_through(flt, event)) is not None)


class Watcher(WatchQueue[QueueItem]):
    def __init__(self, flt: WatchFilter, queue_size: int, *, backlog: Iterable[QueueItem | Bookmark] = (),
                 bookmark: Callable[[], Obj] | None = None) -> None:
        self.filter = flt
        self.window: EventWindow | None = None
        super().__init__(queue_size, backlog=backlog, bookmark=bookmark, on_end=self._detach)

    def deliver(self, event: Event) -> None:
        item = seen_through(self.filter, event)
        if item is not None:
            self.offer(item)

    def _detach(self) -> None:
        if self.window is not None:
            self.window.detach(self)


class EventWindow:
    """The last `size` events of one resource, and the watchers attached to it."""

    def __init__(self, size: int, start_rv: int) -> None:
        self.events: deque[Event] = deque(maxlen=size)
        # A watch may resume from any resourceVersion at or after this one.
        self.oldest_resumable = start_rv
        self.watchers: set[Watcher] = set()

    def append(self, rv: int, type_: str, old: Obj | None, *, new: Obj) -> None:
        if self.events.maxlen is not None and len(self.events) == self.events.maxlen:
            self.oldest_resumable = self.events[0].rv
        event = Event(rv=rv, type=type_, old=old, new=new)
        self.events.append(event)
        for watcher in list(self.watchers):
            watcher.deliver(event)

    def since(self, rv: int) -> list[Event]:
        """The events after `rv`, as they are now (later ones go to the attached watchers)."""
        return [event for event in self.events if event.rv > rv]

    def attach(self, watcher: Watcher) -> None:
        if not watcher.ended:
            watcher.window = self
            self.watchers.add(watcher)

    def detach(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)
