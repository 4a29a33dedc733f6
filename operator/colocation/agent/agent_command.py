"""`colocation agent`: flags, defaults and their environment variables (set by the DaemonSet)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from colocation.agent.leader_locator import DEFAULT_POLL_INTERVAL
from colocation.agent.strategies.registry import STRATEGIES
from colocation.agent.strategies.strategy import with_flags
from colocation.clicommon import common_options
from colocation.kube import permissions

# 9464: the port Prometheus exporters of OpenTelemetry use; nothing else of ours listens there.
DEFAULT_METRICS_PORT = 9464


@click.command("agent")
@click.option("--node-name", envvar="NODE_NAME", show_envvar=True, default=None,
              help="The node this agent measures and reports for. Required (unless --simulated-nodes).")
@click.option("--proc-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/proc"),
              show_default=True, help="Where the node's /proc is mounted.")
@click.option("--cgroup-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/sys/fs/cgroup"),
              show_default=True, help="Where the node's cgroup filesystem is mounted.")
@click.option("--collect-interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between two samples of /proc and the cgroups.")
@click.option("--report-interval", type=click.FloatRange(min=0.05), default=10.0, show_default=True,
              help="Seconds between two checks of whether a report is due.")
@click.option("--report-change-threshold", type=click.FloatRange(min=0), default=0.10, show_default=True,
              help="Report when a usage moved by more than this fraction of its last reported value "
                   "(counted from at least 1 core or 1 GiB).")
@click.option("--max-report-interval", type=click.FloatRange(min=0.05), default=60.0, show_default=True,
              help="Report at least this often (seconds), changed or not; the NodeSLO's "
                   "metricCollectPolicy.reportIntervalSeconds overrides it.")
@click.option("--report-timeout", type=click.FloatRange(min=0.05), default=5.0, show_default=True,
              help="Seconds a report request may take before it counts as failed.")
@click.option("--leader-poll-interval", type=click.FloatRange(min=0.05), default=DEFAULT_POLL_INTERVAL,
              show_default=True,
              help="Seconds between reads of the leader Lease when no report was accepted meanwhile (read at "
                   "once too when a report fails).")
@click.option("--metrics-bind-address", default="0.0.0.0", show_default=True,
              help="Address of the plain HTTP /healthz and /metrics server.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=DEFAULT_METRICS_PORT, show_default=True,
              help="Port of the plain HTTP /healthz and Prometheus /metrics server; 0 turns it off.")
@click.option("--lease-namespace", default=permissions.NODE_LEASE_NAMESPACE, show_default=True,
              help="Namespace of the node heartbeat Lease (named after the node).")
@click.option("--lease-duration", type=click.IntRange(min=1), default=40, show_default=True,
              help="How long the agent may stay silent (no report, no Lease renewal) before the operator "
                   "judges it dead: the operator's --node-grace-period must match; written as the node Lease's "
                   "leaseDurationSeconds (plus the registration interval while reports are accepted).")
@click.option("--heartbeat-interval", "--lease-renew-interval", "heartbeat_interval", type=click.FloatRange(min=0.05),
              default=None,
              help="Seconds between two heartbeats: a report to the leader, changed or not; while no report is "
                   "accepted, a renewal of the node Lease instead. Default: a quarter of --lease-duration. "
                   "(--lease-renew-interval is its former name.)")
@click.option("--lease-registration-interval", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds between two renewals of the node Lease while reports are accepted (it is also "
                   "renewed when the agent starts).")
@click.option("--operator-namespace", envvar="OPERATOR_NAMESPACE", show_envvar=True,
              default=permissions.OPERATOR_NAMESPACE, show_default=True,
              help="Namespace of the operator and its leader Lease.")
@click.option("--scrape-interval", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds between two scrapes of the node's pods annotated colocation.dev/scrape=\"true\" "
                   "(custom metrics, sent to the leader after each); 0 turns custom metrics off, simulated "
                   "ones included.")
@click.option("--scrape-timeout", type=click.FloatRange(min=0.01), default=None,
              help="Seconds one pod's scrape may take; shorter than --scrape-interval. Default: 3, or 80 % of "
                   "--scrape-interval when that is shorter.")
@click.option("--scrape-concurrency", type=click.IntRange(min=1), default=8, show_default=True,
              help="Pods scraped at once.")
@click.option("--max-series-per-pod", type=click.IntRange(min=1), default=500, show_default=True,
              help="Series kept from one pod's scrape (in exposition order); the rest are dropped and counted.")
@click.option("--simulated-nodes", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Instead of measuring this machine, run a simulated agent (synthetic load) for every node "
                   "in this JSON file ([{\"node\", \"token\", \"seed\", \"profile\", \"pods\"}]), sharing one "
                   "connection pool; for the sandbox and load tests. Needs --kubeconfig for the server and CA.")
@click.option("--simulation-concurrency", type=click.IntRange(min=1), default=32, show_default=True,
              help="With --simulated-nodes: reports (and, separately, Lease renewals) in flight at once, each "
                   "over a pool of as many connections; every node's pod watch has a connection of its own.")
@with_flags(STRATEGIES)
@click.option("--dry-run-enforcement", is_flag=True, envvar="COLOCATION_DRY_RUN_ENFORCEMENT", show_envvar=True,
              help="Compute, log and export what enforcement would write or evict, but write no cgroup file, "
                   "ask for no eviction and post no Event (the default install sets it: its cgroup mount is "
                   "read-only).")
@click.option("--restore-on-exit", is_flag=True, envvar="COLOCATION_RESTORE_ON_EXIT", show_envvar=True,
              help="On SIGTERM/SIGINT, undo CPU suppress (quota -1, full cpuset), batch cgroups and CPU burst "
                   "(the kubelet's own values) and system settings (the values found) before exiting.")
@click.option("--prediction-cold-start", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="Seconds a prod pod is observed before the peak predictor reclaims any of its request for "
                   "Mid-tier resources (NodeMetric prodReclaimableMetric); until then its request counts as peak.")
@common_options
def agent_command(kubeconfig: Path | None, node_name: str | None, proc_root: Path, *, cgroup_root: Path,
                  collect_interval: float, report_interval: float, report_change_threshold: float,
                  max_report_interval: float, report_timeout: float, leader_poll_interval: float,
                  metrics_bind_address: str, metrics_port: int, lease_namespace: str, lease_duration: int,
                  heartbeat_interval: float | None, lease_registration_interval: float, operator_namespace: str,
                  scrape_interval: float,
                  scrape_timeout: float | None, scrape_concurrency: int, max_series_per_pod: int,
                  simulated_nodes: Path | None, simulation_concurrency: int, dry_run_enforcement: bool,
                  restore_on_exit: bool, prediction_cold_start: float, **strategy_flags: Any) -> None:
    """Run the node agent: collect usage, report it to the leader (each report is also its
    heartbeat; a Lease is the registration and the fallback), and scrape annotated pods for custom
    metrics.

    Exits 0 after SIGTERM/SIGINT.
    """
    import asyncio

    from colocation.agent.enforcement import EnforcementOptions
    from colocation.agent.peak_predictor import PredictorOptions
    from colocation.agent.report import ReportOptions
    from colocation.agent.runtime import AgentConfig, NodeAgentOptions, StartupError, run_agent
    from colocation.agent.scrape import ScrapeOptions
    from colocation.kube.config_error import KubeConfigError

    heartbeat = heartbeat_interval if heartbeat_interval is not None else lease_duration / 4
    if heartbeat >= lease_duration:
        raise click.BadParameter("must be shorter than --lease-duration", param_hint="--heartbeat-interval")
    if lease_registration_interval < heartbeat:
        raise click.BadParameter("must not be shorter than --heartbeat-interval",
                                 param_hint="--lease-registration-interval")
    if scrape_timeout is None:
        scrape_timeout = min(3.0, 0.8 * scrape_interval) or 3.0
    if scrape_interval and scrape_timeout >= scrape_interval:
        raise click.BadParameter("must be shorter than --scrape-interval", param_hint="--scrape-timeout")
    options = NodeAgentOptions(
        collect_interval=collect_interval,
        report=ReportOptions(report_interval=report_interval, change_threshold=report_change_threshold,
                             max_interval=max_report_interval, request_timeout=report_timeout),
        lease_namespace=lease_namespace, lease_duration=lease_duration, heartbeat_interval=heartbeat,
        lease_registration_interval=lease_registration_interval,
        scrape=ScrapeOptions(interval=scrape_interval, timeout=scrape_timeout, concurrency=scrape_concurrency,
                             max_series_per_pod=max_series_per_pod),
        prediction=PredictorOptions(cold_start=prediction_cold_start))
    if simulated_nodes is not None:
        from colocation.agent.simulated import SimulationConfig, load_simulated_nodes, run_simulation

        if kubeconfig is None:
            raise click.BadParameter("needed with --simulated-nodes", param_hint="--kubeconfig")
        try:
            nodes = tuple(load_simulated_nodes(simulated_nodes))
        except (ValueError, KeyError, TypeError) as error:
            raise click.BadParameter(str(error), param_hint="--simulated-nodes") from None
        simulation = SimulationConfig(nodes=nodes, kubeconfig=kubeconfig, node=options,
                                      metrics_bind_address=metrics_bind_address, metrics_port=metrics_port,
                                      operator_namespace=operator_namespace, leader_poll_interval=leader_poll_interval,
                                      concurrency=simulation_concurrency)
        try:
            sys.exit(asyncio.run(run_simulation(simulation)))
        except StartupError as error:
            raise click.ClickException(str(error)) from None
    if not node_name:
        raise click.ClickException("--node-name (or NODE_NAME) is required: the node this agent runs on")
    config = AgentConfig(node_name=node_name, kubeconfig=kubeconfig, proc_root=proc_root, cgroup_root=cgroup_root,
                         node=options, metrics_bind_address=metrics_bind_address, metrics_port=metrics_port,
                         operator_namespace=operator_namespace, leader_poll_interval=leader_poll_interval,
                         enforcement=EnforcementOptions(
                             strategies=tuple(strategy.options_from(strategy_flags) for strategy in STRATEGIES),
                             collect_interval=collect_interval, dry_run=dry_run_enforcement,
                             restore_on_exit=restore_on_exit))
    try:
        code = asyncio.run(run_agent(config))
    except KubeConfigError as error:
        raise click.ClickException(str(error)) from None
    except StartupError as error:
        raise click.ClickException(str(error)) from None
    sys.exit(code)
