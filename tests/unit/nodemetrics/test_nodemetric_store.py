"""The NodeMetric store: resourceVersions, list and watch semantics, expiry and replication."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from colocation.apimachinery import objects
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.selectors import LabelSelector
from colocation.apimachinery.watch_queue import Bookmark, event_line
from colocation.nodemetrics.nodemetric_store import NodeMetricStore, log_value
from colocation.nodemetrics.nodemetric_watch_window import Watcher
from colocation.nodemetrics.report_schema import ValidatedReport, validate_report
from colocation.nodemetrics.resource_versions import LogPositions
from tests.clock import FakeClock

T0 = 1_795_341_600.0  # 2026-11-22T10:00:00Z
RV0 = 1_795_341_600_000_000  # the same instant in microseconds: the first resourceVersion


def report(node: str, cpu: str = "1", update_time: str = "2026-11-22T10:00:00Z") -> ValidatedReport:
    body = {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
            "status": {"updateTime": update_time,
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}},
                       "podsMetric": [{"namespace": "default", "name": "web", "podUsage": {"resources": {"cpu": cpu}},
                                       "priority": "koord-prod", "qos": "LS"}]}}
    return validate_report(orjson.dumps(body), node)


def make_store(clock: FakeClock, **options: Any) -> NodeMetricStore:
    # Started a second before "now": its first change is then exactly the clock's microseconds
    # (a change at the very instant a store starts is one more than the store's own version).
    clock.wall_now -= 1
    store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic, **options)
    clock.wall_now += 1
    return store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0, wall=T0)


@pytest.fixture
def store(clock: FakeClock) -> NodeMetricStore:
    return make_store(clock, window=5, watcher_queue=10)


def stored(store: NodeMetricStore, name: str) -> bytes:
    entry = store.get(name)
    assert entry is not None, f"{name} is not stored"
    return entry.body


def as_line(item: bytes | Bookmark) -> bytes:
    """A watcher's item as the stream writes it for a client that allows bookmarks."""
    return event_line("BOOKMARK", item.object) if isinstance(item, Bookmark) else item


def lines(watcher: Watcher, count: int) -> list[dict[str, Any]]:
    return [orjson.loads(as_line(item)) for item in watcher.take(count)]


def drain(watcher: Watcher) -> list[tuple[str, str, str]]:
    """Every item ready now, as (type, name, resourceVersion), then the stream's error if it ended
    with one, as ("ERROR", "code reason", message)."""
    seen = []
    for event in lines(watcher, 100_000):
        metadata = event["object"]["metadata"]
        seen.append((event["type"], metadata.get("name", ""), metadata["resourceVersion"]))
    if watcher.error is not None:
        status = watcher.error
        seen.append(("ERROR", f'{status["code"]} {status["reason"]}', status["message"]))
    return seen


# --------------------------------------------------------------------------------------------
# Objects and resourceVersions.


def test_a_report_is_stored_as_a_complete_object(store: NodeMetricStore) -> None:
    entry = store.put(report("node-1", cpu="2500m"), {"pool": "prod"})
    obj = orjson.loads(entry.body)
    assert obj["apiVersion"] == "metrics.colocation.dev/v1alpha1" and obj["kind"] == "NodeMetric"
    assert obj["metadata"] == {"name": "node-1", "resourceVersion": str(RV0),
                               "creationTimestamp": "2026-11-22T10:00:00Z", "labels": {"pool": "prod"}}
    assert obj["status"]["nodeMetric"]["nodeUsage"]["resources"] == {"cpu": "2500m", "memory": "1Gi"}
    assert (entry.name, entry.resource_version, entry.figures.cpu_millis, entry.figures.pod_count) == \
        ("node-1", RV0, 2500, 1)
    assert store.get("node-1") == entry
    assert store.node_count == 1


def test_resource_versions_follow_the_clock_and_always_grow(store: NodeMetricStore, clock: FakeClock) -> None:
    first = store.put(report("a"), {}).resource_version
    second = store.put(report("b"), {}).resource_version  # same microsecond: one more
    clock.wall_now -= 30  # the wall clock stepped back
    third = store.put(report("c"), {}).resource_version
    clock.wall_now += 60
    fourth = store.put(report("d"), {}).resource_version
    assert (first, second, third) == (RV0, RV0 + 1, RV0 + 2)
    assert fourth == RV0 + 30_000_000


def test_an_unchanged_report_refreshes_the_node_without_a_new_version(store: NodeMetricStore,
                                                                clock: FakeClock) -> None:
    first = store.put(report("node-1"), {"pool": "prod"})
    watcher = store.watch(str(first.resource_version))
    clock.now += 30
    again = store.put(report("node-1"), {"pool": "prod"})
    assert again.resource_version == first.resource_version and again.deflated_body is first.deflated_body
    assert again.last_seen_monotonic == first.last_seen_monotonic + 30
    assert store.resource_version == first.resource_version
    assert drain(watcher) == []
    creation = orjson.loads(first.body)["metadata"]["creationTimestamp"]
    clock.wall_now += 10
    changed = store.put(report("node-1", update_time="2026-11-22T10:00:10Z"), {"pool": "prod"})
    assert changed.resource_version == RV0 + 10_000_000
    assert orjson.loads(changed.body)["metadata"]["creationTimestamp"] == creation  # kept across updates
    relabelled = store.put(report("node-1", update_time="2026-11-22T10:00:10Z"), {"pool": "batch"})
    assert relabelled.resource_version == changed.resource_version + 1  # labels are part of the object
    assert drain(watcher) == [("MODIFIED", "node-1", str(changed.resource_version)),
                              ("MODIFIED", "node-1", str(relabelled.resource_version))]


def test_resource_versions_stay_above_a_previous_process_after_a_restart(clock: FakeClock) -> None:
    old = make_store(clock)
    last = [old.put(report(f"n{i}"), {}).resource_version for i in range(3)][-1]
    assert last == RV0 + 2  # three changes in one microsecond ran ahead of the clock
    clock.wall_now -= 0.5  # the new process starts on a clock that went back a little
    new = make_store(clock)
    with pytest.raises(ApiError) as caught:  # an informer resuming from what it saw waits...
        new.watch(str(last))
    assert caught.value.code == 504 and new.resource_version < last  # ...and moved nothing
    clock.wall_now = last / 1_000_000 + 0.001  # once the clock has passed it, it resumes...
    watcher = new.watch(str(last))
    assert drain(watcher) == []
    entry = new.put(report("n0"), {})  # ...and what follows comes after it
    assert entry.resource_version > last
    assert drain(watcher) == [("ADDED", "n0", str(entry.resource_version))]


def test_a_standby_continues_above_what_the_leader_had(clock: FakeClock) -> None:
    clock.wall_now -= 5  # the standby's clock is behind the leader's
    standby = make_store(clock)
    standby.observe_resource_version(RV0 + 41)
    assert standby.put(report("n"), {}).resource_version == RV0 + 42


def test_lists_come_in_name_order_with_the_current_resource_version(store: NodeMetricStore) -> None:
    for name, pool in [("c", "prod"), ("a", "batch"), ("b", "prod")]:
        store.put(report(name), {"pool": pool})
    entries, rv = store.list()
    assert [e.name for e in entries] == ["a", "b", "c"] and rv == RV0 + 2
    assert [e.name for e in store.list(LabelSelector.parse("pool=prod"))[0]] == ["b", "c"]
    assert [e.name for e in store.list(name="b")[0]] == ["b"]
    assert store.list(name="zz") == ([], rv)
    assert store.list(LabelSelector.parse("pool=batch"), name="b") == ([], rv)


def test_a_list_body_joins_the_stored_objects(store: NodeMetricStore) -> None:
    for name in ("b", "a"):
        store.put(report(name), {"pool": name})
    body = store.list_body(LabelSelector.parse("pool in (a,b)"))
    assert orjson.loads(body) == {
        "apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetricList",
        "metadata": {"resourceVersion": str(RV0 + 1)},
        "items": [orjson.loads(stored(store, "a")), orjson.loads(stored(store, "b"))],
    }
    assert stored(store, "a") in body  # the stored bytes, as they are
    assert orjson.loads(store.list_body(name="nope"))["items"] == []


# --------------------------------------------------------------------------------------------
# Watch.


@pytest.mark.parametrize("resource_version", ["", "0"])
def test_a_watch_from_now_starts_with_the_current_objects(store: NodeMetricStore,
                                                          resource_version: str) -> None:
    store.put(report("b"), {})
    store.put(report("a"), {})
    watcher = store.watch(resource_version)
    store.put(report("c"), {})
    assert drain(watcher) == [("ADDED", "a", str(RV0 + 1)), ("ADDED", "b", str(RV0)),
                              ("ADDED", "c", str(RV0 + 2))]
    assert store.watcher_count == 1


def test_initial_events_end_with_an_annotated_bookmark(store: NodeMetricStore) -> None:
    store.put(report("a"), {})
    watcher = store.watch("", send_initial_events=True)
    store.put(report("b"), {})
    events = lines(watcher, 3)
    assert [event["type"] for event in events] == ["ADDED", "BOOKMARK", "ADDED"]
    assert events[1]["object"] == {"kind": "NodeMetric", "apiVersion": "metrics.colocation.dev/v1alpha1",
                                  "metadata": {"resourceVersion": str(RV0),
                                               "annotations": {"k8s.io/initial-events-end": "true"}}}


def test_initial_events_are_sent_even_for_a_resource_version_past_the_window(store: NodeMetricStore) -> None:
    for index in range(8):  # more changes than the window of 5 holds
        store.put(report("a", cpu=str(index + 1)), {})
    watcher = store.watch("1", send_initial_events=True)  # NotOlderThan: the current state is newer
    assert [t for t, _, _ in drain(watcher)] == ["ADDED", "BOOKMARK"]


def test_a_watch_without_initial_events_starts_at_the_most_recent_change(store: NodeMetricStore) -> None:
    store.put(report("a"), {})
    watcher = store.watch("", send_initial_events=False)
    store.put(report("b"), {})
    assert drain(watcher) == [("ADDED", "b", str(RV0 + 1))]


def test_a_watch_resumes_after_the_resource_version_given(store: NodeMetricStore, clock: FakeClock) -> None:
    store.put(report("a"), {})
    seen = store.put(report("b"), {}).resource_version
    store.put(report("a", cpu="2"), {})
    store.delete("b")
    watcher = store.watch(str(seen))
    assert drain(watcher) == [("MODIFIED", "a", str(RV0 + 2)), ("DELETED", "b", str(RV0 + 3))]


def test_a_resource_version_older_than_the_window_is_expired(store: NodeMetricStore) -> None:
    first = store.put(report("a"), {}).resource_version
    for index in range(5):  # the window holds 5 events: the first one falls out...
        store.put(report("a", cpu=str(index + 2)), {})
    # ...but whoever saw it can still resume: every later event is kept.
    assert [rv for _, _, rv in drain(store.watch(str(first)))] == [str(first + n) for n in range(1, 6)]
    watcher = store.watch(str(first - 1))
    assert drain(watcher) == [("ERROR", "410 Expired", f"too old resource version: {first - 1} ({first})")]
    assert watcher.closed and store.watcher_count == 1


def test_the_nodes_changed_since_a_resource_version_come_from_the_window(store: NodeMetricStore) -> None:
    start = store.put(report("a"), {}).resource_version
    store.put(report("b"), {})
    store.put(report("a", cpu="2"), {})
    store.delete("b")
    store.put(report("c"), {})
    assert store.names_changed_since(start) == ({"a", "b", "c"}, store.resource_version)
    assert store.names_changed_since(store.resource_version) == (set(), store.resource_version)
    for index in range(5):  # the window holds 5 events: what came after `start` is no longer all there
        store.put(report("d", cpu=str(index + 2)), {})
    assert store.names_changed_since(start) is None
    assert store.names_changed_since(0) is None  # nothing seen yet: read everything


def test_after_the_log_restarted_nothing_tells_what_changed_before(clock: FakeClock) -> None:
    store = log_store(clock)
    store.apply_logged("node-a", 10, logged("node-a"), received_at=T0)
    store.caught_up(10)
    store.apply_logged("node-a", 11, logged("node-a", cpu="3"), received_at=T0)
    assert store.names_changed_since(10) == ({"node-a"}, 11)
    store.log_restarted(1_800_000_000_000_000)
    assert store.names_changed_since(11) is None


def test_the_window_counts_its_events_and_the_bytes_only_it_keeps(store: NodeMetricStore) -> None:
    entries = [store.put(report("a" if index % 2 else "b", cpu=str(index + 1)), {})
               for index in range(7)]  # b a b a b a b: the window holds 5 events, the first two fall out
    assert store.window_events == 5
    assert len(list(store.watch(str(entries[1].resource_version)).take(100))) == 5
    # The last "a" and the last "b" are the stored objects themselves: only the three before them count,
    # as kept (deflated).
    assert store.window_bytes == sum(len(entry.deflated_body) for entry in entries[2:5])


def test_the_window_bytes_are_counted_again_only_once_they_are_a_second_old(
        store: NodeMetricStore, clock: FakeClock) -> None:
    first = store.put(report("a", cpu="1"), {})
    assert store.window_bytes == 0  # the only event holds the stored object itself
    store.put(report("a", cpu="2"), {})
    assert store.window_bytes == 0  # a scrape within the second gets the figure counted before
    clock.now += 1.0
    assert store.window_bytes == len(first.deflated_body)


def test_a_new_store_cannot_replay_what_came_before_it(clock: FakeClock) -> None:
    store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic)
    assert store.resource_version == RV0  # an empty store lists at the time it started
    watcher = store.watch(str(RV0 - 1))
    assert [t for t, _, _ in drain(watcher)] == ["ERROR"]


def test_a_resource_version_too_far_ahead_is_refused(store: NodeMetricStore) -> None:
    with pytest.raises(ApiError) as caught:
        store.watch(str(RV0 + 3_600_000_000))  # an hour past both the store and the clock
    assert (caught.value.code, caught.value.reason) == (504, "Timeout")
    assert caught.value.message.startswith("Timeout: Too large resource version")
    assert store.put(report("a"), {}).resource_version == RV0  # and it moved nothing


@pytest.mark.parametrize("resource_version", ["abc", "-1", "1.5", "99999999999999999999"])
def test_a_malformed_resource_version_is_400(store: NodeMetricStore, resource_version: str) -> None:
    with pytest.raises(ApiError) as caught:
        store.watch(resource_version)
    assert caught.value.code == 400


def test_every_watcher_gets_the_same_bytes_for_an_event(store: NodeMetricStore) -> None:
    first, second = store.watch("", send_initial_events=False), store.watch("", send_initial_events=False)
    store.put(report("a"), {})
    [line], [same] = first.take(1), second.take(1)
    assert isinstance(line, bytes) and line.endswith(b"\n")
    assert same is line
    assert orjson.loads(line) == {"type": "ADDED", "object": orjson.loads(stored(store, "a"))}


def test_objects_entering_or_leaving_a_selection_are_added_or_deleted(store: NodeMetricStore) -> None:
    store.put(report("a"), {"pool": "prod"})
    watcher = store.watch(str(store.resource_version), LabelSelector.parse("pool=batch"))
    store.put(report("a", cpu="2"), {"pool": "prod"})  # not selected before or after: nothing
    joined = store.put(report("a", cpu="2"), {"pool": "batch"})
    store.put(report("a", cpu="3"), {"pool": "batch"})
    left = store.put(report("a", cpu="3"), {"pool": "prod"})
    store.put(report("b"), {"pool": "batch"})
    assert drain(watcher) == [("ADDED", "a", str(joined.resource_version)),
                              ("MODIFIED", "a", str(joined.resource_version + 1)),
                              ("DELETED", "a", str(left.resource_version)),
                              ("ADDED", "b", str(left.resource_version + 1))]


def test_an_object_leaving_a_selection_is_deleted_as_it_was_at_the_new_version(store: NodeMetricStore) -> None:
    store.put(report("a", cpu="1"), {"pool": "batch"})
    watcher = store.watch("", LabelSelector.parse("pool=batch"), send_initial_events=False)
    left = store.put(report("a", cpu="2"), {"pool": "prod"})
    [event] = lines(watcher, 1)
    assert event["type"] == "DELETED"
    assert event["object"]["metadata"]["labels"] == {"pool": "batch"}  # the content it was selected with
    assert event["object"]["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "1"
    assert event["object"]["metadata"]["resourceVersion"] == str(left.resource_version)


def test_replayed_events_go_through_the_selection_too(store: NodeMetricStore) -> None:
    start = store.put(report("a"), {"pool": "prod"}).resource_version
    store.put(report("a"), {"pool": "batch"})
    store.put(report("b"), {"pool": "prod"})
    watcher = store.watch(str(start), LabelSelector.parse("pool=batch"))
    assert drain(watcher) == [("ADDED", "a", str(start + 1))]


def test_a_watch_of_one_name_sees_only_that_object(store: NodeMetricStore) -> None:
    store.put(report("a"), {})
    store.put(report("b"), {})
    watcher = store.watch("", name="b")
    store.put(report("a", cpu="2"), {})
    store.put(report("b", cpu="2"), {})
    assert drain(watcher) == [("ADDED", "b", str(RV0 + 1)), ("MODIFIED", "b", str(RV0 + 3))]
    replayed = store.watch(str(RV0), name="a")
    assert drain(replayed) == [("MODIFIED", "a", str(RV0 + 2))]


def test_a_watcher_that_falls_behind_is_closed_and_dropped(clock: FakeClock) -> None:
    store = make_store(clock, watcher_queue=2)
    slow = store.watch("", send_initial_events=False)
    fast = store.watch("", send_initial_events=False)
    for index in range(3):
        store.put(report(f"n{index}"), {})
        fast.take(1)
    assert slow.closed and store.watcher_count == 1
    # Silently, what was pending dropped: it resumes from the last resourceVersion it read.
    assert drain(slow) == []
    store.put(report("n9"), {})  # nothing more is queued for it
    assert drain(slow) == [] and not slow.pending


async def test_a_waiting_reader_wakes_up_for_an_event_and_for_the_end(store: NodeMetricStore) -> None:
    watcher = store.watch("", send_initial_events=False)
    reader = asyncio.ensure_future(watcher.wait(None))
    await asyncio.sleep(0)  # let the reader start waiting
    store.put(report("a"), {})
    await asyncio.wait_for(reader, 5)
    [event] = lines(watcher, 1)
    assert event["type"] == "ADDED"
    reader = asyncio.ensure_future(watcher.wait(None))
    await asyncio.sleep(0)
    store.close_watchers()
    await asyncio.wait_for(reader, 5)
    assert watcher.closed and store.watcher_count == 0


async def test_waiting_gives_up_after_its_timeout(store: NodeMetricStore) -> None:
    watcher = store.watch("", send_initial_events=False)
    await watcher.wait(0)
    assert not watcher.pending and not watcher.closed


def test_a_bookmark_is_only_offered_when_nothing_is_pending(store: NodeMetricStore) -> None:
    watcher = store.watch("", LabelSelector.parse("pool=batch"), send_initial_events=False)
    store.put(report("a"), {"pool": "batch"})
    assert watcher.bookmark() is None  # the ADDED has not been read yet
    watcher.take(1)
    store.put(report("b"), {"pool": "prod"})  # not for this watcher, but the version moved on
    assert watcher.bookmark() == {"kind": "NodeMetric", "apiVersion": "metrics.colocation.dev/v1alpha1",
                                  "metadata": {"resourceVersion": str(RV0 + 1)}}
    watcher.stop()
    assert watcher.bookmark() is None and store.watcher_count == 0


# --------------------------------------------------------------------------------------------
# Expiry and deletion.


def test_a_node_silent_for_the_ttl_is_deleted(clock: FakeClock) -> None:
    store = make_store(clock, ttl_seconds=600)
    store.put(report("quiet"), {})
    store.put(report("chatty"), {})
    watcher = store.watch("", send_initial_events=False)
    clock.now += 599
    store.put(report("chatty"), {})  # unchanged, but it counts as news from the node
    assert store.expire() == []
    clock.now += 1
    clock.wall_now += 600  # the wall clock only names the new resourceVersion
    assert store.expire() == ["quiet"]
    assert [e.name for e in store.list()[0]] == ["chatty"]
    assert drain(watcher) == [("DELETED", "quiet", str(RV0 + 600_000_000))]
    clock.now += 599
    assert store.expire() == ["chatty"]


def test_delete_emits_the_last_state_at_the_deletion_version(store: NodeMetricStore) -> None:
    store.put(report("a", cpu="7"), {"pool": "prod"})
    watcher = store.watch("", send_initial_events=False)
    assert store.delete("a") is not None and store.delete("a") is None
    [event] = lines(watcher, 1)
    assert (event["type"], event["object"]["metadata"]["resourceVersion"]) == ("DELETED", str(RV0 + 1))
    assert event["object"]["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "7"
    assert store.get("a") is None and store.node_count == 0


def test_only_nodes_that_still_exist_are_kept(store: NodeMetricStore) -> None:
    for node in ("a", "b", "c"):
        store.put(report(node), {})
    watcher = store.watch("", send_initial_events=False)
    assert store.keep_only({"b"}.__contains__) == ["a", "c"]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines(watcher, 2)] == [
        ("DELETED", "a"), ("DELETED", "c")]
    assert [entry.name for entry in store.list()[0]] == ["b"]


# --------------------------------------------------------------------------------------------
# Replication to a warm standby.


def replicate(leader_watch: Watcher, standby: NodeMetricStore) -> None:
    for event in lines(leader_watch, 100_000):
        standby.apply_event(event["type"], orjson.dumps(event["object"]))


def test_a_standby_serves_what_the_leader_serves(clock: FakeClock) -> None:
    leader = make_store(clock)
    leader.put(report("a"), {"pool": "prod"})
    leader.put(report("b"), {"pool": "batch"})
    clock.wall_now += 1
    standby = make_store(clock)  # started later: its own clock is ahead of the leader's data
    entries, rv = leader.list()
    standby.replace_all([e.body for e in entries], rv)
    assert standby.list_body() == leader.list_body()
    follow = leader.watch(str(rv))
    standby_watch = standby.watch(str(rv))
    leader.put(report("a", cpu="2"), {"pool": "prod"})
    leader.put(report("b"), {"pool": "prod"})
    leader.put(report("c"), {})
    leader.delete("a")
    replicate(follow, standby)
    assert standby.list_body() == leader.list_body()
    assert standby.list_body(LabelSelector.parse("pool=prod")) == leader.list_body(LabelSelector.parse("pool=prod"))
    standby_b, leader_b = standby.get("b"), leader.get("b")
    assert standby_b is not None and leader_b is not None
    assert (standby_b.body, standby_b.resource_version, standby_b.labels, standby_b.figures) == \
        (leader_b.body, leader_b.resource_version, leader_b.labels, leader_b.figures)
    assert drain(standby_watch) == [("MODIFIED", "a", str(RV0 + 1_000_000)),
                                    ("MODIFIED", "b", str(RV0 + 1_000_001)),
                                    ("ADDED", "c", str(RV0 + 1_000_002)),
                                    ("DELETED", "a", str(RV0 + 1_000_003))]
    # Promoted, it carries on above the leader and knows an unchanged report when it sees one.
    assert standby.put(report("c"), {}).resource_version == RV0 + 1_000_002
    assert standby.put(report("c", cpu="5"), {}).resource_version == RV0 + 1_000_004


def _bytes_kept_by(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        action()
        return sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()


def test_the_leader_and_a_standby_keep_reports_deflated_and_serve_them_whole(clock: FakeClock) -> None:
    """10,000 nodes' latest reports and a window of 10,000 events would hold some 100 MB of JSON as
    it is. The leader keeps what it renders, and a standby what it replicates (orjson's output,
    whose buffer keeps the capacity it grew to), deflated, at a fraction of that."""
    leader = make_store(clock, window=1_000)
    reports = []
    for index in range(200):
        pods = [{"namespace": "batch" if i % 3 else "web", "name": f"worker-{index * 7919 % 99991:05d}-{i}",
                 "podUsage": {"resources": {"cpu": f"{(i * 37 + index) % 1000}m",
                                            "memory": str((i * 7_654_321 + index) % 4_000_000_000)}},
                 "priority": "koord-batch" if i % 3 else "koord-prod", "qos": "BE" if i % 3 else "LS"}
                for i in range(30)]
        body = {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": f"node-{index}"},
                "status": {"updateTime": "2026-11-22T10:00:00Z",
                           "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}},
                           "podsMetric": pods}}
        reports.append(validate_report(orjson.dumps(body), f"node-{index}"))
    kept_by_leader = _bytes_kept_by(lambda: [leader.put(one, {}) for one in reports])
    objects = [orjson.loads(entry.body) for entry in leader.list()[0]]
    standby = make_store(clock, window=1_000)

    def replicate_all() -> None:
        for obj in objects:
            standby.apply_event("ADDED", orjson.dumps(obj))  # as the follower writes what it reads

    kept_by_standby = _bytes_kept_by(replicate_all)
    served = sum(len(entry.body) for entry in standby.list()[0])
    assert served > 4_000 * 200
    # The deflated bodies and the entries and events around them.
    assert kept_by_leader < 0.4 * served  # ~0.25 measured; ~1.1 as the JSON was
    assert kept_by_standby < 0.4 * served  # ~0.32
    assert [orjson.loads(entry.body) for entry in standby.list()[0]] == \
        [orjson.loads(entry.body) for entry in leader.list()[0]] == objects


def test_a_watch_resumes_on_the_promoted_standby_without_loss(clock: FakeClock) -> None:
    leader = make_store(clock)
    standby = make_store(clock)
    standby.replace_all([], leader.resource_version)
    follow = leader.watch(str(leader.resource_version))
    client = leader.watch("", send_initial_events=False)
    leader.put(report("a"), {})
    seen = drain(client)
    leader.put(report("b"), {})  # the client never reads this one from the leader
    replicate(follow, standby)
    resumed = standby.watch(seen[-1][2])
    assert drain(resumed) == [("ADDED", "b", str(RV0 + 1))]


def test_a_relist_emits_the_difference(clock: FakeClock) -> None:
    leader = make_store(clock)
    standby = make_store(clock)
    for name in ("a", "b", "c"):
        leader.put(report(name), {})
    standby.replace_all([e.body for e in leader.list()[0]], leader.resource_version)
    watcher = standby.watch("", send_initial_events=False)
    leader.put(report("a", cpu="2"), {})  # changes the standby will only learn from a relist
    leader.delete("b")
    leader.put(report("d"), {})
    entries, rv = leader.list()
    standby.replace_all([e.body for e in entries], rv)
    assert drain(watcher) == [("MODIFIED", "a", str(RV0 + 3)), ("ADDED", "d", str(RV0 + 5)),
                              ("DELETED", "b", str(rv))]
    assert standby.list_body() == leader.list_body()


def test_a_standby_ignores_an_event_delivered_twice(clock: FakeClock) -> None:
    leader = make_store(clock)
    standby = make_store(clock)
    standby.replace_all([], leader.resource_version)
    entry = leader.put(report("a"), {})
    watcher = standby.watch("", send_initial_events=False)
    standby.apply_event("ADDED", entry.body)
    standby.apply_event("MODIFIED", entry.body)
    assert [t for t, _, _ in drain(watcher)] == ["ADDED"]
    standby.apply_event("BOOKMARK", b'{"kind":"NodeMetric","metadata":{"resourceVersion":"%d"}}' % (RV0 + 50))
    assert standby.resource_version == RV0 + 50
    with pytest.raises(ValueError, match="cannot apply"):
        standby.apply_event("ERROR", b"{}")


def test_a_list_without_a_resource_version_does_not_move_the_store_back(clock: FakeClock) -> None:
    standby = make_store(clock)
    before = standby.resource_version
    standby.replace_all([], 0)
    assert standby.resource_version == before


def test_a_new_copy_claims_no_data_until_it_is_given_some(clock: FakeClock) -> None:
    leader = make_store(clock)
    leader.put(report("a"), {})
    clock.wall_now += 2
    standby = make_store(clock)  # its clock-seeded resourceVersion is past all the leader's data...
    entries, rv = leader.list()
    assert standby.resource_version > rv
    assert standby.replicated_version == 0  # ...yet it holds none of it
    standby.replace_all([e.body for e in entries], rv)
    assert standby.replicated_version == rv
    follow = leader.watch(str(rv))
    changed = leader.put(report("a", cpu="2"), {})
    replicate(follow, standby)
    assert standby.replicated_version == changed.resource_version


# ---- a store on a shared log (colocation.jetstream) ---------------------------------------------------

def log_store(clock: FakeClock) -> NodeMetricStore:
    return NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic, window=5, watcher_queue=10,
                           versions=LogPositions())


def logged(node: str, cpu: str = "1", labels: dict[str, str] | None = None) -> bytes:
    return log_value(report(node, cpu), labels or {}, created="2026-11-22T09:00:00Z")


def test_a_store_on_a_log_serves_each_write_at_its_position(clock: FakeClock) -> None:
    store = log_store(clock)
    store.apply_logged("node-a", 40, logged("node-a"), received_at=T0 - 5)
    store.apply_logged("node-b", 41, logged("node-b", labels={"pool": "web"}), received_at=T0 - 4)
    store.caught_up(41)
    entry = store.get("node-b")
    assert entry is not None and entry.resource_version == 41 and entry.labels == {"pool": "web"}
    assert entry.received_at == T0 - 4 and entry.creation_timestamp == "2026-11-22T09:00:00Z"
    body = orjson.loads(entry.body)
    assert body["metadata"] == {"name": "node-b", "resourceVersion": "41", "creationTimestamp": "2026-11-22T09:00:00Z",
                                "labels": {"pool": "web"}}
    assert body["status"] == orjson.loads(report("node-b").status_json)
    assert store.list()[1] == 41
    with pytest.raises(RuntimeError):  # it issues no version of its own
        store.put(report("node-c"), {})
    with pytest.raises(ApiError) as too_far:
        store.watch("42")
    assert too_far.value.code == 504


def test_on_a_log_the_same_content_again_refreshes_the_node_without_an_event(clock: FakeClock) -> None:
    store = log_store(clock)
    store.apply_logged("node-a", 40, logged("node-a"), received_at=T0)
    store.caught_up(40)
    watcher = store.watch("40")
    clock.advance(10)
    store.apply_logged("node-a", 45, logged("node-a"), received_at=T0 + 10)
    entry = store.get("node-a")
    assert entry is not None and entry.resource_version == 40 and entry.last_seen_monotonic == clock.now
    assert store.list()[1] == 45  # the list is as of the log's position
    store.apply_logged("node-a", 46, logged("node-a", cpu="2"), received_at=T0 + 11)
    store.apply_logged("node-a", 47, None, received_at=T0 + 12)
    assert drain(watcher) == [("MODIFIED", "node-a", "46"), ("DELETED", "node-a", "47")]


def test_on_a_log_a_changed_report_is_applied_without_inflating_the_last_one(
        clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    store = log_store(clock)
    store.apply_logged("node-a", 40, logged("node-a"), received_at=T0)
    inflations: list[int] = []

    def counting(kept: bytes) -> bytes:
        inflations.append(len(kept))
        return objects.inflated(kept)

    monkeypatch.setattr("colocation.nodemetrics.storage_interface.inflated", counting)
    store.apply_logged("node-a", 41, logged("node-a", cpu="2"), received_at=T0 + 10)
    assert inflations == []
    entry = store.get("node-a")
    assert entry is not None and entry.resource_version == 41 and entry.figures.cpu_millis == 2000


def test_watches_resume_only_from_where_the_copy_caught_up_and_end_when_the_log_restarts(clock: FakeClock) -> None:
    store = log_store(clock)
    for position, node in ((10, "node-a"), (12, "node-b")):  # the log replayed compacted: 11 is gone
        store.apply_logged(node, position, logged(node), received_at=T0)
    store.caught_up(12)
    assert drain(store.watch("11")) == [("ERROR", "410 Expired", "too old resource version: 11 (12)")]
    watcher = store.watch("12")
    store.apply_logged("node-a", 13, logged("node-a", cpu="3"), received_at=T0)
    assert drain(watcher) == [("MODIFIED", "node-a", "13")]
    store.log_restarted(1_800_000_000_000_000)  # the log lost its writes and starts again above them
    assert watcher.closed
    assert drain(store.watch("13"))[0][:2] == ("ERROR", "410 Expired")
    assert store.get("node-a") is not None and store.list()[1] == 1_800_000_000_000_000


def test_on_a_log_figures_sent_along_give_the_entry_parsing_the_report_gives(clock: FakeClock) -> None:
    parsed, told = log_store(clock), log_store(clock)
    value = logged("node-a", cpu="3", labels={"pool": "web"})
    parsed.apply_logged("node-a", 40, value, received_at=T0)
    told.apply_logged("node-a", 40, value, received_at=T0, figures=report("node-a", "3").figures)
    one, other = parsed.get("node-a"), told.get("node-a")
    assert one is not None and other is not None
    assert (one.body, one.figures, one.labels) == (other.body, other.figures, other.labels)
