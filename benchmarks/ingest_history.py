"""Before and after the ingest work (issue 20): where the leader's CPU per report went, and each stage's cost.

Two kept records: `benchmarks/ingest_before.json`, the operator-ingest figures as published at
commit 440a805 (the run before the report path was reworked: sizes in the same format as
`ingest_results.json`), and `benchmarks/ingest_stages.json`, the in-process stage timings of
`benchmarks.ingest_stages` under labels ("before": commit 440a805's code, "after": this checkout,
re-measured by every ingest run). The tables below are computed from them and from the current
results; nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from benchmarks.ingest_figures import TARGET_RATE, SizeReport, StageRun, StageRuns, StageTimings, load_all
from benchmarks.markdown import table

ROOT = Path(__file__).resolve().parents[1]
BEFORE = ROOT / "benchmarks" / "ingest_before.json"
STAGES = ROOT / "benchmarks" / "ingest_stages.json"


def load_before(path: Path = BEFORE) -> dict[int, SizeReport]:
    return load_all(path)


def load_stages(path: Path = STAGES) -> dict[str, StageRun]:
    return StageRuns.from_file(path).root if path.exists() else {}


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def remeasured(before: dict[int, SizeReport], after: dict[int, SizeReport]) -> list[int]:
    """The sizes run again since the "before" figures (a size not re-run keeps its old run)."""
    return [nodes for nodes in sorted(set(before) & set(after))
            if (before[nodes].date, before[nodes].machine) != (after[nodes].date, after[nodes].machine)]


def _us_or_na(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else _us(seconds)


def cpu_rows(before: dict[int, SizeReport], after: dict[int, SizeReport]) -> list[list[str]]:
    """Per size measured both times: leader CPU per report, one core's worth, and the target on it."""
    rows = []
    for nodes in remeasured(before, after):
        b, a = before[nodes].ingest, after[nodes].ingest
        if b is None or a is None:
            continue
        rows.append([f"{nodes:,}", _us(b.server_cpu_per_report), _us(a.server_cpu_per_report),
                     f"{a.server_cpu_per_report / b.server_cpu_per_report - 1:+.0%}",
                     _us_or_na(b.server_system_cpu_per_report), _us_or_na(a.server_system_cpu_per_report),
                     f"{b.one_core_rate:,.0f}",
                     f"{a.one_core_rate:,.0f}", "met" if a.one_core_rate >= TARGET_RATE else "**missed**",
                     f"{max(0.0, a.server_cpu_per_report - 1 / TARGET_RATE) * 1e6:,.0f}"])
    return rows


def profile_rows(before: SizeReport, after: SizeReport) -> list[list[str]]:
    """Each activity's share of the samples and, times the CPU per report, its µs per report."""
    b_cpu = before.ingest.server_cpu_per_report if before.ingest else 0.0
    a_cpu = after.ingest.server_cpu_per_report if after.ingest else 0.0
    b_share, a_share = dict(before.profile), dict(after.profile)
    labels = sorted(set(b_share) | set(a_share), key=lambda label: -max(b_share.get(label, 0), a_share.get(label, 0)))
    return [[label, f"{b_share.get(label, 0):.1%}", _us(b_share.get(label, 0) * b_cpu),
             f"{a_share.get(label, 0):.1%}", _us(a_share.get(label, 0) * a_cpu)] for label in labels]


def remaining(before: dict[int, SizeReport], after: dict[int, SizeReport]) -> list[str]:
    """Per re-measured size: how far the CPU per report came and the largest activities left."""
    notes = []
    for nodes in remeasured(before, after):
        b, a = before[nodes], after[nodes]
        if b.ingest is None or a.ingest is None:
            continue
        cpu = a.ingest.server_cpu_per_report
        verdict = ("within the target" if cpu <= 1 / TARGET_RATE else
                   f"{(cpu - 1 / TARGET_RATE) * 1e6:,.0f} µs per report above the target's {1e6 / TARGET_RATE:,.0f}")
        largest = ", ".join(f"{label} {share * cpu * 1e6:,.0f} µs" for label, share in a.profile[:3])
        sends = dict(a.profile).get("response: TLS encryption and send", 0.0) * cpu
        kernel = a.ingest.server_system_cpu_per_report
        if not math.isnan(kernel) and sends > kernel:
            largest += (f" (the sends' {sends * 1e6:,.0f} µs exceed the leader's whole kernel time, "
                        f"{kernel * 1e6:,.0f} µs per report, which bounds their CPU: the rest is time spent "
                        f"waiting for the core)")
        notes.append(f"{nodes:,} nodes: {b.ingest.server_cpu_per_report * 1e6:,.0f} → {cpu * 1e6:,.0f} µs of leader "
                     f"CPU per report ({a.ingest.one_core_rate:,.0f}/s on one core), {verdict}; the leader was "
                     f"{a.ingest.server_busy:.0%} busy on a machine with load average {a.load_average or 'n/a'}"
                     + (f"; the largest activities left: {largest}" if largest else "") + ".")
    return notes


def _stages_of(stages: dict[str, StageRun], label: str) -> dict[str, StageTimings]:
    return stages[label].stages if label in stages else {}


def stage_rows(stages: dict[str, StageRun]) -> list[list[str]]:
    before, after = _stages_of(stages, "before"), _stages_of(stages, "after")
    rows = []
    for name in after or before:
        b, a = before.get(name), after.get(name)

        def figures(run: StageTimings | None) -> str:
            return "n/a" if run is None else " / ".join(f"{v:.1f}" for v in (run.min, run.median, run.p90, run.max))

        change = (f"{a.min / b.min - 1:+.0%} / {a.median / b.median - 1:+.0%}"
                  if a is not None and b is not None and b.min and b.median else "n/a")
        rows.append([name, figures(b), figures(a), change])
    return rows


def _run_line(label: str, run: StageRun) -> str:
    return (f"{label}: commit {run.commit}, {run.date}, Python {run.python}, {run.nodes:,} nodes x "
            f"{run.pods} pods, {run.repeats} repeats, load average {run.load_average}")


def section(before: dict[int, SizeReport], after: dict[int, SizeReport], stages: dict[str, StageRun]) -> list[str]:
    """The "before and after" part of the ingest section ([] when there is nothing to compare)."""
    parts: list[str] = []
    rows = cpu_rows(before, after)
    if rows:
        published = next(iter(before.values()))
        parts += ["### Before and after the report path's rework (issue 20)", "",
                  f"Before: the figures published at commit 440a805 (`benchmarks/ingest_before.json`, run "
                  f"{published.date}, {published.machine}). After: this section's runs. Target: ≥ "
                  f"{TARGET_RATE:,.0f} reports/s on one core, i.e. at most {1e6 / TARGET_RATE:,.0f} µs of leader CPU "
                  f"per report.", "",
                  table(["nodes", "leader CPU µs/report before", "after", "change", "of which kernel before",
                         "after", "one core's worth/s before", "after", f"≥ {TARGET_RATE:,.0f}/s on one core",
                         "µs/report still to cut"], rows), "",
                  "Kernel: the leader's system time, from /proc/PID/stat (not recorded before).", ""]
        for nodes in remeasured(before, after):
            if before[nodes].profile and after[nodes].profile:
                parts += [f"Where the leader's time goes at {nodes:,} nodes: py-spy's shares of the sampled ingest, "
                          f"times the CPU per report of the sustained ingest. py-spy samples a thread whenever it is "
                          f"runnable, so on a shared core a long call also collects the time other processes held "
                          f"the core: these are shares of time, not CPU measured per activity.", "",
                          table(["activity", "share before", "µs/report before", "share after", "µs/report after"],
                                profile_rows(before[nodes], after[nodes])), ""]
    parts += [f"- {note}" for note in remaining(before, after)]
    if parts and parts[-1].startswith("- "):
        parts.append("")
    stage_table = stage_rows(stages)
    if stage_table:
        parts += ["### µs per report by stage, in one process (`python -m benchmarks.ingest_stages`)", "",
                  "Each stage of the report path run alone on the load client's reports, caches warm, no HTTP or "
                  "TLS (what the bare server also pays); min / median / p90 / max over the repeats, raw samples in "
                  "`benchmarks/ingest_stages.json`. In the running leader the same code costs more (the core is "
                  "shared with the TLS, the event loop and, here, other processes), so these add up to less than "
                  "the CPU per report above.", "",
                  *[f"- {_run_line(label, run)}" for label, run in stages.items()], "",
                  table(["stage", "before µs (min / median / p90 / max)", "after µs (min / median / p90 / max)",
                         "change (min / median)"], stage_table), "",
                  "On a shared machine the minimum is the least disturbed figure: other processes only ever add "
                  "time to a repeat.", ""]
    return parts


def main(argv: list[str] | None = None) -> int:
    """Write the operator-ingest section again from the kept figures (after `ingest_stages` was re-run)."""
    from benchmarks import ingest_report
    from benchmarks.operator_ingest import PLOTS, RESULTS

    p = argparse.ArgumentParser(prog="python -m benchmarks.ingest_history", description=main.__doc__)
    p.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = p.parse_args(argv)
    everything = load_all(RESULTS)
    plots = ingest_report.plot(everything, PLOTS)
    ingest_report.write(args.output, ingest_report.render(everything, plots, args.output.parent, load_before(),
                                                          load_stages()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
