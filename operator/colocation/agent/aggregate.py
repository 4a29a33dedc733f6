"""Time windows over samples, the way koordlet aggregates before it reports.

`node_usage`, `pod_usages` and `system_usage_avg` average the last `window_seconds`;
`aggregated` gives avg, p50, p90, p95 and p99 (nearest rank) of node cpu and memory for each
duration of the policy that the samples span at least half of; `recent` averages the last
`recent_seconds` with the window they really span. Windows are of the samples' wall-clock times,
(now - d, now]; a clock that steps back starts the history over. Unmeasured cpu values are left
out. Memory is bounded: `max_samples` for the node, and per pod what the longest window needs.

Why, and how it differs from koordlet: docs/agent.md#collection
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from colocation.agent.collector import HostApplicationSample, PodSample, Sample
from colocation.koordinator.collect_policy import DEFAULT_AGGREGATE_SECONDS, DEFAULT_DURATIONS

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
RECENT_WINDOW_SECONDS = 10  # metrics-server's scrape interval is 10-15 s; this follows it
MAX_RECENT_WINDOW_SECONDS = 15


@dataclass(frozen=True)
class Usage:
    cpu_millis: int
    memory_bytes: int


@dataclass(frozen=True, kw_only=True)
class AggregatedUsage:
    """Node usage statistics over the last `duration_seconds`."""

    duration_seconds: int
    avg: Usage
    p50: Usage
    p90: Usage
    p95: Usage
    p99: Usage


@dataclass(frozen=True)
class RecentUsage:
    """Usage over the short window: the node's, each pod's (by UID), and the seconds the samples span."""

    node: Usage
    pods: Mapping[str, Usage]
    window_seconds: int


def percentile(sorted_values: Sequence[int], p: int) -> int:
    """Nearest-rank percentile of already sorted values; p in 1..100. Raises on no values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in 1..100, not {p}")
    rank = max(1, (p * len(sorted_values) + 99) // 100)  # ceil(p·n/100) in integers: no float error
    return sorted_values[rank - 1]


def system_usage(node: Usage, pods: Iterable[Usage], host_applications: Iterable[Usage] = ()) -> Usage:
    """What the node uses outside pods and host applications: max(node - Σ pods - Σ apps, 0)."""
    cpu, memory = node.cpu_millis, node.memory_bytes
    for usage in (*pods, *host_applications):
        cpu -= usage.cpu_millis
        memory -= usage.memory_bytes
    return Usage(cpu_millis=max(cpu, 0), memory_bytes=max(memory, 0))


# Points are plain tuples, not objects: the garbage collector stops tracking a tuple of numbers,
# while it would walk every one of a class's instances on each full collection. A process of
# simulated agents holds up to 1,800 node points per node, and those walks stalled its event loop.
_Point = tuple[float, int | None, int]  # (timestamp, cpu millis or None when unmeasured, memory)
# (timestamp, cpu, memory, system cpu, system memory), None where unmeasured
_NodePoint = tuple[float, int | None, int | None, int | None, int | None]
_P = TypeVar("_P", _Point, _NodePoint)
_TIME: Final = 0
_CPU: Final = 1
_MEMORY: Final = 2
_SYSTEM_CPU: Final = 3
_SYSTEM_MEMORY: Final = 4


def _average(values: Sequence[int]) -> int:
    return round(sum(values) / len(values))


def _newest(ring: deque[_P], *, since: float, now: float) -> list[_P]:
    """The points of `ring` (oldest first) in (since, now], newest first; reads only those from the end."""
    found: list[_P] = []
    for point in reversed(ring):
        if point[0] <= since:
            break
        if point[0] <= now:
            found.append(point)
    return found


class Aggregator:
    """Keeps recent samples and answers koordlet's questions about them. Not thread-safe: one
    task feeds it and reads it (the agent's event loop)."""

    def __init__(
        self,
        window_seconds: int = DEFAULT_AGGREGATE_SECONDS,
        durations: Sequence[int] = DEFAULT_DURATIONS,
        *,
        sample_interval_seconds: float = 1.0,
        max_samples: int = 4096,
        recent_seconds: int = RECENT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if sample_interval_seconds <= 0 or max_samples < 2:
            raise ValueError("sample_interval_seconds must be positive and max_samples at least 2")
        if not 0 < recent_seconds <= MAX_RECENT_WINDOW_SECONDS:
            raise ValueError(f"recent_seconds must be in 1..{MAX_RECENT_WINDOW_SECONDS}, not {recent_seconds}")
        self.recent_seconds = recent_seconds
        self.sample_interval_seconds = sample_interval_seconds
        self.max_samples = max_samples
        self._clock = clock
        self._latest: Sample | None = None
        self._node: deque[_NodePoint] = deque()
        self._pods: dict[str, deque[_Point]] = {}
        self._apps: dict[str, deque[_Point]] = {}
        self.window_seconds = DEFAULT_AGGREGATE_SECONDS
        self.durations: tuple[int, ...] = DEFAULT_DURATIONS
        self.configure(window_seconds=window_seconds, durations=durations)

    def configure(self, *, window_seconds: int | None = None, durations: Sequence[int] | None = None) -> None:
        """Apply a new metricCollectPolicy; kept samples stay (rings are resized, oldest dropped)."""
        if window_seconds is not None:
            if window_seconds <= 0:
                raise ValueError(f"window_seconds must be positive, not {window_seconds}")
            self.window_seconds = window_seconds
        if durations is not None:
            if any(duration <= 0 for duration in durations):
                raise ValueError(f"durations must be positive, not {list(durations)}")
            self.durations = tuple(durations)
        longest = max((self.window_seconds, self.recent_seconds, *self.durations))
        self._node = deque(self._node, maxlen=self._capacity(longest))
        self._pods = {uid: deque(points, maxlen=self._pod_capacity) for uid, points in self._pods.items()}
        self._apps = {name: deque(points, maxlen=self._pod_capacity) for name, points in self._apps.items()}

    def _capacity(self, seconds: float) -> int:
        # Two spare slots: a window of d seconds can hold d/interval + 1 samples, plus jitter.
        return min(self.max_samples, math.ceil(seconds / self.sample_interval_seconds) + 2)

    @property
    def _pod_capacity(self) -> int:
        return self._capacity(self._pod_seconds)

    @property
    def _pod_seconds(self) -> int:
        """How long a pod's samples are kept: for the longer of the two windows that read them."""
        return max(self.window_seconds, self.recent_seconds)

    def __len__(self) -> int:
        return len(self._node)

    def add(self, sample: Sample) -> None:
        if self._latest is not None and sample.timestamp < self._latest.timestamp:
            self._node.clear()
            self._pods.clear()
            self._apps.clear()
        self._latest = sample
        at = sample.timestamp
        node_cpu = sample.node_cpu_millis if sample.node_cpu_measured else None
        node_memory = sample.node_memory_bytes if sample.node_memory_measured else None
        parts: tuple[PodSample | HostApplicationSample, ...] = (*sample.pods, *sample.host_applications)
        system_cpu = system_memory = None
        if node_cpu is not None and all(part.cpu_measured for part in parts):
            system_cpu = max(node_cpu - sum(part.cpu_millis for part in parts), 0)
        if node_memory is not None:
            system_memory = max(node_memory - sum(part.memory_bytes for part in parts), 0)
        self._node.append((at, node_cpu, node_memory, system_cpu, system_memory))
        for pod in sample.pods:
            self._ring(self._pods, pod.uid).append((at, pod.cpu_millis if pod.cpu_measured else None,
                                                     pod.memory_bytes))
        for app in sample.host_applications:
            self._ring(self._apps, app.name).append((at, app.cpu_millis if app.cpu_measured else None,
                                                      app.memory_bytes))
        self._forget_before(at)

    def _ring(self, rings: dict[str, deque[_Point]], key: str) -> deque[_Point]:
        ring = rings.get(key)
        if ring is None:
            ring = rings[key] = deque(maxlen=self._pod_capacity)
        return ring

    def _forget_before(self, now: float) -> None:
        horizon = now - max((self.window_seconds, self.recent_seconds, *self.durations))
        while self._node and self._node[0][_TIME] <= horizon:
            self._node.popleft()
        for rings in (self._pods, self._apps):
            for key in [key for key, ring in rings.items() if ring[-1][0] <= now - self._pod_seconds]:
                del rings[key]  # gone from the node for a whole window: nothing left to report

    def latest(self) -> Sample | None:
        return self._latest

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else now

    def _node_points(self, now: float, seconds: float) -> list[_NodePoint]:
        return [point for point in self._node if now - seconds < point[_TIME] <= now]

    def node_usage(self, now: float | None = None) -> Usage | None:
        """Average node usage over the window; None while the window lacks cpu or memory values."""
        points = self._node_points(self._now(now), self.window_seconds)
        return self._average_usage([p[_CPU] for p in points], [p[_MEMORY] for p in points])

    def system_usage(self, now: float | None = None) -> Usage | None:
        """Average over the window of each sample's system usage (koordlet's systemUsage)."""
        points = self._node_points(self._now(now), self.window_seconds)
        return self._average_usage([p[_SYSTEM_CPU] for p in points], [p[_SYSTEM_MEMORY] for p in points])

    @staticmethod
    def _average_usage(cpu: Sequence[int | None], memory: Sequence[int | None]) -> Usage | None:
        cpu_values = [value for value in cpu if value is not None]
        memory_values = [value for value in memory if value is not None]
        if not cpu_values or not memory_values:
            return None
        return Usage(cpu_millis=_average(cpu_values), memory_bytes=_average(memory_values))

    def pod_usages(self, now: float | None = None) -> Mapping[str, Usage]:
        """Pod UID → average usage over the window, for pods with a measured cpu value in it."""
        return self._ring_usages(self._pods, self._now(now))

    def host_application_usages(self, now: float | None = None) -> Mapping[str, Usage]:
        """Host application name → average usage over the window."""
        return self._ring_usages(self._apps, self._now(now))

    def _ring_usages(self, rings: Mapping[str, deque[_Point]], now: float) -> dict[str, Usage]:
        usages: dict[str, Usage] = {}
        for key, ring in rings.items():
            points = [point for point in ring if now - self.window_seconds < point[0] <= now]
            usage = self._average_usage([point[1] for point in points], [point[2] for point in points])
            if usage is not None:
                usages[key] = usage
        return usages

    def recent(self, now: float | None = None) -> RecentUsage | None:
        """Averages over (now - recent_seconds, now]; None while that lacks node cpu or memory.

        `window_seconds` is what the samples in it span (each cpu value is the rate over the
        interval before its sample), so a young agent says 3 s rather than claim the whole window.
        """
        at = self._now(now)
        since = at - self.recent_seconds
        points = _newest(self._node, since=since, now=at)
        node = self._average_usage([p[_CPU] for p in points], [p[_MEMORY] for p in points])
        if node is None:
            return None
        pods: dict[str, Usage] = {}
        for uid, ring in self._pods.items():
            pod_points = _newest(ring, since=since, now=at)
            usage = self._average_usage([p[_CPU] for p in pod_points], [p[_MEMORY] for p in pod_points])
            if usage is not None:
                pods[uid] = usage
        span = points[0][_TIME] - points[-1][_TIME] + self.sample_interval_seconds  # newest first
        return RecentUsage(node, pods, max(1, min(self.recent_seconds, round(span))))

    def aggregated(self, now: float | None = None) -> tuple[AggregatedUsage, ...]:
        """One entry per configured duration whose samples span at least half of it."""
        at = self._now(now)
        results: list[AggregatedUsage] = []
        for duration in self.durations:
            points = self._node_points(at, duration)
            if not points or points[-1][_TIME] - points[0][_TIME] < duration / 2:
                continue
            cpu = sorted(p[_CPU] for p in points if p[_CPU] is not None)
            memory = sorted(p[_MEMORY] for p in points if p[_MEMORY] is not None)
            if not cpu or not memory:
                continue
            stats = [Usage(percentile(cpu, p), percentile(memory, p)) for p in PERCENTILES]
            results.append(AggregatedUsage(duration_seconds=duration, avg=Usage(_average(cpu), _average(memory)),
                                           p50=stats[0], p90=stats[1], p95=stats[2], p99=stats[3]))
        return tuple(results)
