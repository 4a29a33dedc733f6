"""Watch events of NodeMetrics: the window of recent events, and their fan-out to open watches.

Every event is serialized once into a line shared by the open watches. The window keeps the last
events' objects deflated (a node's latest shares the store's bytes), so that a client can resume
after a resourceVersion; an older one gets 410 Expired. A watch with a label selector sees an
object leave as DELETED and enter as ADDED. Each watcher is a `WatchQueue` of lines; a reader
that falls behind is closed without an error. Serving the lines over HTTP is the API server's.

Why: docs/architecture.md#the-nodemetric-store
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from colocation.apimachinery.objects import Obj, inflated
from colocation.apimachinery.selectors import LabelSelector
from colocation.apimachinery.watch_queue import Bookmark, WatchQueue, bookmark_object, encoded_event_line
from colocation.nodemetrics.report_schema import API_VERSION, KIND
from colocation.nodemetrics.resource_versions import ResourceVersionClock

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A change, holding the object's deflated bytes rather than its event line: the body of a
    node's latest event is the very bytes object the store keeps for the node, so the window adds
    nothing for it."""

    resource_version: int
    name: str
    labels: Mapping[str, str]  # of the object after the event (before it, for DELETED)
    type: str  # ADDED, MODIFIED or DELETED: what a watcher that sees the object before and after gets
    deflated_body: bytes  # `objects.deflated`
    # Only when a MODIFIED event changed the labels: the object may leave or enter a selection.
    previous_labels: Mapping[str, str] | None = None
    deflated_left_body: bytes | None = None  # what a watcher it leaves gets DELETED: the previous content

    @property
    def body(self) -> bytes:
        return inflated(self.deflated_body)

    @property
    def line(self) -> bytes:
        return encoded_event_line(self.type, self.body)

    @property
    def size(self) -> int:
        """Bytes of the objects this event holds."""
        return len(self.deflated_body) + len(self.deflated_left_body or b"")


def nodemetric_bookmark(resource_version: int, *, initial_events_end: bool = False) -> Obj:
    return bookmark_object(KIND, API_VERSION, resource_version, initial_events_end=initial_events_end)


class Watcher(WatchQueue[bytes]):
    """One watch stream: lines of JSON, one event each, the backlog's first."""

    def __init__(self, window: EventWindow, selector: LabelSelector | None, name: str | None,
                 *, backlog: Iterable[bytes | Bookmark] = ()) -> None:
        self.selector = selector
        self.name = name
        self._window = window
        super().__init__(window.watcher_queue, backlog=backlog,
                         bookmark=lambda: nodemetric_bookmark(window.clock.current), on_end=self._detach)

    def deliver(self, event: Event, line: bytes) -> None:
        """Pass an event on as this watcher sees it through its name and label filters (`line`: the
        event's own line, serialized once for every watcher)."""
        if self.name is not None and event.name != self.name:
            return
        seen = line_for(event, self.selector, line)
        if seen is not None:
            self.offer(seen)

    def _detach(self) -> None:
        self._window.detach(self)


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

    @property
    def event_count(self) -> int:
        return len(self._events)

    def events(self) -> Iterable[Event]:
        return iter(self._events)

    def append(self, event: Event, body: bytes | None = None) -> None:
        """Keep `event` and send it to the watchers (`body`: its object inflated, when the caller
        has it at hand)."""
        if len(self._events) == self._events.maxlen:
            # The oldest event falls out: a client must have seen at least its resourceVersion.
            self.oldest_resumable = max(self.oldest_resumable, self._events[0].resource_version)
        self._events.append(event)
        if self._watchers:
            line = event.line if body is None else encoded_event_line(event.type, body)
            for watcher in list(self._watchers):
                watcher.deliver(event, line)

    def replay(self, since: int, selector: LabelSelector | None, name: str | None) -> list[bytes]:
        """The lines of the events after `since`, as a watcher with these filters sees them."""
        return [line for event in self._events if event.resource_version > since
                and (name is None or event.name == name)
                and (line := line_for(event, selector, event.line)) is not None]

    def names_since(self, since: int) -> set[str] | None:
        """The names of the objects changed after `since` (a resourceVersion), newest first until
        then; None when the window does not reach back to it (a reader must look at everything)."""
        if since <= 0 or since < self.oldest_resumable:
            return None
        names: set[str] = set()
        for event in reversed(self._events):
            if event.resource_version <= since:
                break
            names.add(event.name)
        return names

    def resumable_since(self, resource_version: int) -> None:
        """Nothing before `resource_version` is known here (a history taken over from a list)."""
        self.oldest_resumable = resource_version

    def attach(self, watcher: Watcher) -> None:
        if not watcher.ended:
            self._watchers.add(watcher)

    def detach(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def close_all(self) -> None:
        for watcher in list(self._watchers):
            watcher.close()


def line_for(event: Event, selector: LabelSelector | None, line: bytes) -> bytes | None:
    """What a watcher with `selector` gets of `event`, whose own line is `line`."""
    if selector is None:
        return line
    if event.previous_labels is None:
        return line if selector.matches(event.labels) else None
    was, now = selector.matches(event.previous_labels), selector.matches(event.labels)
    if was and now:
        return line
    if was:
        return encoded_event_line(DELETED, inflated(event.deflated_left_body or event.deflated_body))
    return encoded_event_line(ADDED, event.body) if now else None
