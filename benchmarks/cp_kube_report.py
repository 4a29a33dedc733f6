"""The control-plane-kube section of BENCHMARKS.md: ours - base against crd - base, per node per minute."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.cp_kube import OURS_AGENT_ARGS, KubeCostReport, crd_interval
from benchmarks.cp_kube_metrics import (
    WATCH_EVENT_VERB,
    EtcdWindow,
    Key,
    Traffic,
    per_node_minute,
    subtract,
    sum_traffic,
)
from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.stats import ratio, size

SECTION = "control-plane-kube"
RAW = Path(__file__).resolve().parent / "plots" / "control_plane_kube.json"
PLOT = RAW.with_name("control_plane_cadence.png")
# Traffic both paths have (koord-manager also writes batch resources to Nodes; koordlet and our agent
# both watch their node's pods): left out of both sides of the comparison, as issue 16 asks.
SHARED_RESOURCES = ("nodes", "pods")
# Issue 16's targets against the CRD path at its 60 s default: (what, ours ÷ crd at most).
TARGETS = (("API bytes", 0.25), ("API requests", 0.5), ("etcd puts", 0.2), ("etcd WAL bytes", 0.2))
MIN_BYTES = 1.0  # rows of the breakdown under this many bytes per node per minute in both paths are left out
MIN_REQUESTS = 0.01
TOP_ROWS = 15


def write(path: Path, section: str) -> None:
    write_section(path, SECTION, section)


def save_raw(report: KubeCostReport, path: Path = RAW) -> None:
    report.to_file(path)


def problems(report: KubeCostReport) -> list[str]:
    out = [f"{name}: {problem}" for name, run in report.runs.items() for problem in run.problems]
    missing = [name for name in ("base", "ours", "crd") if name not in report.runs]
    missing += [f"{name} (its figures are left out)" for name in report.config.clusters
                if name not in report.runs and name not in missing]
    if missing:
        out.append(f"cluster(s) not run: {', '.join(missing)}")
    return out


def path_costs(report: KubeCostReport) -> dict[str, tuple[dict[Key, Traffic], EtcdWindow]]:
    """Every path's cluster minus base (ours, crd, crd-30, ...), per node per minute."""
    base = report.runs["base"]
    n = report.config.nodes
    base_rows = per_node_minute(base.apiserver, n, base.window_seconds)
    base_etcd = base.etcd.per_node_minute(n, base.window_seconds)
    out = {}
    for name, run in report.runs.items():
        if name == "base":
            continue
        rows = subtract(per_node_minute(run.apiserver, n, run.window_seconds), base_rows)
        out[name] = (rows, run.etcd.per_node_minute(n, run.window_seconds) - base_etcd)
    return out


def compared(rows: dict[Key, Traffic]) -> Traffic:
    """A path's API traffic without what both paths share (`SHARED_RESOURCES`)."""
    return sum_traffic(t for (_, resource, _), t in rows.items() if resource not in SHARED_RESOURCES)


def compared_etcd(report: KubeCostReport, name: str) -> EtcdWindow:
    """A path's etcd figures without its Node writes (shared traffic): each Node patch is one put of
    the whole Node, whose protobuf size the run measured (an estimate of its WAL bytes)."""
    rows, etcd = path_costs(report)[name]
    patches = rows.get(("", "nodes", "patch"), Traffic()).requests
    node_bytes = report.runs[name].node_object_bytes
    return EtcdWindow(etcd.puts - patches, etcd.put_bytes - patches * node_bytes,
                      etcd.wal_bytes - patches * node_bytes, etcd.db_growth, etcd.db_in_use_growth)


def cadence_rows(report: KubeCostReport) -> list[tuple[str, float, float, float]]:
    """(cluster, report interval in seconds, API bytes, API requests) per node per minute, compared traffic."""
    costs = path_costs(report)
    out = [("ours", 10.0, compared(costs["ours"][0]).bytes, compared(costs["ours"][0]).requests)]
    for name in sorted((n for n in costs if n.startswith("crd")), key=lambda n: crd_interval(n, report.config)):
        traffic = compared(costs[name][0])
        out.append((name, crd_interval(name, report.config), traffic.bytes, traffic.requests))
    return out


def target_verdicts(report: KubeCostReport) -> list[tuple[str, float, float, float, bool]]:
    """(what, ours, crd, ours ÷ crd, met) for each of issue 16's targets."""
    costs = path_costs(report)
    ours, crd = compared(costs["ours"][0]), compared(costs["crd"][0])
    ours_etcd, crd_etcd = compared_etcd(report, "ours"), compared_etcd(report, "crd")
    values = {"API bytes": (ours.bytes, crd.bytes), "API requests": (ours.requests, crd.requests),
              "etcd puts": (ours_etcd.puts, crd_etcd.puts), "etcd WAL bytes": (ours_etcd.wal_bytes, crd_etcd.wal_bytes)}
    out = []
    for what, bound in TARGETS:
        o, c = values[what]
        quotient = o / c if c > 0 else math.nan
        out.append((what, o, c, quotient, c > 0 and quotient <= bound))
    return out


def plot(report: KubeCostReport, path: Path = PLOT) -> Path:
    from benchmarks.plotting import pyplot, save

    rows = cadence_rows(report)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    crd = [(interval, value / 1024) for name, interval, value, _ in rows if name.startswith("crd")]
    ax.plot([x for x, _ in crd], [y for _, y in crd], "o-", label="NodeMetric CRD path (measured at each interval)")
    ours = next(value for name, _, value, _ in rows if name == "ours") / 1024
    ax.plot([10, 30, 60], [ours] * 3, "s--", label="this design (agents report every 10 s; measured once)")
    ax.set_xlabel("report interval (s)")
    ax.set_ylabel("API KiB per node per minute")
    ax.set_xticks([10, 30, 60])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title(f"kube-apiserver traffic, {report.config.nodes:,} nodes (shared traffic left out)", fontsize=9)
    return save(fig, path)


def _num(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def _bytes(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return ("-" if value < 0 else "") + size(abs(value))


def _ratio(a: float, b: float) -> str:
    return ratio(a, b) if b > 0 and a >= 0 else "n/a"


def summary_rows(report: KubeCostReport) -> list[list[str]]:
    costs = path_costs(report)
    base = report.runs["base"]
    n = report.config.nodes
    base_total = sum_traffic(per_node_minute(base.apiserver, n, base.window_seconds).values())
    base_etcd = base.etcd.per_node_minute(n, base.window_seconds)
    ours, ours_etcd = compared(costs["ours"][0]), compared_etcd(report, "ours")
    crd, crd_etcd = compared(costs["crd"][0]), compared_etcd(report, "crd")
    lines: list[tuple[str, float, float, float, bool]] = [
        ("API requests", base_total.requests, ours.requests, crd.requests, False),
        ("request body bytes", base_total.request_bytes, ours.request_bytes, crd.request_bytes, True),
        ("response bytes", base_total.response_bytes, ours.response_bytes, crd.response_bytes, True),
        ("watch event bytes", base_total.watch_bytes, ours.watch_bytes, crd.watch_bytes, True),
        ("API bytes (body + response + watch events)", base_total.bytes, ours.bytes, crd.bytes, True),
        ("etcd puts", base_etcd.puts, ours_etcd.puts, crd_etcd.puts, False),
        ("etcd bytes put", base_etcd.put_bytes, ours_etcd.put_bytes, crd_etcd.put_bytes, True),
        ("etcd WAL bytes written", base_etcd.wal_bytes, ours_etcd.wal_bytes, crd_etcd.wal_bytes, True),
        ("etcd db size growth", base_etcd.db_growth, ours_etcd.db_growth, crd_etcd.db_growth, True),
        ("etcd db size in use growth", base_etcd.db_in_use_growth, ours_etcd.db_in_use_growth,
         crd_etcd.db_in_use_growth, True),
    ]
    fmt = {True: _bytes, False: _num}
    return [[name, fmt[is_bytes](b), fmt[is_bytes](o), fmt[is_bytes](c), _ratio(o, c)]
            for name, b, o, c, is_bytes in lines]


def breakdown_rows(report: KubeCostReport, top: int = TOP_ROWS) -> list[list[str]]:
    """The rows that weigh most in either path (by bytes, then requests); the rest summed in one row."""
    costs = path_costs(report)
    ours, crd = costs["ours"][0], costs["crd"][0]

    def weight(key: Key) -> tuple[float, float]:
        o, c = ours.get(key, Traffic()), crd.get(key, Traffic())
        return max(abs(o.bytes), abs(c.bytes)), max(abs(o.requests), abs(c.requests))

    keys = sorted(set(ours) | set(crd), key=lambda k: tuple(-w for w in weight(k)))
    shown = [k for k in keys[:top] if weight(k)[0] >= MIN_BYTES or weight(k)[1] >= MIN_REQUESTS]
    rest = [k for k in keys if k not in shown]
    rows = []
    for group, resource, verb in shown:
        o, c = ours.get((group, resource, verb), Traffic()), crd.get((group, resource, verb), Traffic())
        name = f"{group}/{resource}" if group else resource
        if verb == WATCH_EVENT_VERB:
            rows.append([f"{name} {verb}s", _num(o.watch_events), _bytes(o.bytes), _num(c.watch_events),
                         _bytes(c.bytes)])
        else:
            rows.append([f"{name} {verb}", _num(o.requests), _bytes(o.bytes), _num(c.requests), _bytes(c.bytes)])
    if rest:
        o = sum_traffic(ours.get(k, Traffic()) for k in rest)
        c = sum_traffic(crd.get(k, Traffic()) for k in rest)
        rows.append([f"{len(rest)} other rows (requests; events not counted)", _num(o.requests), _bytes(o.bytes),
                     _num(c.requests), _bytes(c.bytes)])
    return rows


def c_interval(report: KubeCostReport) -> str:
    return f"{report.config.report_interval:.0f}"


def verdicts(report: KubeCostReport) -> list[str]:
    c = report.config
    costs = path_costs(report)
    ours, ours_etcd = compared(costs["ours"][0]), compared_etcd(report, "ours")
    crd, crd_etcd = compared(costs["crd"][0]), compared_etcd(report, "crd")
    notes = []

    def compare(what: str, o: float, c: float, unit: str) -> str:
        if c <= 0 or o < 0:
            return f"{what}: ours {unit.format(o)}, the CRD path {unit.format(c)} (no meaningful ratio)."
        word = "less" if o < c else "more"
        return (f"{what}: this design adds {unit.format(o)} per node per minute, the NodeMetric CRD path "
                f"{unit.format(c)}: ours is {o / c:.2f}x the CRD path's ({word}).")

    notes.append(compare("API requests", ours.requests, crd.requests, "{:,.2f}"))
    notes.append(compare("API bytes", ours.bytes, crd.bytes, "{:,.0f} B"))
    notes.append(compare("etcd puts", ours_etcd.puts, crd_etcd.puts, "{:,.2f}"))
    notes.append(compare("etcd WAL bytes", ours_etcd.wal_bytes, crd_etcd.wal_bytes, "{:,.0f} B"))
    notes.append(compare("etcd bytes put", ours_etcd.put_bytes, crd_etcd.put_bytes, "{:,.0f} B"))
    ours_rows = costs["ours"][0]
    for what, _, _, quotient, met in target_verdicts(report):
        bound = dict(TARGETS)[what]
        notes.append(f"Target {what} ≤ {bound}x the CRD path's at {c_interval(report)} s: "
                     + (f"{quotient:.3f}x, **{'met' if met else 'missed'}**." if not math.isnan(quotient)
                        else "no ratio (the CRD path's figure is not positive): **inconclusive**."))
    renewals = ours_rows.get(("coordination.k8s.io", "leases", "update"), Traffic())
    lease_events = ours_rows.get(("coordination.k8s.io", "leases", WATCH_EVENT_VERB), Traffic())
    if ours.bytes > 0:
        notes.append(f"The agents' node Leases (registration every 10 minutes, fallback only when reports fail): "
                     f"{renewals.requests:,.2f} renewals per node per minute and {lease_events.watch_events:,.2f} "
                     f"watch events, {(renewals.bytes + lease_events.bytes) / ours.bytes:.0%} of this design's "
                     f"compared API bytes.")
    shared = sum_traffic(t for (_, resource, _), t in ours_rows.items() if resource in SHARED_RESOURCES)
    notes.append(f"Left out of both sides as traffic both paths share: this design's Node and Pod rows "
                 f"({shared.requests:,.2f} requests, {shared.bytes:,.0f} B per node per minute: the agents' pod "
                 f"watches, the operator's Node watch and batch-resource patches). etcd has no per-resource "
                 f"figures: its puts are this design's less one per Node patch, its bytes less the Node's size "
                 f"({size(report.runs['ours'].node_object_bytes)} in protobuf, measured) per patch.")
    crd_run = report.runs["crd"]
    if crd_run.crd_writes:
        notes.append(f"The CRD path wrote {crd_run.crd_writes:,} NodeMetric statuses in the "
                     f"{crd_run.window_seconds:.0f} s window ({size(crd_run.crd_object_bytes)} of JSON each, "
                     f"{report.config.pods_per_node} pods per node).")
    writes = [t for (_, _, verb), t in ours_rows.items() if verb in ("create", "update", "patch")]
    if writes and not any(t.response_bytes for t in writes):
        notes.append("kube-apiserver recorded no response sizes for writes (`apiserver_response_sizes` has samples "
                     "for reads only here), so a write's bytes are its request body; its answer, about the object's "
                     "size again, is not counted for either path.")
    if all(run.etcd.db_growth == 0 for run in report.runs.values()):
        notes.append("etcd's database file did not grow in any cluster during the window (bbolt grows its file in "
                     "large steps and kube-apiserver compacts every minute here), so its size says nothing per "
                     "minute at this length; the WAL bytes are the figure for what etcd writes.")
    if c.pods_per_node < 30:
        notes.append(f"The NodeMetric status lists every pod of its node: with {c.pods_per_node} pods per node each "
                     f"write is {size(crd_run.crd_object_bytes)}; it grows with the pods, this design's cost does not.")
    return notes


def render(report: KubeCostReport, machine: Machine, command: str) -> str:
    c = report.config
    runs = report.runs
    setup = ", ".join(f"{name} {run.startup_seconds / 60:,.1f} min to start + {run.warmup_seconds:,.0f} s warm-up"
                      for name, run in runs.items())
    crd_names = ", ".join(f"**{name}** every {crd_interval(name, c):.0f} s" for name in c.clusters
                          if name.startswith("crd"))
    parts = [
        f"## Control-plane cost on kube-apiserver and etcd: {c.nodes:,} nodes",
        "",
        *run_lines(command, machine, report.seconds, f"Clusters: {setup}."),
        "",
        f"Clusters, one after another, each `colocation sandbox --apiserver kube --nodes {c.nodes} "
        f"--pods-per-node {c.pods_per_node} --no-serve-custom-metrics --no-serve-resource-metrics` (etcd, "
        "kube-apiserver, "
        f"kube-controller-manager, kube-scheduler as local processes; nodes 1..{c.nodes - 1} are kwok nodes with "
        f"their kubelet Leases and {c.pods_per_node} pods each): **base** with `--operators 0 --no-agents` (what "
        f"every path shares); **ours**, the default (2 operator replicas, every node's agent reporting every 10 s "
        f"— each report is its heartbeat —, registering its Lease, watching its pods; leader election, "
        f"NodeResource status and Node writes), with the agents sampling usage every 5 s instead of every "
        f"second (`{' '.join(OURS_AGENT_ARGS)}`: the reports keep their cadence and shape, and the "
        f"simulated agents' CPU goes to their heartbeats); and the Koordinator path, base plus: the "
        f"`nodemetrics.slo.koordinator.sh` CRD, one `PUT .../status` per node per report interval (status shaped "
        f"as an agent's report, `benchmarks/nodemetric_store.py`) with a token bound to that node's agent pod "
        f"(TokenRequest), and one informer (list + watch) of the CRs as koord-manager has: {crd_names} "
        f"({c.report_interval:.0f} s is koordlet's default). After a warm-up (every pod past Pending; ours: every "
        f"agent's Lease and every node judged by the operator; crd: every CR written once) both `/metrics` "
        f"were read before and after a {c.window:.0f} s window: kube-apiserver's (`apiserver_request_total`, "
        f"`apiserver_request_body_size_bytes`, `apiserver_response_sizes`, `apiserver_watch_events_sizes`) and "
        f"etcd's (`etcd_mvcc_put_total`, `etcd_debugging_mvcc_total_put_size_in_bytes`, "
        f"`etcd_disk_wal_write_bytes_total`, `etcd_mvcc_db_total_size_in_bytes`).",
        "",
        "kube-apiserver's metrics are not per user, so a path's cost is its cluster's delta minus the base "
        "cluster's, divided by the nodes and the window's minutes; whatever differs between the clusters' own "
        "background (controller resyncs, a watch counted when it ends, compaction) is in that difference, which is "
        "why small rows can be negative. The comparison leaves out, on both sides, the API rows of Nodes and Pods "
        "(traffic both paths have). Request bodies are counted by resource without subresource, so "
        "`leases update` includes nothing else but `nodemetrics update` is the status PUT.",
        "",
    ]
    trouble = problems(report)
    if trouble:
        parts += ["**No figures: the run did not behave as it must for them to mean anything.**", ""]
        parts += [f"- {p}" for p in trouble]
        parts += ["", f"Raw numbers: `benchmarks/plots/{RAW.name}`."]
        return "\n".join(parts) + "\n"
    heard = runs["ours"].heard
    if heard is not None:
        parts += [f"Every agent was heard: all {heard.reported:,} nodes' NodeMetrics have a newer `updateTime` after "
                  f"the window than before it, and all {heard.registered:,} Leases in `colocation-node-lease` were "
                  f"unexpired at its end.", ""]
    checks = runs["ours"].agent_checks
    if checks:
        parts += ["The agent processes' self-check (`colocation.agent.selfcheck`, read before and after the window) "
                  "found no problem:", ""]
        parts += [f"- {process}: {text}" for process, text in sorted(checks.items())]
        parts += [""]
    parts += [
        "### Per node per minute",
        "",
        f"Node and Pod rows left out of the API rows, Node writes out of the etcd rows; crd is the "
        f"{c.report_interval:.0f} s path.",
        "",
        table(["", "base (absolute)", "ours - base", "crd - base", "ours ÷ crd"], summary_rows(report)),
        "",
        "### Against the report interval (API bytes and requests per node per minute, Node and Pod rows left out)",
        "",
        table(["path", "report interval", "API bytes", "API requests"],
              [[name, f"{interval:.0f} s", _bytes(value), _num(requests)]
               for name, interval, value, requests in cadence_rows(report)]),
        "",
        f"![Bytes per node per minute against the report interval](benchmarks/plots/{PLOT.name})",
        "",
        "### By resource and verb (ours - base, crd - base; per node per minute)",
        "",
        table(["resource verb", "ours requests (events)", "ours bytes", "crd requests (events)", "crd bytes"],
              breakdown_rows(report)),
        "",
        f"Raw numbers (every cluster's window deltas): `benchmarks/plots/{RAW.name}`.",
        "",
        "### What this means",
        "",
        *[f"- {note}" for note in verdicts(report)],
    ]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Render the section again from the raw numbers: `python -m benchmarks.cp_kube_report COMMAND [OUTPUT]`."""
    import sys

    from benchmarks import machine

    args = sys.argv[1:] if argv is None else argv
    report = KubeCostReport.from_file(RAW)
    output = Path(args[1]) if len(args) > 1 else RAW.parents[2] / "BENCHMARKS.md"
    write(output, render(report, machine.describe(), args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
