"""The operator-failover section of BENCHMARKS.md and its raw samples: per setting, per kill, verdicts."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.operator_failover import LEASE, FailoverReport, Kill
from benchmarks.stats import percentile, ratio

SECTION = "operator-failover"
RAW = Path(__file__).resolve().parent / "plots" / "failover_kills.json"
PLOT = "failover_takeover.png"
REPORT_TARGET = 3.0  # seconds from SIGKILL to the first report the new leader accepts (issue 15)


def write(path: Path, section: str) -> None:
    write_section(path, SECTION, section)


def save_raw(report: FailoverReport, path: Path = RAW) -> None:
    report.to_file(path)


def _s(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def _spread(values: list[float]) -> str:
    """min / median / p90 / max (nearest rank)."""
    if not values:
        return "n/a"
    return " / ".join(_s(v) for v in (min(values), percentile(values, 0.5), percentile(values, 0.9), max(values)))


def withheld(report: FailoverReport) -> set[str]:
    """Settings whose agents' self-check found problems: their figures are not stated."""
    return {name for name in {k.setting for k in report.kills}
            if any(problem.startswith(f"{name}: ") for problem in report.agent_problems)}


def settings(report: FailoverReport) -> dict[str, list[Kill]]:
    """The kills of each setting whose figures may be stated."""
    out: dict[str, list[Kill]] = {}
    skip = withheld(report)
    for kill in report.kills:
        if kill.setting not in skip:
            out.setdefault(kill.setting, []).append(kill)
    return out


def _timing_rows(report: FailoverReport) -> list[list[str]]:
    rows = []
    for name, every in settings(report).items():
        first = [k for k in every if k.restarts == 0]
        for label, kills in ((f"{name}, every kill", every), (f"{name}, first restarts only", first)):
            if kills:
                rows.append([label, str(len(kills)), _spread([k.lease_moved for k in kills]),
                             _spread([k.first_read for k in kills]), _spread([k.first_report for k in kills]),
                             _spread([k.complete for k in kills]), _spread([k.recovered for k in kills])])
    return rows


def _count_rows(report: FailoverReport) -> list[list[str]]:
    rows = []
    for name, kills in settings(report).items():
        def total(attribute: str, of: list[Kill] = kills) -> str:
            return f"{sum(getattr(k, attribute) for k in of):,}"
        rows.append([name, total("reads"), total("read_retries"), total("read_failures"), total("discovery"),
                     total("discovery_retries"), total("discovery_failures"), total("watch_continues"),
                     total("watch_relists"), str(sum(len(k.watch_lost) for k in kills)),
                     "yes" if all(k.rv_monotonic for k in kills) else
                     f"no ({sum(not k.rv_monotonic for k in kills)} kills)"])
    return rows


def verdicts(report: FailoverReport) -> list[str]:
    """Each target against the numbers measured, per setting."""
    lines = []
    for name, kills in settings(report).items():
        worst = max(k.first_report for k in kills)
        first = [k.first_report for k in kills if k.restarts == 0]
        checks = [
            (f"≤ {REPORT_TARGET:g} s from SIGKILL to the first accepted report, every kill (a killed replica "
             f"restarted within {report.config.max_restart_period:g} s; max {worst:.2f} s)", worst <= REPORT_TARGET),
            (f"the same on a replica's first restart, no back-off ({len(first)} kills, max "
             f"{_s(max(first) if first else math.nan)} s)", bool(first) and max(first) <= REPORT_TARGET),
            (f"0 failed reads ({sum(k.read_failures for k in kills)} failed of {sum(k.reads for k in kills):,})",
             not any(k.read_failures for k in kills)),
            (f"0 s to the first successful read (no read needed a retry; {sum(k.read_retries for k in kills)} "
             f"retried)", not any(k.read_retries for k in kills)),
            (f"0 failed discovery calls ({sum(k.discovery_failures for k in kills)} failed, "
             f"{sum(k.discovery_retries for k in kills)} retried, of {sum(k.discovery for k in kills):,})",
             not any(k.discovery_failures for k in kills)),
            ("every watch continued or relisted with nothing lost"
             + (f" ({sum(len(k.watch_lost) for k in kills)} losses)" if any(k.watch_lost for k in kills) else ""),
             not any(k.watch_lost for k in kills)),
            ("the lists' resourceVersion never decreased", all(k.rv_monotonic for k in kills)),
            (f"at least 10 kills ({len(kills)})", len(kills) >= 10),
        ]
        lines.append(f"{name}: " + "; ".join(f"{text}: **{'met' if ok else 'missed'}**" for text, ok in checks))
    return lines


def _staleness_part(report: FailoverReport) -> list[str]:
    s = report.staleness
    if s is None:
        return []
    target = s.grace + 2
    one = s.one_agent
    rows = []
    if one:
        rows.append(["the real agent (SIGSTOP)", str(len(one)), _s(percentile(one, 0.5)), _s(max(one)),
                     ratio(percentile(one, 0.5), s.grace), "met" if max(one) <= target else "missed"])
    rows.append([f"every simulated agent at once ({s.removed:,}/{s.simulated_nodes:,} nodes)",
                 f"{s.all_simulated.count:,}", _s(s.all_simulated.p50), _s(s.all_simulated.max),
                 ratio(s.all_simulated.p50, s.grace),
                 "met" if s.removed == s.simulated_nodes and s.all_simulated.max <= target else "missed"])
    return [
        "", f"### Staleness (grace period {s.grace:g} s, evaluation every {s.evaluation_interval:g} s)", "",
        f"An agent is stopped with SIGSTOP (it hangs: no Lease release, no connection closed) and a watch of the "
        f"Nodes times, from the signal, the removal of `kubernetes.io/batch-cpu` from its Node. Run with "
        f"`--operator-arg=--node-grace-period={s.grace:g} --operator-arg=--evaluation-interval="
        f"{s.evaluation_interval:g} --agent-arg=--lease-duration={max(1, round(s.grace))}` to keep the run short "
        f"(the default grace is 40 s and the agents renew every quarter of their Lease duration, 10 s); the "
        f"figures scale with the grace period, so they are given relative to it.", "",
        table(["stopped", "samples", "p50 s", "max s", "p50 ÷ grace", f"≤ grace + 2 s ({target:g} s)"], rows), "",
        "![Staleness](benchmarks/plots/failover_staleness.png)", "",
        f"- A node is judged from the last renewal the leader saw, not from the signal: the agent renewed up to a "
        f"renew interval ({s.grace / 4:g} s) before it stopped, so removal lands between grace - {s.grace / 4:g} s "
        f"and grace + one evaluation interval + the Node patch. With the default 40 s grace the same bound is "
        f"42 s.",
    ]


def render(report: FailoverReport, machine: Machine, command: str) -> str:
    c = report.config
    loads = ", ".join(f"{one:.2f}" for one, _, _ in report.load)
    parts = [
        f"## Operator failover and staleness: {c.nodes:,} nodes",
        "",
        *run_lines(command, machine, report.seconds,
                   f"Load average (1 min) at the end of each setting: {loads or 'n/a'} (the machine is shared)."),
        "",
        f"`colocation sandbox --nodes {c.nodes} --pods-per-node {c.pods_per_node} --operators N`, on the builtin "
        f"sandbox (the in-memory API server, replicas as processes) and with `--apiserver kube` (kube-apiserver "
        f"and its aggregator, etcd, kube-controller-manager, the replicas as pods in network namespaces), N = "
        f"{' and '.join(map(str, c.replica_counts))}, the default lease timings ({LEASE}). The leader's process "
        f"is sent SIGKILL {c.kills} times per setting; its pod restarts it at once and the new process frees its "
        f"predecessor's Lease for a warm standby. Before each kill: a leader serving every NodeMetric, and every "
        f"replica alive, ready, behind the Service and holding a complete copy (the restarted one included).",
        "",
        "Meanwhile, through the API server's aggregated path as a client would: a list and a get of NodeMetrics "
        "every 200 ms, discovery (`GET /apis`, `GET /apis/metrics.colocation.dev/v1alpha1`) every 200 ms, each "
        "failed call retried once after 100-300 ms (a retry and a second failure are counted); a watch of "
        "NodeMetrics for the whole setting, resumed from its last resourceVersion when its stream ends (a "
        "continue) or listed again on 410 (a relist, checked: every node there, the reported node at its last "
        "accepted value; after each kill the watch must also deliver the last accepted report within 10 s). "
        "A reporter sends one node's report every 100 ms straight to the leader the Lease names (its endpoint "
        "and CA from the Lease's annotations, a token bound to the node's agent pod). Times are from the SIGKILL: "
        "the first successful read after a failed one (0 when none failed), the first report accepted by the new "
        "leader, the new leader serving every NodeMetric (its own list), and the steady state again. The pod "
        "restarts a process at once the first time; a replica killed again waits the kubelet's CrashLoopBackOff "
        f"(10 s doubling, capped by crashLoopBackOff.maxContainerRestartPeriod, here "
        f"`--max-container-restart-period={c.max_restart_period:g}`: ten kills of two or three replicas would "
        "otherwise measure the back-off), so the tables also give the kills of replicas never restarted before.",
        "",
        "### Failover: from SIGKILL, min / median / p90 / max, seconds",
        "",
    ]
    if report.agent_problems:
        parts += ["**No figures for a setting whose agents' heartbeats or informers failed while the leaders were "
                  "killed** (`colocation.agent.selfcheck`): the system measured was not the one users run. "
                  f"Withheld: {', '.join(sorted(withheld(report))) or 'none'}.", ""]
        parts += [f"- {problem}" for problem in report.agent_problems]
        parts += [""]
    if settings(report):
        parts += [table(["setting", "kills", "Lease moved", "first successful read", "first accepted report",
                         "complete data (new leader)", "steady again"], _timing_rows(report)), "",
                  table(["setting", "reads", "retried", "failed", "discovery calls", "retried", "failed",
                         "watch continues", "watch 410 relists", "watch losses", "list RV monotonic"],
                        _count_rows(report)), "",
                  f"![Failover](benchmarks/plots/{PLOT})", "",
                  f"Raw samples (every kill): `benchmarks/plots/{RAW.name}`.", "", "Verdicts:", ""]
        parts += [f"- {line}" for line in verdicts(report)]
        examples = [line for kills in settings(report).values() for line in (
            [f"{k.setting}, kill {k.index + 1}: {e}" for k in kills for e in k.errors][:3]
            + [f"{k.setting}, kill {k.index + 1}: {e}" for k in kills for e in (*k.watch_lost, *k.rv_backwards)][:3])]
        if examples:
            parts += ["", "What the retried or failed calls answered, the watch's losses and the lists that went "
                      "back (the first three of each, per setting):", ""]
            parts += [f"- {line}" for line in examples]
    checks = {name: text for name, text in report.agent_checks.items()
              if not any(name.startswith(f"{setting}, ") for setting in withheld(report))}
    if checks:
        parts += ["", "Meanwhile, in the settings with figures, the agents kept their heartbeats and informers "
                  "(`colocation.agent.selfcheck`, read before the first kill and after the last; their warnings "
                  "about failed reports are expected):", ""]
        parts += [f"- {name}: {text}" for name, text in sorted(checks.items())]
    if report.failures or report.outside:
        parts += ["", "Settings that did not complete, and client failures outside the kill windows:", ""]
        parts += [f"- {failure}" for failure in (*report.failures, *report.outside)]
    parts += _staleness_part(report)
    return "\n".join(parts) + "\n"
