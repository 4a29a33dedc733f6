"""`colocation sandbox`: the whole system on one machine, or the API server alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from colocation.apimachinery.stop_signals import install_stop_signal_handlers
from colocation.clicommon import common_options


@click.command("sandbox")
@click.option("--apiserver", type=click.Choice(["builtin", "kube"]), default="builtin", show_default=True,
              help="builtin: the in-memory API server (instant). kube: the real control plane (etcd, "
                   "kube-apiserver, kube-controller-manager, kube-scheduler, kwok) built from its Go modules by "
                   "hack/kube/build.sh; needs Go and CAP_NET_ADMIN (pods get network namespaces).")
@click.option("--api-only", is_flag=True, default=False,
              help="Run the sandbox Kubernetes API server alone (no operator, no agents).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Loopback address to listen on. The sandbox is for one machine; never expose it.")
@click.option("--port", type=click.IntRange(0, 65535), default=6443, show_default=True,
              help="HTTPS port of the API server; 0 picks a free port.")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".sandbox"),
              show_default=True, help="Directory for the kubeconfig and other state.")
@click.option("--kubeconfig-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the admin kubeconfig. Default: STATE_DIR/kubeconfig.")
@click.option("--watch-window", type=click.IntRange(100, 10_000_000), default=5000, show_default=True,
              help="Events kept per resource for watches to resume from; older ones get 410 Expired.")
@click.option("--bookmark-interval", type=click.FloatRange(0.1, 3600), default=60.0, show_default=True,
              help="Seconds between BOOKMARK events on watches that allow them.")
@click.option("--probe-interval", type=click.FloatRange(0.05, 60), default=1.0, show_default=True,
              help="Seconds between readiness probes of registered endpoints and APIService checks.")
@click.option("--operators", type=click.IntRange(0, 10), default=2, show_default=True,
              help="Operator replicas to run as processes (active/standby), with the manifests' "
                   "ServiceAccount and RBAC. Ignored with --api-only.")
@click.option("--operator-arg", "operator_args", multiple=True, metavar="ARG",
              help="Extra argument for every operator replica (repeatable), "
                   "e.g. --operator-arg=--lease-duration=4.")
@click.option("--serve-resource-metrics/--no-serve-resource-metrics", default=True, show_default=True,
              help="Run the operators with --serve-resource-metrics and register the APIService of "
                   "manifests/components/resource-metrics, so `kubectl top nodes` and `kubectl top pods -A` "
                   "work against the sandbox at once (it has no metrics-server to conflict with).")
@click.option("--serve-custom-metrics/--no-serve-custom-metrics", default=True, show_default=True,
              help="Run the operators with --serve-custom-metrics and register the APIServices of "
                   "manifests/components/custom-metrics (custom.metrics.k8s.io, external.metrics.k8s.io). "
                   "Without it the agents do not scrape (--scrape-interval=0): no one would take their samples.")
@click.option("--nodes", type=click.IntRange(0, 10_000), default=3, show_default=True,
              help="Nodes to create, with their agents: the first is this machine, measured by a real "
                   "`colocation agent` process; the others are simulated (synthetic load, one process per "
                   "--simulated-nodes-per-agent nodes). Ignored with --api-only.")
@click.option("--simulated-nodes-per-agent", "nodes_per_agent", type=click.IntRange(1, 500), default=500,
              show_default=True,
              help="Simulated nodes per agent process. 1: one process per node, so that a test can stop one "
                   "node's reports (SIGSTOP the process agents.json lists for it).")
@click.option("--pods-per-node", type=click.IntRange(0, 110), default=10, show_default=True,
              help="Pods on each simulated node.")
@click.option("--scraped-pod-share", "scraped_share", type=click.FloatRange(0, 1), default=1.0, show_default=True,
              help="Share of each simulated node's pods that carry the Prometheus scrape annotations, "
                   "floor(pods x share) of them spread evenly; the others are not scraped.")
@click.option("--agents/--no-agents", default=True, show_default=True,
              help="Run the nodes' agents. Without them the Nodes and their pods still exist (for measuring "
                   "what the rest costs on its own).")
@click.option("--agent-arg", "agent_args", multiple=True, metavar="ARG",
              help="Extra argument for every agent process (repeatable), e.g. --agent-arg=--report-interval=2.")
@click.option("--max-container-restart-period", "max_restart_period", type=click.FloatRange(1, 300), default=300.0,
              show_default=True,
              help="Longest wait before restarting an operator or agent that exited again (the kubelet's "
                   "crashLoopBackOff.maxContainerRestartPeriod): the first exit restarts at once, later ones "
                   "after 10 s doubling up to this.")
@click.option("--audit-log", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --apiserver kube: kube-apiserver writes an audit log of every write (create, update, "
                   "patch, delete; Metadata level, with the user and its pod) to this file. Off by default.")
@click.option("--store", type=click.Choice(["memory", "nats"]), default="memory", show_default=True,
              help="Where the operator replicas keep NodeMetrics: in memory, or in a NATS JetStream cluster of 3 "
                   "servers the sandbox starts on this machine (nats-server built by hack/nats/build.sh), with TLS "
                   "on clients and routes and a user for the operators (STATE_DIR/nats).")
@click.option("--kwok-resource-metrics", is_flag=True, default=False,
              help="With --apiserver kube: kwok serves a kubelet's resource metrics (/metrics/resource, TLS) for the "
                   "simulated nodes, and their usage, for kwok and for their agents alike, is what annotations on "
                   "their pods say (steady: each pod's mean) plus the node's system usage.")
@click.option("--metrics-server", "metrics_servers", type=click.IntRange(0, 4), default=0, show_default=True,
              metavar="REPLICAS",
              help="With --apiserver kube: run this many metrics-server processes (built by "
                   "hack/metrics-server/build.sh) behind the v1beta1.metrics.k8s.io APIService, scraping kwok "
                   "(implies --kwok-resource-metrics and --no-serve-resource-metrics: one APIService serves "
                   "metrics.k8s.io). 0: none.")
@click.option("--cert-manager", "cert_manager", is_flag=True, default=False,
              help="With --apiserver kube: cert-manager issues the operators' serving certificate "
                   "(manifests/components/cert-manager), its controller and cainjector built by "
                   "hack/cert-manager/build.sh and run as processes.")
@click.option("--image", default=None, metavar="NAME",
              help="With --apiserver kube: run the operator replicas and the agents from this image's root "
                   "filesystem (in buildah's storage: `make image` builds colocation:dev), each chrooted into it, "
                   "read-only, as its pod's user. Not with --store nats.")
@click.option("--scheduler-extender/--no-scheduler-extender", default=True, show_default=True,
              help="With --apiserver kube: restart kube-scheduler with the operators' load-aware extender once they "
                   "serve. Without it kube-scheduler places pods alone (the replicas still serve the extender).")
@common_options
def sandbox_command(kubeconfig: Path | None, apiserver: str, api_only: bool, *, host: str, port: int, state_dir: Path,
                    kubeconfig_out: Path | None, watch_window: int, bookmark_interval: float,
                    probe_interval: float, operators: int, operator_args: tuple[str, ...],
                    serve_resource_metrics: bool, serve_custom_metrics: bool, nodes: int, nodes_per_agent: int,
                    pods_per_node: int, scraped_share: float,
                    agents: bool, agent_args: tuple[str, ...], max_restart_period: float,
                    audit_log: Path | None, store: str, kwok_resource_metrics: bool, metrics_servers: int,
                    cert_manager: bool, image: str | None, scheduler_extender: bool) -> None:
    """Run an in-memory Kubernetes API server on loopback HTTPS (for trying the system, tests and
    capacity simulation; never for production). Prints `ready: kubeconfig=PATH` once the API
    answers, and runs until interrupted (SIGINT/SIGTERM).

    Without --api-only it installs crds/ and manifests/ and runs --operators replicas of
    `colocation operator`, registered behind the metrics APIService, and creates --nodes Nodes with
    their agents.
    """
    if not serve_custom_metrics:
        agent_args = ("--scrape-interval=0", *agent_args)  # a later --agent-arg=--scrape-interval=… still wins
    if image is not None and (apiserver != "kube" or store == "nats"):
        raise click.BadParameter("runs with --apiserver kube and the in-memory store only", param_hint="--image")
    if apiserver == "kube":
        _run_kube(image=image, api_only=api_only, port=port, state_dir=state_dir, kubeconfig_out=kubeconfig_out,
                  operators=operators, operator_args=operator_args,
                  components=(*_components(serve_resource_metrics and not metrics_servers, serve_custom_metrics),
                              *(("cert-manager",) if cert_manager else ())),
                  nodes=nodes, pods_per_node=pods_per_node, scraped_share=scraped_share,
                  simulated_nodes_per_agent=nodes_per_agent, agents=agents, agent_args=agent_args,
                  audit_log=audit_log,
                  max_restart_period=max_restart_period, store=store, kwok_resource_metrics=kwok_resource_metrics,
                  metrics_servers=metrics_servers, scheduler_extender=scheduler_extender)
        return
    if audit_log is not None:
        raise click.BadParameter("the builtin server keeps no audit log; use --apiserver kube",
                                 param_hint="--audit-log")
    if kwok_resource_metrics or metrics_servers:
        raise click.BadParameter("the builtin server has no kwok nor metrics-server; use --apiserver kube",
                                 param_hint="--metrics-server" if metrics_servers else "--kwok-resource-metrics")
    if not scheduler_extender:
        raise click.BadParameter("the builtin server runs no kube-scheduler; use --apiserver kube",
                                 param_hint="--no-scheduler-extender")
    if cert_manager:
        raise click.BadParameter("cert-manager runs against the real control plane only; use --apiserver kube",
                                 param_hint="--cert-manager")
    from colocation_sandbox.launcher.builtin_sandbox import Sandbox, SandboxConfig
    from colocation_sandbox.launcher.sandbox_runner import serve_forever

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise click.BadParameter("the sandbox listens on loopback only", param_hint="--host")
    config = SandboxConfig(host=host, port=port, state_dir=state_dir, kubeconfig_out=kubeconfig_out,
                           watch_window=watch_window, bookmark_interval=bookmark_interval,
                           probe_interval=probe_interval, max_restart_period=max_restart_period)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signal_handlers(stop.set)
        sandbox = Sandbox(config)
        replicas = 0 if api_only else operators
        components = _components(serve_resource_metrics, serve_custom_metrics)
        extra_args = (*operator_args, *(f"--serve-{name}" for name in components))
        if not api_only:
            from colocation_sandbox.launcher.project_install import install_project

            install_project(sandbox, with_apiservice=replicas > 0, components=components)
        nats = None
        if store == "nats" and replicas:
            from colocation_sandbox.launcher.nats_cluster import NatsServerMissing, start_cluster

            try:
                nats = await start_cluster(state_dir / "nats", secure=True)
            except NatsServerMissing as missing:
                raise click.ClickException(str(missing)) from None
            extra_args = (*nats.operator_args(), *extra_args)
        try:
            await serve_forever(sandbox, stop, replicas, operator_args=extra_args, nodes=0 if api_only else nodes,
                                agent_args=agent_args, pods_per_node=pods_per_node, scraped_share=scraped_share,
                                run_agents=agents, nodes_per_agent=nodes_per_agent)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        finally:
            if nats is not None:
                await nats.stop()

    asyncio.run(main())


def _components(serve_resource_metrics: bool, serve_custom_metrics: bool) -> tuple[str, ...]:
    # Each optional API is a kustomize component and the operator flag it adds.
    enabled = {"resource-metrics": serve_resource_metrics, "custom-metrics": serve_custom_metrics}
    return tuple(name for name, on in enabled.items() if on)


def _run_kube(**options: object) -> None:
    """The real control plane (colocation_sandbox.launcher.controlplane), with the same processes and flags."""
    from colocation_sandbox.launcher.controlplane.binaries import BinariesMissing
    from colocation_sandbox.launcher.controlplane.image_root import ImageUnavailable
    from colocation_sandbox.launcher.controlplane.kube_sandbox import KubeSandboxConfig, serve_kube_sandbox
    from colocation_sandbox.launcher.controlplane.metricsserver import MetricsServerMissing
    from colocation_sandbox.launcher.controlplane.podnetwork import PodNetworkUnavailable
    from colocation_sandbox.launcher.nats_cluster import NatsServerMissing

    config = KubeSandboxConfig(**options)  # type: ignore[arg-type]

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signal_handlers(stop.set)
        await serve_kube_sandbox(config, stop)

    try:
        asyncio.run(main())
    except (BinariesMissing, PodNetworkUnavailable, NatsServerMissing, MetricsServerMissing, ImageUnavailable) as error:
        raise click.ClickException(str(error)) from None
