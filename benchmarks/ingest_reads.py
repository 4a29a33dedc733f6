"""Reads while the leader ingests: lists (JSON and Table), gets, and a watch fanned out to N watchers.

Readers run on a schedule while reports arrive at a steady rate: a list of every NodeMetric every
`list_interval` seconds (JSON and Table alternately, as informers' relists and `kubectl get`
make them), `gets_per_second` gets of one node's NodeMetric, and `watchers` watches of the
collection started from the list's resourceVersion, as informers start them.

Event delay is the time from the reporter reading its 200 response (which carries the new
resourceVersion) to a watcher reading the event with that resourceVersion; both are times of
this process's event loop, so they compare exactly. An event read before the reporter's
coroutine saw its response counts as a delay of 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from benchmarks.client import TABLE, Client, Request, say
from benchmarks.ingest_load import IngestResult
from benchmarks.stats import Latency

COLLECTION = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
# The event's type and its object's resourceVersion, without parsing 6 KB of JSON per line.
_EVENT = re.compile(rb'^\{"type":"(ADDED|MODIFIED|DELETED)".*?"resourceVersion":"(\d+)"')
_ERROR = b'{"type":"ERROR"'
_LIST_VERSION = re.compile(rb'"metadata":\{"resourceVersion":"(\d+)"')


@dataclass(frozen=True)
class ReadPlan:
    watchers: int = 20
    list_interval: float = 1.0  # seconds between two lists (JSON and Table take turns)
    gets_per_second: float = 10.0
    settle_seconds: float = 15.0  # after the last report, how long every event has to arrive


@dataclass
class ReadFigures:
    name: str
    request: str
    latencies: list[float] = field(default_factory=list)
    response_bytes: int = 0  # of the last response
    errors: int = 0

    @property
    def latency(self) -> Latency:
        return Latency.of(self.latencies)


@dataclass(frozen=True)
class WatchFigures:
    watchers: int
    events_expected: int  # reports answered 200 while the watchers were attached, per watcher
    delay: Latency  # over every (watcher, event) pair received
    received_share: float  # of the expected (watcher, event) pairs
    complete_watchers: int


class _Watcher:
    def __init__(self) -> None:
        self.received: dict[str, float] = {}  # resourceVersion -> loop time read
        self.connected = asyncio.Event()

    async def run(self, client: Client, path: str) -> None:
        loop = asyncio.get_running_loop()
        async with client.session.get(path, headers={"Accept": "application/json"},
                                      timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)) as response:
            if response.status != 200:
                raise RuntimeError(f"watch {path}: {response.status} {(await response.read())[:300]!r}")
            self.connected.set()
            async for line in response.content:
                read_at = loop.time()
                if (match := _EVENT.match(line)) is not None:
                    self.received[match.group(2).decode()] = read_at
                elif line.startswith(_ERROR):
                    raise RuntimeError(f"watch {path} ended: {line[:500]!r}")
        # The server closes a watcher that falls behind without an error event: events would be
        # missing from the figures, so the measurement fails instead.
        raise RuntimeError(f"watch {path} ended before the measurement did (a watcher that fell behind is closed)")


async def timed(client: Client, figures: ReadFigures, request: Request) -> None:
    started = time.perf_counter()
    status, body = await client.send(request)
    figures.latencies.append(time.perf_counter() - started)
    figures.response_bytes = len(body)
    figures.errors += status != 200


async def _every(interval: float, until: asyncio.Event, action: Callable[[int], Awaitable[None]]) -> None:
    """Run action(0), action(1), … one at a time, starting one every `interval` seconds (or when
    the previous one ends, if it took longer)."""
    loop = asyncio.get_running_loop()
    started, tick = loop.time(), 0
    while not until.is_set():
        await action(tick)
        tick += 1
        delay = started + tick * interval - loop.time()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), delay)


def list_version(body: bytes) -> str:
    match = _LIST_VERSION.search(body, 0, 400)
    if match is None:
        raise RuntimeError(f"no resourceVersion in the list: {body[:300]!r}")
    return match.group(1).decode()


async def measure(reader: Client, nodes: list[str], plan: ReadPlan,
                  ingest: Callable[[Callable[[int, bytes, float], None]], Awaitable[IngestResult]],
                  resource_version_of: Callable[[bytes], str | None]) -> tuple[list[ReadFigures], WatchFigures,
                                                                                IngestResult]:
    """Attach the watchers, run `ingest` (given the callback for each 200 response) with the readers
    alongside, then wait for the events to arrive."""
    status, body = await reader.send(Request("GET", COLLECTION))
    if status != 200:
        raise RuntimeError(f"list: {status} {body[:300]!r}")
    path = f"{COLLECTION}?watch=true&allowWatchBookmarks=true&resourceVersion={list_version(body)}"
    watch_client = Client(reader.endpoint, concurrency=max(plan.watchers, 1))
    watchers = [_Watcher() for _ in range(plan.watchers)]
    tasks = [asyncio.create_task(w.run(watch_client, path)) for w in watchers]
    lists = [ReadFigures("list, JSON", COLLECTION), ReadFigures("list, Table", f"{COLLECTION} (as=Table)")]
    gets = ReadFigures("get one", f"{COLLECTION}/NODE")
    written: dict[str, float] = {}

    def on_response(node: int, body: bytes, finished: float) -> None:
        rv = resource_version_of(body)
        if rv is not None:
            written[rv] = finished

    stop = asyncio.Event()
    pick = random.Random(7)
    readers = [
        asyncio.create_task(_every(plan.list_interval, stop, lambda tick: timed(
            reader, lists[tick % 2], Request("GET", COLLECTION, accept=TABLE if tick % 2 else "application/json")))),
        asyncio.create_task(_every(1 / plan.gets_per_second, stop, lambda tick: timed(
            reader, gets, Request("GET", f"{COLLECTION}/{pick.choice(nodes)}")))),
    ]
    try:
        await asyncio.wait_for(asyncio.gather(*(w.connected.wait() for w in watchers)), 60)
        say(f"reads: {plan.watchers} watchers attached; lists every {plan.list_interval:g} s, "
            f"{plan.gets_per_second:g} gets/s")
        result = await ingest(on_response)
        stop.set()
        await asyncio.gather(*readers)
        await _settle(watchers, tasks, set(written), plan.settle_seconds)
    finally:
        stop.set()
        for task in [*tasks, *readers]:
            task.cancel()
        await asyncio.gather(*tasks, *readers, return_exceptions=True)
        await watch_client.close()
    return [*lists, gets], _watch_figures(watchers, written), result


async def _settle(watchers: list[_Watcher], tasks: list[asyncio.Task[None]], expected: set[str],
                  timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
        if failed:
            raise failed[0].exception() or RuntimeError("a watcher failed")
        if all(expected <= w.received.keys() for w in watchers):
            return
        await asyncio.sleep(0.1)
    say(f"reads: not every watcher had every event {timeout:.0f} s after the last report")


def _watch_figures(watchers: list[_Watcher], written: dict[str, float]) -> WatchFigures:
    delays = [max(w.received[rv] - at, 0.0) for w in watchers for rv, at in written.items() if rv in w.received]
    expected = len(written) * len(watchers)
    return WatchFigures(len(watchers), len(written), Latency.of(delays),
                        len(delays) / expected if expected else 1.0,
                        sum(1 for w in watchers if written.keys() <= w.received.keys()))
