"""The arithmetic of the leader-scale suite: one window's figures, the memory regression, the 10,000-node
extrapolation and the verdicts, all from the numbers a run measured (no I/O here).

The leader's CPU is split in two: the controllers' evaluations and the rest (the report API, its TLS
and authentication, the Kopf watches of Nodes and Leases, the Pod informer...), charged to the reports
the leader accepted (`colocation_nodemetric_reports_accepted_total`). The evaluations' share is the
share of py-spy's samples of the leader in them (taken right after the window); without a profile it
is their summed wall time (`colocation_reconcile_duration_seconds`), an upper bound: an evaluation
awaits its API writes, and at 1,000 nodes its wall time exceeded the leader's whole CPU. Both scale
with the nodes: reports as nodes per report interval, evaluations as nodes x evaluations per second.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from pydantic import ConfigDict, model_validator
from pydantic.dataclasses import dataclass

from benchmarks.results import NanFloat
from benchmarks.stats import Latency

RSS_PER_NODE_TARGET = 40 * 1024  # bytes of leader RSS per node
CORES_TARGET = 0.8  # leader cores at EXTRAPOLATE_NODES nodes reporting every EXTRAPOLATE_INTERVAL s
EXTRAPOLATE_NODES = 10_000
EXTRAPOLATE_INTERVAL = 10.0
# Failover (issue 34): from the SIGKILL of the leader (the sandbox restarts it at once) to the new
# leader's first finished evaluation of every node, at every node count and every kill; that figure
# must not grow with the node count: the median of the kills at the largest count of a control plane
# at most FAILOVER_GROWTH s above the median at its smallest.
FAILOVER_TARGET = 3.0
FAILOVER_GROWTH = 1.0
# A leader gone without a restart (SIGSTOPped: it neither renews nor releases its Lease, so the standby
# waits for it to expire): from the SIGSTOP to the new leader's first finished evaluation, at most the
# Lease's duration plus this.
TAKEOVER_MARGIN = 2.0
AGENTS_SATURATED = 0.9  # cores of one simulated agents' process (one event loop): the load client is saturated
MACHINE_SATURATED = 0.95  # share of the machine's cores the measured processes used together: no CPU was left
REPORTS_BEHIND = 0.9  # accepted reports below this share of those due: the agents fell behind

# The memory figures before the standbys were warm: BENCHMARKS.md at commit ffa7290 ("Leader at scale").
BEFORE_COMMIT = "ffa7290"
BEFORE_LEADER_CACHES = (118 * 2**20, 37.1 * 1024)  # (fixed bytes, bytes per node): the leader's RSS less the
# watch window and the connections it serves, over 1,004 and 2,504 nodes
BEFORE_LEADER = (117 * 2**20, 40.5 * 1024)  # the same with the connections
BEFORE_STANDBY_RSS = ((1004, 132.9 * 2**20), (2504, 137.0 * 2**20))  # (nodes, the standby's RSS)

MET, MISSED, INCONCLUSIVE = "met", "missed", "inconclusive"
BUILTIN, KUBE = "builtin", "kube"  # the sandbox's API server; the real control plane (`--apiserver kube`)
# The figures below are pydantic dataclasses, saved in benchmarks/plots/leader_scale.json (leader_scale.ScaleReport)
# under these names; a float not measured (NaN) is saved as null.
SAVED = ConfigDict(extra="forbid")


@dataclass(config=SAVED)
class Window:
    """One steady-state window at one node count; CPU in seconds over `seconds`, RSS in bytes at its end."""

    nodes: int  # every Node that reports: the sandbox's and the probes
    seconds: NanFloat
    report_interval: NanFloat
    leader_cpu: NanFloat
    standby_cpu: NanFloat
    agents_cpu: NanFloat  # the simulated agents' processes together (the load client; one per 500 nodes)
    control_plane_cpu: NanFloat  # the control plane: the sandbox's processes but the replicas and the agents
    leader_rss: int
    standby_rss: int
    leader_window_bytes: int  # what only the NodeMetric watch window keeps (its gauge) at the window's end
    leader_window_events: int
    reports: NanFloat  # accepted by the leader in the window
    evaluations: NanFloat  # evaluations of every node the leader's controllers finished in the window
    evaluation_seconds: NanFloat  # their summed duration
    batch_writes: NanFloat  # Node patches of batch resources in the window
    agent_problems: list[str] = field(default_factory=list)  # the agents' self-check over the window
    agent_checks: dict[str, str] = field(default_factory=dict)
    evaluation_share: NanFloat = math.nan  # of the leader's py-spy samples, in the evaluations; NaN: no profile
    agents_busiest_cpu: NanFloat = math.nan  # the busiest of those processes; NaN: `agents_cpu` is one process
    machine_cores: int = 0  # the machine's cores (0: not known)
    # The TLS connections the leader served at the window's end (the agents': the load client opens up
    # to 33 per 500 simulated nodes, a real agent holds one; and the benchmark's own few), and what one
    # idle connection added to the leader's RSS when the benchmark opened CONNECTION_PROBES more right
    # after the window (NaN: not measured).
    leader_connections: int = 0
    connection_bytes: NanFloat = math.nan

    @model_validator(mode="before")
    @classmethod
    def _as_saved_before(cls, saved: Any) -> Any:
        """A window saved before the watch window's gauge (nothing is taken off its RSS), or before the
        control plane's CPU counted kube-apiserver and the rest (it was the sandbox's, `sandbox_cpu`)."""
        if not isinstance(saved, dict):  # constructed in code, not loaded
            return saved
        saved = {"leader_window_bytes": 0, "leader_window_events": 0, **saved}
        if "sandbox_cpu" in saved:
            saved["control_plane_cpu"] = saved.pop("sandbox_cpu")
        return saved

    @property
    def evaluation_cpu(self) -> float:
        """CPU seconds of the evaluations: the profile's share of the leader's CPU, else their wall time."""
        if math.isnan(self.evaluation_share):
            return self.evaluation_seconds
        return self.leader_cpu * self.evaluation_share

    @property
    def leader_cores(self) -> float:
        return self.leader_cpu / self.seconds

    @property
    def standby_cores(self) -> float:
        return self.standby_cpu / self.seconds

    @property
    def agents_cores(self) -> float:
        return self.agents_cpu / self.seconds

    @property
    def agents_busiest_cores(self) -> float:
        return (self.agents_cpu if math.isnan(self.agents_busiest_cpu) else self.agents_busiest_cpu) / self.seconds

    @property
    def measured_cores(self) -> float:
        """The leader, the standby, the simulated agents and the control plane together."""
        return self.leader_cores + self.standby_cores + self.agents_cores + self.control_plane_cores

    @property
    def control_plane_cores(self) -> float:
        return self.control_plane_cpu / self.seconds

    @property
    def expected_reports(self) -> float:
        return self.nodes * self.seconds / self.report_interval

    @property
    def report_rate(self) -> float:
        return self.reports / self.seconds

    @property
    def evaluation_rate(self) -> float:
        return self.evaluations / self.seconds

    @property
    def us_per_report(self) -> float:
        """µs of leader CPU per accepted report, evaluations left out."""
        if not self.reports:
            return math.nan
        return max(self.leader_cpu - self.evaluation_cpu, 0.0) / self.reports * 1e6

    @property
    def us_per_report_all_in(self) -> float:
        """µs of all the leader's CPU (evaluations included) per accepted report."""
        return self.leader_cpu / self.reports * 1e6 if self.reports else math.nan

    @property
    def us_per_node_evaluation(self) -> float:
        """µs of leader CPU per node per evaluation."""
        if not self.evaluations or not self.nodes:
            return math.nan
        return self.evaluation_cpu / (self.evaluations * self.nodes) * 1e6

    @property
    def us_per_node_evaluation_wall(self) -> float:
        if not self.evaluations or not self.nodes:
            return math.nan
        return self.evaluation_seconds / (self.evaluations * self.nodes) * 1e6

    def saturation(self) -> list[str]:
        """Why the load client may have held the leader's figures down ([] when it kept up)."""
        found = []
        if self.agents_busiest_cores >= AGENTS_SATURATED:
            found.append(f"the busiest simulated agents' process used {self.agents_busiest_cores:.2f} cores "
                         "(one event loop)")
        if self.machine_cores and self.measured_cores >= MACHINE_SATURATED * self.machine_cores:
            found.append(f"the machine had no CPU left: the measured processes used {self.measured_cores:.2f} of "
                         f"its {self.machine_cores} cores")
        if self.reports < REPORTS_BEHIND * self.expected_reports:
            found.append(f"the agents fell behind: {self.reports:,.0f} reports accepted of "
                         f"{self.expected_reports:,.0f} due")
        return found + [f"agent self-check: {problem}" for problem in self.agent_problems]


@dataclass(config=SAVED)
class ReportBurst:
    """Reports for the probes (a simulated node's status, each one a change) sent for a while after the
    window, the agents going on as before, at the rate that brings the leader's to that of 10,000
    nodes (1,000 a second): what the leader's CPU grows by per report beyond the window's. In the
    window itself each report is one of ~100 a second, and also carries the event loop's wake-up for
    it, which a busier loop shares between many."""

    seconds: NanFloat
    leader_cpu: NanFloat  # s of CPU over the burst
    reports: NanFloat  # accepted by the leader over the burst (the agents' and the probes')
    probe_reports: int  # of them, sent by the probes
    failed: int  # probe reports not accepted
    client_cpu: NanFloat  # s of CPU of this benchmark's process (the probes' client) over the burst
    baseline_cores: NanFloat  # the leader's cores in the window before
    baseline_rate: NanFloat  # its accepted reports per second in the window before

    @property
    def rate(self) -> float:
        return self.reports / self.seconds

    @property
    def leader_cores(self) -> float:
        return self.leader_cpu / self.seconds

    @property
    def client_cores(self) -> float:
        return self.client_cpu / self.seconds

    @property
    def us_per_report(self) -> float:
        """µs of leader CPU per report beyond the window's rate: the extra CPU over the extra reports."""
        extra = self.rate - self.baseline_rate
        if extra <= 0:
            return math.nan
        return (self.leader_cores - self.baseline_cores) / extra * 1e6


def extrapolate(window: Window, nodes: int = EXTRAPOLATE_NODES, interval: float = EXTRAPOLATE_INTERVAL,
                burst: ReportBurst | None = None) -> float:
    """Leader cores at `nodes` nodes each reporting every `interval` s, from one window's unit costs:
    µs per report x reports per second + µs per node evaluation x nodes x evaluations per second.

    With a `burst`, a report costs what it added to the leader's CPU there, and the rest of the
    window's CPU (neither its reports at that cost nor its evaluations: timers, informers, the event
    loop's idle wake-ups) is added as it was measured."""
    evaluations = window.us_per_node_evaluation * 1e-6 * nodes * window.evaluation_rate
    if burst is None or math.isnan(burst.us_per_report):
        return window.us_per_report * 1e-6 * nodes / interval + evaluations
    per_report = burst.us_per_report * 1e-6
    rest = max(window.leader_cores - window.report_rate * per_report - window.evaluation_cpu / window.seconds, 0.0)
    return per_report * nodes / interval + evaluations + rest


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares line through (x, y) points: (intercept, slope); None without two distinct x."""
    xs = {x for x, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return mean_y - slope * mean_x, slope


@dataclass(config=SAVED)
class Convergence:
    """One SIGKILL of the leader; seconds from the signal (NaN: not within the timeout).

    `first_evaluation` is when the poll that first saw the new leader's evaluation count at 1 or more
    was answered: the evaluation finished between `evaluation_after` (when the last poll that saw it
    at 0 was sent) and then, so `first_evaluation` is late by at most their difference."""

    nodes: int
    index: int
    lease_moved: NanFloat  # the Lease naming another holder
    first_evaluation: NanFloat  # the new leader's first finished evaluation (the verdict's figure)
    all_reported: NanFloat  # the new leader serving every node's NodeMetric with an updateTime from after the kill
    converged: NanFloat  # an evaluation finished after that
    stale: int = 0  # nodes not re-reported when it gave up
    note: str = ""
    evaluation_after: NanFloat = math.nan  # the last poll that saw no evaluation was sent then (NaN: not saved)
    evaluation_seconds: NanFloat = math.nan  # the first evaluation's own duration (its histogram's sum / count)
    profiled: bool = False  # py-spy sampled the new leader across it: shown, left out of the verdicts

    @property
    def resolution(self) -> float:
        """How late `first_evaluation` may be: the span between the last poll without it and the first with it."""
        return self.first_evaluation - self.evaluation_after


@dataclass(config=SAVED)
class Takeover:
    """One stop of the leader without a restart: SIGSTOP (it neither renews nor releases its Lease, so
    the standby waits for the Lease to expire), SIGCONT once the new leader has evaluated (it then finds
    it lost the Lease and exits, and the sandbox starts it again). Seconds from the SIGSTOP (NaN: not
    within the timeout)."""

    nodes: int
    index: int
    lease_duration: NanFloat  # the Lease's leaseDurationSeconds when the leader was stopped (the operator's flag)
    lease_moved: NanFloat
    first_evaluation: NanFloat  # the new leader's first finished evaluation (the verdict's figure)
    evaluation_after: NanFloat = math.nan  # as in Convergence
    evaluation_seconds: NanFloat = math.nan
    void: str = ""  # why the sample does not count ("": it does), e.g. the stopped process died before the takeover

    @property
    def bound(self) -> float:
        return self.lease_duration + TAKEOVER_MARGIN

    @property
    def resolution(self) -> float:
        return self.first_evaluation - self.evaluation_after

    @property
    def within(self) -> bool:
        return not self.void and self.first_evaluation <= self.bound  # NaN compares False


@dataclass(config=SAVED)
class SizeResult:
    """Everything measured at one node count."""

    nodes: int  # sandbox nodes (the probes come on top)
    probes: int = 0
    window: Window | None = None
    latencies: list[float] = field(default_factory=list)  # s from a probe's report to its Node patch
    latency_failures: list[str] = field(default_factory=list)
    kills: list[Convergence] = field(default_factory=list)
    stops: list[Takeover] = field(default_factory=list)  # the leader gone without a restart
    profile: list[tuple[str, float]] = field(default_factory=list)  # innermost frames by share of samples
    profile_shares: list[tuple[str, float]] = field(default_factory=list)  # activities by share
    profile_samples: int = 0
    burst: ReportBurst | None = None
    # py-spy of the standby from just before one more SIGKILL of the leader (that kill is left out of the
    # verdicts): where the new leader's time goes while it takes over and evaluates.
    failover_profile: list[tuple[str, float]] = field(default_factory=list)  # innermost frames by share
    failover_profile_shares: list[tuple[str, float]] = field(default_factory=list)
    failover_profile_samples: int = 0
    setup_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  # what could not be measured, and why
    apiserver: str = BUILTIN

    @property
    def latency(self) -> Latency:
        return Latency.of(self.latencies)

    def saturation(self) -> list[str]:
        return self.window.saturation() if self.window is not None else []

    @property
    def counted_kills(self) -> list[Convergence]:
        """The kills the verdicts count: all but the profiled one."""
        return [k for k in self.kills if not k.profiled]

    @property
    def failover_median(self) -> float:
        """The median first evaluation of the counted kills (a kill without one counts as infinitely late)."""
        kills = self.counted_kills
        return statistics.median(_late(k.first_evaluation) for k in kills) if kills else math.nan

    @property
    def label(self) -> str:
        """Its Nodes, the probes' included, and the real control plane's mark: "1,004", "1,004 (kube)"."""
        return f"{self.nodes + self.probes:,}" + (f" ({KUBE})" if self.apiserver == KUBE else "")


def _late(seconds: float) -> float:
    return math.inf if math.isnan(seconds) else seconds


def fitted(results: Sequence[SizeResult]) -> list[SizeResult]:
    """The results the memory and CPU verdicts are computed from: a window on the builtin API server (one
    control plane for every count) that the load client did not hold down."""
    return [r for r in results if r.window is not None and r.apiserver == BUILTIN and not r.saturation()]


def memory_fit(results: Sequence[SizeResult], *, with_window: bool = False) -> tuple[float, float] | None:
    """(fixed bytes, bytes per node) of the leader's RSS over the node counts measured, without the
    NodeMetric watch window's events (unless `with_window`): the window keeps a fixed number of events
    whatever the cluster's size (10,000 by default), and fills later the fewer nodes report, so a
    small cluster's window may still be filling when the RSS is read; its bytes are a fixed cost."""
    return fit([(r.window.nodes, r.window.leader_rss - (0 if with_window else r.window.leader_window_bytes))
                for r in results if r.window is not None])


def cache_memory_fit(results: Sequence[SizeResult]) -> tuple[float, float] | None:
    """`memory_fit` less the connections the leader serves: each size's at the window's end times
    what one connection was measured to cost at that size. None without two sizes so measured."""
    points = [(r.window.nodes, r.window.leader_rss - r.window.leader_window_bytes
               - r.window.leader_connections * r.window.connection_bytes)
              for r in results if r.window is not None and not math.isnan(r.window.connection_bytes)]
    return fit(points) if len(points) >= 2 else None


def standby_memory_fit(results: Sequence[SizeResult]) -> tuple[float, float] | None:
    """(fixed bytes, bytes per node) of the standby's RSS over the node counts measured (its whole RSS:
    it holds a copy of every NodeMetric, and, warm, the leader's informers and Kopf's watches)."""
    return fit([(r.window.nodes, r.window.standby_rss) for r in results if r.window is not None])


def cpu_fit(results: Sequence[SizeResult]) -> tuple[float, float] | None:
    """(fixed cores, cores per node) of the leader over the node counts measured."""
    return fit([(r.window.nodes, r.window.leader_cores) for r in results if r.window is not None])


def _verdict(ok: bool, saturated: bool) -> str:
    if ok:
        return MET
    return INCONCLUSIVE if saturated else MISSED


def verdicts(results: Sequence[SizeResult]) -> list[tuple[str, str, str]]:
    """(target, figure, met / missed / inconclusive) for each target, from the numbers."""
    measured = fitted(results)
    left_out = [r for r in results if r.window is not None and r.apiserver == BUILTIN and r.saturation()]
    lines: list[tuple[str, str, str]] = []
    memory, caches = memory_fit(measured), cache_memory_fit(measured)
    target = (f"≤ {RSS_PER_NODE_TARGET / 1024:.0f} KiB of leader RSS per node (NodeMetrics, pod and node caches "
              "together)")
    if memory is None:
        lines.append((target, "needs two node counts the load client kept up with", INCONCLUSIVE))
    else:
        largest_window = max((r.window for r in measured if r.window is not None), key=lambda w: w.nodes)
        window = (f"the watch window's {largest_window.leader_window_bytes / 2**20:,.1f} MiB of "
                  f"{largest_window.leader_window_events:,} events")
        whole = f"{memory[1] / 1024:,.1f} KiB per node (fixed {memory[0] / 2**20:,.0f} MiB, plus {window})"
        if caches is None:
            lines.append((target, whole + "; the connections it serves not measured",
                          _verdict(memory[1] <= RSS_PER_NODE_TARGET, False)))
        else:
            connections = ", ".join(f"{r.window.leader_connections:,} at {r.window.nodes:,} nodes"
                                    for r in measured if r.window is not None)
            cost = max(r.window.connection_bytes for r in measured if r.window is not None)
            lines.append((target, f"{caches[1] / 1024:,.1f} KiB per node without the connections it serves (fixed "
                                  f"{caches[0] / 2**20:,.0f} MiB, plus {window}); {whole} with them ({connections}; "
                                  f"at most {cost / 1024:,.0f} KiB each, measured)",
                          _verdict(caches[1] <= RSS_PER_NODE_TARGET, False)))
    target = (f"≤ {CORES_TARGET:g} leader cores at {EXTRAPOLATE_NODES:,} nodes reporting every "
              f"{EXTRAPOLATE_INTERVAL:g} s")
    if not measured:
        lines.append((target, "no window the load client kept up with", INCONCLUSIVE))
    else:
        largest = max(measured, key=lambda r: r.nodes)
        assert largest.window is not None
        cores = extrapolate(largest.window, burst=largest.burst)
        burst = largest.burst
        basis = (f"{burst.us_per_report:,.0f} µs per report at {burst.rate:,.0f} reports/s"
                 if burst is not None and not math.isnan(burst.us_per_report) else "the window's µs per report")
        lines.append((target, f"{cores:.2f} cores (from {largest.label} nodes, {basis})",
                      INCONCLUSIVE if math.isnan(cores) else _verdict(cores <= CORES_TARGET, False)))
    if left_out:
        lines = [(target, figure + "; left out: " + ", ".join(f"{r.label} nodes" for r in left_out)
                  + " (the load client was held down)", verdict) for target, figure, verdict in lines]
    return lines + failover_verdicts(results)


def before_standby_fit() -> tuple[float, float]:
    """(fixed bytes, bytes per node) of the standby's RSS before it was warm (BEFORE_STANDBY_RSS)."""
    line = fit(BEFORE_STANDBY_RSS)
    assert line is not None
    return line


def _loaded_verdict(ok: bool, failing: Sequence[SizeResult]) -> str:
    """Met; else inconclusive when every count that failed it had the load client held down, else missed."""
    if ok:
        return MET
    return INCONCLUSIVE if failing and all(r.saturation() for r in failing) else MISSED


def _s(seconds: float) -> str:
    return "none" if math.isnan(seconds) else ("never" if math.isinf(seconds) else f"{seconds:.2f} s")


def failover_verdicts(results: Sequence[SizeResult]) -> list[tuple[str, str, str]]:
    """The failover's three targets: every kill's first evaluation within FAILOVER_TARGET s; its median
    not growing with the node count on each control plane; a stopped leader's successor within the
    Lease's duration + TAKEOVER_MARGIN s."""
    lines: list[tuple[str, str, str]] = []
    killed = [r for r in results if r.counted_kills]
    target = (f"≤ {FAILOVER_TARGET:g} s from a SIGKILL of the leader (restarted) to the new leader's first finished "
              "evaluation of every node, every kill at every node count")
    if not killed:
        lines.append((target, "no kill measured", INCONCLUSIVE))
    else:
        failing = [r for r in killed if not all(k.first_evaluation <= FAILOVER_TARGET for k in r.counted_kills)]
        seconds = [k.first_evaluation for r in killed for k in r.counted_kills]
        evaluated = [value for value in seconds if not math.isnan(value)]
        figure = (f"max {_s(max(evaluated))}" if evaluated else "no evaluation") + f" of {len(seconds)} kills"
        if len(evaluated) < len(seconds):
            figure += f"; {len(seconds) - len(evaluated)} without an evaluation before the timeout"
        figure += " (" + ", ".join(f"{len(r.counted_kills)} at {r.label} nodes: median "
                                   f"{_s(r.failover_median)}, max "
                                   f"{_s(max(_late(k.first_evaluation) for k in r.counted_kills))}"
                                   for r in killed) + ")"
        lines.append((target, figure, _loaded_verdict(not failing, failing)))
    target = (f"the failover does not grow with the node count: on each control plane, the median first evaluation "
              f"at its largest node count ≤ the median at its smallest + {FAILOVER_GROWTH:g} s")
    planes = [[r for r in killed if r.apiserver == plane] for plane in (BUILTIN, KUBE)]
    compared = [(min(rs, key=lambda r: r.nodes), max(rs, key=lambda r: r.nodes)) for rs in planes
                if len({r.nodes for r in rs}) >= 2]
    if not compared:
        lines.append((target, "needs kills at two node counts on one control plane", INCONCLUSIVE))
    else:
        grown = [(small, large) for small, large in compared
                 if not large.failover_median <= small.failover_median + FAILOVER_GROWTH]
        figure = "; ".join(f"{_s(small.failover_median)} at {small.label} nodes, {_s(large.failover_median)} at "
                           f"{large.label} nodes ({large.failover_median - small.failover_median:+.2f} s)"
                           if math.isfinite(large.failover_median - small.failover_median) else
                           f"{_s(small.failover_median)} at {small.label} nodes, {_s(large.failover_median)} at "
                           f"{large.label} nodes" for small, large in compared)
        # Either end held down makes the comparison say nothing.
        held = any(r.saturation() for pair in grown for r in pair)
        lines.append((target, figure, MET if not grown else INCONCLUSIVE if held else MISSED))
    stopped = [r for r in results if r.stops]
    target = (f"≤ the Lease's duration + {TAKEOVER_MARGIN:g} s from a SIGSTOP of the leader (gone without a "
              "restart) to the new leader's first finished evaluation, every stop at every node count")
    if not stopped:
        lines.append((target, "no stop measured", INCONCLUSIVE))
    else:
        stops = [t for r in stopped for t in r.stops]
        counted = [t for t in stops if not t.void]
        evaluated = [t.first_evaluation for t in counted if not math.isnan(t.first_evaluation)]
        bounds = sorted({t.bound for t in stops})
        figure = (f"max {_s(max(evaluated))}" if evaluated else "no evaluation") + f" of {len(counted)} stops"
        figure += (f", against {' / '.join(f'{b:g} s' for b in bounds)} (the Lease's "
                   f"{' / '.join(f'{b - TAKEOVER_MARGIN:g} s' for b in bounds)} + {TAKEOVER_MARGIN:g} s)")
        if len(evaluated) < len(counted):
            figure += f"; {len(counted) - len(evaluated)} without an evaluation before the timeout"
        void = [t for t in stops if t.void]
        if void:
            figure += f"; {len(void)} not counted: " + "; ".join(t.void for t in void)
        figure += " (" + ", ".join(
            f"{len(r.stops)} at {r.label} nodes: max "
            + (_s(max(_late(t.first_evaluation) for t in r.stops if not t.void))
               if any(not t.void for t in r.stops) else "none counted") for r in stopped) + ")"
        # A stop that does not count shows nothing either way: without a counted one over its bound, inconclusive.
        failing = [r for r in stopped if any(not t.void and not t.within for t in r.stops)]
        verdict = _loaded_verdict(not failing, failing) if failing or not void else INCONCLUSIVE
        lines.append((target, figure, verdict))
    return lines
