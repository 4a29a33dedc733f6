"""The figures of the operator ingest benchmark, kept per cluster size in benchmarks/ingest_results.json.

A run replaces the sizes it measured and keeps the others with the command and date they were
measured by, so the 20,000-node figures (run by hand: they take longer than `make bench` may)
stay in BENCHMARKS.md next to those of the default run, each labelled with its own command.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.ingest_load import IngestResult
from benchmarks.stats import Latency

TARGET_RATE = 3000.0  # reports/s on one core
TARGET_SHARE = 0.40  # of the bare server's rate
TARGET_BYTES_PER_NODE = 40 * 1024
# A load client this busy against the bare server may be what limits it: the bare rate is then a
# floor of its ceiling, and a share of it that meets the target proves nothing ("inconclusive").
CLIENT_BOUND = 0.85
INCONCLUSIVE = None  # a verdict of targets_met(): neither met nor missed
METRICS_SERVER_BYTES_PER_NODE = 2 * 1024 * 1024  # metrics-server's sizing guidance


@dataclass(frozen=True)
class PhaseFigures:
    name: str
    count: int
    seconds: float
    rate: float
    latency: Latency
    errors: int
    first_error: str
    server_cpu_per_report: float  # seconds of the server process's CPU per report
    server_busy: float  # server CPU / wall time (1.0: one core)
    client_busy: float
    apiserver_cpu_per_report: float = 0.0  # the sandbox's CPU (TokenReviews, SubjectAccessReviews)
    # The kernel's part of server_cpu_per_report (system time; NaN when not measured).
    server_system_cpu_per_report: float = math.nan

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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ReadSummary:
    name: str
    request: str
    latency: Latency
    response_bytes: int
    errors: int


@dataclass(frozen=True)
class WatchSummary:
    watchers: int
    events: int
    delay: Latency
    received_share: float
    complete_watchers: int


@dataclass
class SizeReport:
    nodes: int
    pods_per_node: int
    body_bytes: float
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


# ---- persistence ---------------------------------------------------------------------------------

def _latency(raw: dict[str, Any]) -> Latency:
    return Latency(**raw)


def _phase(raw: dict[str, Any] | None) -> PhaseFigures | None:
    return None if raw is None else PhaseFigures(**{**raw, "latency": _latency(raw["latency"])})


def _read(raw: dict[str, Any]) -> ReadSummary:
    return ReadSummary(**{**raw, "latency": _latency(raw["latency"])})


def from_json(raw: dict[str, Any]) -> SizeReport:
    report = SizeReport(**{k: v for k, v in raw.items() if k in {f.name for f in dataclasses.fields(SizeReport)}})
    for name in ("load", "ingest", "baseline", "read_ingest"):
        setattr(report, name, _phase(raw.get(name)))
    report.memory = MemoryFigures(**raw["memory"]) if raw.get("memory") else None
    report.reads = [_read(r) for r in raw.get("reads", [])]
    report.baseline_reads = [_read(r) for r in raw.get("baseline_reads", [])]
    watch = raw.get("watch")
    report.watch = WatchSummary(**{**watch, "delay": _latency(watch["delay"])}) if watch else None
    report.profile = [(str(a), float(b)) for a, b in raw.get("profile", [])]
    report.hottest = [(str(a), float(b)) for a, b in raw.get("hottest", [])]
    return report


def load_all(path: Path) -> dict[int, SizeReport]:
    if not path.exists():
        return {}
    return {int(key): from_json(value) for key, value in json.loads(path.read_text()).items()}


def save_all(path: Path, reports: dict[int, SizeReport]) -> None:
    document = {str(nodes): dataclasses.asdict(reports[nodes]) for nodes in sorted(reports)}
    path.write_text(json.dumps(document, indent=1, allow_nan=True) + "\n")
