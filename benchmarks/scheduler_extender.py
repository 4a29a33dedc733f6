"""The load-aware scheduler extender (issue 40): its latency, kube-scheduler's throughput with it, its placements.

    python -m benchmarks.run --suite scheduler-extender [--se-nodes 50 --se-pods 1000 ...]

Three parts (`--se-parts`, default all):

- latency (`benchmarks/scheduler_extender_latency.py`): filter and prioritize, in-process through
  the extender's aiohttp application on loopback (plain HTTP, no TLS), at `--se-latency-nodes`
  candidates (default 1,000 and 5,000), `--se-latency-calls` pods each; p50 and p99 against the
  goal of 10 ms per verb;
- throughput and placement (`benchmarks/scheduler_extender_kube.py`): the real kube-scheduler on
  the real control plane, first alone (`colocation sandbox --no-scheduler-extender`) then with
  the extender: pods/s binding `--se-pods` pods, and where `--se-placement-pods` pods land on
  nodes of a skewed load (the spread and the highest node usage after), with the extender also
  with `tentativeHoldSeconds: 0` (the burst without tentative placements).

A kube run whose agents' self-check found a problem, or whose pods were created no faster than
kube-scheduler bound them (the client, not the scheduler, was measured), states no verdict:
"inconclusive". Raw samples: benchmarks/plots/scheduler_extender.json.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import machine, markdown
from benchmarks.client import say
from benchmarks.results import Record
from benchmarks.scheduler_extender_kube import KubeConfig, Placement, SystemRun
from benchmarks.scheduler_extender_kube import run as run_kube
from benchmarks.scheduler_extender_latency import LatencyFigures
from benchmarks.scheduler_extender_latency import run as run_latency
from benchmarks.stats import ms

SUITE = "scheduler-extender"
PARTS = ("latency", "kube")
RAW = Path(__file__).resolve().parent / "plots" / "scheduler_extender.json"
GOAL_P99_SECONDS = 0.010


@dataclass(frozen=True, kw_only=True)
class SchedulerExtenderConfig:
    parts: tuple[str, ...] = PARTS
    latency_nodes: tuple[int, ...] = (1000, 5000)
    latency_calls: int = 200
    kube: KubeConfig = field(default_factory=KubeConfig)


@dataclass
class Results:
    latency: list[LatencyFigures] = field(default_factory=list)
    runs: list[SystemRun] = field(default_factory=list)


def latency_verdict(p99: float) -> str:
    if math.isnan(p99):
        return "not measured"
    return "met" if p99 <= GOAL_P99_SECONDS else "missed"


def spread(placement: Placement) -> tuple[float, float]:
    """(population standard deviation, maximum) of the nodes' cpu usage after the placement, in %."""
    usage = list(placement.usage().values())
    if not usage:
        return math.nan, math.nan
    return statistics.pstdev(usage), max(usage)


def less_is_better(reference: float, value: float) -> str:
    if math.isnan(reference) or math.isnan(value):
        return "not measured"
    if math.isclose(value, reference, rel_tol=1e-9, abs_tol=1e-9):
        return "even"
    return "better" if value < reference else "worse"


def problems_of(runs: list[SystemRun], part: str) -> list[str]:
    """The agents' problems over `part` ("throughput" or "placement") of each run."""
    return [f"{run.system}: {problem}" for run in runs
            for problem in (run.throughput_problems if part == "throughput" else run.placement_problems)]


def throughput_inconclusive(runs: list[SystemRun]) -> list[str]:
    """Why the throughput comparison states no verdict: the agents' problems, or a burst limited by its client
    or timed late."""
    reasons = problems_of(runs, "throughput")
    reasons += [f"{run.system}: the nodes were labelled no faster than the pods were bound (the client was measured)"
                for run in runs if any(burst.client_bound for burst in run.bursts)]
    reasons += [f"{run.system}: kube-apiserver closed the watch as too slow, and the last binding was seen in the "
                "list after it (its time is late)" for run in runs if any(burst.last_listed for burst in run.bursts)]
    return reasons


def median_rate(run: SystemRun) -> float:
    """The median of the run's bursts' pods per second."""
    rates = [burst.pods_per_second for burst in run.bursts]
    return statistics.median(rates) if rates and not any(math.isnan(rate) for rate in rates) else math.nan


def latency_lines(figures: list[LatencyFigures]) -> list[str]:
    rows = [[f"{f.nodes:,} candidates ({f.passed:,} passed the filter)", verb, f"{latency.count:,}", ms(latency.p50),
             ms(latency.p99), ms(latency.max), latency_verdict(latency.p99)]
            for f in figures for verb, latency in (("filter", f.filter), ("prioritize", f.prioritize))]
    return ["### Latency", "",
            "In-process: the extender as the manager assembles it, served by its aiohttp application on a "
            "loopback port of the benchmark's process (plain HTTP, no TLS) and called as kube-scheduler calls it "
            "(`NodeNames`), one pod at a time: filter with every candidate, then prioritize with those it passed. "
            "Every node has a fresh report; the pods have UIDs, so each is placed tentatively (the default 30 s "
            "hold) and the later calls carry those placements. Milliseconds, the client's view (request sent "
            "to answer read). Goal: p99 at most 10 ms per verb.", "",
            markdown.table(["candidates", "verb", "calls", "p50 ms", "p99 ms", "max ms", "goal"], rows)]


def throughput_lines(runs: list[SystemRun]) -> list[str]:
    reasons = throughput_inconclusive(runs)
    rows = [[run.system, str(index + 1), f"{burst.pods:,}", f"{burst.pods_per_second:,.1f}", f"{burst.opened_in:,.2f}",
             f"{burst.bound_at[-1]:,.1f}" if burst.bound_at else "n/a", f"{burst.watch_resumes:,}", burst.timed_by]
            for run in runs for index, burst in enumerate(run.bursts)]
    alone, extended = median_rate(runs[0]), median_rate(runs[1])
    ratio = extended / alone if alone > 0 and not math.isnan(extended) else math.nan
    verdict = ("inconclusive: " + "; ".join(reasons)) if reasons else (
        f"with the extender kube-scheduler binds {ratio:.2f}x the pods per second it binds alone"
        if not math.isnan(ratio) else "not measured")
    return ["### Throughput", "",
            "The real kube-scheduler (its client at 500 QPS, burst 1,000) binding pods of 10m cpu, in bursts, each "
            "system's figure the median of its bursts. In each burst the pods are "
            "created first with a node selector no node matches; then every simulated node is given that label, 8 "
            "requests in flight, and a watch times each binding. Pods/s: the pods over the seconds from the first "
            "label sent to the last binding. Each binding's time is its Scheduled Event's (`eventTime`, in "
            "microseconds, written by kube-scheduler). Without an Event for every pod, it is when the watch showed "
            "the pod bound; when kube-apiserver closed the watch as too slow (it does so under such a burst on 2 "
            "cores), the watch listed the pods bound meanwhile and went on, and if the last binding was seen in such "
            "a list, the run states no verdict.", "",
            markdown.table(["scheduler", "burst", "pods", "bound pods/s", "nodes labelled in, s", "last bound, s",
                            "watch resumed", "timed by"],
                           rows), "",
            f"Medians: {alone:,.1f} pods/s alone, {extended:,.1f} with the extender. Ratio (with / without the "
            f"extender): {ratio:.2f}. Verdict: {verdict}." if not math.isnan(ratio)
            else f"Verdict: {verdict}."]


def placement_lines(runs: list[SystemRun], config: KubeConfig) -> list[str]:
    placements = [p for run in runs for p in run.placements]
    if not placements:
        return []
    reference_stdev, reference_max = spread(placements[0])
    reasons = problems_of(runs, "placement")
    rows = []
    for index, placement in enumerate(placements):
        stdev, highest = spread(placement)
        verdict = "reference" if index == 0 else ("inconclusive" if reasons else
                                                  f"spread {less_is_better(reference_stdev, stdev)}, "
                                                  f"max {less_is_better(reference_max, highest)}")
        rows.append([placement.label, f"{len(placement.placed):,}", f"{placement.pod_cpu:,}m", f"{stdev:.1f}",
                     f"{highest:.1f}", f"{placement.most_on_one_node():,}", verdict])
    before = spread(Placement(label="before", pod_cpu=0, allocatable=placements[0].allocatable,
                              base=placements[0].base))
    return ["### Placement on a skewed load", "",
            f"{len(placements[0].allocatable)} simulated nodes whose pods use (their annotations, which their "
            "agents report) from 80 % of the first node's allocatable cpu down to 10 % of the last's; then pods "
            f"that use what they request, together {config.new_load:.0%} of the nodes' allocatable cpu, created "
            "at once. Node usage: its pods' annotated cpu, the new ones' included, in % of its allocatable. "
            f"Before the placement: standard deviation {before[0]:.1f}, max {before[1]:.1f}. Verdicts against "
            "kube-scheduler alone (less is better).", "",
            markdown.table(["scheduler", "pods", "pod cpu", "usage std dev, %", "max node usage, %",
                            "most pods on one node", "verdict"], rows), "",
            *([f"No verdict: the agents' self-check found problems: {'; '.join(reasons)}."] if reasons
              else ["The agents' self-check was clean over both runs' placements."])]


def render(results: Results, config: SchedulerExtenderConfig, where: machine.Machine, command: str,
           seconds: float) -> str:
    kube = config.kube
    size = (f"Sandboxes of {kube.nodes} nodes, {kube.pods_per_node} pods each; {kube.pods:,} pods for the throughput, "
            f"{kube.placement_pods:,} placed." if results.runs else "")
    lines = ["## Scheduler extender", "", *markdown.run_lines(command, where, seconds, size), "",
             "How: [benchmarks/scheduler_extender.py](benchmarks/scheduler_extender.py).", ""]
    if results.latency:
        lines += [*latency_lines(results.latency), ""]
    if len(results.runs) == 2:
        lines += [*throughput_lines(results.runs), "", *placement_lines(results.runs, kube)]
    return "\n".join(lines).rstrip() + "\n"


class SchedulerExtenderSamples(Record):
    """What benchmarks/plots/scheduler_extender.json holds: the machine, each size's calls, each system's run."""

    machine: machine.Machine
    latency: list[LatencyFigures]
    runs: list[SystemRun]


def save_raw(results: Results, path: Path, where: machine.Machine) -> None:
    SchedulerExtenderSamples(machine=where, latency=results.latency, runs=results.runs).to_file(path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    c, k = SchedulerExtenderConfig(), KubeConfig()
    p.add_argument("--se-parts", default=",".join(c.parts),
                   help="scheduler-extender: the parts to run, comma-separated: latency (in-process), kube (the real "
                        "control plane: throughput and placement).")
    p.add_argument("--se-latency-nodes", default=",".join(str(n) for n in c.latency_nodes),
                   help="scheduler-extender: candidate nodes of the latency calls, comma-separated.")
    p.add_argument("--se-latency-calls", type=int, default=c.latency_calls,
                   help="scheduler-extender: pods (a filter and a prioritize each) per size.")
    p.add_argument("--se-nodes", type=int, default=k.nodes, help="scheduler-extender: nodes of each sandbox "
                                                                 "(one is this machine's).")
    p.add_argument("--se-pods-per-node", type=int, default=k.pods_per_node,
                   help="scheduler-extender: pods on each simulated node before the runs.")
    p.add_argument("--se-pods", type=int, default=k.pods, help="scheduler-extender: pods of each throughput burst.")
    p.add_argument("--se-bursts", type=int, default=k.bursts,
                   help="scheduler-extender: throughput bursts per system (the figure is their median).")
    p.add_argument("--se-placement-pods", type=int, default=k.placement_pods,
                   help="scheduler-extender: pods placed on the skewed load.")
    p.add_argument("--se-new-load", type=float, default=k.new_load,
                   help="scheduler-extender: the placed pods' cpu, together, as a share of the simulated nodes' "
                        "allocatable cpu.")
    p.add_argument("--se-raw", type=Path, default=RAW, help="scheduler-extender: where the raw samples go (JSON).")


def config_from(args: argparse.Namespace, state_dir: Path) -> SchedulerExtenderConfig:
    parts = tuple(part for part in args.se_parts.split(",") if part)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"--se-parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    return SchedulerExtenderConfig(
        parts=parts, latency_nodes=tuple(int(n) for n in args.se_latency_nodes.split(",") if n),
        latency_calls=args.se_latency_calls,
        kube=KubeConfig(state_dir=state_dir, nodes=args.se_nodes, pods_per_node=args.se_pods_per_node,
                        pods=args.se_pods, bursts=args.se_bursts, placement_pods=args.se_placement_pods,
                        new_load=args.se_new_load))


def run_suite(config: SchedulerExtenderConfig, output: Path, command: str, raw: Path = RAW) -> Results:
    where = machine.describe()  # before the run: its outputs (tracked files) would read as "+changes"
    started = time.monotonic()
    results = Results()
    if "latency" in config.parts:
        results.latency = run_latency(config.latency_nodes, config.latency_calls)
        for figures in results.latency:
            say(f"{SUITE}: {figures.nodes:,} candidates: filter p99 {ms(figures.filter.p99)} ms, "
                f"prioritize p99 {ms(figures.prioritize.p99)} ms")
    if "kube" in config.parts:
        results.runs = asyncio.run(run_kube(config.kube))
    save_raw(results, raw, where)
    markdown.write_section(output, SUITE, render(results, config, where, command, time.monotonic() - started))
    say(f"wrote the {SUITE} section of {output} and {raw}")
    return results


__all__ = ["SUITE", "SchedulerExtenderConfig", "add_arguments", "config_from", "render", "run_suite"]
