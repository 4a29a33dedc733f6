"""Agents' reports as load: every node with its own token, over one keep-alive connection pool.

Two shapes of load. Closed loop (`rate=None`): `concurrency` requests always in flight, as fast
as the server answers, for the throughput it sustains. Paced: reports start on a fixed schedule
of `rate` per second (with at most `concurrency` in flight), as a fleet of agents reporting
every few seconds sends them, for reads and watches measured against a steady write load.
Nodes report round-robin, so each one's reports are spread out as a real agent's are.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from benchmarks.client import Tally
from benchmarks.ingest_reports import Reports
from colocation.apimachinery.tables import metadata_only_accept

REPORT_PATH = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{node}/status"
_RESOURCE_VERSION = re.compile(rb'"resourceVersion":"(\d+)"')


@dataclass
class IngestResult(Tally):
    """What one phase of reports measured (seconds; client CPU of this process)."""

    name: str
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    first_error: str = ""
    elapsed: float = 0.0
    client_cpu: float = 0.0
    request_bytes: int = 0

    @property
    def count(self) -> int:  # type: ignore[override]  # one latency per answered report
        return len(self.latencies)


def resource_version_of(body: bytes) -> str | None:
    """The object's resourceVersion (the first one in a body whose metadata comes first)."""
    match = _RESOURCE_VERSION.search(body, 0, 4096)
    return match.group(1).decode() if match else None


class ReportSender:
    """PUTs of NodeMetric status to one server, each node authenticated with its own token."""

    def __init__(self, url: str, tls: ssl.SSLContext, reports: Reports, tokens: list[str], *,
                 concurrency: int = 64, timeout: float = 30.0) -> None:
        self.reports = reports
        self.concurrency = concurrency
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.paths = [REPORT_PATH.format(node=node) for node in reports.nodes]
        # As the agents ask: the answer is the report's metadata, not the object back.
        self.headers = [{"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "Accept": metadata_only_accept()} for token in tokens]
        self.session = aiohttp.ClientSession(
            url, auto_decompress=False, skip_auto_headers=("Accept-Encoding", "User-Agent"),
            connector=aiohttp.TCPConnector(ssl=tls, limit=concurrency, keepalive_timeout=300))
        self._next_node = 0

    async def close(self) -> None:
        await self.session.close()

    async def send(self, node_index: int) -> tuple[int, bytes]:
        body = self.reports.next_body(node_index)
        async with self.session.put(self.paths[node_index], data=body, headers=self.headers[node_index],
                                    timeout=self.timeout) as response:
            return response.status, await response.read()

    async def run(self, name: str, *, seconds: float | None = None, count: int | None = None,
                  rate: float | None = None, on_response: Callable[[int, bytes, float], None] | None = None,
                  progress: Callable[[str], None] | None = None, progress_every: float = 10.0,
                  start: int | None = None, only: int | None = None) -> IngestResult:
        """Send reports until `seconds` have passed or `count` were sent (the first of the two).

        Nodes take turns from where the previous run stopped (or node `start`), among all of them
        or only the first `only`.
        """
        if seconds is None and count is None:
            raise ValueError("give seconds, count or both")
        result = IngestResult(name)
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + seconds if seconds is not None else float("inf")
        limit = count if count is not None else 2**62
        issued = 0
        nodes = only or len(self.paths)
        if start is not None:
            self._next_node = start

        async def worker() -> None:
            nonlocal issued
            while issued < limit:
                slot = issued
                issued += 1
                if rate is not None:
                    delay = started + slot / rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if loop.time() >= deadline:
                    return
                node = self._next_node % nodes
                self._next_node = (node + 1) % len(self.paths)
                begun = loop.time()
                status, body = await self.send(node)
                finished = loop.time()
                result.latencies.append(finished - begun)
                result.statuses[status] += 1
                if status >= 300 and not result.first_error:
                    result.first_error = f"{self.paths[node]}: {status} {body[:300]!r}"
                if on_response is not None and status == 200:
                    on_response(node, body, finished)

        async def report() -> None:
            while progress is not None:
                await asyncio.sleep(progress_every)
                done = len(result.latencies)
                progress(f"{name}: {done:,} reports ({done / (loop.time() - started):,.0f}/s), "
                         f"{result.errors:,} errors")

        cpu_started = time.process_time()
        reporter = asyncio.create_task(report())
        try:
            await asyncio.gather(*(worker() for _ in range(min(self.concurrency, limit))))
        finally:
            reporter.cancel()
        result.elapsed = loop.time() - started
        result.client_cpu = time.process_time() - cpu_started
        return result
