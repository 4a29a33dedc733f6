"""The control-plane-kube section of BENCHMARKS.md: ours - base against crd - base, per node per minute."""

from __future__ import annotations

import math
from pathlib import Path

import orjson

from benchmarks.cp_kube import KubeCostReport
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
MIN_BYTES = 1.0  # rows of the breakdown under this many bytes per node per minute in both paths are left out
MIN_REQUESTS = 0.01
TOP_ROWS = 15


def write(path: Path, section: str) -> None:
    write_section(path, SECTION, section)


def save_raw(report: KubeCostReport, path: Path = RAW) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2))


def problems(report: KubeCostReport) -> list[str]:
    out = [f"{name}: {problem}" for name, run in report.runs.items() for problem in run.problems]
    missing = [name for name in ("base", "ours", "crd") if name not in report.runs]
    if missing:
        out.append(f"cluster(s) not run: {', '.join(missing)}")
    return out


def path_costs(report: KubeCostReport) -> dict[str, tuple[dict[Key, Traffic], EtcdWindow]]:
    """ours - base and crd - base, per node per minute."""
    base = report.runs["base"]
    n = report.config.nodes
    base_rows = per_node_minute(base.apiserver, n, base.window_seconds)
    base_etcd = base.etcd.per_node_minute(n, base.window_seconds)
    out = {}
    for name in ("ours", "crd"):
        run = report.runs[name]
        rows = subtract(per_node_minute(run.apiserver, n, run.window_seconds), base_rows)
        out[name] = (rows, run.etcd.per_node_minute(n, run.window_seconds) - base_etcd)
    return out


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
    ours, ours_etcd = sum_traffic(costs["ours"][0].values()), costs["ours"][1]
    crd, crd_etcd = sum_traffic(costs["crd"][0].values()), costs["crd"][1]
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


def verdicts(report: KubeCostReport) -> list[str]:
    c = report.config
    costs = path_costs(report)
    ours, ours_etcd = sum_traffic(costs["ours"][0].values()), costs["ours"][1]
    crd, crd_etcd = sum_traffic(costs["crd"][0].values()), costs["crd"][1]
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
    renewals = ours_rows.get(("coordination.k8s.io", "leases", "update"), Traffic())
    lease_events = ours_rows.get(("coordination.k8s.io", "leases", WATCH_EVENT_VERB), Traffic())
    if ours.bytes > 0:
        notes.append(f"Most of this design's cost is the agents' node Leases: {renewals.requests:,.2f} renewals per "
                     f"node per minute and the {lease_events.watch_events:,.2f} watch events they cause are "
                     f"{(renewals.bytes + lease_events.bytes) / ours.bytes:.0%} of its API bytes.")
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
                     f"write is {size(crd_run.crd_object_bytes)}; it grows with the pods, the Lease renewals do not.")
    return notes


def render(report: KubeCostReport, machine: Machine, command: str) -> str:
    c = report.config
    runs = report.runs
    setup = ", ".join(f"{name} {run.startup_seconds / 60:,.1f} min to start + {run.warmup_seconds:,.0f} s warm-up"
                      for name, run in runs.items())
    parts = [
        f"## Control-plane cost on kube-apiserver and etcd: {c.nodes:,} nodes",
        "",
        *run_lines(command, machine, report.seconds, f"Clusters: {setup}."),
        "",
        f"Three clusters, one after another, each `colocation sandbox --apiserver kube --nodes {c.nodes} "
        f"--pods-per-node {c.pods_per_node} --no-serve-custom-metrics` (etcd, kube-apiserver, "
        f"kube-controller-manager, kube-scheduler as local processes; nodes 1..{c.nodes - 1} are kwok nodes with "
        f"their kubelet Leases and {c.pods_per_node} pods each): **base** with `--operators 0 --no-agents` (what "
        f"both paths share); **ours**, the default (2 operator replicas, every node's agent: node Lease renewals, "
        f"pod watch, leader election, reports to the leader, NodeResource status writes); **crd**, base plus the "
        f"Koordinator path's load: the `nodemetrics.slo.koordinator.sh` CRD, one `PUT .../status` per node "
        f"every {c.report_interval:.0f} s (koordlet's default report interval; status shaped as an agent's report, "
        f"`benchmarks/nodemetric_store.py`) with a token bound to that node's agent pod (TokenRequest), and one "
        f"informer (list + watch) of the CRs as koord-manager has. After a warm-up (every pod past Pending; ours: "
        f"every agent's Lease and every node judged by the operator; crd: every CR written once) both `/metrics` "
        f"were read before and after a {c.window:.0f} s window: kube-apiserver's (`apiserver_request_total`, "
        f"`apiserver_request_body_size_bytes`, `apiserver_response_sizes`, `apiserver_watch_events_sizes`) and "
        f"etcd's (`etcd_mvcc_put_total`, `etcd_debugging_mvcc_total_put_size_in_bytes`, "
        f"`etcd_disk_wal_write_bytes_total`, `etcd_mvcc_db_total_size_in_bytes`).",
        "",
        "kube-apiserver's metrics are not per user, so a path's cost is its cluster's delta minus the base "
        "cluster's, divided by the nodes and the window's minutes; whatever differs between the clusters' own "
        "background (controller resyncs, a watch counted when it ends, compaction) is in that difference, which is "
        "why small rows can be negative. Request bodies are counted by resource without subresource, so "
        "`leases update` includes nothing else but `nodemetrics update` is the status PUT. These figures replace "
        "the modelled etcd figures of the control-plane section (objects replayed into a separate etcd).",
        "",
    ]
    trouble = problems(report)
    if trouble:
        parts += ["**No figures: the run did not behave as it must for them to mean anything.**", ""]
        parts += [f"- {p}" for p in trouble]
        parts += ["", f"Raw numbers: `benchmarks/plots/{RAW.name}`."]
        return "\n".join(parts) + "\n"
    leases = runs["ours"].leases
    if leases is not None:
        parts += [f"The agents kept their Leases: all {leases.seen:,} Leases in `colocation-node-lease` were renewed "
                  f"during the window and none was older than {2 * leases.renew_interval:.0f} s at its end.", ""]
    checks = runs["ours"].agent_checks
    if checks:
        parts += ["The agent processes' self-check (`colocation.agent.selfcheck`, read before and after the window) "
                  "found no problem:", ""]
        parts += [f"- {process}: {text}" for process, text in sorted(checks.items())]
        parts += [""]
    parts += [
        "### Per node per minute",
        "",
        table(["", "base (absolute)", "ours - base", "crd - base", "ours ÷ crd"], summary_rows(report)),
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
    from benchmarks.cp_kube import KubeCostReport

    args = sys.argv[1:] if argv is None else argv
    report = KubeCostReport.from_json(orjson.loads(RAW.read_bytes()))
    output = Path(args[1]) if len(args) > 1 else RAW.parents[2] / "BENCHMARKS.md"
    write(output, render(report, machine.describe(), args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
