"""The "Leader at scale" section of BENCHMARKS.md, its raw samples (JSON) and its plot (CPU and RSS vs nodes)."""

from __future__ import annotations

import asyncio
import math
import statistics
from pathlib import Path

from benchmarks import leader_scale, machine, plotting
from benchmarks.client import say
from benchmarks.leader_scale import CONNECTION_PROBES, ScaleConfig, ScaleReport
from benchmarks.leader_scale_figures import (
    AGENTS_SATURATED,
    BEFORE_COMMIT,
    BEFORE_LEADER,
    BEFORE_LEADER_CACHES,
    BEFORE_STANDBY_RSS,
    BUILTIN,
    EXTRAPOLATE_INTERVAL,
    EXTRAPOLATE_NODES,
    FAILOVER_GROWTH,
    FAILOVER_TARGET,
    MACHINE_SATURATED,
    REPORTS_BEHIND,
    TAKEOVER_MARGIN,
    SizeResult,
    before_standby_fit,
    cache_memory_fit,
    cpu_fit,
    extrapolate,
    fitted,
    memory_fit,
    standby_memory_fit,
    verdicts,
)
from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.stats import size

SECTION = "leader-scale"
RAW = leader_scale.PLOTS / "leader_scale.json"
PLOT = "leader_scale.png"


def save_raw(report: ScaleReport, path: Path = RAW, where: Machine | None = None) -> None:
    report.model_copy(update={"machine": where}).to_file(path)


def plot(report: ScaleReport, path: Path) -> Path | None:
    measured = [r.window for r in report.results if r.window is not None and r.apiserver == BUILTIN]
    kube = [r.window for r in report.results if r.window is not None and r.apiserver != BUILTIN]
    if not measured and not kube:
        return None
    plt = plotting.pyplot()
    fig, (cpu, rss) = plt.subplots(1, 2, figsize=(10, 4))
    nodes = [w.nodes for w in measured]
    cpu.plot(nodes, [w.leader_cores for w in measured], "o-", label="leader")
    cpu.plot(nodes, [w.standby_cores for w in measured], "s--", label="standby")
    cpu.plot(nodes, [w.agents_cores for w in measured], "^:", label="simulated agents (load client)")
    if kube:
        cpu.plot([w.nodes for w in kube], [w.leader_cores for w in kube], "D", label="leader, real control plane")
    cpu.set_xlabel("nodes")
    cpu.set_ylabel("cores")
    cpu.set_title(f"CPU, every node reporting every {report.config.report_interval:g} s")
    cpu.legend()
    rss.plot(nodes, [w.leader_rss / 2**20 for w in measured], "o-", label="leader")
    rss.plot(nodes, [w.standby_rss / 2**20 for w in measured], "s--", label="standby")
    if kube:
        rss.plot([w.nodes for w in kube], [w.leader_rss / 2**20 for w in kube], "D", label="leader, real control plane")
    line = memory_fit(fitted(report.results))
    if line is not None:
        ends = [0, max(nodes)]
        rss.plot(ends, [(line[0] + line[1] * n) / 2**20 for n in ends], ":",
                 label=f"fit: {line[1] / 1024:.1f} KiB/node")
    rss.set_xlabel("nodes")
    rss.set_ylabel("MiB")
    rss.set_title("RSS")
    rss.legend()
    return plotting.save(fig, path)


def _f(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def _window_rows(results: list[SizeResult]) -> list[list[str]]:
    return [[r.label, _f(w.leader_cores), _f(w.standby_cores), size(w.leader_rss),
             f"{size(w.leader_window_bytes)} ({w.leader_window_events:,})", f"{w.leader_connections:,}",
             "n/a" if math.isnan(w.connection_bytes) else size(int(w.connection_bytes)), size(w.standby_rss),
             f"{w.report_rate:,.0f} ({w.reports / w.expected_reports:.0%} of due)", _f(w.us_per_report, 0),
             _f(w.us_per_report_all_in, 0), f"{w.evaluation_rate:.2f}", _f(w.us_per_node_evaluation, 1),
             _f(w.us_per_node_evaluation_wall, 1), _f(w.evaluation_share * 100, 0),
             f"{w.batch_writes:,.0f}", _f(extrapolate(w)), _f(extrapolate(w, burst=r.burst)), _f(w.agents_cores),
             _f(w.control_plane_cores)]
            for r in results if (w := r.window) is not None]


def _burst_rows(results: list[SizeResult]) -> list[list[str]]:
    return [[r.label, _f(b.seconds, 0), f"{b.rate:,.0f}", f"{b.baseline_rate:,.0f}",
             f"{b.probe_reports:,} ({b.failed:,} failed)", _f(b.client_cores), _f(b.baseline_cores),
             _f(b.leader_cores), _f(b.us_per_report, 0)]
            for r in results if (b := r.burst) is not None]


def _latency_rows(results: list[SizeResult]) -> list[list[str]]:
    return [[r.label, str(r.latency.count), _f(r.latency.p50), _f(r.latency.p99), _f(r.latency.max),
             str(len(r.latency_failures))] for r in results if r.latencies or r.latency_failures]


def _kill_rows(results: list[SizeResult]) -> list[list[str]]:
    return [[r.label, str(k.index + 1), _f(k.lease_moved), _f(k.first_evaluation), _f(k.evaluation_after),
             _f(k.evaluation_seconds), _f(k.all_reported, 1), _f(k.converged, 1), k.note or "—"]
            for r in results for k in r.kills]


def _median(values: list[float]) -> float:
    """The median, a missing figure (NaN: not reached before the timeout) counting as the latest."""
    finite = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan
    if len(finite) * 2 <= len(values):  # the median is a missing one
        return math.nan
    return statistics.median([math.inf if math.isnan(v) else v for v in values])


def _spread(values: list[float]) -> str:
    """min / median / max, NaN (not reached) counting as the latest."""
    if not values:
        return "n/a"
    late = [math.inf if math.isnan(v) else v for v in values]
    return " / ".join("never" if math.isinf(v) else f"{v:.2f}" for v in (min(late), statistics.median(late), max(late)))


def _failover_rows(results: list[SizeResult]) -> list[list[str]]:
    """The node counts side by side: the counted kills' figures."""
    rows = []
    for r in results:
        if not (kills := r.counted_kills):
            continue
        rows.append([r.label, str(len(kills)), _spread([k.first_evaluation for k in kills]),
                     _f(_median([k.evaluation_seconds for k in kills])), _f(_median([k.lease_moved for k in kills])),
                     _f(_median([k.all_reported for k in kills]), 1), _f(_median([k.converged for k in kills]), 1),
                     _f(max((k.resolution for k in kills if not math.isnan(k.resolution)), default=math.nan))])
    return rows


def _stop_rows(results: list[SizeResult]) -> list[list[str]]:
    return [[r.label, str(t.index + 1), _f(t.lease_duration, 0), _f(t.bound, 0), _f(t.lease_moved),
             _f(t.first_evaluation), _f(t.evaluation_after), _f(t.evaluation_seconds),
             "within" if t.within else ("not counted: " + t.void if t.void else "over")]
            for r in results for t in r.stops]


def _resolution(results: list[SizeResult]) -> float:
    spans = [k.resolution for r in results for k in r.kills] + [t.resolution for r in results for t in r.stops]
    spans = [span for span in spans if not math.isnan(span)]
    return max(spans, default=math.nan)


def _failover_lines(report: ScaleReport) -> list[str]:
    c, results = report.config, report.results
    poll = (f"polled every {c.failover_poll:g} s (one GET of the Lease and one GET /metrics of the standby, "
            "together)")
    resolution = _resolution(results)
    late = ("" if math.isnan(resolution) else
            f"; over this run's kills and stops that is at most {resolution:.2f} s (the column \"finished after\")")
    lines = ["", "### Failover: from a SIGKILL of the leader to the new leader's first finished evaluation", "",
             f"The leader is sent SIGKILL {c.kills} times per node count (the sandbox starts it again at once, as a "
             "standby; each kill waits for a ready standby holding every node's NodeMetric). Seconds from the "
             "signal: the Lease naming the new holder; the new leader's first finished evaluation of every node "
             "(the verdict's figure): its `colocation_reconcile_duration_seconds_count` above what it was before "
             "the kill, which moves only when an evaluation of every node returns (its duration is observed "
             "then) and stays at 0 on a standby (its evaluation loop waits for its promotion), "
             f"{poll}. The figure is when the poll that saw it was answered; the evaluation finished after the "
             f"last poll that did not see it was sent, so the figure is late by at most their difference{late}. "
             "\"Its duration\" is that evaluation's own (the histogram's sum). Then, for information (polled every "
             "0.25 s): every node's NodeMetric on the new leader with an updateTime from after the kill (a watch on "
             "it, whole seconds; the standby's copy is current, so the first evaluation needs none of them), and "
             "an evaluation finished after that (converged).", "",
             f"Rules: every kill ≤ {FAILOVER_TARGET:g} s at every node count, on the builtin API server and on the "
             f"real control plane; it does not grow with the node count: on each control plane, the median at its "
             f"largest count ≤ the median at its smallest + {FAILOVER_GROWTH:g} s (a kill without an evaluation "
             "before the timeout counts as the latest). A miss at a count whose window had the load client held "
             "down is inconclusive." + (" One more kill per count, with py-spy on the standby, is shown but not "
                                        "counted (py-spy takes CPU on the same cores)."
                                        if any(k.profiled for r in results for k in r.kills) else ""), "",
             table(["Nodes", "Kills", "First evaluation, min / median / max s", "Its duration, median s",
                    "Lease moved, median s", "Every node re-reported, median s", "Converged, median s",
                    "Poll resolution, max s"], _failover_rows(results))]
    over_lines = []
    for r in results:
        over = [k for k in r.counted_kills if not k.first_evaluation <= FAILOVER_TARGET]
        if over:
            over_lines.append(
                f"Over {FAILOVER_TARGET:g} s at {r.label} nodes: {len(over)} of {len(r.counted_kills)} kills; there "
                f"the Lease moved at {_f(_median([k.lease_moved for k in over]))} s and the first evaluation itself "
                f"took {_f(_median([k.evaluation_seconds for k in over]))} s (medians)"
                + ("; where its time went: the profile below." if r.failover_profile_samples else
                   "; no profile of the failover at this count.")
                + (" The load client was held down there." if r.saturation() else "") + "  ")
    lines += ["", *over_lines] if over_lines else []
    lines += ["", "Every kill:", "",
              table(["Nodes", "Kill", "Lease moved", "First evaluation", "Finished after", "Its duration",
                     "Every node re-reported", "Converged", "Note"], _kill_rows(results))]
    if any(r.stops for r in results) or c.stops:
        lines += ["", "### Leader gone without a restart: from a SIGSTOP of the leader to the new leader's first "
                      "finished evaluation", "",
                  f"The leader is sent SIGSTOP {c.stops} times per node count: it neither renews nor releases its "
                  "Lease, so the standby takes the Lease only once it has expired (its leaseDurationSeconds, read "
                  "from the Lease before each stop, is the operator's `--lease-duration`, 15 s by default). Timed as "
                  "the kills, from the SIGSTOP; once the new leader has evaluated, the stopped one gets SIGCONT, "
                  "finds it lost the Lease and exits, and the sandbox starts it again; the next stop waits for it "
                  "to be a ready standby holding every node. A stop whose process ended or ran again before the "
                  f"takeover is not counted. Rule: every stop ≤ the Lease's duration + {TAKEOVER_MARGIN:g} s.", "",
                  table(["Nodes", "Stop", "Lease duration s", "Bound s", "Lease moved", "First evaluation",
                         "Finished after", "Its duration", "Within"], _stop_rows(results))]
    return lines


def _failover_profile_lines(report: ScaleReport) -> list[str]:
    profiled = [r for r in report.results if r.failover_profile_samples]
    if not profiled:
        return []
    largest = max(profiled, key=lambda r: (r.apiserver == BUILTIN, r.nodes))
    header = ["Samples with a frame of", *(f"{r.label} nodes" for r in profiled)]
    rows = [[label, *(f"{dict(r.failover_profile_shares).get(label, 0.0):.1%}" for r in profiled)]
            for label, _ in leader_scale.PROFILE_MARKERS]
    return ["", "### Where the new leader's time goes as it takes over (py-spy, one more kill per count)", "",
            f"py-spy sampled the standby for {report.config.failover_profile_seconds:g} s (100 Hz, running code "
            "only), from about two seconds before one more SIGKILL of the leader, through its promotion, its first "
            "evaluation and the agents' reports moving to it: "
            f"{', '.join(f'{r.failover_profile_samples:,}' for r in profiled)} samples; a sample counts in every row "
            "it matches:", "", table(header, rows), "",
            f"Innermost frames (own time) at {largest.label} nodes, top 12:", "",
            table(["Function", "Share"], [[f"`{frame}`", f"{share:.1%}"] for frame, share in largest.failover_profile])]


def _memory_lines(results: list[SizeResult]) -> list[str]:
    """The leader's and the standby's RSS per node, now and before the standbys were warm."""
    measured = fitted(results)
    caches, whole, standby = cache_memory_fit(measured), memory_fit(measured), standby_memory_fit(measured)
    before_standby = before_standby_fit()
    points = " and ".join(f"{size(rss)} at {nodes:,} nodes" for nodes, rss in BEFORE_STANDBY_RSS)

    def kib(line: tuple[float, float] | None) -> str:
        return "n/a" if line is None else f"{line[1] / 1024:,.1f} KiB"

    def mib(line: tuple[float, float] | None) -> str:
        return "n/a" if line is None else f"{line[0] / 2**20:,.0f} MiB"

    def change(now: tuple[float, float] | None, before: tuple[float, float], per_node: bool = True) -> str:
        if now is None:
            return "n/a"
        return (f"{(now[1] - before[1]) / 1024:+,.1f} KiB" if per_node else f"{(now[0] - before[0]) / 2**20:+,.0f} MiB")

    rows = [["Leader RSS per node, without the connections it serves", kib(BEFORE_LEADER_CACHES), kib(caches),
             change(caches, BEFORE_LEADER_CACHES)],
            ["its fixed part", mib(BEFORE_LEADER_CACHES), mib(caches), change(caches, BEFORE_LEADER_CACHES, False)],
            ["Leader RSS per node, with them", kib(BEFORE_LEADER), kib(whole), change(whole, BEFORE_LEADER)],
            ["Standby RSS per node", kib(before_standby), kib(standby), change(standby, before_standby)],
            ["its fixed part", mib(before_standby), mib(standby), change(standby, before_standby, False)]]
    for r in results:
        if r.apiserver != BUILTIN or (w := r.window) is None:
            continue
        then = before_standby[0] + before_standby[1] * w.nodes
        rows.append([f"Standby RSS at {r.label} nodes", size(then), size(w.standby_rss),
                     f"{(w.standby_rss - then) / 2**20:+,.1f} MiB ({w.standby_rss / then - 1:+.0%})"])
    return ["", f"### Memory per node: before (commit {BEFORE_COMMIT}) and now", "",
            f"Before (commit {BEFORE_COMMIT}, whose BENCHMARKS.md holds that run, the standbys cold: their "
            "controllers, informers and Kopf watches started on promotion): the leader "
            f"{BEFORE_LEADER_CACHES[1] / 1024:.1f} KiB per node without the connections it serves (fixed "
            f"{BEFORE_LEADER_CACHES[0] / 2**20:.0f} MiB), {BEFORE_LEADER[1] / 1024:.1f} KiB with them (fixed "
            f"{BEFORE_LEADER[0] / 2**20:.0f} MiB); the standby {points}, so "
            f"{before_standby[1] / 1024:.1f} KiB per node (fixed {before_standby[0] / 2**20:.1f} MiB, the line through "
            "those two). Now: the same fits over this run's builtin node counts the load client kept up with "
            "(the standby's of its whole RSS); the standby's RSS at each count against that earlier line.", "",
            table(["", f"Before (commit {BEFORE_COMMIT})", "Now", "Change"], rows)]


def _profile_lines(results: list[SizeResult]) -> list[str]:
    """The shares of the profiles side by side; the innermost frames of the largest node count's on the
    builtin API server (the verdicts' basis), else of the largest."""
    profiled = [r for r in results if r.profile_samples]
    if not profiled:
        return []
    largest = max(profiled, key=lambda r: (r.apiserver == BUILTIN, r.nodes))
    header = ["Samples with a frame of", *(f"{r.label} nodes" for r in profiled)]
    rows = [[label, *(f"{dict(r.profile_shares).get(label, 0.0):.1%}" for r in profiled)]
            for label, _ in leader_scale.PROFILE_MARKERS]
    lines = ["", "### Where the leader's CPU goes (py-spy, right after each window)", "",
             f"{', '.join(f'{r.profile_samples:,}' for r in profiled)} samples (100 Hz, of running code only); a "
             "sample counts in every row it matches:", "", table(header, rows), "",
             f"Innermost frames (own time) at {largest.label} nodes, top 12:", "",
             table(["Function", "Share"], [[f"`{frame}`", f"{share:.1%}"] for frame, share in largest.profile])]
    for r in profiled:
        kopf = [share for _, share in r.profile_shares[:3]]  # PROFILE_MARKERS: Kopf, its kwargs, Node and Lease events
        lines += ["", f"Kopf's per-event handling at {r.label} nodes: {kopf[0]:.1%} of the samples have "
                      f"a Kopf frame, {kopf[1]:.1%} building the handler's kwargs; our Node and Lease event "
                      f"handling (informers of our own, not Kopf's) {kopf[2]:.1%}."]
    return lines


def _real_control_plane_lines(results: list[SizeResult], memory: tuple[float, float] | None,
                              cpu: tuple[float, float] | None) -> list[str]:
    """Each real control plane's window beside what the builtin API server's fits give at its count."""
    lines = []
    for r in results:
        if r.apiserver == BUILTIN or (w := r.window) is None:
            continue
        rss = f"leader RSS {size(w.leader_rss)}"
        if memory is not None:
            rss += f" (the fit above gives {size(int(memory[0] + memory[1] * w.nodes + w.leader_window_bytes))})"
        cores = f"leader {_f(w.leader_cores)} cores"
        if cpu is not None:
            cores += f" (the fit above gives {cpu[0] + cpu[1] * w.nodes:.2f})"
        lines.append(f"On the real control plane, {r.label} nodes: {rss}, {cores}, {_f(w.us_per_report, 0)} µs per "
                     f"report; its control plane {_f(w.control_plane_cores)} cores.  ")
    return ["", *lines] if lines else []


def render(report: ScaleReport, machine: Machine, command: str) -> str:
    c = report.config
    results = report.results
    builtin, kube = ([r for r in results if (r.apiserver == BUILTIN) == on_builtin] for on_builtin in (True, False))
    on_kube = f"{', '.join(f'{r.nodes:,}' for r in kube)} on the real control plane"
    counts = (f"{', '.join(f'{r.nodes:,}' for r in builtin)} nodes" + (f" (and {on_kube})" if kube else "")
              if builtin else f"{on_kube}")
    cpu = cpu_fit(fitted(results))
    memory = memory_fit(fitted(results))
    lines = [f"## Leader at scale: {counts}, every node reporting every {c.report_interval:g} s", "",
             *run_lines(command, machine, report.seconds,
                        f"Open files limit (`ulimit -n`): {report.fd_limit:,}."), "",
             f"`colocation sandbox` (builtin API server, 2 operator replicas, controllers on) with N Nodes of "
             f"{c.pods_per_node} pods; the agents run with `{' '.join(report.agent_args) or '(defaults)'}`"
             + (f" (not in `colocation agent --help`, left out: {', '.join(report.missing_flags)})"
                if report.missing_flags else "")
             + f", plus {c.probes} probe Nodes of the benchmark's own. A {c.window:g} s window of steady state "
             "(every node served, judged and given batch resources, one report round after that) per node count. "
             "CPU is utime + stime "
             "from /proc over the window; RSS (VmRSS) at its end. Reports and evaluations are the leader's own "
             "counters (`colocation_nodemetric_reports_accepted_total`, `colocation_reconcile_duration_seconds`). "
             "The evaluations' CPU is the leader's CPU x their share of a py-spy profile of the leader taken right "
             "after the window (their wall time, which includes awaiting API writes, where there is no profile); "
             "µs per report is the rest of the leader's CPU (report API, authentication, Kopf's Node and Lease "
             "events, the Pod informer...) per accepted report; "
             f"the extrapolation is µs/report x {EXTRAPOLATE_NODES / EXTRAPOLATE_INTERVAL:,.0f} reports/s + µs per "
             f"node evaluation x {EXTRAPOLATE_NODES:,} nodes x the evaluations per second measured. "
             "That µs per report carries, at ~100 reports/s, the event loop's wake-up for each report and the "
             "leader's other work, which do not grow with the reports; so after the profile the probes add "
             "reports up to 10,000 nodes' rate (the report burst below), and the verdict's extrapolation takes a "
             "report at "
             "what it added to the leader's CPU there, plus the rest of the window's CPU (neither its reports at "
             "that cost nor its evaluations) as it was.", "",
             "Rows marked (kube) ran the same on the real control plane: `colocation sandbox --apiserver kube` "
             "(kube-apiserver, etcd, kube-controller-manager and kube-scheduler built from the upstream modules, "
             "kwok's Nodes). Control plane cores are the sandbox's processes but the replicas and the agents: "
             "there, those and the sandbox's own (its kubelet for the replicas' and agents' pods); on the builtin "
             "API server, the sandbox process. The memory and CPU verdicts are computed from the builtin API "
             "server's node counts the load client kept up with (one control plane for every count); the "
             "failover verdicts from every kill and every stop, on both.", "",
             "### Verdicts", ""]
    lines += [f"- {target}: {figure}: **{verdict}**" for target, figure, verdict in verdicts(results)]
    saturated = [f"{r.label} nodes: {'; '.join(r.saturation())}" for r in results if r.saturation()]
    lines += ["", ("The load client fell behind or was saturated (figures there are inconclusive, and left out of "
                   "the memory and CPU verdicts): " + " | ".join(saturated)) if saturated else
              f"The load client kept up at every node count (each simulated agents' process below "
              f"{AGENTS_SATURATED:g} cores, the measured processes below {MACHINE_SATURATED:.0%} of the machine's "
              f"cores, ≥ {REPORTS_BEHIND:.0%} of the due reports accepted, the agents' self-check clean)."]
    lines += ["", "### Steady state", "",
              table(["Nodes", "Leader cores", "Standby cores", "Leader RSS", "Its watch window (events)",
                     "Connections the leader served", "RSS per idle connection", "Standby RSS", "Reports/s",
                     "µs/report", "µs/report, all in", "Evaluations/s", "µs CPU per node evaluation",
                     "µs wall per node evaluation", "Evaluations' % of the profile", "Node patches",
                     f"Cores at {EXTRAPOLATE_NODES:,} nodes (window's µs/report)",
                     f"Cores at {EXTRAPOLATE_NODES:,} nodes (burst's µs/report)", "Agents cores",
                     "Control plane cores"],
                    _window_rows(results)), ""]
    if memory is not None:
        raw = memory_fit(fitted(results), with_window=True) or memory
        lines.append(f"Leader RSS = {memory[0] / 2**20:,.0f} MiB + {memory[1] / 1024:,.1f} KiB x nodes + the "
                     "NodeMetric watch window (least squares over the node counts, of the RSS less what only the "
                     "window keeps, "
                     "`colocation_nodemetric_watch_window_bytes`: the window keeps its last 10,000 events whatever the "
                     "cluster's size, so it is a fixed cost once full, and it fills more slowly the fewer nodes "
                     f"report). With the window counted: {raw[0] / 2**20:,.0f} MiB + {raw[1] / 1024:,.1f} KiB x "
                     "nodes.  ")
        caches = cache_memory_fit(fitted(results))
        if caches is not None:
            lines.append(f"Without the connections it serves: {caches[0] / 2**20:,.0f} MiB + {caches[1] / 1024:,.1f} "
                         "KiB x nodes + the window (the same fit, of the RSS less the window and less the "
                         "connections the leader held at the window's end, each at what one idle connection added "
                         f"to its RSS when the benchmark opened {CONNECTION_PROBES} more right after the window: "
                         "most are the agents': an agent keeps one TLS connection to the leader, and the load client "
                         "opens up to 33 per process of 500 simulated nodes, so their number grows with its "
                         "processes, not the nodes; docs/install.md sizes them apart).  ")
    standby = standby_memory_fit(fitted(results))
    if standby is not None:
        lines.append(f"Standby RSS = {standby[0] / 2**20:,.0f} MiB + {standby[1] / 1024:,.1f} KiB x nodes (the same "
                     "least squares, of its whole RSS).  ")
    if cpu is not None:
        lines.append(f"Leader CPU = {cpu[0]:.3f} + {cpu[1] * 1000:.3f} x nodes / 1,000 cores, which gives "
                     f"{cpu[0] + cpu[1] * EXTRAPOLATE_NODES:.2f} cores at {EXTRAPOLATE_NODES:,} nodes.")
    lines += _real_control_plane_lines(results, memory, cpu)
    lines += _memory_lines(results)
    if any(r.burst is not None for r in results):
        lines += ["", "### Report burst: the leader's CPU per report at 10,000 nodes' rate", "",
                  f"Right after the profile, the {c.probes} probes send reports for {c.burst_seconds:g} s at the rate "
                  f"that brings the leader's to {EXTRAPOLATE_NODES / EXTRAPOLATE_INTERVAL:,.0f} a second (at most "
                  f"{c.burst_concurrency} in flight), while the agents go on as before: "
                  "each report carries the status of a simulated node (its 30 pods' usage), and each is a change "
                  "(its first pod's CPU usage counts up), so each is validated, stored, kept in the watch window "
                  "and streamed to the standby, as an agent's is. "
                  "µs per extra report = (leader cores in the burst - in the window) / (reports/s in the burst - in "
                  "the window), both from the leader's counters.", "",
                  table(["Nodes", "Seconds", "Reports/s", "Window's reports/s", "Probe reports", "Client cores",
                         "Leader cores before", "Leader cores", "µs per extra report"], _burst_rows(results))]
    lines += ["", f"![Leader CPU and RSS vs nodes](benchmarks/plots/{PLOT})", "",
              "### Latency: a report that moves batch resources to the Node patch", "",
              "A probe node's report switches its CPU usage between 1 and 8 cores; timed from just before the PUT to "
              "the leader until a watch of the probe Nodes shows `kubernetes.io/batch-cpu` moved the right way "
              "(the evaluation loop runs every 5 s, so that is most of it).", "",
              table(["Nodes", "Samples", "p50 s", "p99 s", "max s", "Failed"], _latency_rows(results))]
    lines += _failover_lines(report)
    lines += _profile_lines(results)
    lines += _failover_profile_lines(report)
    failures = [f"{r.label} nodes: {failure}" for r in results for failure in r.failures]
    failures += [f"{r.label} nodes: {why}" for r in results for why in r.latency_failures[:3]]
    if failures:
        lines += ["", "Not measured or failed:", "", *[f"- {failure}" for failure in failures]]
    lines += ["", f"Load averages after each node count: "
                  f"{'; '.join(' / '.join(f'{v:.2f}' for v in load) for load in report.load)}. "
                  f"Raw samples: `benchmarks/plots/{RAW.name}`."]
    return "\n".join(lines)


def rerender(output: Path, command: str, raw: Path = RAW, plot_path: Path = leader_scale.PLOTS / PLOT) -> None:
    """Write the section again from the saved samples (`command`: the run's), the profiles' shares counted
    again from their raw files (for new rows of leader_scale.PROFILE_MARKERS); the evaluations' share, and
    so the CPU split, stays the one the run measured; the machine and date are the run's when saved."""
    report = ScaleReport.from_file(raw)
    for result in report.results:
        profile = leader_scale.profile_path(result.nodes, result.apiserver)
        if result.profile_samples and profile.exists():
            result.profile_shares = leader_scale.profile_shares(profile.read_text())
    plot(report, plot_path)
    where = report.machine or machine.describe()
    write_section(output, SECTION, render(report, where, command))


def run_suite(config: ScaleConfig, output: Path, command: str) -> ScaleReport:
    where = machine.describe()  # before the run: its outputs (tracked files) would read as "+changes"
    report = asyncio.run(leader_scale.run(config))
    save_raw(report, RAW, where)
    plot(report, leader_scale.PLOTS / PLOT)
    write_section(output, SECTION, render(report, where, command))
    say(f"wrote the {SECTION} section of {output}, {RAW} and {PLOT}")
    return report
