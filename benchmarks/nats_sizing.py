"""The nats-ingest suite's arithmetic: one configuration's window as saved, the per-unit costs derived from
the windows of one run, the sizing table projected from them and the verdicts (no I/O here).

Per-unit costs (µs of CPU, utime + stime; r = reports/s; C = replicas' CPU, in cores):

- evaluations: the leader's CPU x their share of a py-spy profile taken right after the window
  (`leader_scale.profile_shares`); out of the leader's CPU before anything below, and projected on their
  own as e, µs per node per second (they grow with the nodes, not with the reports). With evaluation
  shards, a replica pays a part of e for every node (health, the zones' guard: g) and the rest only for
  its shards' nodes (o = e - g). g / e is measured in process (`EvaluationSplit`, the reconciler of
  `benchmarks.leader_pods` holding no shard against holding every node), and applied to e;
- fixed: what a replica spends whatever the reports (informers, Lease, its announcements, idle fetches),
  F = half the value at r = 0 of the line through nats-2-small's and nats-2's C_sum; the line's slope
  is the marginal cost of a report with two replicas, w + a. At ~100 reports/s a replica's fixed
  cost is a large part of its CPU, so it is kept out of the per-report figures the sizing projects;
- a, a replica's CPU per write of another replica it applies: a follower probe (`python -m
  benchmarks.nats_ingest follow`) reads the stream beside the replicas, takes no report and applies
  every write: its CPU / writes. For comparison, the model of two configurations: two replicas each
  apply the other's writes, C_sum = r·w + r·a, so a = C_sum / r - C1 / r (nats-2 less nats-1, fixed
  costs in). a falls as the writes come faster (a fetch brings more of them at once), so the same
  probe also runs at several write rates in process (`nats_apply_rates`); the sizing takes a at each
  row's write rate from those points (interpolated over log rate; past the fastest, the fastest's);
- w, a replica's CPU per report it takes (the write, its acknowledgement, its own copy's apply): with
  one replica every report is its own, w1 = (C1 - F) / r (nats-1); with two, w2 = slope - a;
- two ingesting replicas vs one: w2 against w1 (a from the model would make them equal by
  construction: the probe's is measured apart);
- against the in-memory store, at the same node count and rate, fixed costs in on both sides: nats-1's
  C1 / r over the in-memory leader's CPU per report (memory-2), evaluations out of both;
- nats-server: the three servers' CPU per report with one and with two replicas; its own line (fixed
  and per report) through nats-2-small and nats-2; d, what one more reader adds per report: the probe
  window's servers' CPU less the main window's;
- custom metrics: a configuration with custom metrics on less the same without, replica by replica
  (leader with leader; the same node count and rate, so fixed costs cancel): extra CPU per sample
  accepted (by any replica), extra RSS per series; k, series per scraped pod: the series held over the
  scraped pods, floor(pods x the run's scraped share) on each simulated node (`scraped_pod_count`); the
  series hold the samples of the run so far, so the RSS a series has at the retention's end adds
  SAMPLE_BYTES for each sample more it will hold (the series store's two arrays of doubles); the sample
  stream's bytes per sample (NATS);
- memory per node: the busiest replica's and nats-server's RSS at nats-2-small and nats-2, the line
  through them; the NodeMetric stream's bytes per node from the servers' /jsz.

Sizing (`size`), for n nodes reporting every t s with a share p of their pods scraped (P pods per node,
k series per scraped pod as measured, every `scrape_interval` s): r = n / t reports/s, s = n·P·p·k /
`scrape_interval` samples/s; with R replicas each takes r / R reports and applies the others' r·(R-1)/R
writes; w is the larger of w1 and w2; the busiest replica's extra CPU per sample, c, is charged to every
replica (samples spread over the replicas: this overstates R > 2); the evaluations are shared in
S = SIZING_SHARDS shards (`--evaluation-shards`), and the busiest replica holds h = ceil(S / R) of them:

    busiest replica cores(R) = F + (r/R·w + r·(R-1)/R·a + s·c + n·g + n·o·h/S) / 1e6

R is the smallest count whose busiest replica is within CORE_LIMIT; none when even infinitely many
replicas would not do (F + r·a + s·c + n·g + n·o/S, what is left with infinitely many, reaches the
limit).
nats-server, in all: its fixed cores + r·(its slope + (R-2)·d) + s·(its CPU per sample), the busiest
server's share of it as measured; its memory, fixed + n x its RSS per node; the streams' bytes on each
server (3 replicas): n x the NodeMetric stream's per node + s x the retention x the sample stream's per
sample (the sample stream's own byte bound not applied). Replica memory: fixed + n x RSS per node +
series x bytes per series; a replica holding more series than --custom-metrics-max-series
(OPERATOR_MAX_SERIES by default) drops the rest. Everything in the table is projected from the run's
node count.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import ConfigDict, Field

from benchmarks.leader_scale_figures import (
    AGENTS_SATURATED,
    INCONCLUSIVE,
    MACHINE_SATURATED,
    MET,
    MISSED,
    REPORTS_BEHIND,
)
from benchmarks.results import NanFloat, Record
from colocation.agent.synthetic import scraped_pod_count
from colocation.jetstream.nodemetric_log import STREAM
from colocation.kube.permissions import MAX_EVALUATION_SHARDS
from colocation.manager.operator_config import OperatorConfig

MEMORY, NATS = "memory", "nats"
# The configurations, in the order they run; Spec.name is one of these.
MEMORY_2, NATS_1, NATS_2 = "memory-2", "nats-1", "nats-2"
NATS_2_CUSTOM, MEMORY_2_CUSTOM, NATS_2_SMALL = "nats-2-custom", "memory-2-custom", "nats-2-small"
CONFIG_NAMES = (MEMORY_2, NATS_1, NATS_2, NATS_2_CUSTOM, MEMORY_2_CUSTOM, NATS_2_SMALL)

RATIO_TARGET = 1.3  # a replica's CPU per report on NATS over the in-memory store's
TWO_VS_ONE_TARGET = 0.10  # per-report ingest cost with two ingesting replicas within this of one's
CORE_LIMIT = 1.0  # cores per replica
GOAL_NODES, GOAL_CADENCE, GOAL_REPLICAS, GOAL_SHARE = 100_000, 10.0, 8, 0.0
SIZING_NODES = (10_000, 25_000, 50_000, 100_000)
SIZING_CADENCES = (10.0, 60.0)
SIZING_SHARES = (0.0, 0.2)
SIZING_SHARDS = MAX_EVALUATION_SHARDS  # the sizing's --evaluation-shards
SAMPLE_BYTES = 2 * array("d").itemsize  # a held sample: its timestamp and value, each in an array('d')


def _operator_default(name: str) -> float:
    return float(next(f.default for f in dataclasses.fields(OperatorConfig) if f.name == name))  # type: ignore[arg-type]


RETENTION = _operator_default("custom_metrics_retention")  # s, --custom-metrics-retention's default
OPERATOR_MAX_SERIES = int(_operator_default("custom_metrics_max_series"))  # --custom-metrics-max-series
MAX_SAMPLES_PER_SERIES = 360  # SeriesStore's default
SAMPLE_STREAM = "colocation-samples"  # the custom metric samples' stream with --store nats


class Spec(Record):
    """One sandbox configuration of the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    store: str  # MEMORY or NATS
    replicas: int
    nodes: int
    custom_metrics: bool = False
    probe: bool = False  # a window with the follower probe after the main one


class ReplicaFigures(Record):
    identity: str
    leader: bool
    cpu: NanFloat  # s of CPU over the window
    rss: int  # bytes, at the window's end
    rss_before: int  # at its start
    reports: float  # accepted over the window (colocation_nodemetric_reports_accepted_total)
    samples: float = 0.0  # custom metric samples accepted over the window
    samples_total: float = 0.0  # accepted since the replica started, at the window's end
    series: float = 0.0  # custom metric series held at the window's end
    series_dropped: float = 0.0  # samples dropped over the window for the series limit
    evaluation_share: NanFloat = math.nan  # the leader's: its evaluations' share of a profile after the window
    profile_samples: int = 0


class ApplyRate(Record):
    """The follower probe's CPU over the writes of one window at one write rate (`nats_apply_rates`)."""

    rate: float  # writes/s achieved
    writes: int
    cpu: float  # s of the probe's CPU, until it was idle again

    @property
    def us(self) -> float:
        return self.cpu / self.writes * 1e6 if self.writes else math.nan


def apply_at(curve: Sequence[tuple[float, float]], rate: float, fallback: float) -> float:
    """µs per write applied at `rate` writes/s, from measured (rate, µs) points: interpolated over log
    rate between two, the nearest's below or above them all; `fallback` without any."""
    points = sorted((r, us) for r, us in curve if r > 0 and not math.isnan(us))
    if not points:
        return fallback
    if rate <= points[0][0]:
        return points[0][1]
    for (r0, us0), (r1, us1) in itertools.pairwise(points):
        if rate <= r1:
            return us0 + (us1 - us0) * math.log(rate / r0) / math.log(r1 / r0)
    return points[-1][1]


class EvaluationSplit(Record):
    """µs of CPU per node of the whole cluster per evaluation, in process (`leader_pods.reconciler_micros`):
    a replica evaluating every node, one holding none of `shards` (what every replica pays), one holding one."""

    nodes: int
    shards: int
    whole_us: NanFloat = math.nan
    no_shard_us: NanFloat = math.nan
    one_shard_us: NanFloat = math.nan

    @property
    def global_share(self) -> float:
        return self.no_shard_us / self.whole_us


class ServerFigures(Record):
    name: str
    cpu: NanFloat  # s over the window
    rss: int


class ProbeWindow(Record):
    """The follower probe's window: a reader of the stream that takes no report."""

    seconds: float
    cpu: NanFloat  # the probe's
    writes: float  # reports accepted by the replicas over it: the writes it applied
    servers_cpu: NanFloat


class ConfigRun(Record):
    spec: Spec
    report_interval: float
    seconds: NanFloat = math.nan  # the window's
    replicas: list[ReplicaFigures] = Field(default_factory=list)
    servers: list[ServerFigures] = Field(default_factory=list)
    stream_bytes: dict[str, float] = Field(default_factory=dict)  # by stream, from /jsz at the end
    stream_messages: dict[str, float] = Field(default_factory=dict)
    agents_cpu: NanFloat = math.nan  # every agent process, real and simulated
    agents_busiest_cpu: NanFloat = math.nan  # the busiest simulated agents' process
    sandbox_cpu: NanFloat = math.nan  # the sandbox and its other children (the builtin API server)
    machine_cores: int = 0
    probe: ProbeWindow | None = None
    agent_checks: dict[str, str] = Field(default_factory=dict)
    agent_problems: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)  # the run failed: its figures are not conclusive
    notes: list[str] = Field(default_factory=list)  # what was left out, for the reader
    setup_seconds: NanFloat = math.nan

    @property
    def reports(self) -> float:
        return sum(r.reports for r in self.replicas)

    @property
    def report_rate(self) -> float:
        return self.reports / self.seconds if self.replicas else math.nan

    @property
    def sample_rate(self) -> float:
        return sum(r.samples for r in self.replicas) / self.seconds if self.replicas else math.nan

    @property
    def expected_reports(self) -> float:
        return self.spec.nodes * self.seconds / self.report_interval

    def leader(self) -> ReplicaFigures | None:
        return next((r for r in self.replicas if r.leader), None)

    def standby(self) -> ReplicaFigures | None:
        return next((r for r in self.replicas if not r.leader), None)

    def evaluation_cpu(self) -> float:
        """The leader's CPU in evaluations (0 without a profile: then they count as report cost)."""
        leader = self.leader()
        if leader is None or math.isnan(leader.evaluation_share):
            return 0.0
        return leader.cpu * leader.evaluation_share

    def net_cpu(self, replica: ReplicaFigures) -> float:
        """A replica's CPU over the window, its evaluations out."""
        return replica.cpu - (self.evaluation_cpu() if replica.leader else 0.0)

    def replica_cpu(self) -> float:
        return sum(self.net_cpu(r) for r in self.replicas)

    def servers_cpu(self) -> float:
        return sum(s.cpu for s in self.servers) if self.servers else math.nan

    def measured_cores(self) -> float:
        parts = [sum(r.cpu for r in self.replicas), sum(s.cpu for s in self.servers), self.agents_cpu,
                 self.sandbox_cpu]
        return sum(p for p in parts if not math.isnan(p)) / self.seconds

    def problems(self) -> list[str]:
        """Why this window's figures may not be the system's ([] when the load generator kept up)."""
        found = list(self.failures)
        if not self.replicas:
            return found or ["no window"]
        if self.reports < REPORTS_BEHIND * self.expected_reports:
            found.append(f"the agents fell behind: {self.reports:,.0f} reports accepted of "
                         f"{self.expected_reports:,.0f} due")
        if self.agents_busiest_cpu / self.seconds >= AGENTS_SATURATED:
            found.append(f"the busiest simulated agents' process used {self.agents_busiest_cpu / self.seconds:.2f} "
                         "cores (one event loop)")
        if self.machine_cores and self.measured_cores() >= MACHINE_SATURATED * self.machine_cores:
            found.append(f"the machine had no CPU left: the measured processes used {self.measured_cores():.2f} of "
                         f"its {self.machine_cores} cores")
        if dropped := sum(r.series_dropped for r in self.replicas):
            found.append(f"{dropped:,.0f} samples dropped for the series limit")
        return found + [f"agent self-check: {problem}" for problem in self.agent_problems]


@dataclass(frozen=True, kw_only=True)
class SampleCosts:
    """Custom metrics on less off, one store, at the run's node count."""

    store: str
    sample_rate: float  # samples/s accepted, all replicas
    series: float  # held by the replica holding most
    series_per_pod: float
    leader_us: float  # extra CPU per sample (accepted by any replica)
    standby_us: float
    server_us: float  # nats-server's, all servers (NaN for the in-memory store)
    held: float  # samples each series held at the window's end
    rss_per_series: float  # the replica with most extra RSS per series
    growth_per_sample: float  # extra RSS growth over the window per sample accepted (for information)
    steady_series_bytes: float  # rss_per_series with the series full to the retention
    stream_per_sample: float  # the sample stream's bytes per sample it holds (NaN: none)
    scrape_interval: float

    @property
    def busiest_us(self) -> float:
        return max(self.leader_us, self.standby_us)


@dataclass(frozen=True, kw_only=True)
class Derived:
    """The per-unit costs of one run (µs of CPU, cores, bytes); NaN where a configuration is missing."""

    memory_us: float = math.nan  # the in-memory leader's CPU per report
    memory_standby_us: float = math.nan  # the in-memory standby's, per report of the leader
    all_in_us: float = math.nan  # nats-1's CPU per report, its fixed cost in
    fixed_cores: float = math.nan  # F, per replica
    marginal_us: float = math.nan  # the slope of C_sum over r with two replicas: w + a
    ingest_us: float = math.nan  # w1 (nats-1)
    two_ingest_us: float = math.nan  # w2 (nats-2)
    apply_probe_us: float = math.nan  # a
    apply_model_us: float = math.nan  # a, two configurations' model: nats-2 less nats-1, fixed costs in
    evaluation_us: float = math.nan  # e, the leader's evaluations, µs per node per second (nats-2)
    evaluation_global_share: float = math.nan  # g / e: what every replica pays, whatever shards it holds
    apply_curve: tuple[tuple[float, float], ...] = ()  # (writes/s, a in µs) of the in-process probe runs
    server_one_us: float = math.nan  # nats-server per report, one replica, all in
    server_two_us: float = math.nan  # with two
    server_fixed_cores: float = math.nan  # its line through nats-2-small and nats-2
    server_marginal_us: float = math.nan
    server_probe_us: float = math.nan  # d: what one more reader (the probe) added per report
    busiest_server_share: float = math.nan
    replica_fixed: float = math.nan  # bytes: the busiest replica's RSS, the line's value at 0 nodes
    replica_per_node: float = math.nan
    server_fixed: float = math.nan
    server_per_node: float = math.nan
    stream_per_node: float = math.nan  # the NodeMetric stream's bytes per node
    samples: Mapping[str, SampleCosts] = dataclasses.field(default_factory=dict)  # by store

    @property
    def ratio(self) -> float:
        return self.all_in_us / self.memory_us

    @property
    def two_vs_one(self) -> float:
        return self.two_ingest_us / self.ingest_us - 1


def _cores(seconds_cpu: float, run: ConfigRun) -> float:
    return seconds_cpu / run.seconds


def _per_report(run: ConfigRun, seconds_cpu: float) -> float:
    return seconds_cpu / run.reports * 1e6 if run.reports else math.nan


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(value at 0, slope) of the line through two points; NaNs without two distinct x."""
    if len(points) < 2 or points[0][0] == points[1][0]:
        return math.nan, math.nan
    (x0, y0), (x1, y1) = points[:2]
    slope = (y1 - y0) / (x1 - x0)
    return y0 - slope * x0, slope


def sample_costs(custom: ConfigRun, base: ConfigRun, *, pods_per_node: int, scraped_share: float,
                 scrape_interval: float) -> SampleCosts:
    """Custom metrics' per-sample CPU and per-series RSS: `custom` less `base`, replica by replica (by role);
    `scraped_share` of each simulated node's pods were scraped."""
    rate = custom.sample_rate
    roles = {}
    for role in ("leader", "standby"):
        mine, theirs = getattr(custom, role)(), getattr(base, role)()
        if mine is None or theirs is None:
            roles[role] = (math.nan, math.nan, math.nan)
            continue
        extra_cores = _cores(custom.net_cpu(mine), custom) - _cores(base.net_cpu(theirs), base)
        per_series = (mine.rss - theirs.rss) / mine.series if mine.series else math.nan
        growth = ((mine.rss - mine.rss_before) - (theirs.rss - theirs.rss_before)) / (rate * custom.seconds) \
            if rate else math.nan
        roles[role] = (extra_cores / rate * 1e6 if rate else math.nan, per_series, growth)
    series = max((r.series for r in custom.replicas), default=0.0)
    # The first node is the machine's, with a real agent and none of the simulated pods.
    scraped_pods = max(custom.spec.nodes - 1, 0) * scraped_pod_count(pods_per_node, scraped_share)
    accepted = sum(r.samples_total for r in custom.replicas)  # since the start: all within the retention
    held = accepted / series if series else math.nan
    rss_per_series = max((v[1] for v in roles.values() if not math.isnan(v[1])), default=math.nan)
    full = min(RETENTION / scrape_interval, MAX_SAMPLES_PER_SERIES)
    server_us = (_cores(custom.servers_cpu(), custom) - _cores(base.servers_cpu(), base)) / rate * 1e6 \
        if rate and custom.servers else math.nan
    return SampleCosts(store=custom.spec.store, sample_rate=rate, series=series,
                       series_per_pod=series / scraped_pods if scraped_pods else math.nan,
                       leader_us=roles["leader"][0], standby_us=roles["standby"][0], server_us=server_us, held=held,
                       rss_per_series=rss_per_series,
                       growth_per_sample=max((v[2] for v in roles.values() if not math.isnan(v[2])), default=math.nan),
                       steady_series_bytes=rss_per_series + SAMPLE_BYTES * max(0.0, full - held),
                       stream_per_sample=custom.stream_bytes.get(SAMPLE_STREAM, math.nan) / accepted
                       if accepted else math.nan, scrape_interval=scrape_interval)


def derive(runs: Mapping[str, ConfigRun], *, pods_per_node: int, scraped_share: float, scrape_interval: float,
           split: EvaluationSplit | None = None, apply_rates: Sequence[ApplyRate] = ()) -> Derived:
    """The per-unit costs from the run's windows (by configuration name) and its in-process
    measurements (the evaluations' split, the applies by write rate); see the module's docstring."""
    nan = math.nan
    found: dict[str, float] = {}
    if split is not None:
        found["evaluation_global_share"] = split.global_share
    if (memory := runs.get(MEMORY_2)) is not None and (leader := memory.leader()) is not None:
        found["memory_us"] = _per_report(memory, memory.net_cpu(leader))
        if (standby := memory.standby()) is not None:
            found["memory_standby_us"] = _per_report(memory, standby.cpu)
    one, two, small = runs.get(NATS_1), runs.get(NATS_2), runs.get(NATS_2_SMALL)
    one = one if one is not None and one.replicas else None
    two = two if two is not None and two.replicas else None
    probe = next((r.probe for r in (two, one) if r is not None and r.probe is not None and r.probe.writes), None)
    a = probe.cpu / probe.writes * 1e6 if probe is not None else nan
    fixed = marginal = nan
    if two is not None:
        found["evaluation_us"] = two.evaluation_cpu() / two.seconds / two.spec.nodes * 1e6
        found["server_two_us"] = _per_report(two, two.servers_cpu())
        found["stream_per_node"] = two.stream_bytes.get(STREAM, nan) / two.spec.nodes
        if two.servers and two.servers_cpu():
            found["busiest_server_share"] = max(s.cpu for s in two.servers) / two.servers_cpu()
        if two.probe is not None and two.probe.writes:
            found["server_probe_us"] = (two.probe.servers_cpu / two.probe.seconds - two.servers_cpu() / two.seconds) \
                / (two.probe.writes / two.probe.seconds) * 1e6
        if small is not None and small.replicas:
            both = (small, two)
            fixed, marginal = _line([(r.report_rate, _cores(r.replica_cpu(), r)) for r in both])
            fixed, marginal = fixed / 2, marginal * 1e6
            found["replica_fixed"], found["replica_per_node"] = _line(
                [(r.spec.nodes, max(x.rss for x in r.replicas)) for r in both])
            if small.servers and two.servers:
                server_fixed, server_marginal = _line([(r.report_rate, _cores(r.servers_cpu(), r)) for r in both])
                found["server_fixed_cores"], found["server_marginal_us"] = server_fixed, server_marginal * 1e6
                found["server_fixed"], found["server_per_node"] = _line(
                    [(r.spec.nodes, max(x.rss for x in r.servers)) for r in both])
    if one is not None:
        found["all_in_us"] = _per_report(one, one.replica_cpu())
        found["server_one_us"] = _per_report(one, one.servers_cpu())
        found["ingest_us"] = _per_report(one, one.replica_cpu() - fixed * one.seconds)
        if two is not None:
            found["apply_model_us"] = _per_report(two, two.replica_cpu()) - found["all_in_us"]
    return Derived(**found, fixed_cores=fixed, marginal_us=marginal, two_ingest_us=marginal - a, apply_probe_us=a,
                   apply_curve=tuple((point.rate, point.us) for point in apply_rates),
                   samples=_samples(runs, pods_per_node=pods_per_node, scraped_share=scraped_share,
                                    scrape_interval=scrape_interval))


def _samples(runs: Mapping[str, ConfigRun], *, pods_per_node: int, scraped_share: float,
             scrape_interval: float) -> dict[str, SampleCosts]:
    found = {}
    for custom, base in ((NATS_2_CUSTOM, NATS_2), (MEMORY_2_CUSTOM, MEMORY_2)):
        if custom in runs and base in runs and runs[custom].replicas and runs[base].replicas:
            costs = sample_costs(runs[custom], runs[base], pods_per_node=pods_per_node,
                                 scraped_share=scraped_share, scrape_interval=scrape_interval)
            found[costs.store] = costs
    return found


# ---- sizing ---------------------------------------------------------------------------------------------


def _larger(one: float, other: float) -> float:
    """The larger of two figures, either of which may be NaN (not measured)."""
    return max(v for v in (one, other) if not math.isnan(v)) if not (math.isnan(one) and math.isnan(other)) \
        else math.nan


@dataclass(frozen=True, kw_only=True)
class UnitCosts:
    """What the sizing projects from: µs of CPU, cores, bytes; per report, write, sample, node or series."""

    fixed_cores: float  # F, per replica
    ingest_us: float  # w
    apply_us: float  # a, at the system's write rate (the probe)
    evaluation_global_us: float  # g, every replica's, per node per second
    evaluation_shard_us: float  # o = e - g: a replica holding every shard, per node per second
    sample_us: float  # c, the busiest replica's extra CPU per sample
    server_fixed_cores: float  # nats-server, all servers
    server_us: float  # all servers, per report at two replicas
    server_per_replica_us: float  # d, what one more replica adds per report (at least 0)
    server_sample_us: float
    busiest_server_share: float
    series_per_pod: float
    series_bytes: float  # at the retention's end
    replica_fixed: float
    replica_per_node: float
    server_fixed: float
    server_per_node: float
    stream_per_node: float
    stream_per_sample: float
    apply_curve: tuple[tuple[float, float], ...] = ()  # (writes/s, a in µs): a at other write rates

    def apply_at(self, rate: float) -> float:
        return apply_at(self.apply_curve, rate, self.apply_us)

    @classmethod
    def of(cls, derived: Derived) -> UnitCosts:
        samples = derived.samples.get(NATS)
        nan = math.nan
        evaluation = 0.0 if math.isnan(derived.evaluation_us) else derived.evaluation_us
        # Without the split, all of it counts on every replica, as if the evaluations were not shared.
        share = 1.0 if math.isnan(derived.evaluation_global_share) else min(derived.evaluation_global_share, 1.0)
        return cls(fixed_cores=derived.fixed_cores, ingest_us=_larger(derived.ingest_us, derived.two_ingest_us),
                   apply_us=derived.apply_probe_us, evaluation_global_us=evaluation * share,
                   evaluation_shard_us=evaluation * (1.0 - share),
                   sample_us=samples.busiest_us if samples else nan,
                   server_fixed_cores=derived.server_fixed_cores, server_us=derived.server_marginal_us,
                   server_per_replica_us=max(derived.server_probe_us, 0.0),
                   server_sample_us=max(samples.server_us, 0.0) if samples else nan,
                   busiest_server_share=derived.busiest_server_share,
                   series_per_pod=samples.series_per_pod if samples else nan,
                   series_bytes=samples.steady_series_bytes if samples else nan,
                   replica_fixed=derived.replica_fixed, replica_per_node=derived.replica_per_node,
                   server_fixed=derived.server_fixed, server_per_node=derived.server_per_node,
                   stream_per_node=derived.stream_per_node,
                   stream_per_sample=samples.stream_per_sample if samples else nan, apply_curve=derived.apply_curve)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    nodes: int
    cadence: float  # s between a node's reports
    share: float  # of the pods scraped for custom metrics
    pods_per_node: int = 30
    scrape_interval: float = 5.0

    @property
    def report_rate(self) -> float:
        return self.nodes / self.cadence

    def series_with(self, units: UnitCosts) -> float:
        return self.nodes * self.pods_per_node * self.share * units.series_per_pod if self.share else 0.0

    def sample_rate(self, units: UnitCosts) -> float:
        return self.series_with(units) / self.scrape_interval


def _times(rate: float, cost: float) -> float:
    """`rate` per second at `cost` µs each, in cores; 0 when the rate is 0, whatever the cost."""
    return rate * cost / 1e6 if rate else 0.0


def _evaluation_cores(units: UnitCosts, scenario: Scenario, shards_held: int) -> float:
    """The evaluations of a replica holding `shards_held` of the SIZING_SHARDS shards."""
    return _times(scenario.nodes, units.evaluation_global_us + units.evaluation_shard_us * shards_held / SIZING_SHARDS)


def floor_cores(units: UnitCosts, scenario: Scenario) -> float:
    """The busiest replica's cores with infinitely many replicas: its fixed cost, every write applied, the
    samples, every node's health and one shard's evaluations."""
    r = scenario.report_rate
    return (units.fixed_cores + _times(r, units.apply_at(r))
            + _times(scenario.sample_rate(units), units.sample_us) + _evaluation_cores(units, scenario, 1))


def replica_cores(units: UnitCosts, scenario: Scenario, replicas: int, *, busiest: bool = True) -> float:
    """A replica's cores with `replicas` sharing the reports and the shards: the busiest holds the most
    shards (the leader, whose other duties cost little, is one of them), the others the fewest."""
    r = scenario.report_rate
    cores = (units.fixed_cores + _times(r / replicas, units.ingest_us) + _times(r * (replicas - 1) / replicas,
                                                                              units.apply_at(r))
             + _times(scenario.sample_rate(units), units.sample_us))
    held = -(-SIZING_SHARDS // replicas) if busiest else SIZING_SHARDS // replicas
    return cores + _evaluation_cores(units, scenario, held)


def replicas_needed(units: UnitCosts, scenario: Scenario, limit: float = CORE_LIMIT) -> int | None:
    """The fewest replicas whose busiest stays within `limit` cores; None when no count does."""
    if replica_cores(units, scenario, 1) <= limit:
        return 1
    # Each replica more moves part of the ingest, r·(w - a), off every replica, down to the floor.
    floor = floor_cores(units, scenario)
    spread = _times(scenario.report_rate, units.ingest_us - units.apply_at(scenario.report_rate))
    if math.isnan(floor) or math.isnan(spread) or spread <= 0 or floor >= limit:
        return None
    count = max(2, math.ceil(spread / (limit - floor)))
    while replica_cores(units, scenario, count) > limit:  # rounding
        count += 1
    while count > 2 and replica_cores(units, scenario, count - 1) <= limit:
        count -= 1
    return count


@dataclass(frozen=True, kw_only=True)
class Sizing:
    scenario: Scenario
    replicas: int | None
    busiest_cores: float  # at `replicas` (NaN when none)
    other_cores: float  # a replica holding the fewest shards, at `replicas`
    floor_cores: float  # the busiest's with infinitely many replicas
    series: float
    sample_rate: float
    replica_bytes: float
    server_cores: float  # all servers, at `replicas`
    busiest_server_cores: float
    server_bytes: float  # each server's RSS
    stream_bytes: float  # each server's copy of the streams (disk)

    @property
    def over_series_cap(self) -> bool:
        return self.series > OPERATOR_MAX_SERIES


def size(units: UnitCosts, scenario: Scenario) -> Sizing:
    replicas = replicas_needed(units, scenario)
    r, n = scenario.report_rate, scenario.nodes
    series = scenario.series_with(units)
    samples = scenario.sample_rate(units)
    servers = (units.server_fixed_cores + _times(r, units.server_us + (replicas - 2) * units.server_per_replica_us)
               + _times(samples, units.server_sample_us)) if replicas else math.nan
    return Sizing(scenario=scenario, replicas=replicas,
                  busiest_cores=replica_cores(units, scenario, replicas) if replicas else math.nan,
                  other_cores=replica_cores(units, scenario, replicas, busiest=False) if replicas else math.nan,
                  floor_cores=floor_cores(units, scenario), series=series, sample_rate=samples,
                  replica_bytes=units.replica_fixed + n * units.replica_per_node
                  + (series * units.series_bytes if series else 0.0),
                  server_cores=servers, busiest_server_cores=servers * units.busiest_server_share,
                  server_bytes=units.server_fixed + n * units.server_per_node,
                  stream_bytes=n * units.stream_per_node
                  + (samples * RETENTION * units.stream_per_sample if samples else 0.0))


def sizing_table(units: UnitCosts, *, pods_per_node: int, scrape_interval: float) -> list[Sizing]:
    return [size(units, Scenario(nodes=n, cadence=t, share=p, pods_per_node=pods_per_node,
                                 scrape_interval=scrape_interval))
            for n in SIZING_NODES for t in SIZING_CADENCES for p in SIZING_SHARES]


# ---- verdicts -------------------------------------------------------------------------------------------


def unclean(runs: Mapping[str, ConfigRun], names: Sequence[str]) -> list[str]:
    """Why the named configurations' figures are not conclusive: missing, failed or held down."""
    found = []
    for name in names:
        run = runs.get(name)
        if run is None:
            found.append(f"{name}: not run")
        elif problems := run.problems():
            found.append(f"{name}: {'; '.join(problems)}")
    return found


def _judge(met: bool, figure: float, held_down: list[str]) -> str:
    if held_down or math.isnan(figure):
        return INCONCLUSIVE
    return MET if met else MISSED


def verdicts(runs: Mapping[str, ConfigRun], derived: Derived, goal: Sizing) -> list[tuple[str, str, str]]:
    """(target, figure, verdict) for each target, from this run's figures."""
    lines = []
    held = unclean(runs, (MEMORY_2, NATS_1))
    lines.append((f"≤ {RATIO_TARGET:g}x the in-memory store's replica CPU per report (the replica that takes every "
                  "report, at the same rate, evaluations out)",
                  f"{derived.ratio:.2f}x ({derived.all_in_us:,.0f} µs on NATS with one replica, "
                  f"{derived.memory_us:,.0f} µs in memory)",
                  _judge(derived.ratio <= RATIO_TARGET, derived.ratio, held)))
    held = unclean(runs, (NATS_1, NATS_2, NATS_2_SMALL))
    if runs.get(NATS_2) is not None and runs[NATS_2].probe is None:
        held.append(f"{NATS_2}: no probe window")
    lines.append((f"two ingesting replicas vs one: per-report ingest cost within {TWO_VS_ONE_TARGET:.0%}",
                  f"{derived.two_vs_one:+.1%} ({derived.two_ingest_us:,.0f} µs with two, "
                  f"{derived.ingest_us:,.0f} µs with one; fixed costs and, with two, the other's writes out)",
                  _judge(abs(derived.two_vs_one) <= TWO_VS_ONE_TARGET, derived.two_vs_one, held)))
    held = unclean(runs, (NATS_1, NATS_2, NATS_2_SMALL))
    figure = (f"{goal.replicas} replicas (the busiest at {goal.busiest_cores:.2f} cores)"
              if goal.replicas is not None
              else f"no replica count: the busiest keeps {goal.floor_cores:.2f} cores with any number")
    verdict = _judge(goal.replicas is not None and goal.replicas <= GOAL_REPLICAS, goal.floor_cores, held)
    lines.append((f"{GOAL_NODES:,} nodes every {GOAL_CADENCE:g} s (no custom metrics) with ≤ {GOAL_REPLICAS} replicas "
                  f"of ≤ {CORE_LIMIT:g} core each, {SIZING_SHARDS} evaluation shards", figure,
                  f"{verdict} (projected)"))
    return lines
