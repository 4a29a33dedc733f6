"""The failover/staleness and control-plane suites as `python -m benchmarks.run` runs them: flags and sections."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from benchmarks import (
    control_plane,
    cp_kube,
    cp_kube_report,
    cp_plots,
    cp_report,
    failover_report,
    failover_staleness,
    machine,
    operator_failover,
)
from benchmarks.client import say

FAILOVER = "failover"
CONTROL_PLANE = "control-plane"
CONTROL_PLANE_KUBE = cp_kube.SUITE
PLOTS = Path(__file__).resolve().parent / "plots"


def add_arguments(p: argparse.ArgumentParser) -> None:
    f, c = operator_failover.FailoverConfig(), control_plane.ControlPlaneConfig()
    s = f.staleness
    p.add_argument("--failover-nodes", type=int, default=f.nodes, help="Nodes (with agents) in the failover runs.")
    p.add_argument("--failover-pods-per-node", type=int, default=f.pods_per_node)
    p.add_argument("--failover-replicas", type=int, action="append", default=None,
                   help="Operator replicas (>= 2; repeatable; default: 2 and 3).")
    p.add_argument("--failover-target", action="append", choices=operator_failover.TARGETS, default=None,
                   help="builtin: the in-memory sandbox; kube: the real control plane (repeatable; default: both).")
    p.add_argument("--failover-kills", type=int, default=f.kills, help="SIGKILLs of the leader per setting.")
    p.add_argument("--staleness-nodes", type=int, default=s.nodes,
                   help="Nodes in the staleness run (its agents renew their Lease every grace/4 s).")
    p.add_argument("--staleness-grace", type=float, default=s.grace, help="--node-grace-period of the staleness run.")
    p.add_argument("--staleness-repetitions", type=int, default=s.repetitions,
                   help="Times the real agent is stopped; 0: no staleness run.")
    p.add_argument("--control-plane-nodes", type=int, default=c.nodes)
    p.add_argument("--control-plane-pods-per-node", type=int, default=c.pods_per_node)
    p.add_argument("--control-plane-window", type=float, default=c.window, help="Seconds of steady state counted.")
    p.add_argument("--control-plane-etcd", choices=("run", "skip"), default=c.etcd,
                   help="skip: no etcd-server installed, report the modeled byte counts only.")
    k = cp_kube.KubeCostConfig()
    p.add_argument("--cp-kube-nodes", type=int, default=k.nodes,
                   help="Nodes of each real cluster (kube-apiserver, etcd, kwok) of the control-plane-kube suite.")
    p.add_argument("--cp-kube-pods-per-node", type=int, default=k.pods_per_node)
    p.add_argument("--cp-kube-window", type=float, default=k.window, help="Seconds of steady state counted.")
    p.add_argument("--cp-kube-cluster", action="append", choices=cp_kube.CLUSTERS, default=None,
                   help="Run only this cluster (repeatable; the section needs base, ours and crd, and shows the "
                        "report-interval table for the crd-N clusters run).")


def run(args: argparse.Namespace, suites: tuple[str, ...], state_dir: Path, command: str, output: Path) -> None:
    if FAILOVER in suites:
        config = operator_failover.FailoverConfig(
            nodes=args.failover_nodes, pods_per_node=args.failover_pods_per_node,
            targets=tuple(args.failover_target or operator_failover.TARGETS),
            replica_counts=tuple(args.failover_replicas or (2, 3)), kills=args.failover_kills,
            staleness=failover_staleness.StalenessConfig(nodes=args.staleness_nodes, grace=args.staleness_grace,
                                                         repetitions=args.staleness_repetitions),
            state_dir=state_dir)
        failover = asyncio.run(operator_failover.run(config))
        cp_plots.failover(failover, PLOTS / failover_report.PLOT)
        cp_plots.staleness(failover, PLOTS / "failover_staleness.png")
        failover_report.save_raw(failover)
        failover_report.write(output, failover_report.render(failover, machine.describe(), command))
        say(f"wrote the {failover_report.SECTION} section of {output} and {failover_report.RAW}")
    if CONTROL_PLANE in suites:
        cp_config = control_plane.ControlPlaneConfig(
            nodes=args.control_plane_nodes, pods_per_node=args.control_plane_pods_per_node,
            window=args.control_plane_window, etcd=args.control_plane_etcd, state_dir=state_dir)
        cost = asyncio.run(control_plane.run(cp_config))
        cp_plots.control_plane(cost, PLOTS / "control_plane_cost.png")
        cp_report.write(output, cp_report.CONTROL_PLANE_SECTION,
                        cp_report.render_control_plane(cost, machine.describe(), command))
        say(f"wrote the {cp_report.CONTROL_PLANE_SECTION} section of {output}")
    if CONTROL_PLANE_KUBE in suites:
        kube_config = cp_kube.KubeCostConfig(
            nodes=args.cp_kube_nodes, pods_per_node=args.cp_kube_pods_per_node, window=args.cp_kube_window,
            state_dir=state_dir, clusters=tuple(args.cp_kube_cluster or cp_kube.CLUSTERS))
        kube_cost = asyncio.run(cp_kube.run(kube_config))
        cp_kube_report.save_raw(kube_cost)
        cp_kube_report.write(output, cp_kube_report.render(kube_cost, machine.describe(), command))
        if not cp_kube_report.problems(kube_cost):
            say(f"plotted {cp_kube_report.plot(kube_cost)}")
        say(f"wrote the {cp_kube_report.SECTION} section of {output} and {cp_kube_report.RAW}")
