"""The operator-failover and control-plane sections of BENCHMARKS.md: tables, ratios, what they mean."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.control_plane import ControlPlaneReport, Row
from benchmarks.cp_etcd import INSTALL_HINT, EtcdFigures
from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.operator_failover import DEFAULT_LEASE, SHORT_LEASE, FailoverReport
from benchmarks.stats import percentile, ratio, size
from colocation.agent.leader_locator import DEFAULT_POLL_INTERVAL

FAILOVER_SECTION = "operator-failover"
CONTROL_PLANE_SECTION = "control-plane"
TARGETS = {"SIGKILL": 3.0, "SIGTERM": 2.0}


def write(path: Path, name: str, section: str) -> None:
    write_section(path, name, section)


def _s(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


# ---- failover ------------------------------------------------------------------------------------

def _takeover_rows(report: FailoverReport) -> list[list[str]]:
    rows = []
    cases = list(dict.fromkeys((t.settings, t.signal) for t in report.takeovers))
    for settings, sig in cases:
        runs = [t for t in report.takeovers if (t.settings, t.signal) == (settings, sig)]
        lease = DEFAULT_LEASE if settings == DEFAULT_LEASE.name else SHORT_LEASE
        direct = [t.direct for t in runs]
        via = [t.apiservice for t in runs]
        moved = [t.lease_moved for t in runs]
        target = TARGETS[sig]
        verdict = "met" if max(direct) <= target else "missed"
        rows.append([f"{settings} ({lease.describe()})", sig, str(len(runs)), _s(percentile(moved, 0.5)),
                     _s(percentile(direct, 0.5)), _s(max(direct)), _s(percentile(via, 0.5)), _s(max(via)),
                     ratio(percentile(direct, 0.5), percentile(moved, 0.5)), f"≤ {target:g} s: {verdict}"])
    return rows


def _takeover_notes(report: FailoverReport) -> list[str]:
    def median(settings: str, sig: str, attribute: str) -> float:
        # The table's p50 (nearest rank), so the text and the table agree whatever the number of runs.
        values = [getattr(t, attribute) for t in report.takeovers if (t.settings, t.signal) == (settings, sig)]
        return percentile(values, 0.5) if values else math.nan

    notes = []
    kill_default, kill_short = median("default", "SIGKILL", "direct"), median("short", "SIGKILL", "direct")
    if not math.isnan(kill_default):
        notes.append(
            f"A killed leader cannot release its Lease, so a standby may take over only once the lease duration "
            f"has passed since it last saw the Lease change: with the defaults (15 s) the new leader serves every "
            f"NodeMetric {kill_default:.1f} s after the SIGKILL (p50), which no warm standby can shorten. The "
            f"3 s target needs a short lease: `--lease-duration 2 --renew-deadline 1.5 --retry-period 0.25`"
            + (f" gives {kill_short:.1f} s." if not math.isnan(kill_short) else "."))
    term_default, term_short = median("default", "SIGTERM", "direct"), median("short", "SIGTERM", "direct")
    if not math.isnan(term_default):
        notes.append(
            f"A SIGTERM'd leader releases its Lease (an empty holderIdentity) as it exits, so a standby takes it at "
            f"its next retry, within one retry period: {term_default:.2f} s with the default 2 s retry period"
            + (f", {term_short:.2f} s with 0.25 s." if not math.isnan(term_short) else "."))
    notes.append(
        "From taking the Lease to serving all nodes costs the new leader almost nothing (the ratio column): a "
        "standby follows the leader's NodeMetric watch and holds a full copy, so it serves complete data the "
        "moment it is ready. The APIService path adds the endpoint readiness probe (every second in the "
        "sandbox; manifests/operator.yaml probes every 2 s) and, after a SIGTERM, the old leader's shutdown "
        "while it is still listed as ready.")
    notes.append(
        "The short settings cost the API server more: the leader renews every retry period (4 Lease writes/s at "
        "0.25 s against 0.5/s) and each standby reads the Lease as often, and a leader that cannot renew for "
        "1.5 s (a slow API server, a long GC pause) gives up leading. Use them where a 3 s failover matters more "
        "than that.")
    return notes


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


def render_failover(report: FailoverReport, machine: Machine, command: str) -> str:
    c = report.config
    parts = [
        f"## Operator failover and staleness: {c.nodes:,} nodes",
        "",
        *run_lines(command, machine, report.seconds),
        "",
        f"`colocation sandbox --nodes {c.nodes} --pods-per-node {c.pods_per_node} --operators {c.operators}` "
        f"as a subprocess: {c.operators} operator replicas (processes, pod-bound ServiceAccount tokens, the "
        f"manifests' RBAC), one real agent and {c.nodes - 1:,} simulated ones in one process, all over HTTPS. "
        f"Each run waits for a leader serving all {c.nodes:,} NodeMetrics and a standby holding a complete copy, "
        f"then sends the leader's process SIGKILL or SIGTERM and polls every 50 ms: the leader Lease, the new "
        f"holder's `/readyz` and its list of NodeMetrics (directly, admin token), and the list through the "
        f"APIService once the Service's Endpoints no longer name the old leader. The baseline is the election itself: "
        f"the moment the Lease names the new holder, measured in the same run. A full list from the leader took "
        f"{report.list_seconds * 1000:,.0f} ms.",
        "",
        "### Failover: from the signal to the new leader serving every node",
        "",
    ]
    if report.agent_problems:
        parts += ["**No takeover figures: the agents' heartbeats or informers failed while the leaders were killed** "
                  "(`colocation.agent.selfcheck`), so the system measured was not the one users run:", ""]
        parts += [f"- {problem}" for problem in report.agent_problems]
    else:
        parts += [table(["lease (duration / renew deadline / retry)", "signal", "runs", "Lease moved p50 s",
                         "new leader serving all, p50 s", "max s", "via the APIService p50 s", "max s",
                         "serving ÷ Lease moved", "target"], _takeover_rows(report)),
                  "", "![Failover](benchmarks/plots/failover_takeover.png)", ""]
        parts += [f"- {note}" for note in _takeover_notes(report)]
    if report.agent_checks and not report.agent_problems:
        parts += ["", "Meanwhile the agents kept their heartbeats and informers (`colocation.agent.selfcheck`, read "
                  "before the first kill and after the last; their warnings about failed reports are expected):", ""]
        parts += [f"- {name}: {text}" for name, text in sorted(report.agent_checks.items())]
    if report.failures:
        parts += ["", "Runs that did not happen (the system had not recovered from the previous one; the "
                  "replicas' and agents' logs are in the state directory):", ""]
        parts += [f"- {failure}" for failure in report.failures]
    parts += _staleness_part(report)
    return "\n".join(parts) + "\n"


# ---- control plane -------------------------------------------------------------------------------

def _row_cells(row: Row) -> list[str]:
    return [row.path, row.client, row.verb, row.resource, f"{row.requests:,.2f}", size(row.request_bytes),
            size(row.response_bytes), row.note]


def _etcd_rows(report: ControlPlaneReport) -> list[list[str]]:
    per = report.per_node_minute
    rows = []
    pairs: list[tuple[str, EtcdFigures | None]] = [("NodeMetric CRD (full object per report, JSON)", report.etcd_crd),
                                                   ("this design (Leases, NodeResource statuses)", report.etcd_ours)]
    for name, figures in pairs:
        if figures is None:
            continue
        rows.append([name, f"{per(figures.puts):,.2f}", size(per(figures.put_bytes)), size(per(figures.db_growth)),
                     size(per(figures.disk_writes))])
    if report.etcd_crd is not None and report.etcd_ours is not None:
        c, o = report.etcd_crd, report.etcd_ours
        rows.append(["CRD ÷ this design", ratio(c.puts, o.puts), ratio(c.put_bytes, o.put_bytes),
                     ratio(c.db_growth, o.db_growth), ratio(c.disk_writes, o.disk_writes)])
    return rows


def render_control_plane(report: ControlPlaneReport, machine: Machine, command: str) -> str:
    c = report.config
    ours, crd = report.total("this design"), report.total("NodeMetric CRD")
    reports_per_node_minute = report.per_node_minute(report.reports)
    per = report.per_node_minute
    modeled_crd = reports_per_node_minute * report.crd_object_bytes
    modeled_ours = (per(report.lease_renewals) * report.lease_object_bytes
                    + per(report.node_resource_writes) * report.node_resource_bytes)
    parts = [
        f"## Control-plane cost: {c.nodes:,} nodes x {c.pods_per_node} pods",
        "",
        *run_lines(command, machine, report.seconds, f"Window: {report.window_seconds:,.0f} s."),
        "",
        f"`colocation sandbox --nodes {c.nodes} --pods-per-node {c.pods_per_node}` (2 operator replicas, default "
        f"settings) counts every request reaching it (`GET /sandbox/stats`: requests and HTTP bytes before TLS, "
        f"per user, verb and resource), in the steady state: the window opens once every node has reported and "
        f"the leader's startup grace is over. In the same window, the Koordinator-style path writes the same metrics "
        f"at the same moments: each of the {report.reports:,} NodeMetric changes the leader stored "
        f"({reports_per_node_minute:.2f} per node per minute) is written to a `nodemetrics.{'slo.koordinator.sh'}` "
        f"custom resource with `PUT …/status` (koordlet's UpdateStatus) carrying that node's agent token, and one "
        f"informer watches them (koord-manager).",
        "",
    ]
    if report.problems:
        parts += ["**No figures: the run did not behave as it must for them to mean anything.**", ""]
        parts += [f"- {problem}" for problem in report.problems]
        return "\n".join(parts) + "\n"
    parts += [
        "The agent processes' self-check (`colocation.agent.selfcheck`, read before and after the window) found "
        "no problem:",
        "",
        *(f"- {process}: {text}" for process, text in sorted(report.agent_checks.items())),
        "",
        "Per node per minute:",
        "",
        table(["path", "client", "verb", "resource", "requests", "request bytes", "response bytes", "note"],
               [_row_cells(r) for r in report.rows] + [_row_cells(ours), _row_cells(crd)]),
        "",
        "Summary, per node per minute:",
        "",
        table(["", "requests", "bytes (both ways)", "CRD path ÷ this design"], [
            ["this design: agents + operator, all their API traffic", f"{ours.requests:,.2f}", size(ours.bytes), ""],
            ["NodeMetric CRD path: the metric writes + one informer", f"{crd.requests:,.2f}", size(crd.bytes),
             f"{ratio(crd.requests, ours.requests)} requests, {ratio(crd.bytes, ours.bytes)} bytes"],
        ]),
        "",
        "![Control-plane cost](benchmarks/plots/control_plane_cost.png)",
        "",
        "### etcd",
        "",
        f"Both object streams of the window are put into a real etcd (Debian's etcd-server, one fresh member "
        f"each, on loopback, through the v3 HTTP/JSON gateway, 8 puts in flight): the CRD path's objects as "
        f"kube-apiserver stores custom resources (the whole object as JSON, {size(report.crd_object_bytes)} on "
        f"average, one per report) against ours: the node and leader Leases as kube-apiserver stores built-in "
        f"kinds (protobuf, {size(report.lease_object_bytes)}, one per renewal: {per(report.lease_renewals):.2f} "
        f"per node per minute) and the NodeResource objects the leader's status writes store (JSON, "
        f"{size(report.node_resource_bytes)}, {per(report.node_resource_writes):.2f} per node per minute). Node "
        f"status writes happen in both designs and are left out of both. etcd keeps "
        f"every revision until kube-apiserver compacts (every 5 minutes), so the database grows by what is put.",
        "",
    ]
    if report.etcd_note or (report.etcd_crd is None):
        parts += [report.etcd_note or f"etcd was not run; install it with `{INSTALL_HINT}`.", ""]
    else:
        parts += [table(["per node per minute", "puts", "bytes put (keys + values)", "db size growth",
                          "disk writes (/proc/PID/io)"], _etcd_rows(report)), ""]
    parts += [f"Modeled (object size x writes, no etcd): CRD path {size(modeled_crd)}, this design "
              f"{size(modeled_ours)} per node per minute ({ratio(modeled_crd, modeled_ours)}).", "",
              "### What this means", ""]
    parts += [
        f"- The metrics themselves never reach the API server in this design: the {reports_per_node_minute:.2f} "
        f"reports per node per minute go to the leader. What remains is the agents' heartbeat (a Lease write "
        f"every 10 s, as the kubelet's), their pod watch, their reads of the leader Lease, and the operator's "
        f"watches, Node and NodeResource writes and delegated authentication (TokenReview/SubjectAccessReview).",
        _biggest(report),
        _per_report(report, reports_per_node_minute),
        f"- The simulation shares one leader locator per agent process, and accepted reports defer its polls; "
        f"the agents' leader-Lease row is therefore the bound for separate agents: one read per "
        f"{DEFAULT_POLL_INTERVAL:g} s each when idle (the bytes per read are measured). Simulated agents do not "
        f"watch their NodeSLO, so that row is the one real agent's, for every agent.",
        "- Bytes include HTTP headers: every agent request carries its ~1 KiB bound ServiceAccount token, which "
        "is why small Lease writes are not small on the wire.",
    ]
    return "\n".join(parts) + "\n"


REPORTS_EVERY_10_S = 6.0  # per minute


def _per_report(report: ControlPlaneReport, reports_per_node_minute: float) -> str:
    """The CRD path pays per report; ours does not: what the ratio becomes when agents report more often."""
    crd, ours = report.total("NodeMetric CRD").bytes, report.total("this design").bytes
    if not reports_per_node_minute or not ours:
        return "- No NodeMetric changes in the window: the per-report cost of the CRD path is unknown."
    per_report = crd / reports_per_node_minute
    faster = per_report * REPORTS_EVERY_10_S
    return (f"- The CRD path's traffic is per report ({size(per_report)} each: the write, its answer and the "
            f"informer's event); this design's does not depend on how often agents report, since reports go to "
            f"the leader. Here agents reported {reports_per_node_minute:.2f} times per node per minute (they send "
            f"on change); at one report every 10 s (modeled from the measured per-report cost) the CRD path would "
            f"put {size(faster)} per node per minute on the API server, {ratio(faster, ours)} this design's, and "
            f"its etcd writes would grow {REPORTS_EVERY_10_S / reports_per_node_minute:.1f}x.")


def _biggest(report: ControlPlaneReport) -> str:
    ours = sorted((r for r in report.rows if r.path == "this design"), key=lambda r: -r.bytes)
    total = report.total("this design").bytes
    crd = report.total("NodeMetric CRD")
    if not ours or not total:
        return "- This design made no API requests in the window."
    top = ", ".join(f"{r.client} {r.verb} {r.resource} ({r.requests:.2f}/min, {r.bytes / total:.0%})" for r in ours[:3])
    verdict = ("more" if total > crd.bytes else "less")
    return (f"- Measured, this design puts {verdict} bytes on the API server than writing the metrics as CRs "
            f"({ratio(total, crd.bytes)}); the largest items are {top}. Rows that run once per report (rather "
            f"than per renewal or per change) are where this design can still save: a per-report write or review "
            f"costs as much as the CR write it replaces.")
