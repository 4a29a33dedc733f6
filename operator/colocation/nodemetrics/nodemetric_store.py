"""The latest NodeMetric of every node, in memory, with Kubernetes list and watch semantics.

Each object is serialized once, when it changes, and kept deflated; lists join the stored bodies
and every watch event is one shared line (`nodemetric_watch_window`). resourceVersions come from
`resource_versions.ResourceVersionClock`, so a standby serves the leader's objects at the
leader's resourceVersions. Watches follow kube-apiserver's watch cache: "" or "0" starts with the
current objects as ADDED; a version inside the event window resumes after it; an older one gets
410 Expired. Each entry keeps when the leader took it in (`Entry.received_at`): readers order and
age reports by it, never by `updateTime`. Pure; both clocks are injected. Single-threaded.

Why: docs/architecture.md#the-nodemetric-store
"""

from __future__ import annotations

import bisect
import builtins
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from colocation.apimachinery.clock import MonotonicClock, WallClock, format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import deflated, inflated
from colocation.apimachinery.selectors import LabelSelector
from colocation.apimachinery.watch_params import parse_resource_version
from colocation.apimachinery.watch_queue import Bookmark, encoded_event_line
from colocation.nodemetrics.nodemetric_watch_window import (
    ADDED,
    DELETED,
    MODIFIED,
    Event,
    EventWindow,
    Watcher,
    nodemetric_bookmark,
)
from colocation.nodemetrics.report_schema import (
    API_VERSION,
    KIND,
    LIST_KIND,
    UsageFigures,
    ValidatedReport,
    figures_of,
)
from colocation.nodemetrics.resource_versions import MICROSECONDS, ResourceVersionClock
from colocation.nodemetrics.storage_interface import Entry, update_time_ahead

_STATUS_KEY = b',"status":'
# `window_bytes` is a pass over the whole window: a scrape reuses a figure at most this old
# (seconds), so frequent scrapes cost the leader nothing more.
WINDOW_BYTES_MAX_AGE = 1.0
_OBJECT_HEAD = b'{"apiVersion":"' + API_VERSION.encode() + b'","kind":"' + KIND.encode() + b'","metadata":'


class NodeMetricStore:
    def __init__(self, *, clock_wall: WallClock, clock_monotonic: MonotonicClock, ttl_seconds: float = 600.0,
                 window: int = 10_000, watcher_queue: int = 1_000,
                 versions: ResourceVersionClock | None = None) -> None:
        self._wall = clock_wall
        self._monotonic = clock_monotonic
        self._ttl = ttl_seconds
        self._entries: dict[str, Entry] = {}
        self._names: list[str] = []  # sorted: lists come out in name order without sorting
        # Its own clock, or positions in a shared log (`apply_logged`).
        self._versions = versions if versions is not None else ResourceVersionClock(clock_wall)
        self._window = EventWindow(self._versions, size=window, watcher_queue=watcher_queue)
        # Called for each report stored with its receipt time as updateTime (`StorageMetrics.track`).
        self.on_update_time_replaced: Callable[[], object] = _nothing
        self._window_bytes: tuple[float, int] | None = None  # (when counted, the figure)

    # -- figures for metrics --------------------------------------------------------------------

    @property
    def node_count(self) -> int:
        return len(self._entries)

    @property
    def watcher_count(self) -> int:
        return self._window.watcher_count

    @property
    def window_events(self) -> int:
        return self._window.event_count

    @property
    def window_bytes(self) -> int:
        """Bytes of the objects only the watch window keeps: not the ones that are a node's latest
        (a pass over the window, at most every `WINDOW_BYTES_MAX_AGE` seconds)."""
        now = self._monotonic()
        if self._window_bytes is None or now - self._window_bytes[0] >= WINDOW_BYTES_MAX_AGE:
            entries = self._entries
            counted = sum(event.size for event in self._window.events()
                          if (entry := entries.get(event.name)) is None
                          or entry.deflated_body is not event.deflated_body)
            self._window_bytes = (now, counted)
        return self._window_bytes[1]

    @property
    def resource_version(self) -> int:
        return self._versions.current

    @property
    def replicated_version(self) -> int:
        """The resourceVersion this copy holds data up to, 0 while it holds none it was given.

        A new store's `resource_version` starts at the wall clock, ahead of everything a leader
        issued before it: a consistent read must not take an empty copy for a current one."""
        return 0 if self._versions.untouched else self._versions.current

    def observe_resource_version(self, resource_version: int) -> None:
        """Never issue a resourceVersion at or below this one (e.g. the leader's, seen by a standby)."""
        self._versions.observe(resource_version)

    # -- writes ---------------------------------------------------------------------------------

    def put(self, report: ValidatedReport, labels: Mapping[str, str]) -> Entry:
        """Store a node's report; an unchanged report only refreshes the node's freshness.

        An updateTime more than MAX_UPDATE_TIME_AHEAD ahead of the receipt time is replaced by it
        (`update_time_ahead` tells the caller). The same report sent again is unchanged, even then:
        its updateTime stays the first receipt's, so a stuck agent's repeats do not look new.
        """
        now = self._monotonic()
        received_at = self._wall()
        labels = dict(labels)
        previous = self._entries.get(report.name)
        stored = report.as_received(received_at)
        if previous is not None and previous.labels == labels and (
                _ends_with_status(previous.body, stored.status_json) or _sent_again(previous, report)):
            entry = dataclasses.replace(previous, last_seen_monotonic=now)
            self._entries[report.name] = entry
        else:
            rv = self._versions.next()
            created = previous.creation_timestamp if previous is not None else format_time(received_at)
            body = _render(report.name, labels, rv, created=created, status_json=stored.status_json)
            sent = report.figures.update_time if stored is not report else None
            entry = Entry(name=report.name, labels=labels, resource_version=rv, deflated_body=deflated(body),
                          figures=stored.figures, creation_timestamp=created, last_seen_monotonic=now,
                          received_at=received_at, update_time_sent=sent)
            self._store(entry)
            self._emit_change(entry, previous, body)
        if update_time_ahead(report, entry):
            self.on_update_time_replaced()
        return entry

    def delete(self, name: str) -> Entry | None:
        entry = self._entries.get(name)
        if entry is not None:
            self._remove(entry, self._versions.next())
        return entry

    def keep_only(self, exists: Callable[[str], bool]) -> list[str]:
        """Drop the nodes for which `exists` is false (Nodes deleted while no one removed their data)."""
        gone = sorted(name for name in self._entries if not exists(name))
        for name in gone:
            self._remove(self._entries[name], self._versions.next())
        return gone

    def silent(self) -> list[str]:
        """The nodes that have not reported for the TTL (on the monotonic clock), in name order."""
        deadline = self._monotonic() - self._ttl
        return sorted(e.name for e in self._entries.values() if e.last_seen_monotonic <= deadline)

    def expire(self) -> list[str]:
        """Drop the nodes that have not reported for the TTL."""
        silent = self.silent()
        for name in silent:
            self._remove(self._entries[name], self._versions.next())
        return silent

    def close_watchers(self) -> None:
        """End every watch (shutdown, lost leadership); clients reconnect to the next leader."""
        self._window.close_all()

    # -- replication (a warm standby following the leader's watch) -----------------------------

    def apply_event(self, type_: str, body: bytes) -> None:
        """Apply one of the leader's watch events; `body` carries the leader's resourceVersion."""
        if type_ == "BOOKMARK":
            self._versions.observe(_resource_version_of(orjson.loads(body)))
            return
        if type_ not in (ADDED, MODIFIED, DELETED):
            raise ValueError(f"cannot apply a {type_} event")
        entry = self._entry_from_body(body)
        previous = self._entries.get(entry.name)
        self._versions.observe(entry.resource_version)
        if previous is not None and previous.deflated_body == entry.deflated_body and type_ != DELETED:
            return  # delivered twice (a resumed replication watch): nothing changed
        if type_ == DELETED:
            if previous is not None:
                self._unstore(entry.name)
                self._window.append(Event(resource_version=entry.resource_version, name=entry.name, labels=entry.labels,
                                          type=DELETED, deflated_body=entry.deflated_body), body)
            return
        self._store(entry)
        self._emit_change(entry, previous, body)

    def replace_all(self, bodies: list[bytes], resource_version: int) -> None:
        """Make the contents those of the leader's list at `resource_version` (after a relist).

        Watchers see the difference: ADDED and MODIFIED at the objects' own resourceVersions,
        DELETED at the list's. A store that had never held anything takes the leader's history
        over: clients may resume from any resourceVersion since the list.
        """
        # A list without a resourceVersion (0) says nothing about history: keep our own.
        fresh = self._versions.untouched and resource_version > 0
        incoming = [self._entry_from_body(body) for body in bodies]
        names = {entry.name for entry in incoming}
        for entry in sorted(incoming, key=lambda e: e.resource_version):
            previous = self._entries.get(entry.name)
            if previous is not None and previous.deflated_body == entry.deflated_body:
                self._entries[entry.name] = dataclasses.replace(previous, last_seen_monotonic=entry.last_seen_monotonic)
                continue
            self._store(entry)
            self._emit_change(entry, previous)
        for name in [n for n in self._names if n not in names]:
            self._remove(self._entries[name], resource_version)
        if fresh:
            # Nothing before the list is known here: resuming from earlier would miss deletions.
            self._versions.restart_at(resource_version)
            self._window.resumable_since(resource_version)
        self._versions.observe(resource_version)

    # -- a shared log (colocation.jetstream: every replica applies every write, in the log's order) --

    def apply_logged(self, name: str, position: int, value: bytes | None, *, received_at: float,
                     figures: UsageFigures | None = None) -> None:
        """Apply the write at `position` of the shared log: `value` is the object without its
        resourceVersion (`log_value`), None when the node's NodeMetric was deleted; `received_at`
        is when the log took it in (its own clock, the same on every replica); `figures`, when the
        writer sent them along, spare parsing the report. The same content written again only
        refreshes the node's freshness, as an unchanged report does."""
        self._versions.observe(position)
        previous = self._entries.get(name)
        if value is None:
            if previous is not None:
                self._remove(previous, position)
            return
        entry, body = logged_entry(position, value, received_at=received_at, seen_at=self._monotonic(),
                                   figures=figures)
        # Figures differ only where statuses do (they are read from the status): most writes are
        # changes, and the comparison then inflates nothing.
        if previous is not None and previous.figures == entry.figures and previous.labels == entry.labels \
                and same_status(previous.body, body):
            self._entries[name] = dataclasses.replace(previous, last_seen_monotonic=entry.last_seen_monotonic)
            return
        self._store(entry)
        self._emit_change(entry, previous, body)

    def caught_up(self, position: int) -> None:
        """Everything of the log up to `position` is applied. The first time, watches may resume
        only from there: what came before was replayed compacted (a node's latest write only)."""
        if self._window.oldest_resumable == 0:
            self._window.resumable_since(position)
        self._versions.observe(position)

    def log_restarted(self, position: int) -> None:
        """The log lost its writes and goes on after `position`: every watch ends (its client lists
        again) and none resumes from before it. Each node keeps its last data until it writes again."""
        self._versions.observe(position)
        self._window.resumable_since(position)
        self._window.close_all()

    # -- reads ----------------------------------------------------------------------------------

    def get(self, name: str) -> Entry | None:
        return self._entries.get(name)

    def names_changed_since(self, resource_version: int) -> tuple[set[str], int] | None:
        """`NodeMetricReader.names_changed_since`, from the watch window's events."""
        names = self._window.names_since(resource_version)
        return None if names is None else (names, self._versions.current)

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
        return candidates, self._versions.current

    def list_body(self, label_selector: LabelSelector | None = None, name: str | None = None) -> bytes:
        """A NodeMetricList, assembled from the stored bodies."""
        entries, rv = self.list(label_selector, name)
        return b"".join((b'{"apiVersion":"', API_VERSION.encode(), b'","kind":"', LIST_KIND.encode(),
                         b'","metadata":{"resourceVersion":"', str(rv).encode(), b'"},"items":[',
                         b",".join(inflated(e.deflated_body) for e in entries), b"]}"))

    def watch(self, resource_version: str, label_selector: LabelSelector | None = None, name: str | None = None,
              *, send_initial_events: bool | None = None) -> Watcher:
        """Start a watch, as kube-apiserver's watch cache does for these parameters.

        `send_initial_events` is None when the client did not set it: then "" and "0" start with
        the current objects. True sends them (whatever the resourceVersion) followed by a BOOKMARK
        annotated `k8s.io/initial-events-end`; False starts from now, or after the given
        resourceVersion. Raises ApiError for a malformed resourceVersion (400) or one too far in
        the future (504, as the watch cache's "Too large resource version").
        """
        selector = label_selector if label_selector is not None and not label_selector.empty else None
        since = parse_resource_version(resource_version)
        if since:
            # Not observed: a read never moves the resourceVersion; the next write's version is at
            # least the wall clock, so it comes after any version the client can have seen.
            self._versions.check_reached(since)
        backlog: Iterable[bytes | Bookmark] = ()
        if send_initial_events or (not since and send_initial_events is None):
            # Rendered as the stream reads them: 10,000 nodes are not encoded twice over at once.
            backlog = (encoded_event_line(ADDED, entry.body) for entry in self.list(selector, name)[0])
            if send_initial_events:
                end = nodemetric_bookmark(self._versions.current, initial_events_end=True)
                backlog = itertools.chain(backlog, (Bookmark(end),))
        elif since and since < (oldest := self._window.oldest_resumable):
            expired = Watcher(self._window, selector, name)
            expired.expire(ApiError.gone(f"too old resource version: {since} ({oldest})").status())
            return expired
        elif since:
            backlog = self._window.replay(since, selector, name)
        watcher = Watcher(self._window, selector, name, backlog=backlog)
        self._window.attach(watcher)
        return watcher

    # -- internals ------------------------------------------------------------------------------

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
        self._window.append(Event(resource_version=rv, name=entry.name, labels=entry.labels, type=DELETED,
                                  deflated_body=deflated(body)), body)

    def _emit_change(self, entry: Entry, previous: Entry | None, body: bytes | None = None) -> None:
        """Append the event of a change to `entry` (`body`: its inflated body, when at hand)."""
        rv, name, kept = entry.resource_version, entry.name, entry.deflated_body
        # The event holds the entry's own bytes: the window adds nothing for a node's latest change.
        if previous is None:
            event = Event(resource_version=rv, name=name, labels=entry.labels, type=ADDED, deflated_body=kept)
        elif previous.labels == entry.labels:
            event = Event(resource_version=rv, name=name, labels=entry.labels, type=MODIFIED, deflated_body=kept)
        else:
            event = Event(resource_version=rv, name=name, labels=entry.labels, type=MODIFIED, deflated_body=kept,
                          previous_labels=previous.labels,
                          deflated_left_body=deflated(_with_resource_version(previous.body, rv)))
        self._window.append(event, body)

    def _entry_from_body(self, body: bytes) -> Entry:
        obj = orjson.loads(body)
        metadata = obj["metadata"]
        return Entry(
            name=metadata["name"],
            labels=metadata.get("labels") or {},
            resource_version=_resource_version_of(obj),
            deflated_body=deflated(body),
            figures=figures_of(obj),
            creation_timestamp=metadata.get("creationTimestamp") or "",
            last_seen_monotonic=self._monotonic(),
            received_at=min(self._wall(), _resource_version_of(obj) / MICROSECONDS),
        )


def _nothing() -> None:
    pass


def _sent_again(previous: Entry, report: ValidatedReport) -> bool:
    """Whether `report` is the one `previous` holds with a receipt time as its updateTime, sent again."""
    return (previous.update_time_sent == report.figures.update_time
            and _ends_with_status(previous.body, report.with_update_time(previous.figures.update_time).status_json))


def _render(name: str, labels: Mapping[str, str], rv: int, *, created: str, status_json: bytes) -> bytes:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": str(rv), "creationTimestamp": created}
    if labels:
        metadata["labels"] = labels
    return b"".join((_OBJECT_HEAD, orjson.dumps(metadata), _STATUS_KEY, status_json, b"}"))


def log_value(report: ValidatedReport, labels: Mapping[str, str], *, created: str) -> bytes:
    """What a shared log keeps of a node's report (`NodeMetricStore.apply_logged`): the object as
    served, but for its resourceVersion, which is its position in the log."""
    metadata: dict[str, Any] = {"name": report.name, "creationTimestamp": created}
    if labels:
        metadata["labels"] = dict(labels)
    return b"".join((_OBJECT_HEAD, orjson.dumps(metadata), _STATUS_KEY, report.status_json, b"}"))


def logged_entry(position: int, value: bytes, *, received_at: float, seen_at: float,
                 figures: UsageFigures | None = None) -> tuple[Entry, bytes]:
    """The entry, and its body, of a write at `position` of a shared log (`log_value`). With the
    `figures` at hand only the metadata is parsed: the status is copied as it was written."""
    split = value.find(_STATUS_KEY) if value.startswith(_OBJECT_HEAD) else -1
    if figures is None or split < 0:
        obj = orjson.loads(value)
        metadata, status_json, figures = obj["metadata"], orjson.dumps(obj["status"]), figures_of(obj)
    else:  # the first `"status":` key is the object's: the metadata's names and labels hold no quotes
        metadata, status_json = orjson.loads(value[len(_OBJECT_HEAD):split]), value[split + len(_STATUS_KEY):-1]
    labels, created = metadata.get("labels") or {}, metadata.get("creationTimestamp") or ""
    body = _render(metadata["name"], labels, position, created=created, status_json=status_json)
    return Entry(name=metadata["name"], labels=labels, resource_version=position, deflated_body=deflated(body),
                 figures=figures, creation_timestamp=created, last_seen_monotonic=seen_at,
                 received_at=received_at), body


def same_status(body: bytes, other: bytes) -> bool:
    """Whether two bodies of one node carry the same status (their metadata may differ). The first
    `"status":` key is the object's: metadata comes first, and names and labels hold no quotes."""
    return body[body.index(_STATUS_KEY):] == other[other.index(_STATUS_KEY):]


def _ends_with_status(body: bytes, status_json: bytes) -> bool:
    """Whether `body` ends with `"status":` this status (it ends every body, ours and a replicated
    leader's), compared in place: a report is a few KiB, and most are changes."""
    start = len(body) - len(status_json) - 1
    return (start >= len(_STATUS_KEY) and body.endswith(b"}") and body.startswith(status_json, start)
            and body.startswith(_STATUS_KEY, start - len(_STATUS_KEY)))


def _with_resource_version(body: bytes, rv: int) -> bytes:
    obj = orjson.loads(body)
    obj["metadata"]["resourceVersion"] = str(rv)
    return orjson.dumps(obj)


def _resource_version_of(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])
