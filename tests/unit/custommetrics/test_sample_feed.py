"""The leader's replication feed: what ingest keeps, the snapshot and what follows it, and the bounds.

The stream is read here as the watch serving reads it (`take`), and applied as a standby applies
it (`SampleFollower.apply`, no network): a follower must end up holding what the leader holds,
every accepted sample delivered once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from colocation.custommetrics.sample_batches import IncomingSeries, ValidatedBatch
from colocation.custommetrics.sample_feed import LINE_BYTES, FeedCursor, SampleFeed
from colocation.custommetrics.sample_follower import FeedError, SampleFollower
from colocation.custommetrics.series_metrics import StoreMetrics
from colocation.custommetrics.series_store import PODS, SeriesKey, SeriesSamples, SeriesStore
from tests.clock import FakeClock

NOW = 1_800_000_000.0
Samples = list[tuple[float, float]]


def pod_series(metric: str, pod: str, samples: Samples, labels: dict[str, str] | None = None) -> IncomingSeries:
    return IncomingSeries(metric=metric, labels=tuple(sorted((labels or {}).items())), namespace="team-a", pod=pod,
                          timestamps=tuple(t for t, _ in samples), values=tuple(v for _, v in samples))


def key(metric: str, pod: str, labels: dict[str, str] | None = None) -> SeriesKey:
    return SeriesKey(metric=metric, resource=PODS, namespace="team-a", name=pod,
                     labels=tuple(sorted((labels or {}).items())))


def contents(store: SeriesStore) -> dict[SeriesKey, Samples]:
    return {series.key: list(zip(series.timestamps, series.values, strict=True)) for series in store}


class Leader:
    """A leader's store and feed, ingesting as `CustomMetricsApi.ingest` does."""

    def __init__(self, clock: FakeClock, **feed: Any) -> None:
        self.clock = clock
        self.store = SeriesStore(clock.wall, retention_seconds=600)
        self.feed = SampleFeed(self.store, monotonic=clock.monotonic, **feed)
        self.kept: list[SeriesSamples] = []

    def ingest(self, *series: IncomingSeries) -> None:
        result = self.store.ingest(ValidatedBatch("node-1", series))
        self.feed.append(result.kept)
        self.kept.extend(result.kept)


def drain(cursor: FeedCursor) -> list[dict[str, Any]]:
    lines: list[bytes] = []
    while taken := cursor.take(16):
        assert all(isinstance(line, bytes) and line.endswith(b"\n") for line in taken)
        lines.extend(line for line in taken if isinstance(line, bytes))
    return [orjson.loads(line) for line in lines]


def delivered(events: list[dict[str, Any]], type_: str) -> list[tuple[SeriesKey, float, float]]:
    return [(key(s["metric"], s["name"], s["labels"]), t, v) for e in events if e["type"] == type_
            for s in e["object"]["series"] for t, v in zip(s["timestamps"], s["values"], strict=True)]


def follower(clock: FakeClock) -> SampleFollower:
    store = SeriesStore(clock.wall, retention_seconds=600)
    return SampleFollower(store, lambda: None, lambda: "", metrics=StoreMetrics(CollectorRegistry(), store.__len__))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0, wall=NOW)


def test_ingest_says_which_samples_it_kept_a_slice_of_each_series(clock: FakeClock) -> None:
    leader = Leader(clock)
    leader.ingest(pod_series("rps", "web-1", [(NOW - 10, 1.0)]))
    leader.kept.clear()
    result = leader.store.ingest(ValidatedBatch("node-1", (
        pod_series("rps", "web-1", [(NOW - 700, 9.0), (NOW - 20, 9.0), (NOW - 10, 2.0), (NOW - 5, 3.0),
                                    (NOW + 400, 9.0)]),
        pod_series("rps", "web-2", [(NOW - 900, 9.0)]))))
    assert result.accepted == 2 and sum(result.dropped.values()) == 4
    assert result.kept == [SeriesSamples(key("rps", "web-1"), (NOW - 10, NOW - 5), (2.0, 3.0))]
    assert contents(leader.store) == {key("rps", "web-1"): [(NOW - 10, 2.0), (NOW - 5, 3.0)]}


def test_a_follower_gets_a_snapshot_then_every_later_batch_once(clock: FakeClock) -> None:
    leader = Leader(clock)
    leader.ingest(pod_series("rps", "web-1", [(NOW - 30, 1.0), (NOW - 20, 2.0)], {"method": "GET"}),
                  pod_series("rps", "web-2", [(NOW - 30, 5.0)]))
    at_snapshot = contents(leader.store)
    leader.kept.clear()
    cursor = leader.feed.open()
    # Accepted after the snapshot began and before it was read: they must come as batches only.
    leader.ingest(pod_series("rps", "web-1", [(NOW - 20, 2.5), (NOW - 10, 3.0)], {"method": "GET"}))
    leader.ingest(pod_series("rps", "web-3", [(NOW - 10, 7.0)]), pod_series("rps", "web-2", [(NOW - 5, 6.0)]))
    events = drain(cursor)

    assert [e["type"] for e in events] == ["SNAPSHOT", "SERIES", "SYNCED", "BATCH", "BATCH"]
    snapshot_seq = events[0]["object"]["seq"]
    assert events[0]["object"] == events[2]["object"] == {"epoch": leader.feed.epoch, "seq": snapshot_seq}
    assert [e["object"]["seq"] for e in events[3:]] == [snapshot_seq + 1, snapshot_seq + 2]
    # The snapshot is the state when it began (web-1's newest value then, not the one replaced since);
    # the batches are what was kept after it: every sample once.
    assert Counter(delivered(events, "SERIES")) == Counter((k, t, v) for k, samples in at_snapshot.items()
                                                          for t, v in samples)
    assert Counter(delivered(events, "BATCH")) == Counter((s.key, t, v) for s in leader.kept
                                                         for t, v in zip(s.timestamps, s.values, strict=True))
    standby = follower(clock)
    for event in events:
        standby.apply(event)
    assert standby.synced and standby.seq == leader.feed.seq
    assert contents(standby.series) == contents(leader.store)

    leader.ingest(pod_series("rps", "web-3", [(NOW - 1, 8.0)]))
    for event in drain(cursor):
        standby.apply(event)
    assert contents(standby.series) == contents(leader.store)
    assert not cursor.pending and cursor.bookmark() == {"seq": leader.feed.seq}


def test_what_expires_before_the_snapshot_is_read_is_left_out(clock: FakeClock) -> None:
    leader = Leader(clock)
    leader.ingest(pod_series("rps", "web-1", [(NOW - 590, 1.0), (NOW - 100, 2.0)]),
                  pod_series("rps", "web-2", [(NOW - 595, 3.0)]))
    cursor = leader.feed.open()
    clock.wall_now += 20
    leader.store.collect_garbage()
    events = drain(cursor)
    assert delivered(events, "SERIES") == [(key("rps", "web-1"), NOW - 100, 2.0)]
    standby = follower(clock)
    for event in events:
        standby.apply(event)
    assert contents(standby.series) == contents(leader.store)


def test_a_follower_that_falls_behind_is_dropped_with_410_and_comes_back_to_a_snapshot(clock: FakeClock) -> None:
    dropped: list[int] = []
    leader = Leader(clock, max_bytes=4096, on_dropped=lambda: dropped.append(1))
    leader.ingest(pod_series("rps", "web-1", [(NOW - 100, 1.0)]))
    cursor = leader.feed.open()
    standby = follower(clock)
    for event in drain(cursor):
        standby.apply(event)
    seq = standby.seq
    assert seq is not None
    for second in range(50):  # each line ~150 bytes: the feed forgets the oldest ones
        leader.ingest(pod_series("rps", "web-1", [(NOW - 50 + second, float(second))]))
    assert leader.feed.first > seq + 1 and leader.feed.held_bytes <= 4096

    assert cursor.take(16) == [] and cursor.ended
    assert cursor.error is not None and (cursor.error["code"], cursor.error["reason"]) == (410, "Expired")
    assert dropped == [1] and leader.feed.followers == 0
    with pytest.raises(FeedError) as error:
        standby.apply({"type": "ERROR", "object": cursor.error})
    assert error.value.reason == "expired" and standby.seq is None

    events = drain(leader.feed.open(leader.feed.epoch, seq))  # its place is gone: a snapshot
    assert events[0]["type"] == "SNAPSHOT"
    for event in events:
        standby.apply(event)
    assert contents(standby.series) == contents(leader.store)


def test_a_follower_resumes_where_it_stopped_and_another_epoch_gets_a_snapshot(clock: FakeClock) -> None:
    leader = Leader(clock)
    leader.ingest(pod_series("rps", "web-1", [(NOW - 100, 1.0)]))
    first = leader.feed.open()
    drain(first)
    first.stop()
    seq = first.seq
    leader.ingest(pod_series("rps", "web-1", [(NOW - 90, 2.0)]))
    leader.ingest(pod_series("rps", "web-1", [(NOW - 80, 3.0)]))

    resumed = drain(leader.feed.open(leader.feed.epoch, seq))
    assert [(e["type"], e["object"].get("seq")) for e in resumed] == [
        ("RESUME", seq), ("BATCH", seq + 1), ("BATCH", seq + 2)]
    assert resumed[0]["object"]["epoch"] == leader.feed.epoch
    assert drain(leader.feed.open("a-previous-leader", seq))[0]["type"] == "SNAPSHOT"
    assert drain(leader.feed.open(leader.feed.epoch, seq + 100))[0]["type"] == "SNAPSHOT"


def test_the_feed_is_bounded_and_holds_nothing_while_nobody_follows(clock: FakeClock) -> None:
    leader = Leader(clock, max_bytes=100_000, max_lines=5, linger_seconds=60)
    for second in range(3):
        leader.ingest(pod_series("rps", "web-1", [(NOW - 100 + second, 1.0)]))
    assert (leader.feed.seq, leader.feed.held_bytes) == (3, 0)  # counted, not kept

    cursor = leader.feed.open()
    for second in range(20):
        leader.ingest(pod_series("rps", "web-1", [(NOW - 50 + second, 1.0)]))
        assert leader.feed.seq - leader.feed.first + 1 <= 5
    assert 0 < leader.feed.held_bytes <= 100_000
    cursor.stop()
    clock.now += 59  # a follower that just lost its connection comes back and resumes
    leader.ingest(pod_series("rps", "web-1", [(NOW - 20, 1.0)]))
    assert leader.feed.held_bytes > 0
    clock.now += 2
    leader.ingest(pod_series("rps", "web-1", [(NOW - 10, 1.0)]))
    assert leader.feed.held_bytes == 0 and leader.feed.first == leader.feed.seq + 1


def test_a_large_batch_is_split_into_consecutive_lines(clock: FakeClock) -> None:
    leader = Leader(clock)
    cursor = leader.feed.open()
    drain(cursor)
    long_label = {"path": "x" * 1000}
    leader.ingest(*(pod_series(f"m{index}", "web-1", [(NOW - 10, float(index))], long_label) for index in range(300)))
    lines = cursor.take(100)
    assert len(lines) > 3
    assert all(isinstance(line, bytes) and len(line) <= LINE_BYTES + 2048 for line in lines)
    standby = follower(clock)
    standby.apply({"type": "SNAPSHOT", "object": {"epoch": leader.feed.epoch, "seq": 0}})
    standby.apply({"type": "SYNCED", "object": {"epoch": leader.feed.epoch, "seq": 0}})
    for line in lines:
        assert isinstance(line, bytes)
        standby.apply(orjson.loads(line))
    assert contents(standby.series) == contents(leader.store) and len(standby.series) == 300


def test_a_gap_in_the_batches_is_a_broken_stream(clock: FakeClock) -> None:
    standby = follower(clock)
    standby.apply({"type": "SNAPSHOT", "object": {"epoch": "e", "seq": 7}})
    standby.apply({"type": "SYNCED", "object": {"epoch": "e", "seq": 7}})
    with pytest.raises(FeedError) as error:
        standby.apply({"type": "BATCH", "object": {"seq": 9, "series": []}})
    assert error.value.reason == "protocol" and standby.seq is None  # the next stream starts from a snapshot


async def test_waiting_ends_when_a_batch_is_appended(clock: FakeClock) -> None:
    leader = Leader(clock)
    cursor = leader.feed.open()
    drain(cursor)
    waiting = asyncio.create_task(cursor.wait(timeout=30))
    await asyncio.sleep(0)  # one turn of the loop (no time passes): the task is now waiting
    assert not waiting.done()
    leader.ingest(pod_series("rps", "web-1", [(NOW - 1, 1.0)]))
    await asyncio.wait_for(waiting, timeout=5)
    assert cursor.pending
