"""The figures of the operator ingest benchmark, kept per cluster size in benchmarks/ingest_results.json.

A run replaces the sizes it measured and keeps the others with the command and date they were
measured by, so the 20,000-node figures (run by hand: they take longer than `make bench` may)
stay in BENCHMARKS.md next to those of the default run, each labelled with its own command.
The figures are pydantic dataclasses, saved under these names (`SizeReports`; NaN as null). Here
too: the in-process stage timings of benchmarks.ingest_stages, kept per run label in
benchmarks/ingest_stages.json (`StageRuns`).
"""

from __future__ import annotations

import math
from dataclasses import field
from pathlib import Path

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from benchmarks.ingest_load import IngestResult
from benchmarks.results import KeyedRecords, NanFloat, Record
from benchmarks.stats import Latency

TARGET_RATE = 3000.0  # reports/s on one core
TARGET_SHARE = 0.40  # of the bare server's rate
TARGET_BYTES_PER_NODE = 40 * 1024
# A load client this busy against the bare server may be what limits it: the bare rate is then a
# floor of its ceiling, and a share of it that meets the target proves nothing ("inconclusive").
CLIENT_BOUND = 0.85
INCONCLUSIVE = None  # a verdict of targets_met(): neither met nor missed
METRICS_SERVER_BYTES_PER_NODE = 2 * 1024 * 1024  # metrics-server's sizing guidance
SAVED = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=SAVED)
class PhaseFigures:
    name: str
    count: int
    seconds: NanFloat
    rate: NanFloat
    latency: Latency
    errors: int
    first_error: str
    server_cpu_per_report: NanFloat  # seconds of the server process's CPU per report
    server_busy: NanFloat  # server CPU / wall time (1.0: one core)
    client_busy: NanFloat
    apiserver_cpu_per_report: NanFloat = 0.0  # the sandbox's CPU (TokenReviews, SubjectAccessReviews)
    # The kernel's part of server_cpu_per_report (system time; NaN when not measured).
    server_system_cpu_per_report: NanFloat = math.nan

    @classmethod
    def of(cls, result: IngestResult, server_cpu: float, apiserver_cpu: float = 0.0, *,
           server_system_cpu: float = math.nan) -> PhaseFigures:
        n, wall = max(result.count, 1), max(result.elapsed, 1e-9)
        return cls(result.name, result.count, result.elapsed, result.rate, Latency.of(result.latencies),
                   result.errors, result.first_error, server_cpu / n, server_cpu / wall, result.client_cpu / wall,
                   apiserver_cpu / n, server_system_cpu / n)

    @property
    def one_core_rate(self) -> float:
        """Reports per second one fully busy core would take at this CPU cost per report."""
        return 1 / self.server_cpu_per_report if self.server_cpu_per_report else 0.0


@dataclass(frozen=True, config=SAVED)
class MemoryFigures:
    """RSS of the leader (bytes) at each step; per node figures divide by the node count."""

    empty: int  # serving, no Nodes
    nodes_known: int  # the Node informer holds every Node
    warm: int  # after the first reports of `warm_nodes` nodes, concurrently (fixed costs of serving)
    loaded: int  # after one report from every node
    after_ingest: int  # the event window full of events
    peak: int  # VmHWM at the end (lists and Tables make large transient responses)
    nodes: int
    warm_nodes: int

    @property
    def per_node(self) -> float:
        """Memory per node: the Node it knows and its latest report (fixed costs of serving excluded)."""
        return (self.nodes_known - self.empty) / self.nodes + (self.loaded - self.warm) / self._reported

    @property
    def per_node_steady(self) -> float:
        """The same once sustained ingest has filled the watch event window (a fixed 10,000 events)."""
        return (self.nodes_known - self.empty) / self.nodes + (self.after_ingest - self.warm) / self._reported

    @property
    def _reported(self) -> int:
        return max(self.nodes - self.warm_nodes, 1)


@dataclass(frozen=True, config=SAVED)
class ReadSummary:
    name: str
    request: str
    latency: Latency
    response_bytes: int
    errors: int


@dataclass(frozen=True, config=SAVED)
class WatchSummary:
    watchers: int
    events: int
    delay: Latency
    received_share: NanFloat
    complete_watchers: int


@dataclass(config=SAVED)
class SizeReport:
    nodes: int
    pods_per_node: int
    body_bytes: NanFloat
    command: str = ""
    date: str = ""
    machine: str = ""
    # /proc/loadavg (1, 5, 15 minutes) as the size's run began and ended: the machine may be shared.
    load_average: str = ""
    setup_seconds: float = 0.0
    load: PhaseFigures | None = None  # every node's first report (nothing cached yet)
    ingest: PhaseFigures | None = None
    baseline: PhaseFigures | None = None
    memory: MemoryFigures | None = None
    read_ingest: PhaseFigures | None = None  # the paced reports during the reads
    reads: list[ReadSummary] = field(default_factory=list)
    baseline_reads: list[ReadSummary] = field(default_factory=list)
    watch: WatchSummary | None = None
    profile: list[tuple[str, float]] = field(default_factory=list)  # activity, share of samples
    hottest: list[tuple[str, float]] = field(default_factory=list)
    profile_samples: int = 0

    @property
    def share_of_baseline(self) -> float:
        if self.ingest is None or self.baseline is None or not self.baseline.rate:
            return 0.0
        return self.ingest.rate / self.baseline.rate

    def targets_met(self) -> dict[str, bool | None]:
        """Each target measured: met (True), missed (False) or INCONCLUSIVE (None)."""
        met: dict[str, bool | None] = {}
        if self.ingest is not None:
            met["rate"] = self.ingest.rate >= TARGET_RATE
        if self.baseline is not None:
            share_met = self.share_of_baseline >= TARGET_SHARE
            # A missed share stands: the bare server's true ceiling is only higher.
            met["share"] = INCONCLUSIVE if share_met and self.baseline.client_busy > CLIENT_BOUND else share_met
        if self.memory is not None:
            met["memory"] = self.memory.per_node <= TARGET_BYTES_PER_NODE
        return met


class SizeReports(KeyedRecords[int, SizeReport]):
    """What benchmarks/ingest_results.json (and ingest_before.json) hold: the figures of each cluster size."""


class StageTimings(Record):
    """One stage's µs per report in each repeat, and their min / median / p90 / max."""

    samples_us: list[float]
    min: float
    median: float
    p90: float
    max: float


class StageRun(Record):
    """One run of benchmarks.ingest_stages: what it measured, on what, and each stage's timings."""

    label: str  # e.g. "before" (an older commit's code), "after" (this checkout)
    date: str
    commit: str
    python: str
    nodes: int
    pods: int
    repeats: int
    load_average: str  # as the run began and ended: the machine may be shared
    stages: dict[str, StageTimings]


class StageRuns(KeyedRecords[str, StageRun]):
    """What benchmarks/ingest_stages.json holds: each run under its label."""


def load_all(path: Path) -> dict[int, SizeReport]:
    return SizeReports.from_file(path).root if path.exists() else {}


def save_all(path: Path, reports: dict[int, SizeReport]) -> None:
    SizeReports({nodes: reports[nodes] for nodes in sorted(reports)}).to_file(path)
