"""Scraping the node's annotated pods for custom metrics (Prometheus text format).

Every scrape interval the agent fetches `SCHEME://<status.podIP>:PORT/PATH` of each running pod
on its node that opts in with the `colocation.dev/*` annotations, a few at a time, each within a
timeout and at most `max_body_bytes`. A pod with wrong annotations is not scraped, logged once
and counted every round. prometheus_client parses the text; each sample keeps its name and
labels. Repeated, non-finite and over-the-limit samples are dropped and counted by reason.
Nothing about one pod stops the others or the agent.

The annotations and the rules: docs/metrics-apis.md#scraping-pods
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.samples import MetricSample, SeriesKey

log = logging.getLogger(__name__)

SCRAPE_ANNOTATION = "colocation.dev/scrape"
PORT_ANNOTATION = "colocation.dev/port"
PATH_ANNOTATION = "colocation.dev/path"
SCHEME_ANNOTATION = "colocation.dev/scheme"
DEFAULT_PATH = "/metrics"
# Prometheus text format only: prometheus_client's parser does not read OpenMetrics.
_ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


@dataclass(frozen=True, kw_only=True)
class ScrapeOptions:
    interval: float = 5.0  # 0: no custom metrics
    timeout: float = 3.0
    concurrency: int = 8
    max_series_per_pod: int = 500
    max_body_bytes: int = 1 << 20  # parsing is pure Python: about 0.4 s of cpu per MiB


@dataclass(frozen=True, kw_only=True)
class ScrapeTarget:
    """An annotated pod: where to scrape it, or `problem` saying why it cannot be."""

    namespace: str
    name: str
    pod_ip: str = ""
    port: int = 0
    path: str = DEFAULT_PATH
    scheme: str = "http"
    problem: str = ""

    @property
    def pod(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def url(self) -> str:
        host = f"[{self.pod_ip}]" if ":" in self.pod_ip else self.pod_ip
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def scrape_target(pod: Mapping[str, Any]) -> ScrapeTarget | None:
    """The pod's target when it is annotated for scraping, else None."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if annotations.get(SCRAPE_ANNOTATION) != "true":
        return None
    namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")
    pod_ip = str((pod.get("status") or {}).get("podIP") or "")
    path = str(annotations.get(PATH_ANNOTATION) or DEFAULT_PATH)
    scheme = str(annotations.get(SCHEME_ANNOTATION) or "http")
    raw_port = annotations.get(PORT_ANNOTATION)
    port = int(raw_port) if isinstance(raw_port, str) and raw_port.isascii() and raw_port.isdigit() else 0
    problem = ""
    if raw_port is None:
        problem = f"annotation {PORT_ANNOTATION} is missing"
    elif not 1 <= port <= 65535:
        problem = f"annotation {PORT_ANNOTATION}={raw_port!r} is not a port number (1-65535)"
    elif scheme not in ("http", "https"):
        problem = f"annotation {SCHEME_ANNOTATION}={scheme!r} is neither http nor https"
    elif not path.startswith("/"):
        problem = f"annotation {PATH_ANNOTATION}={path!r} does not start with /"
    return ScrapeTarget(namespace=namespace, name=name, pod_ip=pod_ip, port=port if not problem else 0, path=path,
                        scheme=scheme, problem=problem)


class ScrapeError(Exception):
    def __init__(self, result: str, message: str) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class Parsed:
    samples: list[MetricSample]
    dropped: Counter[str]
    stamped: dict[SeriesKey, float]  # the exposition's own timestamps, to compare with the next scrape's


def parse_exposition(text: str, pod: tuple[str, str] | None, scraped_at: float, *, max_series: int,
                     stamped_before: Mapping[SeriesKey, float] | None = None) -> Parsed:
    """The samples of a Prometheus text exposition; ScrapeError("bad-exposition") if it is not one.

    `stamped_before` is the previous scrape's `stamped`: a sample whose own timestamp did not move
    since then was already taken.
    """
    samples: list[MetricSample] = []
    dropped: Counter[str] = Counter()
    stamped: dict[SeriesKey, float] = {}
    before = stamped_before or {}
    series = 0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not math.isfinite(sample.value):
                    dropped["non-finite"] += 1
                    continue
                if series >= max_series:
                    dropped["series-limit"] += 1
                    continue
                series += 1
                key = SeriesKey(sample.name, tuple(sorted(sample.labels.items())), pod)
                if sample.timestamp is None:
                    samples.append(MetricSample(key, scraped_at, float(sample.value)))
                    continue
                timestamp = stamped[key] = float(sample.timestamp)
                if timestamp <= before.get(key, -math.inf):
                    dropped["repeated"] += 1
                else:
                    samples.append(MetricSample(key, timestamp, float(sample.value)))
    except (ValueError, IndexError, KeyError, TypeError) as error:  # what the parser raises on bad text
        raise ScrapeError("bad-exposition", f"not Prometheus text format: {error}") from None
    return Parsed(samples, dropped, stamped)


class PodScraper:
    """Scrapes the targets `targets()` names, all in one round; the source of a real agent's samples."""

    def __init__(self, session: aiohttp.ClientSession, targets: Callable[[], Iterable[ScrapeTarget]],
                 options: ScrapeOptions, *, metrics: AgentMetrics, node: str = "",
                 wall: Callable[[], float] = time.time) -> None:
        self.session = session
        self.targets = targets
        self.options = options
        self.metrics = metrics
        self.node = node
        self._wall = wall
        self._slots = asyncio.Semaphore(options.concurrency)
        self._logged: dict[tuple[str, str], str] = {}  # pod -> the last problem logged for it
        # pod -> {series: exposition timestamp} of its last scrape: explicit timestamps that did not move.
        self._stamped: dict[tuple[str, str], dict[SeriesKey, float]] = {}

    async def scrape_all(self) -> list[MetricSample]:
        targets = list(self.targets())
        current = {target.pod for target in targets}
        for gone in [pod for pod in self._stamped if pod not in current]:
            del self._stamped[gone]
        for gone in [pod for pod in self._logged if pod not in current]:
            del self._logged[gone]
        rounds = await asyncio.gather(*(self._scrape_counted(target) for target in targets))
        return [sample for samples in rounds for sample in samples]

    def _note(self, target: ScrapeTarget, result: str, problem: str) -> None:
        """Count the round's result; log a problem once, until it changes or goes away."""
        self.metrics.scrapes.labels(result).inc()
        if problem and self._logged.get(target.pod) != problem:
            log.warning("cannot scrape pod", extra={"node": self.node, "pod": "/".join(target.pod),
                                                    "result": result, "error": problem})
        if problem:
            self._logged[target.pod] = problem
        elif self._logged.pop(target.pod, None) is not None:
            log.info("scraping pod again", extra={"node": self.node, "pod": "/".join(target.pod)})

    async def _scrape_counted(self, target: ScrapeTarget) -> list[MetricSample]:
        if target.problem:
            self._note(target, "invalid-annotation", target.problem)
            return []
        if not target.pod_ip:
            self._note(target, "no-address", "the pod has no IP address yet")
            return []
        started = time.monotonic()
        try:
            async with self._slots:
                parsed = await self.scrape(target)
        except ScrapeError as error:
            self._note(target, error.result, str(error))
            return []
        self.metrics.scrape_duration.observe(time.monotonic() - started)
        self._note(target, "ok", "")
        for reason, count in parsed.dropped.items():
            self.metrics.custom_samples_dropped.labels(reason).inc(count)
        if parsed.dropped["series-limit"]:
            log.info("pod exposes more series than kept", extra={
                "node": self.node, "pod": "/".join(target.pod), "kept": self.options.max_series_per_pod,
                "dropped": parsed.dropped["series-limit"]})
        self._stamped[target.pod] = parsed.stamped
        return parsed.samples

    async def scrape(self, target: ScrapeTarget) -> Parsed:
        """Fetch and parse one target; ScrapeError with the result to count when that fails."""
        scraped_at = self._wall()
        try:
            async with self.session.get(target.url, headers={"Accept": _ACCEPT},
                                        ssl=target.scheme != "https",
                                        timeout=aiohttp.ClientTimeout(total=self.options.timeout)) as response:
                if response.status != 200:
                    raise ScrapeError("http-error", f"{target.url} answered HTTP {response.status}")
                body = await self._read(response, target)
        except TimeoutError:
            raise ScrapeError("timeout", f"{target.url}: no answer within {self.options.timeout} s") from None
        except aiohttp.ClientError as error:
            raise ScrapeError("unreachable", f"{target.url}: {error}") from None
        try:
            text = body.decode()
        except UnicodeDecodeError:
            raise ScrapeError("bad-exposition", f"{target.url}: the body is not UTF-8") from None
        # Parsing is cpu work proportional to the body: off the event loop, so reports and the
        # heartbeat are not held up by a large exposition.
        return await asyncio.to_thread(parse_exposition, text, target.pod, scraped_at,
                                       max_series=self.options.max_series_per_pod,
                                       stamped_before=self._stamped.get(target.pod))

    async def _read(self, response: aiohttp.ClientResponse, target: ScrapeTarget) -> bytes:
        limit = self.options.max_body_bytes
        if response.content_length is not None and response.content_length > limit:
            raise ScrapeError("too-large", f"{target.url}: {response.content_length} bytes, more than {limit}")
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > limit:
                raise ScrapeError("too-large", f"{target.url}: more than {limit} bytes")
        return bytes(body)
