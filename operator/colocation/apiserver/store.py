"""The latest NodeMetric of every node, in memory, with Kubernetes list and watch semantics.

Each object is serialized once, when it changes; lists join the stored bytes and every watch
event is one shared line, so serving costs no serialization per reader. resourceVersions come
from a clock-seeded counter (`max(current + 1, wall-clock microseconds)`), so they keep growing
across restarts and failovers, and a warm standby replicating the leader's events serves the
same objects at the same resourceVersions.

Watch semantics follow kube-apiserver's watch cache: "" or "0" starts with the current objects
as ADDED events; a resourceVersion inside the event window resumes after it; an older one gets
410 Expired; an object leaving or entering a watcher's label selector is DELETED or ADDED for it.
Every watcher's live queue is bounded: a reader that falls behind is closed with 410 and dropped.

Pure apart from asyncio's queue; both clocks are injected. Single-threaded: call it from the loop.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import dataclasses
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from colocation.apimachinery.clock import MonotonicClock, WallClock, format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import LabelSelector
from colocation.apiserver.models import (
    API_VERSION,
    GROUP,
    KIND,
    LIST_KIND,
    UsageFigures,
    ValidatedReport,
    figures_of,
)

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"
_MAX_RESOURCE_VERSION = 2**63 - 1
_OBJECT_HEAD = b'{"apiVersion":"' + API_VERSION.encode() + b'","kind":"' + KIND.encode() + b'","metadata":'


@dataclass(frozen=True, slots=True)
class Entry:
    """One node's stored NodeMetric: its serialized body and what is read without parsing it."""

    name: str
    labels: Mapping[str, str]  # the Node's labels, as the object's metadata.labels
    resource_version: int
    body: bytes  # the whole object, as served by get, list and watch
    figures: UsageFigures
    creation_timestamp: str
    last_seen_monotonic: float  # the last report, even an unchanged one


@dataclass(frozen=True, slots=True)
class _Event:
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

    def __init__(self, store: NodeMetricStore, selector: LabelSelector | None, name: str | None,
                 queue_size: int) -> None:
        self._store = store
        self.selector = selector
        self.name = name
        # Backlog items are shared event lines, or entries rendered as ADDED when read.
        self._backlog: deque[bytes | Entry] = deque()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=max(1, queue_size))
        self._closed = False

    @property
    def closed(self) -> bool:
        """No more events will be added; lines already queued (a final ERROR) are still read."""
        return self._closed

    async def next(self, timeout: float | None) -> bytes | None:
        """The next line, or None after `timeout` seconds without one or once the stream ended."""
        if self._backlog:
            item = self._backlog.popleft()
            return item if isinstance(item, bytes) else _event_line(ADDED, item.body)
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
        return _bookmark_line(self._store.resource_version, {})

    def stop(self) -> None:
        """The client went away: detach and drop whatever was queued."""
        self._finish(None)

    def _offer(self, line: bytes) -> None:
        if self._closed:
            return
        try:
            self._queue.put_nowait(line)
        except asyncio.QueueFull:
            self._finish(_error_line(ApiError.gone(
                f"the watcher fell behind: more than {self._queue.maxsize} events were waiting to be read")))

    def _deliver(self, event: _Event) -> None:
        """Pass an event on as this watcher sees it through its name and label filters."""
        if self.name is not None and event.name != self.name:
            return
        line = _line_for(event, self.selector)
        if line is not None:
            self._offer(line)

    def _start(self, backlog: list[bytes | Entry]) -> None:
        self._backlog.extend(backlog)

    def _finish(self, final: bytes | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._store._detach(self)  # the store and its watchers are one unit
        self._backlog.clear()
        while not self._queue.empty():  # free the memory at once; the stream ends anyway
            self._queue.get_nowait()
        self._queue.put_nowait(final or b"")


def _line_for(event: _Event, selector: LabelSelector | None) -> bytes | None:
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


class NodeMetricStore:
    def __init__(self, clock_wall: WallClock, clock_monotonic: MonotonicClock, *, ttl_seconds: float = 600.0,
                 window: int = 10_000, watcher_queue: int = 1_000, future_tolerance_seconds: float = 300.0) -> None:
        self._wall = clock_wall
        self._monotonic = clock_monotonic
        self._ttl = ttl_seconds
        self._watcher_queue = watcher_queue
        self._future_tolerance = int(future_tolerance_seconds * 1_000_000)
        self._entries: dict[str, Entry] = {}
        self._names: list[str] = []  # sorted: lists come out in name order without sorting
        # The store begins now: nothing before this resourceVersion can be replayed.
        self._rv = self._wall_rv()
        self._oldest_resumable = self._rv
        self._highest_known = 0  # the highest resourceVersion issued, replicated or observed
        self._events: deque[_Event] = deque(maxlen=max(1, window))
        self._watchers: set[Watcher] = set()

    # -- figures for metrics --------------------------------------------------------------------

    @property
    def node_count(self) -> int:
        return len(self._entries)

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)

    @property
    def resource_version(self) -> int:
        return self._rv

    # -- resourceVersions -----------------------------------------------------------------------

    def _wall_rv(self) -> int:
        return int(self._wall() * 1_000_000)

    def _next_rv(self) -> int:
        self._rv = max(self._rv + 1, self._wall_rv())
        self._highest_known = self._rv
        return self._rv

    def observe_resource_version(self, resource_version: int) -> None:
        """Never issue a resourceVersion at or below this one (e.g. the leader's, seen by a standby)."""
        self._rv = max(self._rv, resource_version)
        self._highest_known = max(self._highest_known, resource_version)

    # -- writes ---------------------------------------------------------------------------------

    def put(self, report: ValidatedReport, labels: Mapping[str, str]) -> Entry:
        """Store a node's report; an unchanged report only refreshes the node's freshness."""
        now = self._monotonic()
        labels = dict(labels)
        status_tail = b"".join((b',"status":', report.status_json, b"}"))
        previous = self._entries.get(report.name)
        # The status ends every body (ours, and a replicated leader's): compare the bytes.
        if previous is not None and previous.labels == labels and previous.body.endswith(status_tail):
            entry = dataclasses.replace(previous, last_seen_monotonic=now)
            self._entries[report.name] = entry
            return entry
        rv = self._next_rv()
        created = previous.creation_timestamp if previous is not None else format_time(self._wall())
        body = _render(report.name, labels, rv, created, status_tail)
        entry = Entry(report.name, labels, rv, body, report.figures, created, now)
        self._store(entry)
        self._emit_change(entry, previous)
        return entry

    def delete(self, name: str) -> Entry | None:
        entry = self._entries.get(name)
        if entry is not None:
            self._remove(entry, self._next_rv())
        return entry

    def expire(self) -> list[str]:
        """Drop the nodes that have not reported for the TTL (on the monotonic clock)."""
        deadline = self._monotonic() - self._ttl
        stale = [e for e in self._entries.values() if e.last_seen_monotonic <= deadline]
        for entry in sorted(stale, key=lambda e: e.name):
            self._remove(entry, self._next_rv())
        return sorted(e.name for e in stale)

    def close_watchers(self) -> None:
        """End every watch (shutdown, lost leadership); clients reconnect to the next leader."""
        for watcher in list(self._watchers):
            watcher._finish(None)

    # -- replication (a warm standby following the leader's watch) -----------------------------

    def apply_event(self, type_: str, body: bytes) -> None:
        """Apply one of the leader's watch events; `body` carries the leader's resourceVersion."""
        if type_ == "BOOKMARK":
            self.observe_resource_version(_resource_version_of(orjson.loads(body)))
            return
        if type_ not in (ADDED, MODIFIED, DELETED):
            raise ValueError(f"cannot apply a {type_} event")
        entry = self._entry_from_body(body)
        previous = self._entries.get(entry.name)
        self.observe_resource_version(entry.resource_version)
        if previous is not None and previous.body == body and type_ != DELETED:
            return  # delivered twice (a resumed replication watch): nothing changed
        if type_ == DELETED:
            if previous is not None:
                self._unstore(entry.name)
                self._append(_Event(entry.resource_version, entry.name, entry.labels, _event_line(DELETED, body)))
            return
        self._store(entry)
        self._emit_change(entry, previous)

    def replace_all(self, bodies: list[bytes], resource_version: int) -> None:
        """Make the contents those of the leader's list at `resource_version` (after a relist).

        Watchers see the difference: ADDED and MODIFIED at the objects' own resourceVersions,
        DELETED at the list's. A store that had never held anything takes the leader's history
        over: clients may resume from any resourceVersion since the list.
        """
        # A list without a resourceVersion (0) says nothing about history: keep our own.
        fresh = self._highest_known == 0 and resource_version > 0
        incoming = [self._entry_from_body(body) for body in bodies]
        names = {entry.name for entry in incoming}
        for entry in sorted(incoming, key=lambda e: e.resource_version):
            previous = self._entries.get(entry.name)
            if previous is not None and previous.body == entry.body:
                self._entries[entry.name] = dataclasses.replace(previous, last_seen_monotonic=entry.last_seen_monotonic)
                continue
            self._store(entry)
            self._emit_change(entry, previous)
        for name in [n for n in self._names if n not in names]:
            self._remove(self._entries[name], resource_version)
        if fresh:
            # Nothing before the list is known here: resuming from earlier would miss deletions.
            self._rv = resource_version
            self._oldest_resumable = resource_version
        self.observe_resource_version(resource_version)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, name: str) -> Entry | None:
        return self._entries.get(name)

    def list(self, label_selector: LabelSelector | None = None,
             name: str | None = None) -> tuple[builtins.list[Entry], int]:
        """The matching entries in name order, and the resourceVersion of this state."""
        if name is not None:
            found = self._entries.get(name)
            candidates = [found] if found is not None else []
        else:
            candidates = [self._entries[n] for n in self._names]
        if label_selector is not None and not label_selector.empty:
            candidates = [e for e in candidates if label_selector.matches(e.labels)]
        return candidates, self._rv

    def list_body(self, label_selector: LabelSelector | None = None, name: str | None = None) -> bytes:
        """A NodeMetricList, assembled from the stored bodies."""
        entries, rv = self.list(label_selector, name)
        return b"".join((b'{"apiVersion":"', API_VERSION.encode(), b'","kind":"', LIST_KIND.encode(),
                         b'","metadata":{"resourceVersion":"', str(rv).encode(), b'"},"items":[',
                         b",".join(e.body for e in entries), b"]}"))

    def watch(self, resource_version: str, label_selector: LabelSelector | None = None, name: str | None = None,
              send_initial_events: bool | None = None) -> Watcher:
        """Start a watch, as kube-apiserver does for these parameters.

        `send_initial_events` is None when the client did not set it: then "" and "0" start with
        the current objects. True sends them (whatever the resourceVersion) followed by a BOOKMARK
        annotated `k8s.io/initial-events-end`; False starts from now, or after the given
        resourceVersion. Raises ApiError for a malformed resourceVersion (400) or one too far in
        the future (504, as the watch cache's "Too large resource version").
        """
        selector = label_selector if label_selector is not None and not label_selector.empty else None
        watcher = Watcher(self, selector, name, self._watcher_queue)
        unset = resource_version in ("", "0")
        since = None if unset else self._parse_resource_version(resource_version)
        if since is not None and since > self._rv:
            self.observe_resource_version(since)  # later events must come after what the client saw
        if send_initial_events or (unset and send_initial_events is None):
            backlog: builtins.list[bytes | Entry] = builtins.list(self.list(selector, name)[0])
            if send_initial_events:
                backlog.append(_bookmark_line(self._rv, {INITIAL_EVENTS_END: "true"}))
        elif since is None:
            backlog = []
        elif since < self._oldest_resumable:
            watcher._finish(_error_line(ApiError.gone(
                f"too old resource version: {since} ({self._oldest_resumable})")))
            return watcher
        else:
            backlog = [line for event in self._events if event.resource_version > since
                       and (name is None or event.name == name)
                       and (line := _line_for(event, selector)) is not None]
        watcher._start(backlog)
        self._watchers.add(watcher)
        return watcher

    def _parse_resource_version(self, text: str) -> int:
        if not text.isascii() or not text.isdigit() or int(text) > _MAX_RESOURCE_VERSION:
            raise ApiError.bad_request(f'invalid resource version: "{text}"')
        value = int(text)
        limit = max(self._rv, self._wall_rv()) + self._future_tolerance
        if value > limit:
            raise ApiError(504, "Timeout", f"Timeout: Too large resource version: {value}, current: {self._rv}",
                           {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                            "retryAfterSeconds": 1, "group": GROUP, "kind": "nodemetrics"})
        return value

    # -- internals ------------------------------------------------------------------------------

    def _detach(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def _store(self, entry: Entry) -> None:
        if entry.name not in self._entries:
            bisect.insort(self._names, entry.name)
        self._entries[entry.name] = entry

    def _unstore(self, name: str) -> None:
        del self._entries[name]
        del self._names[bisect.bisect_left(self._names, name)]

    def _remove(self, entry: Entry, rv: int) -> None:
        # The DELETED object is the last state, at the resourceVersion of its deletion.
        self._unstore(entry.name)
        body = _with_resource_version(entry.body, rv)
        self._append(_Event(rv, entry.name, entry.labels, _event_line(DELETED, body)))

    def _emit_change(self, entry: Entry, previous: Entry | None) -> None:
        rv, name = entry.resource_version, entry.name
        if previous is None:
            self._append(_Event(rv, name, entry.labels, _event_line(ADDED, entry.body)))
        elif previous.labels == entry.labels:
            self._append(_Event(rv, name, entry.labels, _event_line(MODIFIED, entry.body)))
        else:
            self._append(_Event(rv, name, entry.labels, _event_line(MODIFIED, entry.body),
                                previous_labels=previous.labels,
                                left_line=_event_line(DELETED, _with_resource_version(previous.body, rv)),
                                joined_line=_event_line(ADDED, entry.body)))

    def _append(self, event: _Event) -> None:
        if len(self._events) == self._events.maxlen:
            # The oldest event falls out: a client must have seen at least its resourceVersion.
            self._oldest_resumable = max(self._oldest_resumable, self._events[0].resource_version)
        self._events.append(event)
        for watcher in list(self._watchers):
            watcher._deliver(event)

    def _entry_from_body(self, body: bytes) -> Entry:
        obj = orjson.loads(body)
        metadata = obj["metadata"]
        return Entry(
            name=metadata["name"],
            labels=metadata.get("labels") or {},
            resource_version=_resource_version_of(obj),
            body=body,
            figures=figures_of(obj),
            creation_timestamp=metadata.get("creationTimestamp") or "",
            last_seen_monotonic=self._monotonic(),
        )


def _render(name: str, labels: Mapping[str, str], rv: int, created: str, status_tail: bytes) -> bytes:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": str(rv), "creationTimestamp": created}
    if labels:
        metadata["labels"] = labels
    return b"".join((_OBJECT_HEAD, orjson.dumps(metadata), status_tail))


def _with_resource_version(body: bytes, rv: int) -> bytes:
    obj = orjson.loads(body)
    obj["metadata"]["resourceVersion"] = str(rv)
    return orjson.dumps(obj)


def _resource_version_of(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def _event_line(type_: str, body: bytes) -> bytes:
    return b"".join((b'{"type":"', type_.encode(), b'","object":', body, b"}\n"))


def _error_line(error: ApiError) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": error.status()}) + b"\n"


def _bookmark_line(rv: int, annotations: Mapping[str, str]) -> bytes:
    metadata: dict[str, Any] = {"resourceVersion": str(rv)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return orjson.dumps({"type": "BOOKMARK", "object": {"kind": KIND, "apiVersion": API_VERSION,
                                                        "metadata": metadata}}) + b"\n"
