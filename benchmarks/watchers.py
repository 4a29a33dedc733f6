"""Watch fan-out: N watchers of every pod while M updates land; delivery delay and completeness.

The delay of an event is the time from the writer receiving its response (which carries the
new resourceVersion) to a watcher reading the event with that resourceVersion. Both clocks are
this process's event loop, so they compare exactly. A watcher may read an event before the
writer's coroutine has processed the response; that counts as a delay of zero.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import orjson

from benchmarks.client import Client, Request, say
from benchmarks.stats import Latency

_SETTLE_SECONDS = 60.0  # how long after the last write every event must have arrived
# A watcher only needs each event's type and resourceVersion. Reading them without decoding the
# whole object keeps the client's CPU out of the delay measured (a pod has one resourceVersion).
_MODIFIED = re.compile(rb'^\{"type":"MODIFIED".*?"resourceVersion":"(\d+)"')
_ERROR = b'{"type":"ERROR"'


@dataclass(frozen=True)
class WatchFigures:
    watchers: int
    updates: int
    updates_per_second: float
    update_latency: Latency  # of the writes, while the watchers are attached
    delay: Latency  # write response → watcher receives the event
    complete_watchers: int  # watchers that received every event
    fewest_received: int  # events received by the watcher that got fewest
    early: int  # events a watcher read before the writer read the write's response
    server_cpu_per_update: float
    server_busy: float  # server CPU time / wall time while the updates ran (1.0: one core saturated)
    client_busy: float  # the same for this process (the writer and every watcher)


class _Watcher:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.received: dict[str, float] = {}  # resourceVersion -> time read
        self.complete = asyncio.Event()
        self.connected = asyncio.Event()

    async def run(self, client: Client, path: str, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        async with client.session.get(path, headers={"Accept": "application/json"},
                                      timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=30)) as response:
            if response.status != 200:
                raise RuntimeError(f"watch {path}: {response.status} {(await response.read())[:300]!r}")
            self.connected.set()
            async for line in response.content:
                read_at = loop.time()
                if (match := _MODIFIED.match(line)) is not None:
                    self.received[match.group(1).decode()] = read_at
                elif line.startswith(_ERROR):
                    raise RuntimeError(f"watch {path} ended: {line[:500]!r}")
                if len(self.received) >= self.expected:
                    self.complete.set()
                    return


async def measure_fan_out(client: Client, watchers: int, updates: int, make_update: Callable[[int], Request],
                          *, server_cpu: Callable[[], float] | None = None) -> WatchFigures:
    """Attach `watchers` to /api/v1/pods, send make_update(0…updates-1), measure their delivery."""
    start = await client.json(Request("GET", "/api/v1/pods?limit=1"))
    resource_version = start["metadata"]["resourceVersion"]
    timeout = 600.0
    path = (f"/api/v1/pods?watch=true&resourceVersion={resource_version}&allowWatchBookmarks=true"
            f"&timeoutSeconds={int(timeout)}")
    say(f"watch fan-out: {watchers} watchers, {updates:,} pod status updates")
    # Watch streams hold their connections: a session of their own leaves the writers' pool alone.
    watch_client = Client(client.endpoint, concurrency=watchers)
    streams = [_Watcher(updates) for _ in range(watchers)]
    tasks = [asyncio.create_task(w.run(watch_client, path, timeout)) for w in streams]
    try:
        await _wait_all([w.connected for w in streams], tasks, 60.0)
        written: dict[str, float] = {}

        def on_response(index: int, status: int, body: bytes, finished: float) -> None:
            if status == 200:
                written[orjson.loads(body)["metadata"]["resourceVersion"]] = finished

        cpu_before = server_cpu() if server_cpu else 0.0
        result = await client.load("watched updates", updates, make_update, on_response=on_response, progress=say)
        cpu_used = (server_cpu() - cpu_before) if server_cpu else 0.0
        if result.errors:
            raise RuntimeError(f"watched updates failed: {result.first_error}")
        try:
            await _wait_all([w.complete for w in streams], tasks, _SETTLE_SECONDS)
        except TimeoutError:
            say(f"watch fan-out: not every watcher received every event within {_SETTLE_SECONDS:.0f} s")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await watch_client.close()
    delays: list[float] = []
    early = 0
    for stream in streams:
        for rv, read_at in stream.received.items():
            if rv in written:
                early += read_at < written[rv]
                delays.append(max(read_at - written[rv], 0.0))
    expected = set(written)
    figures = WatchFigures(
        watchers, result.count, result.rate, Latency.of(result.latencies), Latency.of(delays),
        sum(1 for s in streams if expected <= s.received.keys()),
        min(len(expected & s.received.keys()) for s in streams), early, cpu_used / max(result.count, 1),
        cpu_used / result.elapsed if result.elapsed else 0.0,
        result.client_cpu / result.elapsed if result.elapsed else 0.0)
    say(f"watch fan-out: delay p50 {figures.delay.p50 * 1000:.1f} ms, p99 {figures.delay.p99 * 1000:.1f} ms, "
        f"max {figures.delay.max * 1000:.1f} ms; {figures.complete_watchers}/{watchers} watchers complete")
    return figures


async def _wait_all(events: list[asyncio.Event], tasks: list[asyncio.Task[None]], timeout: float) -> None:
    """Wait for every event, failing early (with its error) if a watcher stops with one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    waiters = {asyncio.create_task(event.wait()) for event in events}
    try:
        while waiters:
            running = {task for task in tasks if not task.done()}
            done, _ = await asyncio.wait(waiters | running, timeout=max(deadline - loop.time(), 0),
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise TimeoutError
            for task in done & running:
                if not task.cancelled() and (error := task.exception()) is not None:
                    raise error
            waiters -= done
    finally:
        for waiter in waiters:
            waiter.cancel()
