"""The sandbox capacity section of BENCHMARKS.md: tables, ratios to the baseline, what they mean."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.machine import Machine
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.sandbox_capacity import CapacityReport, ReadFigures, WriteFigures
from benchmarks.stats import ms, ratio, size

SECTION = "sandbox-capacity"

# Kubernetes' API call latency SLOs (sig-scalability, 99th percentile per cluster-day): the bar a
# simulated control plane has to clear for its latencies not to distort what runs against it.
SLO_MUTATING = 1.0
SLO_LIST = 30.0


def write(path: Path, section: str) -> None:
    write_section(path, SECTION, section)


def _writestable(report: CapacityReport) -> str:
    baseline = {w.name: w for w in report.baseline_writes}
    rows = []
    for w in report.writes:
        base = baseline.get(w.name)
        rows.append([w.name, f"{w.count:,}", f"{w.seconds:,.1f}", f"{w.per_second:,.0f}", ms(w.latency.p50),
                     ms(w.latency.p99), ms(w.latency.max), str(w.errors), f"{w.server_cpu_per_request * 1e6:,.0f}",
                     f"{base.per_second:,.0f}" if base else "n/a",
                     ratio(w.per_second, base.per_second) if base else "n/a",
                     ratio(w.server_cpu_per_request, base.server_cpu_per_request) if base else "n/a"])
    return table(["phase", "requests", "seconds", "per second", "p50 ms", "p99 ms", "max ms", "errors",
                   "server CPU µs/request", "baseline per second", "throughput ÷ baseline",
                   "CPU/request ÷ baseline"], rows)


def _readstable(reads: list[ReadFigures]) -> str:
    rows = []
    for r in reads:
        walk = f" (whole walk {r.pass_seconds:,.1f} s)" if r.pass_seconds else ""
        rows.append([r.name + walk, f"`{r.request}`", f"{r.latency.count:,}", f"{r.items:,}" if r.items else "n/a",
                     size(r.response_bytes), ms(r.latency.p50), ms(r.latency.p99)])
    return table(["list", "request", "requests", "items", "response", "p50 ms", "p99 ms"], rows)


def _find(writes: list[WriteFigures], name: str) -> WriteFigures | None:
    return next((w for w in writes if w.name == name), None)


def interpretation(report: CapacityReport) -> list[str]:
    """Plain statements drawn from the figures (no hand-edited text, so a re-run stays true)."""
    notes: list[str] = []
    pods, base_pods = _find(report.writes, "pods"), _find(report.baseline_writes, "pods")
    if pods and base_pods:
        notes.append(
            f"Loading {report.config.sizes.pods:,} pods takes {pods.seconds:,.0f} s ({pods.per_second:,.0f} pods/s, "
            f"{ratio(pods.per_second, base_pods.per_second)} the bare server's rate in its own phase). Throughput "
            f"ratios move with whatever else runs on the machine during each phase; CPU per request does not: the "
            f"sandbox spends {pods.server_cpu_per_request * 1e6:,.0f} µs per pod create against "
            f"{base_pods.server_cpu_per_request * 1e6:,.0f} µs for parse-and-store "
            f"({ratio(pods.server_cpu_per_request, base_pods.server_cpu_per_request)}: admission, metadata, the "
            f"event window and listeners). The client used {pods.client_cpu_share:.0%} of a core against the "
            f"sandbox and {base_pods.client_cpu_share:.0%} against the baseline, "
            + ("so the baseline's rate is bounded by the client." if base_pods.client_cpu_share > 0.85 else
               "so the client was not the limit."))
    mutating = [w for w in report.writes if w.latency.count]
    worst = max(mutating, key=lambda w: w.latency.p99, default=None)
    if worst is not None:
        verdict = "within" if worst.latency.p99 <= SLO_MUTATING else "outside"
        notes.append(f"Writes stay {verdict} Kubernetes' mutating-call SLO (p99 ≤ 1 s) with "
                     f"{report.config.concurrency} requests in flight: the slowest phase ({worst.name}) has "
                     f"p99 {ms(worst.latency.p99)} ms.")
    notes += _list_notes(report)
    if report.watch is not None:
        w = report.watch
        complete = "every watcher received every event" if w.complete_watchers == w.watchers else (
            f"only {w.complete_watchers} of {w.watchers} watchers received every event "
            f"(the slowest got {w.fewest_received:,} of {w.updates:,})")
        notes.append(f"With {w.watchers} watchers of all pods, {w.updates:,} status updates ran at "
                     f"{w.updates_per_second:,.0f}/s (server {w.server_busy:.0%} busy) and {complete}; delivery "
                     f"delay p50 {ms(w.delay.p50)} ms, p99 {ms(w.delay.p99)} ms. "
                     + ("Events queue up behind writes: while writes run at full speed, a controller in a "
                        "simulation sees changes seconds late, which a real apiserver's watch cache does not do."
                        if w.delay.p50 > 1.0 else "Watchers keep up with writes at full speed."))
    if report.memory is not None and report.baseline_memory is not None:
        m, b = report.memory, report.baseline_memory
        notes.append(f"Memory: {size(m.per_object)} of RSS per stored object ({size(report.pod_json_bytes)} of JSON "
                     f"per pod on the wire), {ratio(m.per_object, b.per_object)} what the bare server's dicts of "
                     f"parsed JSON take; the loaded sandbox holds {size(m.loaded)}, peaked at {size(m.peak)} while "
                     f"serving full lists, and still held {size(m.final)} at the end (the allocator keeps freed "
                     f"memory).")
    return notes


def _list_notes(report: CapacityReport) -> list[str]:
    by_name = {r.name: r for r in report.reads}
    full = by_name.get("pods, all namespaces (JSON)")
    if full is None:
        return []
    pods = report.config.sizes.pods
    slow = [r.name for r in report.reads if r.latency.p99 > SLO_LIST]
    notes = [f"A full JSON list of {pods:,} pods takes {ms(full.latency.p50)} ms (p50); "
             + (f"{', '.join(slow)} exceed the 30 s list SLO." if slow else
                "every list is within Kubernetes' 30 s SLO for namespace- and cluster-scoped lists.")
             + _baseline_list_note(report)]
    pages = next((r for r in report.reads if r.pass_seconds), None)
    if pages is not None and full.latency.p50 and pages.pass_seconds > 2 * full.latency.p50:
        notes.append(f"Walking the pods {report.config.page_size} at a time (informers' and kubectl's paginated "
                     f"list) takes {pages.pass_seconds:,.1f} s, {pages.pass_seconds / full.latency.p50:.0f}x the "
                     f"full list: a page of {report.config.page_size} costs {ms(pages.latency.p50)} ms, so the cost "
                     f"of a page follows the size of the collection, not of the page.")
    node = by_name.get("pods on one node (fieldSelector)")
    per_item_full = full.latency.p50 / pods
    if node is not None and node.items and node.latency.p50 / node.items > 100 * per_item_full:
        storm = node.latency.p50 * report.config.nodes
        notes.append(f"The per-node pod list (`fieldSelector=spec.nodeName=…`, what each node agent and kubelet "
                     f"asks) takes {ms(node.latency.p50)} ms for {node.items} pods: its cost follows all "
                     f"{pods:,} pods, not the node's. All {report.config.nodes:,} agents asking once cost about "
                     f"{storm / 60:,.0f} min of sandbox CPU"
                     + (", so agent restart storms cannot be simulated at this size." if storm > 60 else "."))
    return notes


def _baseline_list_note(report: CapacityReport) -> str:
    if not report.baseline_reads or not report.reads:
        return ""
    base, full = report.baseline_reads[0], report.reads[0]
    if math.isnan(base.latency.p50) or not base.latency.p50:
        return ""
    return (f" The full JSON list costs {full.latency.p50 / base.latency.p50:.1f}x the bare server's dump of the "
            f"same objects ({ms(base.latency.p50)} ms).")


def render(report: CapacityReport, machine: Machine, command: str) -> str:
    c = report.config
    parts = [
        f"## Sandbox capacity: {c.nodes:,} nodes, {c.sizes.pods:,} pods",
        "",
        *run_lines(command, machine, report.seconds),
        "",
        f"`colocation sandbox --api-only` ran as a subprocess; every request went over HTTPS (loopback, TLS from "
        f"`colocation.apimachinery.certificates`) with keep-alive through aiohttp, {c.concurrency} requests in "
        f"flight, authenticated "
        f"with the admin token of the kubeconfig it wrote. The baseline is `benchmarks/baseline_server.py` in its "
        f"own process: the same TLS setup, it parses each body with orjson, keeps it in a dict and answers 201 with "
        f"it. Both received the same {c.namespaces} namespaces, {c.nodes:,} Nodes (kubelet-shaped: labels, "
        f"capacity, allocatable, four conditions, addresses, nodeInfo) and {c.sizes.pods:,} Pods "
        f"({c.pods_per_node} per node, spec.nodeName set, 1-2 containers with requests and limits, owner "
        f"reference, tolerations, a projected token volume; {size(report.pod_json_bytes)} of JSON each). Pod "
        f"status is then written as a kubelet does: a strategic merge patch of `/status` (Running, five "
        f"conditions, container statuses). Latency is measured at the client, from sending the request to reading "
        f"the last byte.",
        "",
        "### Creates and status writes",
        "",
        _writestable(report),
        "",
        "### Lists (sandbox loaded)",
        "",
        _readstable(report.reads),
        "",
        "Baseline, for scale:",
        "",
        _readstable(report.baseline_reads),
    ]
    if report.watch is not None:
        w = report.watch
        parts += ["", "### Watch fan-out", "",
                  f"{w.watchers} watchers of `/api/v1/pods?watch=true` (all namespaces) while {w.updates:,} pod "
                  f"status patches land. Delay: from the writer reading its response to a watcher reading the event "
                  f"with that resourceVersion ({w.early:,} events arrived before the writer's response was read and "
                  f"count as 0).",
                  "",
                  table(["watchers", "updates", "updates/s", "update p50 ms", "update p99 ms", "server CPU µs/update",
                          "server busy", "client busy", "delay p50 ms", "delay p99 ms", "delay max ms",
                          "watchers with every event"],
                         [[str(w.watchers), f"{w.updates:,}", f"{w.updates_per_second:,.0f}",
                           ms(w.update_latency.p50), ms(w.update_latency.p99),
                           f"{w.server_cpu_per_update * 1e6:,.0f}", f"{w.server_busy:.0%}", f"{w.client_busy:.0%}",
                           ms(w.delay.p50), ms(w.delay.p99), ms(w.delay.max), f"{w.complete_watchers}/{w.watchers}"]]),
                  "",
                  "Busy: CPU time of the process over the wall time of the updates (100 % is one core).  "]
    if report.memory is not None and report.baseline_memory is not None:
        m, b = report.memory, report.baseline_memory
        parts += ["", "### Memory (RSS of the server process, /proc/PID/status)", "",
                  table(["", "sandbox", "baseline", "sandbox ÷ baseline"], [
                      ["empty", size(m.empty), size(b.empty), ratio(m.empty, b.empty)],
                      [f"loaded ({m.objects:,} nodes and pods)", size(m.loaded), size(b.loaded),
                       ratio(m.loaded, b.loaded)],
                      ["per object (loaded - empty)", size(m.per_object), size(b.per_object),
                       ratio(m.per_object, b.per_object)],
                      ["after the status writes", size(m.after_status), "n/a", "n/a"],
                      ["at the end", size(m.final), size(b.final), "n/a"],
                      ["peak (VmHWM)", size(m.peak), size(b.peak), ratio(m.peak, b.peak)]])]
    parts += ["", "### What this means", ""]
    parts += [f"- {note}" for note in interpretation(report)]
    return "\n".join(parts) + "\n"
