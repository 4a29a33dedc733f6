"""PNG plots of the failover, staleness and control-plane benchmarks (matplotlib, from the `bench` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.plotting import pyplot, save

if TYPE_CHECKING:
    from benchmarks.control_plane import ControlPlaneReport
    from benchmarks.operator_failover import FailoverReport

def failover(report: FailoverReport, path: Path) -> None:
    """Every kill's times from SIGKILL, per setting."""
    from benchmarks.failover_report import REPORT_TARGET, settings

    plt = pyplot()
    cases = settings(report)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = (("lease_moved", "s", "Lease moved"), ("first_report", "o", "first accepted report"),
              ("complete", "^", "new leader serving all"), ("first_read", "x", "first successful read"))
    for x, kills in enumerate(cases.values()):
        for i, (attribute, marker, label) in enumerate(series):
            ax.scatter([x + (i - 1.5) * 0.12] * len(kills), [getattr(k, attribute) for k in kills], marker=marker,
                       color=f"C{i}", label=label if x == 0 else None, zorder=3)
    ax.axhline(REPORT_TARGET, color="red", linestyle="dashed", label="target: first accepted report")
    ax.set_xticks(range(len(cases)), [name.replace(", ", "\n") for name in cases])
    ax.set_ylabel("seconds from SIGKILL")
    ax.set_title(f"Operator failover, {report.config.nodes:,} nodes, default lease ({report.config.kills} kills each)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)


def staleness(report: FailoverReport, path: Path) -> None:
    figures = report.staleness
    if figures is None:
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    if figures.simulated_samples:
        ax.hist(figures.simulated_samples, bins=30, color="C0",
                label=f"{figures.removed:,} simulated nodes (one process stopped)")
    for i, value in enumerate(figures.one_agent):
        ax.axvline(value, color="C2", linewidth=2, label="the real agent stopped" if i == 0 else None)
    ax.axvline(figures.grace, color="black", linestyle="dotted", label=f"grace period ({figures.grace:g} s)")
    ax.axvline(figures.grace + 2, color="red", linestyle="dashed", label="target: grace + 2 s")
    ax.set_xlabel("seconds from SIGSTOP to the Node's batch resources removed")
    ax.set_ylabel("nodes")
    ax.set_title("Staleness: a stopped agent's node loses its batch resources")
    ax.legend(fontsize=8)
    save(fig, path)


def control_plane(report: ControlPlaneReport, path: Path) -> None:
    plt = pyplot()
    fig, (api, etcd) = plt.subplots(1, 2, figsize=(10, 4.2))
    paths = ["this design", "NodeMetric CRD"]
    for x, name in enumerate(paths):
        bottom = 0.0
        clients = list(dict.fromkeys(r.client for r in report.rows if r.path == name))
        for i, client in enumerate(clients):
            value = sum(r.bytes for r in report.rows if r.path == name and r.client == client) / 1024
            api.bar(x, value, bottom=bottom, color=f"C{i + 2 * x}", label=f"{name}: {client}")
            bottom += value
    api.set_xticks(range(len(paths)), paths)
    api.set_ylabel("KiB per node per minute (requests + responses)")
    api.set_title("Traffic reaching the API server")
    api.legend(fontsize=7)
    labels, values, colors = [], [], []
    for name, figures in (("CRD path", report.etcd_crd), ("this design", report.etcd_ours)):
        if figures is None:
            continue
        for kind, raw, color in (("put", figures.put_bytes, "C0"), ("db growth", figures.db_growth, "C1"),
                                 ("disk writes", figures.disk_writes, "C3")):
            labels.append(f"{name}\n{kind}")
            values.append(report.per_node_minute(raw) / 1024)
            colors.append(color)
    if values:
        etcd.bar(range(len(values)), values, color=colors)
        etcd.set_xticks(range(len(values)), labels, fontsize=7)
        etcd.set_yscale("log")
    else:
        etcd.text(0.5, 0.5, "etcd not run", ha="center", va="center", transform=etcd.transAxes)
    etcd.set_ylabel("KiB per node per minute")
    etcd.set_title("etcd (one fresh etcd-server each)")
    fig.suptitle(f"Control-plane cost, {report.config.nodes:,} nodes x {report.config.pods_per_node} pods")
    save(fig, path)
