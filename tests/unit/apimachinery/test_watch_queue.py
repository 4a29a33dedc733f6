"""One watcher's queue: backlog then live events, bounded, ended silently or with an error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.watch_queue import Bookmark, WatchQueue, bookmark_object

END = Bookmark(bookmark_object("NodeMetric", "metrics.colocation.dev/v1alpha1", 7, initial_events_end=True))


class Ends:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_bookmark_objects_carry_only_a_resource_version_and_the_end_of_initial_events() -> None:
    assert bookmark_object("ConfigMap", "v1", 12) == {
        "kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "12"}}
    assert END.object["metadata"] == {"resourceVersion": "7",
                                      "annotations": {"k8s.io/initial-events-end": "true"}}


def test_the_backlog_comes_first_and_does_not_count_against_the_bound() -> None:
    queue: WatchQueue[str] = WatchQueue(2, backlog=["a", "b", "c", END])
    queue.offer("live-1")
    queue.offer("live-2")
    assert not queue.ended
    assert queue.take(3) == ["a", "b", "c"]
    assert queue.take(10) == [END, "live-1", "live-2"]
    assert queue.take(10) == [] and not queue.pending


def test_the_backlog_is_read_one_item_ahead_of_what_was_taken() -> None:
    read: list[int] = []

    def rendered() -> Iterator[str]:
        for index in range(1000):
            read.append(index)
            yield f"line-{index}"

    queue: WatchQueue[str] = WatchQueue(10, backlog=rendered())
    assert queue.pending and read == [0]
    assert queue.take(2) == ["line-0", "line-1"]
    assert read == [0, 1, 2]


def test_a_full_queue_ends_the_watch_silently_and_drops_what_was_pending() -> None:
    ends = Ends()
    queue: WatchQueue[str] = WatchQueue(2, backlog=["initial"], on_end=ends)
    for item in ("a", "b", "c"):
        queue.offer(item)
    assert queue.ended and queue.closed and queue.error is None
    assert queue.take(10) == [] and ends.count == 1
    queue.offer("d")
    queue.close()
    queue.stop()
    assert queue.take(10) == [] and ends.count == 1


def test_expiry_ends_the_watch_with_its_status() -> None:
    ends = Ends()
    queue: WatchQueue[str] = WatchQueue(5, backlog=["x"], on_end=ends)
    status = ApiError.gone("too old resource version: 1 (5)").status()
    queue.expire(status)
    assert queue.ended and queue.error == status and not queue.pending and ends.count == 1
    queue.expire(ApiError.gone("again").status())
    assert queue.error == status and ends.count == 1


def test_a_bookmark_is_only_given_while_nothing_is_pending() -> None:
    version = [3]
    queue: WatchQueue[str] = WatchQueue(5, bookmark=lambda: bookmark_object("Pod", "v1", version[0]))
    assert queue.bookmark() == bookmark_object("Pod", "v1", 3)
    queue.offer("event")
    version[0] = 4
    assert queue.bookmark() is None
    queue.take(1)
    assert queue.bookmark() == bookmark_object("Pod", "v1", 4)
    queue.close()
    assert queue.bookmark() is None
    assert WatchQueue[str](5).bookmark() is None  # a source without versions has none to give


async def test_a_waiting_stream_wakes_up_for_an_event_and_for_the_end() -> None:
    queue: WatchQueue[str] = WatchQueue(5)
    waiting = asyncio.create_task(queue.wait(None))
    await asyncio.sleep(0)  # let it start waiting
    assert not waiting.done()
    queue.offer("a")
    await asyncio.wait_for(waiting, 5)
    queue.take(1)
    waiting = asyncio.create_task(queue.wait(None))
    await asyncio.sleep(0)
    queue.stop()
    await asyncio.wait_for(waiting, 5)
    assert queue.ended


async def test_waiting_gives_up_after_its_timeout() -> None:
    queue: WatchQueue[str] = WatchQueue(5)
    await asyncio.wait_for(queue.wait(0.01), 5)
    assert not queue.ended and not queue.pending
