"""The series store: recent samples of every custom metric series, with the indexes queries need.

A series is one metric of one object (a Pod or a Node) with one set of sample labels; its samples
are kept in timestamp order in two `array('d')`. Samples older than the retention are never read
and are dropped by `collect_garbage`. A batch's samples are moved by its `sentTime`'s offset
from our clock (`clock_offset`). A new series beyond `max_series` is refused; a series beyond
`max_samples_per_series` drops its oldest. `ingest` says what it kept, for standbys to `apply`;
`snapshot_marks` and `snapshot_of` read a snapshot without copying the samples. Pure: the wall
clock is injected; single-threaded (the event loop).

Why: docs/metrics-apis.md#uploads and docs/metrics-apis.md#standbys
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from colocation.apimachinery.clock import WallClock
from colocation.apimachinery.selectors import LabelSelector, Operator
from colocation.custommetrics.sample_batches import ValidatedBatch

PODS = "pods"
NODES = "nodes"

# Why a sample or a series was not kept (the label of the dropped-samples counter).
TOO_OLD = "too-old"
FUTURE = "future"
OUT_OF_ORDER = "out-of-order"
SERIES_LIMIT = "series-limit"

# An agent's clock within this of ours (network delay and jitter included) is taken as it is.
CLOCK_SKEW_TOLERANCE = 2.0

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesKey:
    metric: str
    resource: str  # PODS or NODES
    namespace: str  # "" for nodes
    name: str  # the Pod's or the Node's name
    labels: Labels  # sorted


@dataclass(frozen=True, slots=True)
class SeriesSamples:
    """Samples of one series, oldest first: what a batch kept of it, or what a snapshot holds."""

    key: SeriesKey
    timestamps: Sequence[float]
    values: Sequence[float]


# The newest (timestamp, value) of each series when a snapshot was taken.
SnapshotMarks = dict[SeriesKey, tuple[float, float]]


# What `Series.append` did with a sample.
REFUSED, ADDED, REPEATED = 0, 1, 2


class Series:
    """The retained samples of one series, oldest first."""

    __slots__ = ("key", "labels", "timestamps", "values")

    def __init__(self, key: SeriesKey) -> None:
        self.key = key
        self.labels = dict(key.labels)
        self.timestamps = array("d")
        self.values = array("d")

    def append(self, timestamp: float, value: float, capacity: int) -> int:
        """Add a sample after the newest (ADDED). One at a timestamp held already replaces that
        sample's value (REPEATED: a batch sent again is stored once); any other older one is
        REFUSED (0, false)."""
        if self.timestamps:
            newest = self.timestamps[-1]
            if timestamp == newest:
                self.values[-1] = value
                return REPEATED
            if timestamp < newest:
                index = bisect.bisect_left(self.timestamps, timestamp)
                if self.timestamps[index] != timestamp:
                    return REFUSED
                self.values[index] = value
                return REPEATED
        if len(self.timestamps) >= capacity:
            del self.timestamps[0]  # a memmove of at most a few kilobytes
            del self.values[0]
        self.timestamps.append(timestamp)
        self.values.append(value)
        return ADDED

    def cut(self, oldest: float) -> None:
        """Drop the samples older than `oldest`."""
        first = bisect.bisect_left(self.timestamps, oldest)
        if first:
            del self.timestamps[:first]
            del self.values[:first]

    def window(self, oldest: float) -> tuple[array[float], array[float]]:
        """(timestamps, values) at or after `oldest`."""
        first = bisect.bisect_left(self.timestamps, oldest)
        return self.timestamps[first:], self.values[first:]


@dataclass(kw_only=True)
class IngestResult:
    accepted: int = 0
    new_series: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    kept: list[SeriesSamples] = field(default_factory=list)  # the accepted samples, for standbys


def clock_offset(*, sent_at: float | None, received_at: float) -> float:
    """Seconds to add to an agent's sample times to put them on our clock: the difference between
    when we received the batch and the agent's clock when it sent it, when that is more than
    network delay and jitter could make it (CLOCK_SKEW_TOLERANCE); else 0, and the times stay as
    scraped. Without sentTime (an older agent), 0: its times are judged as sent."""
    if sent_at is None:
        return 0.0
    offset = received_at - sent_at
    return offset if abs(offset) > CLOCK_SKEW_TOLERANCE else 0.0


class SeriesStore:
    def __init__(self, wall: WallClock, *, retention_seconds: float = 600.0, max_series: int = 50_000,
                 max_samples_per_series: int = 360, future_tolerance_seconds: float = 300.0) -> None:
        self._wall = wall
        self.retention = retention_seconds
        self.max_series = max_series
        self.max_samples = max(1, max_samples_per_series)
        self._future_tolerance = future_tolerance_seconds
        self._series: dict[SeriesKey, Series] = {}
        self._by_object: dict[tuple[str, str, str], dict[str, set[SeriesKey]]] = {}
        self._by_label: dict[tuple[str, str, str, str], set[SeriesKey]] = {}

    def __len__(self) -> int:
        return len(self._series)

    def empty_like(self) -> SeriesStore:
        """A new, empty store with the same clock and bounds."""
        return SeriesStore(self._wall, retention_seconds=self.retention, max_series=self.max_series,
                           max_samples_per_series=self.max_samples,
                           future_tolerance_seconds=self._future_tolerance)

    def oldest_kept(self) -> float:
        return self._wall() - self.retention

    # -- writes ---------------------------------------------------------------------------------

    def ingest(self, batch: ValidatedBatch) -> IngestResult:
        now = self._wall()
        oldest, newest = now - self.retention, now + self._future_tolerance
        result = IngestResult()
        shift = clock_offset(sent_at=batch.sent_at, received_at=now)
        for incoming in batch.series:
            if shift:
                incoming = dataclasses.replace(incoming, timestamps=tuple(t + shift for t in incoming.timestamps))
            resource, name = (PODS, incoming.pod) if incoming.pod else (NODES, batch.node)
            key = SeriesKey(metric=incoming.metric, resource=resource, namespace=incoming.namespace, name=name,
                            labels=incoming.labels)
            series = self._series.get(key)
            if series is None:
                if len(self._series) >= self.max_series:
                    result.dropped[SERIES_LIMIT] += len(incoming.values)
                    continue
                series = self._add(key)
                result.new_series += 1
            kept_times: list[float] = []
            kept_values: list[float] = []
            for timestamp, value in zip(incoming.timestamps, incoming.values, strict=True):
                if timestamp < oldest:
                    result.dropped[TOO_OLD] += 1
                elif timestamp > newest:
                    result.dropped[FUTURE] += 1
                elif series.append(timestamp, value, self.max_samples):
                    result.accepted += 1
                    kept_times.append(timestamp)
                    kept_values.append(value)
                else:
                    result.dropped[OUT_OF_ORDER] += 1
            if not series.timestamps:  # nothing of it was kept: it must not linger until the sweep
                self._remove(series.key)
                result.new_series -= 1
                continue
            if kept_times:  # repeated samples too: a batch sent again after a failure reaches the others
                result.kept.append(SeriesSamples(key, tuple(kept_times), tuple(kept_values)))
        return result

    def apply(self, samples: SeriesSamples) -> int:
        """Add samples the leader kept (a standby's copy): their times were judged there, only the
        retention and the bounds apply here. Returns how many were added."""
        timestamps = samples.timestamps
        start = bisect.bisect_left(timestamps, self.oldest_kept())
        if start == len(timestamps):
            return 0
        series = self._series.get(samples.key)
        if series is None:
            if len(self._series) >= self.max_series:
                return 0
            series = self._add(samples.key)
        if not series.timestamps and all(map(operator.lt, timestamps[start:], timestamps[start + 1:])):
            # A snapshot's series into an empty one: at C speed (a snapshot may hold millions).
            first = max(start, len(timestamps) - self.max_samples)
            series.timestamps.extend(timestamps[first:])
            series.values.extend(samples.values[first:])
            return len(timestamps) - first
        added = 0
        for index in range(start, len(timestamps)):
            added += series.append(timestamps[index], samples.values[index], self.max_samples) == ADDED
        return added

    def replace_contents(self, other: SeriesStore) -> None:
        """Hold what `other` holds (a copy assembled aside, while this one kept serving)."""
        self._series, self._by_object, self._by_label = other._series, other._by_object, other._by_label
        other._series, other._by_object, other._by_label = {}, {}, {}

    def record(self, key: SeriesKey, timestamp: float, value: float) -> bool:
        """Add one sample (the operator's own series); False when it is not kept.

        Outside the retention and the future tolerance nothing is kept, as in `ingest`: a sample
        far ahead would hold the series (later ones are older) and never expire.
        """
        now = self._wall()
        if not now - self.retention <= timestamp <= now + self._future_tolerance:
            return False
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= self.max_series:
                return False
            series = self._add(key)
        return bool(series.append(timestamp, value, self.max_samples))

    def collect_garbage(self) -> int:
        """Cut every series at the retention; drop the empty ones. Returns how many were dropped."""
        oldest = self.oldest_kept()
        empty = []
        for series in self._series.values():
            if series.timestamps and series.timestamps[0] < oldest:
                series.cut(oldest)
                if not series.timestamps:
                    empty.append(series.key)
        for key in empty:
            self._remove(key)
        return len(empty)

    def _add(self, key: SeriesKey) -> Series:
        series = Series(key)
        self._series[key] = series
        self._by_object.setdefault((key.metric, key.resource, key.namespace), {}).setdefault(key.name, set()).add(key)
        for label in key.labels:
            self._by_label.setdefault((key.metric, key.resource, *label), set()).add(key)
        return series

    def _remove(self, key: SeriesKey) -> None:
        del self._series[key]
        scope = (key.metric, key.resource, key.namespace)
        objects = self._by_object[scope]
        objects[key.name].discard(key)
        if not objects[key.name]:
            del objects[key.name]
            if not objects:
                del self._by_object[scope]
        for label in key.labels:
            index_key = (key.metric, key.resource, *label)
            self._by_label[index_key].discard(key)
            if not self._by_label[index_key]:
                del self._by_label[index_key]

    # -- reads ----------------------------------------------------------------------------------

    def metrics(self) -> set[tuple[str, str]]:
        """(resource, metric) of every series held: what discovery lists."""
        return {(resource, metric) for metric, resource, _ in self._by_object}

    def object_names(self, metric: str, resource: str, namespace: str) -> Iterable[str]:
        return self._by_object.get((metric, resource, namespace), {}).keys()

    def namespaces(self, metric: str, resource: str) -> set[str]:
        return {namespace for m, r, namespace in self._by_object if m == metric and r == resource}

    def series_of(self, metric: str, resource: str, namespace: str, *, name: str,
                  metric_selector: LabelSelector | None = None) -> list[Series]:
        """The series of one object with samples in the retention, matching the metric label selector."""
        keys = self._by_object.get((metric, resource, namespace), {}).get(name, ())
        return self._live(keys, metric_selector)

    def series_in(self, metric: str, resource: str, namespace: str,
                  *, metric_selector: LabelSelector | None = None) -> list[Series]:
        """Every series of a metric in a namespace (all nodes for NODES), oldest sample in retention."""
        objects = self._by_object.get((metric, resource, namespace), {})
        candidates = self._label_candidates(metric, resource, metric_selector)
        if candidates is None:
            keys: Iterable[SeriesKey] = (key for keys in objects.values() for key in keys)
        else:
            keys = (key for key in candidates if key.namespace == namespace)
        return self._live(keys, metric_selector)

    def _label_candidates(self, metric: str, resource: str,
                          selector: LabelSelector | None) -> set[SeriesKey] | None:
        """The series the selector's equalities allow, from the label index; None: no equality to use."""
        found: set[SeriesKey] | None = None
        for requirement in selector.requirements if selector is not None else ():
            if requirement.operator not in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN):
                continue
            allowed = set().union(*(self._by_label.get((metric, resource, requirement.key, value), set())
                                    for value in requirement.values))
            found = allowed if found is None else found & allowed
        return found

    def _live(self, keys: Iterable[SeriesKey], selector: LabelSelector | None) -> list[Series]:
        oldest = self.oldest_kept()
        chosen = []
        for key in keys:
            series = self._series[key]
            if series.timestamps and series.timestamps[-1] >= oldest and (
                    selector is None or selector.matches(series.labels)):
                chosen.append(series)
        return chosen

    def __iter__(self) -> Iterator[Series]:
        return iter(self._series.values())

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot_marks(self) -> SnapshotMarks:
        return {key: (series.timestamps[-1], series.values[-1]) for key, series in self._series.items()
                if series.timestamps}

    def snapshot_of(self, key: SeriesKey, mark: tuple[float, float]) -> SeriesSamples | None:
        """The series as it was at its mark, less what expired since; None if nothing is left."""
        series = self._series.get(key)
        if series is None:
            return None
        newest, value = mark
        first = bisect.bisect_left(series.timestamps, self.oldest_kept())
        last = bisect.bisect_right(series.timestamps, newest)
        if first >= last:
            return None  # expired, or gone and made again by samples newer than the mark
        timestamps, values = series.timestamps[first:last], series.values[first:last]
        if timestamps[-1] == newest:
            values[-1] = value  # a later batch may have replaced the value at that timestamp
        return SeriesSamples(key, timestamps, values)
