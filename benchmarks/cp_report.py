"""The control-plane section of BENCHMARKS.md: tables, ratios, what they mean."""

from __future__ import annotations

from pathlib import Path

from benchmarks.control_plane import ControlPlaneReport, Row
from benchmarks.cp_etcd import INSTALL_HINT, EtcdFigures
from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.stats import ratio, size
from colocation.agent.leader_locator import DEFAULT_POLL_INTERVAL

CONTROL_PLANE_SECTION = "control-plane"


def write(path: Path, name: str, section: str) -> None:
    write_section(path, name, section)


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
        f"reports per node per minute go to the leader, and each is the agent's heartbeat. What remains is the "
        f"agents' Lease registration (at start and every 10 minutes), their pod watch, and the operator's "
        f"watches, Node and NodeResource writes and delegated authentication (TokenReview/SubjectAccessReview).",
        _biggest(report),
        _per_report(report, reports_per_node_minute),
        f"- An accepted report confirms the leader, and agents report at least every 10 s, so an agent reads "
        f"the leader Lease only when it starts or a report fails (its {DEFAULT_POLL_INTERVAL:g} s poll never "
        f"falls due): the simulation's shared leader locator reads as separate agents would. Simulated agents do "
        f"not watch their NodeSLO, so that row is the one real agent's, for every agent.",
        "- Bytes include HTTP headers: every agent request carries its ~1 KiB bound ServiceAccount token, which "
        "is why small writes are not small on the wire.",
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
