"""Custom metric samples on their way to the leader: the bounded buffer, the batches, the sender.

Every scrape interval the agent adds its samples (from `scrape`, or `synthetic` for simulated
nodes) to a `SampleBuffer`, and the `SampleSender` PUTs all it holds as MetricSampleBatch bodies
to `nodemetrics/{node}/samples` over the reports' `Delivery`. A failed batch's samples go back
into the buffer, ahead of newer ones, and are retried with backoff and jitter. The buffer keeps
the newest `max_samples_per_series` per series and at most `max_series` series (the rest dropped
and counted); bodies stay below 1 MiB. A batch refused as invalid is dropped. A leader change
wakes the sender at once.

The limits, and why: docs/metrics-apis.md#scraping-pods
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.delivery import Delivery, DeliveryFailed, run_checks
from colocation.agent.leader_locator import Leader
from colocation.kube import permissions
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

_SAMPLES = permissions.declared(permissions.AGENT_API_CALLS, permissions.ApiCall(
    group=permissions.METRICS_GROUP, resource="nodemetrics", verb="update", namespace=None, subresource="samples"))

API_VERSION = f"{permissions.METRICS_GROUP}/v1alpha1"
MAX_SAMPLES_PER_SERIES = 120
MAX_SERIES_PER_BATCH = 20_000
MAX_BATCH_BYTES = 1_000_000  # under the leader's 1 MiB, with room for the envelope
MAX_METRIC_NAME = 200
MAX_LABELS = 32
MAX_LABEL_VALUE = 1024
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# A refusal of the batch itself: the same body can never be accepted.
_REFUSED = frozenset({"http-400", "http-413", "http-422"})


@dataclass(frozen=True, slots=True)
class SeriesKey:
    """One series: the Prometheus sample name, its labels (sorted), and its pod (None: the node)."""

    metric: str
    labels: tuple[tuple[str, str], ...] = ()
    pod: tuple[str, str] | None = None  # (namespace, name)


class MetricSample(NamedTuple):
    key: SeriesKey
    timestamp: float  # unix seconds
    value: float


def invalid_reason(key: SeriesKey) -> str | None:
    """Why the leader would refuse this series (the contract's limits), or None."""
    if len(key.metric) > MAX_METRIC_NAME or not _METRIC_NAME.fullmatch(key.metric):
        return f"metric name {key.metric[:MAX_METRIC_NAME]!r} is not a Prometheus name of at most 200 characters"
    if len(key.labels) > MAX_LABELS:
        return f"{len(key.labels)} labels, at most {MAX_LABELS} allowed"
    for name, value in key.labels:
        if not _LABEL_NAME.fullmatch(name):
            return f"label name {name!r} is not a Prometheus label name"
        if len(value) > MAX_LABEL_VALUE:
            return f"label {name} is longer than {MAX_LABEL_VALUE} characters"
    return None


Held = dict[SeriesKey, deque[tuple[float, float]]]
DropCounter = Callable[[str, int], None]


class SampleBuffer:
    """Samples not yet accepted by the leader, per series, oldest first, bounded (module docstring)."""

    def __init__(self, *, max_samples_per_series: int = MAX_SAMPLES_PER_SERIES, max_series: int = MAX_SERIES_PER_BATCH,
                 dropped: DropCounter | None = None) -> None:
        self.max_samples_per_series = max_samples_per_series
        self.max_series = max_series
        self._dropped = dropped or (lambda reason, count: None)
        self._held: Held = {}
        self.samples = 0

    def __len__(self) -> int:
        return self.samples

    def add(self, sample: MetricSample) -> bool:
        """Hold `sample`; False (and counted) when it is dropped instead."""
        if not math.isfinite(sample.value):
            self._dropped("non-finite", 1)
            return False
        series = self._held.get(sample.key)
        if series is None:
            if invalid_reason(sample.key) is not None:
                self._dropped("invalid", 1)
                return False
            if len(self._held) >= self.max_series:
                self._dropped("node-series-limit", 1)
                return False
            series = self._held[sample.key] = deque()
        if len(series) >= self.max_samples_per_series:
            series.popleft()
            self._dropped("buffer-full", 1)
            self.samples -= 1
        series.append((sample.timestamp, sample.value))
        self.samples += 1
        return True

    def take(self) -> Held:
        """Everything held, leaving the buffer empty (give back what was not accepted with `put_back`)."""
        held, self._held, self.samples = self._held, {}, 0
        return held

    def put_back(self, unsent: Held) -> None:
        """Return samples that were not accepted: ahead of those added since, within the bounds."""
        newer, self._held, self.samples = self._held, {}, 0
        for source in (unsent, newer):
            for key, points in source.items():
                for timestamp, value in points:
                    self.add(MetricSample(key, timestamp, value))


def _series_json(key: SeriesKey, points: Iterable[tuple[float, float]]) -> bytes:
    series: dict[str, object] = {"metric": key.metric, "labels": dict(key.labels)}
    if key.pod is not None:
        series["pod"] = {"namespace": key.pod[0], "name": key.pod[1]}
    series["samples"] = [{"timestamp": timestamp, "value": value} for timestamp, value in points]
    return orjson.dumps(series)


def batch_bodies(node: str, held: Mapping[SeriesKey, Sequence[tuple[float, float]]], *, sent_at: float,
                 max_bytes: int = MAX_BATCH_BYTES,
                 max_series: int = MAX_SERIES_PER_BATCH) -> list[tuple[bytes, list[SeriesKey]]]:
    """MetricSampleBatch bodies holding every series in `held`, each under `max_bytes` and
    `max_series`; with the series each one carries. `sent_at` (our clock now) lets the leader put
    the samples' times on its own clock."""
    head = orjson.dumps({"apiVersion": API_VERSION, "kind": "MetricSampleBatch", "node": node,
                         "sentTime": sent_at})[:-1] + b',"series":['
    bodies: list[tuple[bytes, list[SeriesKey]]] = []
    parts: list[bytes] = []
    keys: list[SeriesKey] = []
    size = len(head) + 2

    def close() -> None:
        bodies.append((head + b",".join(parts) + b"]}", list(keys)))
        parts.clear()
        keys.clear()

    for key, points in held.items():
        part = _series_json(key, points)
        if parts and (size + len(part) + 1 > max_bytes or len(parts) >= max_series):
            close()
            size = len(head) + 2
        parts.append(part)
        keys.append(key)
        size += len(part) + 1
    if parts:
        close()
    return bodies


@dataclass(frozen=True, kw_only=True)
class SendOptions:
    interval: float = 5.0  # the scrape interval: a batch follows every scrape
    request_timeout: float = 5.0
    retry_initial: float = 1.0
    retry_maximum: float = 30.0


class SampleSender:
    def __init__(self, node: str, delivery: Delivery, buffer: SampleBuffer, *, options: SendOptions | None = None,
                 metrics: AgentMetrics | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, rng: random.Random | None = None) -> None:
        self.node = node
        self.delivery = delivery
        self.locator = delivery.locator
        self.buffer = buffer
        self.options = options or SendOptions()
        self.metrics = metrics or AgentMetrics()
        self.path = f"/apis/{_SAMPLES.group}/v1alpha1/{_SAMPLES.resource}/{node}/{_SAMPLES.subresource}"
        self.delivered_to: str | None = None  # the leader identity the last accepted batch reached
        self._clock = clock
        self._wall = wall  # the clock the scraper stamps samples with
        self._retry_at = 0.0  # monotonic; nudges before it wait for the backoff
        self._backoff = Backoff(min(self.options.retry_initial, self.options.retry_maximum),
                                self.options.retry_maximum, jitter=0.5, rng=rng)
        self._wake = asyncio.Event()
        self.locator.subscribe(self._leader_changed)

    def nudge(self) -> None:
        """New samples are held: send them now, unless a failure's backoff is still running."""
        if self._clock() >= self._retry_at:
            self._wake.set()

    def _leader_changed(self, leader: Leader | None) -> None:
        # Where every replica takes batches (--store nats), a new leader changes nothing here.
        if leader is not None and not leader.reports_anywhere and leader.identity != self.delivered_to \
                and len(self.buffer):
            self._retry_at = 0.0  # the backoff was for the old leader
            self._wake.set()

    def _failed(self, reason: str) -> None:
        self.metrics.sample_batches_failed.labels(reason).inc()

    async def check(self) -> float:
        """Send every sample held; the seconds until the next check (unless nudged sooner)."""
        if not len(self.buffer):
            return 2 * self.options.interval  # the next scrape nudges
        if not self.locator.read_once:
            await self.locator.refresh()
        held = self.buffer.take()
        bodies = batch_bodies(self.node, held, sent_at=self._wall())
        for position, (body, keys) in enumerate(bodies):
            started = self._clock()
            try:
                route, leader = await self.delivery.put(self.path, body, self._failed, any_replica=True)
            except DeliveryFailed as failure:
                if failure.reason in _REFUSED:
                    dropped = sum(len(held[key]) for key in keys)
                    self.metrics.custom_samples_dropped.labels("refused").inc(dropped)
                    log.error("the leader refused a sample batch; its samples are dropped",
                              extra={"node": self.node, "error": str(failure), "samples": dropped})
                    continue
                self.buffer.put_back({key: held[key] for _, unsent in bodies[position:] for key in unsent})
                delay = self._backoff.next_delay()
                self._retry_at = self._clock() + delay
                log.warning("sending samples failed, retrying", extra={
                    "node": self.node, "error": str(failure), "retry_in": round(delay, 2),
                    "held": len(self.buffer)})
                return delay
            sent = sum(len(held[key]) for key in keys)
            self.metrics.sample_batches_sent.labels(route).inc()
            self.metrics.sample_batch_duration.observe(self._clock() - started)
            self.metrics.custom_samples_sent.inc(sent)
            self.delivered_to = leader
            log.debug("samples sent", extra={"node": self.node, "route": route, "samples": sent,
                                             "series": len(keys)})
        self._backoff.reset()
        self._retry_at = 0.0
        return 2 * self.options.interval

    async def run(self) -> None:
        await run_checks(self.check, self._wake)


# Takes one round of samples: every annotated pod scraped, or a simulated node's synthetic series.
SampleSource = Callable[[], Awaitable[Iterable[MetricSample]]]


class CustomMetrics:
    """One node's custom metrics: take samples every interval, hold them, send them (two tasks)."""

    def __init__(self, source: SampleSource, sender: SampleSender, metrics: AgentMetrics) -> None:
        self.source = source
        self.sender = sender
        self.buffer = sender.buffer
        self.metrics = metrics

    async def take_once(self) -> int:
        """One round: the samples kept."""
        kept = sum(self.buffer.add(sample) for sample in await self.source())
        self.metrics.custom_samples_scraped.inc(kept)
        self.sender.nudge()
        return kept

    async def _take_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.sender.options.interval
        next_at = loop.time()
        while True:
            try:
                await self.take_once()
            except Exception:  # a bug in one round must not end custom metrics
                log.exception("taking custom metric samples failed", extra={"node": self.sender.node})
            # A fixed rate; after a stall, skip the missed rounds instead of bursting to catch up.
            next_at = max(next_at + interval, loop.time())
            await asyncio.sleep(next_at - loop.time())

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._take_loop(), name=f"custom-metrics@{self.sender.node}"),
                 asyncio.create_task(self.sender.run(), name=f"samples@{self.sender.node}")]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*tasks, return_exceptions=True)
