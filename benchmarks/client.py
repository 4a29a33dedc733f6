"""An HTTPS client for load: keep-alive connections, bounded concurrency, a timeout on every request.

Requests are described by a function of their index, so a phase of 150,000 creates never holds
150,000 bodies in memory, and the baseline and the sandbox get byte-identical requests.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from colocation.apimachinery import certificates

JSON = "application/json"
STRATEGIC = "application/strategic-merge-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@dataclass(frozen=True)
class Endpoint:
    """Where a server is and how to trust and authenticate to it."""

    url: str
    ca_pem: bytes
    token: str = ""

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Endpoint:
        document = yaml.safe_load(path.read_text())
        context_name = document["current-context"]
        context = next(c["context"] for c in document["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in document["users"] if u["name"] == context["user"])
        return cls(cluster["server"], base64.b64decode(cluster["certificate-authority-data"]), user.get("token", ""))

    @classmethod
    def from_ca_file(cls, url: str, ca_path: Path) -> Endpoint:
        return cls(url, ca_path.read_bytes())

    def ssl_context(self) -> ssl.SSLContext:
        return certificates.ssl_client_context(self.ca_pem)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with the query string
    body: bytes | None = None
    content_type: str = JSON
    accept: str = JSON


class Tally:
    """Error count and rate of a phase; mixed into the dataclasses that record one."""

    count: int
    elapsed: float
    statuses: Counter[int]

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 300)

    @property
    def rate(self) -> float:
        return self.count / self.elapsed if self.elapsed else 0.0


@dataclass
class LoadResult(Tally):
    """What one phase of requests measured (seconds; client CPU of this process)."""

    name: str
    count: int = 0
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    first_error: str = ""
    request_bytes: int = 0
    response_bytes: int = 0
    client_cpu: float = 0.0
    server_cpu: float = 0.0


class Client:
    """One keep-alive session to an Endpoint; at most `concurrency` requests in flight."""

    def __init__(self, endpoint: Endpoint, *, concurrency: int = 48, timeout: float = 120.0) -> None:
        self.endpoint = endpoint
        self.concurrency = concurrency
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
        self.session = aiohttp.ClientSession(
            endpoint.url, headers=headers, auto_decompress=False, skip_auto_headers=("Accept-Encoding",),
            connector=aiohttp.TCPConnector(ssl=endpoint.ssl_context(), limit=concurrency, keepalive_timeout=300))

    async def close(self) -> None:
        await self.session.close()

    async def send(self, request: Request) -> tuple[int, bytes]:
        headers = {"Accept": request.accept}
        if request.body is not None:
            headers["Content-Type"] = request.content_type
        async with self.session.request(request.method, request.path, data=request.body, headers=headers,
                                        timeout=self.timeout) as response:
            return response.status, await response.read()

    async def json(self, request: Request) -> Any:
        import orjson

        status, body = await self.send(request)
        if status >= 300:
            raise RuntimeError(f"{request.method} {request.path}: {status} {body[:300]!r}")
        return orjson.loads(body)

    async def load(self, name: str, count: int, make: Callable[[int], Request], *,
                   on_response: Callable[[int, int, bytes, float], None] | None = None,
                   progress: Callable[[str], None] | None = None, progress_every: float = 10.0) -> LoadResult:
        """Send requests make(0) … make(count-1), `concurrency` at a time, measuring each."""
        result = LoadResult(name)
        next_index = 0
        loop = asyncio.get_running_loop()

        async def worker() -> None:
            nonlocal next_index
            while next_index < count:
                index = next_index
                next_index += 1
                request = make(index)
                started = loop.time()
                status, body = await self.send(request)
                finished = loop.time()
                result.latencies.append(finished - started)
                result.statuses[status] += 1
                result.request_bytes += len(request.body or b"")
                result.response_bytes += len(body)
                if status >= 300 and not result.first_error:
                    result.first_error = f"{request.method} {request.path}: {status} {body[:300]!r}"
                if on_response is not None:
                    on_response(index, status, body, finished)

        async def report() -> None:
            while True:
                await asyncio.sleep(progress_every)
                done = len(result.latencies)
                if progress is not None:
                    progress(f"{name}: {done:,}/{count:,} ({done / (loop.time() - started):,.0f}/s)")

        cpu_started, started = time.process_time(), loop.time()
        reporter = asyncio.create_task(report())
        try:
            await asyncio.gather(*(worker() for _ in range(min(self.concurrency, count))))
        finally:
            reporter.cancel()
        result.elapsed = loop.time() - started
        result.client_cpu = time.process_time() - cpu_started
        result.count = len(result.latencies)
        return result


def say(message: str) -> None:
    """A progress line (the default run takes minutes: show that it is moving)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stdout, flush=True)


async def sit_out(window: float, started: float, step: float, progress: Callable[[float], str]) -> None:
    """Wait out a measured window of `window` seconds begun at `started` (time.monotonic, which is
    also the event loop's clock), saying `progress(seconds elapsed)` every `step` seconds."""
    while (elapsed := time.monotonic() - started) < window:
        await asyncio.sleep(min(step, window - elapsed))  # the measured window itself
        say(progress(min(time.monotonic() - started, window)))
