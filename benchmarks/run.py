"""`make bench`: run the benchmarks and write their sections of BENCHMARKS.md.

    python -m benchmarks.run [--nodes 5000 --pods-per-node 30 ...] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
from pathlib import Path

from benchmarks import (
    agent_cost,
    agent_cost_report,
    connection_memory,
    cp_suite,
    jetstream_costs,
    leader_scale,
    leader_scale_report,
    machine,
    metrics_server,
    nats_ingest,
    operator_ingest,
    outage_recovery,
    report,
    sandbox_capacity,
    scheduler_extender,
)
from benchmarks.client import say

ROOT = Path(__file__).resolve().parents[1]
SUITES = ("capacity", operator_ingest.SUITE, cp_suite.FAILOVER, cp_suite.CONTROL_PLANE, cp_suite.CONTROL_PLANE_KUBE,
          leader_scale.SUITE, agent_cost.SUITE, connection_memory.SUITE, outage_recovery.SUITE, jetstream_costs.SUITE,
          nats_ingest.SUITE, metrics_server.SUITE, scheduler_extender.SUITE)
# What a bare `make bench` runs: agent-cost (6 min: its 5 windows must outlast the agent's 300 s
# aggregation window), outage-recovery (5.4 min at its 100 nodes, 2026-11-28: a real control plane
# started for each of its two 45 s freezes) and metrics-server (two real control planes, each with
# a 300 s window; it needs `make metrics-server`) and scheduler-extender (two real control planes
# placing thousands of pods) only when named.
DEFAULT_SUITES = tuple(suite for suite in SUITES if suite not in (
    agent_cost.SUITE, outage_recovery.SUITE, metrics_server.SUITE, scheduler_extender.SUITE))


def parser() -> argparse.ArgumentParser:
    defaults = sandbox_capacity.CapacityConfig()
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nodes", type=int, default=defaults.nodes, help="Nodes in the simulated cluster.")
    p.add_argument("--pods-per-node", type=int, default=defaults.pods_per_node)
    p.add_argument("--namespaces", type=int, default=defaults.namespaces, help="Namespaces the pods spread over.")
    p.add_argument("--concurrency", type=int, default=defaults.concurrency, help="Requests in flight.")
    p.add_argument("--status-updates", type=int, default=defaults.status_updates,
                   help="Pods whose Running status is written after creation; -1: all, 0: none.")
    p.add_argument("--watchers", type=int, default=defaults.watchers, help="Concurrent watchers of all pods.")
    p.add_argument("--watch-updates", type=int, default=defaults.watch_updates,
                   help="Pod status updates the watchers must all receive.")
    p.add_argument("--list-repeats", type=int, default=defaults.list_repeats)
    p.add_argument("--selector-repeats", type=int, default=defaults.selector_repeats)
    p.add_argument("--pagination-repeats", type=int, default=defaults.pagination_repeats)
    p.add_argument("--page-size", type=int, default=defaults.page_size)
    p.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md",
                   help="Markdown file whose sandbox-capacity section is (re)written.")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="Where the servers keep kubeconfigs and logs (default: a temporary directory).")
    p.add_argument("--suite", action="append", choices=SUITES, default=None,
                   help="Run only this suite (repeatable); default: every suite but agent-cost, outage-recovery, "
                        "metrics-server and scheduler-extender.")
    cp_suite.add_arguments(p)
    operator_ingest.add_arguments(p, prefix="ingest-")
    leader_scale.add_arguments(p)
    agent_cost.add_arguments(p)
    connection_memory.add_arguments(p)
    outage_recovery.add_arguments(p)
    jetstream_costs.add_arguments(p)
    nats_ingest.add_arguments(p)
    metrics_server.add_arguments(p)
    scheduler_extender.add_arguments(p)
    return p


def config_from(args: argparse.Namespace, state_dir: Path) -> sandbox_capacity.CapacityConfig:
    return sandbox_capacity.CapacityConfig(
        nodes=args.nodes, pods_per_node=args.pods_per_node, namespaces=args.namespaces,
        concurrency=args.concurrency, status_updates=args.status_updates, watchers=args.watchers,
        watch_updates=args.watch_updates, list_repeats=args.list_repeats, selector_repeats=args.selector_repeats,
        pagination_repeats=args.pagination_repeats, page_size=args.page_size, state_dir=state_dir)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    command = " ".join(["python -m benchmarks.run", *map(shlex.quote, argv)])
    suites = tuple(args.suite or DEFAULT_SUITES)
    with tempfile.TemporaryDirectory(prefix="colocation-bench-") as scratch:
        if "capacity" in suites:
            config = config_from(args, args.state_dir or Path(scratch))
            say(f"sandbox capacity: {config.nodes:,} nodes x {config.pods_per_node} pods "
                f"= {config.sizes.pods:,} pods; writing {args.output}")
            result = asyncio.run(sandbox_capacity.run(config))
            report.write(args.output, report.render(result, machine.describe(), command))
            say(f"wrote {args.output}")
        if operator_ingest.SUITE in suites:
            operator_ingest.run_suite(operator_ingest.config_from(
                args, (args.state_dir or Path(scratch)) / "ingest", prefix="ingest-"), args.output, command)
        cp_suite.run(args, suites, args.state_dir or Path(scratch), command, args.output)
        if leader_scale.SUITE in suites:
            leader_scale_report.run_suite(leader_scale.config_from(args, (args.state_dir or Path(scratch)) / "scale"),
                                          args.output, command)
        if agent_cost.SUITE in suites:
            agent_cost_report.run_suite(agent_cost.config_from(args, (args.state_dir or Path(scratch)) / "cost"),
                                        args.output, command)
        if connection_memory.SUITE in suites:
            connection_memory.run_suite(connection_memory.config_from(
                args, (args.state_dir or Path(scratch)) / "connections"), args.output, command)
        if outage_recovery.SUITE in suites:
            outage_recovery.run_suite(outage_recovery.config_from(args, (args.state_dir or Path(scratch)) / "outage"),
                                      args.output, command)
        if jetstream_costs.SUITE in suites:
            jetstream_costs.run_suite(args, args.output, command)
        if nats_ingest.SUITE in suites:
            nats_ingest.run_suite(nats_ingest.config_from(args, (args.state_dir or Path(scratch)) / "nats-ingest"),
                                  args.output, command)
        if metrics_server.SUITE in suites:
            metrics_server.run_suite(metrics_server.config_from(
                args, (args.state_dir or Path(scratch)) / "metrics-server"), args.output, command, args.ms_raw)
        if scheduler_extender.SUITE in suites:
            scheduler_extender.run_suite(scheduler_extender.config_from(
                args, (args.state_dir or Path(scratch)) / "scheduler-extender"), args.output, command, args.se_raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
