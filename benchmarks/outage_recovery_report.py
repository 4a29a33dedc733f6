"""The outage-recovery suite's figures, verdicts and section, from what benchmarks/outage_recovery.py observed.

Pure: the observations are histories of arrivals (when this client saw something, on the event
loop's clock), and every figure is computed from them here, so the unit tests feed made-up ones.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator
from pydantic.dataclasses import dataclass

from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.results import NanFloat, Record
from benchmarks.stats import percentile
from colocation.agent import selfcheck

SUITE = "outage-recovery"
RAW = Path(__file__).resolve().parent / "plots" / "outage_recovery.json"
BOUND = 5.0  # issue 34: every node's data fresh again within 5 s of the thaw
MET, MISSED, INCONCLUSIVE = "met", "missed", "inconclusive"
LAG_LIMIT = 1.0  # seconds: an agent process whose event loop was this late fell behind (short of CPU)

# (arrival, updateTime in whole seconds) of one node's NodeMetric, as the watch delivered them.
Reports = Sequence[tuple[float, int]]
# (arrival, whether the Node offers batch resources) of one Node, as the watch delivered them.
Offers = Sequence[tuple[float, bool]]
# Saved beside what was measured, for whoever reads the file; computed again from it when loaded.
FREEZE_FIGURES = ("allFresh", "allBatch", "verdict", "misses")
REPORT_FIGURES = ("verdict",)


def fresh_after(reports: Reports, thawed: float, thaw_second: int) -> float:
    """Seconds from the thaw (`thawed`, the loop's clock) until the first NodeMetric of the node with
    an updateTime after the thaw arrived; NaN if none did. The thaw happens just after the whole
    second `thaw_second`, and updateTime has whole seconds: an updateTime of that second counts."""
    return next((max(arrival - thawed, 0.0) for arrival, updated in reports if updated >= thaw_second), math.nan)


def batch_restored(offers: Offers, thawed: float, end: float) -> float:
    """Seconds from the thaw after which the Node offered batch resources until `end` without a
    break: 0 if it never stopped; NaN if it does not offer them at `end`."""
    seen = [(arrival, offered) for arrival, offered in offers if arrival <= end]
    if not seen or not seen[-1][1]:
        return math.nan
    since = thawed
    for (_, before), (arrival, now) in itertools.pairwise(seen):
        if now and not before:
            since = max(since, arrival)
    return since - thawed


def removals(offers: Offers, start: float, end: float) -> list[float]:
    """When (the loop's clock) the Node's batch resources went away within [start, end]."""
    return [arrival for (_, before), (arrival, now) in itertools.pairwise(offers)
            if before and not now and start <= arrival <= end]


def _without(figures: Sequence[str], saved: Any) -> Any:
    """The saved document less the figures computed from the rest (any other input as it is)."""
    return {k: v for k, v in saved.items() if k not in figures} if isinstance(saved, dict) else saved


@dataclass(config=ConfigDict(extra="forbid"))
class Freeze:
    """One component stopped (SIGSTOP) and continued (SIGCONT), and what followed. A pydantic dataclass,
    saved in benchmarks/plots/outage_recovery.json with its figures and verdict (NaN as null)."""

    component: str  # kube-apiserver or etcd
    nodes: int  # NodeMetrics expected (every node's)
    seconds: NanFloat = math.nan  # how long it was stopped
    fresh: dict[str, NanFloat] = field(default_factory=dict)  # node -> seconds from the thaw to a fresh NodeMetric
    batch: dict[str, NanFloat] = field(default_factory=dict)  # Node -> seconds from the thaw to batch for good
    removed: list[tuple[str, float]] = field(default_factory=list)  # (Node, seconds from the thaw) batch went
    evictions: list[str] = field(default_factory=list)  # new eviction Events: "reason: namespace/pod"
    pods_deleted: list[str] = field(default_factory=list)  # namespace/name of pods on simulated nodes gone
    leader_before: str = ""
    leader_after: str = ""
    resource_version_before: int = 0  # of the NodeMetric list
    resource_version_after: int = 0
    agent_checks: dict[str, str] = field(default_factory=dict)  # selfcheck summary by agent process
    agent_problems: list[str] = field(default_factory=list)  # unrelated to the freeze: inconclusive
    failure: str = ""  # why it could not be measured
    setup_seconds: NanFloat = math.nan  # from the sandbox's start to every simulated Node with batch resources
    lease_taken: NanFloat = math.nan  # from the thaw until the Lease was written by a holder after it
    # CPU seconds used from the thaw until every node was fresh (or the recovery timed out), by
    # component (`component_of`), and that window's length in seconds
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_window: NanFloat = math.nan

    @model_serializer(mode="wrap")
    def _with_figures(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {**handler(self), "allFresh": self.all_fresh, "allBatch": self.all_batch, "verdict": self.verdict,
                "misses": self.misses()}

    @model_validator(mode="before")
    @classmethod
    def _measured_only(cls, saved: Any) -> Any:
        return _without(FREEZE_FIGURES, saved)

    @property
    def all_fresh(self) -> float:
        """Seconds from the thaw until every node's NodeMetric had an updateTime after it (NaN: not all)."""
        values = list(self.fresh.values())
        if len(values) < self.nodes or any(math.isnan(v) for v in values):
            return math.nan
        return max(values, default=math.nan)

    @property
    def all_batch(self) -> float:
        """Seconds from the thaw until every Node offered batch resources for good (NaN: not all)."""
        values = list(self.batch.values())
        if not values or any(math.isnan(v) for v in values):
            return math.nan
        return max(values)

    @property
    def stale(self) -> int:
        return sum(1 for v in self.fresh.values() if math.isnan(v)) + max(self.nodes - len(self.fresh), 0)

    def misses(self) -> list[str]:
        """What the issue's target says went wrong; [] when it was met."""
        found = []
        if not self.all_fresh <= BOUND:
            found.append(f"every NodeMetric fresh {seconds(self.all_fresh)} after the thaw"
                         + (f" ({self.stale} nodes never)" if self.stale else ""))
        if not self.all_batch <= BOUND:
            found.append(f"batch resources on every Node {seconds(self.all_batch)} after the thaw")
        if self.removed:
            found.append(f"batch resources removed {len(self.removed)} times")
        if self.evictions:
            found.append(f"{len(self.evictions)} eviction Events")
        if self.pods_deleted:
            found.append(f"{len(self.pods_deleted)} pods deleted")
        return found

    @property
    def verdict(self) -> str:
        if self.failure or self.agent_problems:
            return INCONCLUSIVE
        return MISSED if self.misses() else MET

    @property
    def resource_version_went_back(self) -> bool:
        return bool(self.resource_version_before and self.resource_version_after
                    and self.resource_version_after < self.resource_version_before)


class OutageConfig(Record):
    model_config = ConfigDict(frozen=True)

    nodes: int = 100  # the real control plane holds about 1,000 on 2 cores
    pods_per_node: int = 10
    components: tuple[str, ...] = ("kube-apiserver", "etcd")
    freeze_seconds: float = 45.0
    baseline_seconds: float = 20.0  # steady state watched before each freeze: the agents' self-check
    # Watched after the recovery for late removals and evictions: past the operator's default grace
    # period (40 s), a new leader's startup grace, so its first judgment of every node falls inside.
    settle_seconds: float = 45.0
    recovery_timeout: float = 300.0
    operator_args: tuple[str, ...] = ()
    # The simulated agents sample usage every 10 s, not every second: reports keep their cadence,
    # but sampling was 47 % of their CPU (py-spy), which they share with the operator on 2 cores.
    agent_args: tuple[str, ...] = ("--collect-interval=10",)
    state_dir: Path = Path(".bench")


class OutageReport(Record):
    """What benchmarks/plots/outage_recovery.json holds, with its verdict."""

    config: OutageConfig
    machine: str = ""  # where it ran (Machine.describe()), described before the run
    seconds: float = 0.0
    freezes: list[Freeze] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _with_verdict(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {**handler(self), "verdict": self.verdict}

    @model_validator(mode="before")
    @classmethod
    def _measured_only(cls, saved: Any) -> Any:
        return _without(REPORT_FIGURES, saved)

    @property
    def verdict(self) -> str:
        """missed if any freeze missed; met if every component's freeze was measured and met."""
        verdicts = [f.verdict for f in self.freezes]
        if MISSED in verdicts:
            return MISSED
        if verdicts and all(v == MET for v in verdicts) and len(verdicts) == len(self.config.components):
            return MET
        return INCONCLUSIVE


def seconds(value: float) -> str:
    return "never" if math.isnan(value) else f"{value:.1f} s"


def freeze_problems(before: Mapping[str, selfcheck.AgentHealth], after: Mapping[str, selfcheck.AgentHealth],
                    lag: Mapping[str, float]) -> list[str]:
    """The agents' self-check problems between `before` (read in the steady state, just before the
    freeze) and `after` (read after the recovery and the settle window) that the freeze does not
    explain, by process; plus every process whose event loop lagged `LAG_LIMIT` or more meanwhile
    (`lag`: the largest lag read, by process): it fell behind on its own, short of CPU.

    What the freeze explains: late heartbeats and the warnings they log (no report accepted and no
    Lease renewed while the control plane is stopped), and failed lists and watches of the agents'
    informers (kube-apiserver stopped, or unable to reach etcd). A restart, a process without nodes,
    heartbeats still overdue or informers still not synced at the end are not explained by it.
    """
    explained = {name: dataclasses.replace(health, informer_failures=before[name].informer_failures)
                 for name, health in after.items() if name in before}
    explained |= {name: health for name, health in after.items() if name not in before}
    found = selfcheck.sandbox_problems(before, explained, warnings_expected=True)
    found += [f"{name}: its event loop lagged {value:.1f} s (short of CPU: the load client fell behind)"
              for name, value in sorted(lag.items()) if value >= LAG_LIMIT]
    return found


# ---- the section -------------------------------------------------------------------------------

def render(report: OutageReport, where: Machine, command: str) -> str:
    c = report.config
    lines = ["## Control-plane outages: recovery after kube-apiserver or etcd is frozen", "",
             *run_lines(command, where, report.seconds),
             "",
             f"`colocation sandbox --apiserver kube` (kube-apiserver, etcd, kwok; 2 operator replicas with the "
             f"default lease timings, 15 s / 10 s / 2 s) with {c.nodes:,} nodes ({c.nodes - 1:,} simulated, "
             f"{c.pods_per_node} pods each), started afresh for each component frozen, agents and operator at "
             "their defaults"
             + (f" but {' '.join(c.agent_args + c.operator_args)}" if c.agent_args or c.operator_args else "")
             + ". In the steady state (a leader, a ready standby, every node's NodeMetric reported within a "
             "heartbeat and a half, every Node with batch resources, the agents' self-check clean over "
             f"{c.baseline_seconds:g} s), {' or '.join(c.components)} is stopped with SIGSTOP "
             f"for {c.freeze_seconds:g} s (past the lease duration: the leader stops leading until it renews the "
             "Lease, or a standby takes it) and "
             "continued with SIGCONT just after a whole second. From the thaw: when every node's NodeMetric has an "
             "updateTime after it (a watch of NodeMetrics through the aggregated API, as a reader sees them, and "
             "a list every second after the thaw, since the watch made before the freeze can hang on the frozen "
             "connection for its 30 s read timeout; updateTime has whole seconds), when every Node offers batch "
             "resources again for good "
             "(`kubernetes.io/batch-cpu` in its allocatable, a watch of the Nodes: 0 if none lost them); over the "
             f"recovery and {c.settle_seconds:g} s more (past the default grace period, a new leader's startup "
             "grace: its first judgment of every node falls inside): batch resources removed, eviction Events "
             "(ColocationEvicting, ColocationEvicted) and pods on simulated nodes deleted.", "",
             f"Target (issue 34): every node's data fresh again within {BOUND:g} s of the thaw, and nothing evicted "
             "or removed that was healthy.", ""]
    rows = []
    for f in report.freezes:
        values = [v for v in f.fresh.values() if not math.isnan(v)]
        rows.append([f"{f.component}", f"{f.seconds:.0f}", f"{seconds(f.all_fresh)}",
                     f"{percentile(values, 0.5):.1f} / {percentile(values, 0.9):.1f}" if values else "n/a",
                     f"{seconds(f.all_batch)}", str(len(f.removed)), str(len(f.evictions)), str(len(f.pods_deleted)),
                     leadership(f),
                     verdict_cell(f.verdict)])
    if rows:
        lines += [table(["Frozen", "Seconds", "Every NodeMetric fresh", "Per node p50 / p90 (s)",
                         "Every Node with batch", "Batch removed", "Eviction Events", "Pods deleted", "Lease",
                         f"≤ {BOUND:g} s after the thaw"], rows), ""]
    lines.append(f"Verdict: **≤ {BOUND:g} s after the thaw: {report.verdict}**"
                 + ("" if report.verdict != INCONCLUSIVE else
                    " (the simulated agents reported problems the freeze does not explain, or a freeze could "
                    "not be measured: see below)") + ".")
    for f in report.freezes:
        if f.misses():
            lines += ["", f"{f.component}: " + "; ".join(f.misses()) + "."]
        if f.removed:
            lines.append(f"{f.component}: batch resources removed (Node, seconds from the thaw): "
                         + ", ".join(f"{node} {at:+.1f}" for node, at in f.removed[:10])
                         + (" …" if len(f.removed) > 10 else "") + ".")
        if f.resource_version_went_back:
            lines += ["", f"{f.component}: the NodeMetric list's resourceVersion went back, from "
                          f"{f.resource_version_before} to {f.resource_version_after}."]
        if f.failure:
            lines += ["", f"{f.component}: not measured: {f.failure}."]
    lines += ["", "The agent processes' self-check (`colocation.agent.selfcheck`), read just before each freeze "
                  "and after its settle window, ignoring what the freeze itself causes (late heartbeats, their "
                  "warnings, failed informer lists and watches), and a steady-state window before it:"]
    problems = [f"{f.component}: {p}" for f in report.freezes for p in f.agent_problems]
    lines += [f"- {p}" for p in problems] if problems else ["- no problems."]
    lines += cpu_lines(report.freezes)
    setups = [f"{f.component} {seconds(f.setup_seconds)}" for f in report.freezes if not math.isnan(f.setup_seconds)]
    if setups:
        lines += ["", "Setup (the sandbox started, every node reporting, every simulated Node with batch resources): "
                  + ", ".join(setups) + "."]
    lines += ["", f"Raw samples (seconds from each thaw to each node's fresh NodeMetric, and to its Node's batch "
                  f"resources): `benchmarks/plots/{RAW.name}`."]
    return "\n".join(lines)


def cpu_lines(freezes: list[Freeze]) -> list[str]:
    """Where the machine's CPU went from each thaw until every node was fresh: the operator competes
    with the control plane and the simulated machines (kwok, the simulated agents) on the same cores."""
    measured = [f for f in freezes if f.cpu and f.cpu_window > 0]
    if not measured:
        return []
    components = sorted({name for f in measured for name in f.cpu}, key=lambda name: -sum(f.cpu.get(name, 0.0)
                                                                                          for f in measured))
    rows = [[name, *(f"{f.cpu.get(name, 0.0):.1f} ({f.cpu.get(name, 0.0) / f.cpu_window:.2f})" for f in measured)]
            for name in components]
    rows.append(["all", *(f"{sum(f.cpu.values()):.1f} ({sum(f.cpu.values()) / f.cpu_window:.2f})" for f in measured)])
    lines = ["", "CPU seconds from the thaw until every node was fresh, by process (in brackets: cores, on "
                 "average over that window). The Lease was written by a leader after the thaw "
             + ", ".join(f"{seconds(f.lease_taken)} after it ({f.component})" for f in measured) + ".", "",
             table(["Process", *(f"{f.component} ({f.cpu_window:.1f} s)" for f in measured)], rows)]
    return lines


def leadership(f: Freeze) -> str:
    """Whether the Lease went to another replica (the replicas' names are in the raw samples)."""
    if not f.leader_before or not f.leader_after:
        return "n/a"
    return "kept" if f.leader_before == f.leader_after else "moved"


def verdict_cell(verdict: str) -> str:
    return f"**{verdict}**" if verdict == MISSED else verdict


def save_raw(report: OutageReport, path: Path = RAW, where: Machine | None = None) -> None:
    report.model_copy(update={"machine": where.describe() if where is not None else ""}).to_file(path)


def write(output: Path, report: OutageReport, where: Machine, command: str) -> None:
    write_section(output, SUITE, render(report, where, command))
