"""`colocation operator`: flags, defaults and their environment variables (set by the Deployment)."""

from __future__ import annotations

import datetime as dt
import os
import socket
import sys
import uuid
from pathlib import Path

import click

from colocation.clicommon import common_options
from colocation.kube import permissions


def _default_identity() -> str:
    # A fresh suffix per process, as kube-controller-manager does: a restarted replica (same pod
    # name, empty memory) must not resume the lease of its previous life. It frees that lease
    # instead (its predecessor is dead), so that a warm standby, holding a full copy, takes over.
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _check_serving_files(cert_file: Path, key_file: Path) -> None:
    """A clear one-line error, now, for files that are no certificate and matching key."""
    import ssl

    from colocation.apimachinery import certificates

    try:
        certificates.ssl_server_context(certificates.CertKey(cert_file.read_bytes(), key_file.read_bytes()))
    except (ssl.SSLError, ValueError) as error:
        raise click.BadParameter(f"--tls-cert-file {cert_file} and --tls-key-file {key_file} are not a PEM "
                                 f"certificate and its key: {error}") from None


@click.command("operator")
@click.option("--namespace", envvar="POD_NAMESPACE", show_envvar=True, default=permissions.OPERATOR_NAMESPACE,
              show_default=True, help="Namespace of the leader Lease (the operator's own).")
@click.option("--identity", default=None,
              help="Holder identity in the leader Lease. Default: POD_NAME (else the host name), an "
                   "underscore and a random suffix, new for every process.")
@click.option("--bind-address", default="0.0.0.0", show_default=True, help="Address the HTTPS server listens on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8443, show_default=True,
              help="HTTPS port: the NodeMetric API, /readyz, /livez, /healthz and /metrics.")
@click.option("--advertise-address", envvar="POD_IP", show_envvar=True, default="127.0.0.1", show_default=True,
              help="Address agents and standbys use to reach this replica when it leads (published on the Lease).")
@click.option("--tls-cert-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Serving certificate (PEM) that another tool provides and renews (cert-manager): read again "
                   "when it changes; no CA is managed and no APIService patched. Default: a certificate signed by "
                   "the CA in Secret colocation-operator-ca, which the operator creates, rotates and patches into "
                   "its APIServices' caBundle.")
@click.option("--tls-key-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Key of --tls-cert-file (PEM).")
@click.option("--tls-ca-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="With --tls-cert-file: the CAs (PEM) that verify it, published on the leader Lease for agents "
                   "and standbys. Default: the certificate itself (right for a self-signed one).")
@click.option("--serving-cert-validity", type=click.FloatRange(min=1), default=30 * 86400.0, show_default=True,
              help="Seconds a serving certificate is valid (without --tls-cert-file).")
@click.option("--ca-validity", type=click.FloatRange(min=1), default=365 * 86400.0, show_default=True,
              help="Seconds the serving CA is valid (without --tls-cert-file).")
@click.option("--cert-renew-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=2 / 3,
              show_default=True,
              help="Fraction of its lifetime after which a serving certificate or the CA is replaced; a replaced "
                   "CA stays in the caBundle until it expires.")
@click.option("--lease-duration", type=click.FloatRange(min=1), default=15.0, show_default=True,
              help="Seconds a standby waits, after the last change it saw, before taking over the Lease.")
@click.option("--renew-deadline", type=click.FloatRange(min=0.5), default=10.0, show_default=True,
              help="Seconds the leader keeps trying to renew before it gives up leading (and exits).")
@click.option("--retry-period", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds between attempts to acquire or renew the Lease.")
@click.option("--metric-ttl", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds after its last report a node's NodeMetric is dropped (a DELETED event).")
@click.option("--bookmark-interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds between BOOKMARK events on NodeMetric watches that allow them; a standby "
                   "gives up its feed from the leader after three intervals without a byte.")
@click.option("--serve-resource-metrics", is_flag=True, default=False,
              help="Also serve metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics from the same data, so "
                   "`kubectl top` and the HPA work without metrics-server (register the APIService of "
                   "manifests/components/resource-metrics). Runs a Pod informer for pod labels.")
@click.option("--serve-custom-metrics", is_flag=True, default=False,
              help="Also serve custom.metrics.k8s.io (v1beta2, v1beta1) and external.metrics.k8s.io (v1beta1) "
                   "from the leader's memory: the samples agents scrape and built-in cpu_usage/memory_usage "
                   "(register the APIServices of manifests/components/custom-metrics). Runs a Pod informer.")
@click.option("--custom-metrics-retention", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds a custom metric sample is kept; a series without newer samples is dropped.")
@click.option("--custom-metrics-max-series", type=click.IntRange(min=1), default=50_000, show_default=True,
              help="Series held at most (about 3 KB each with 10 minutes of 5-second samples); samples of "
                   "new series beyond it are dropped and counted. The built-ins' history has the same bound.")
@click.option("--evaluation-interval", type=click.FloatRange(min=0.05), default=5.0, show_default=True,
              help="Seconds between two evaluations of every node (health, batch resources), events or not.")
@click.option("--node-grace-period", type=click.FloatRange(min=0.1), default=40.0, show_default=True,
              help="Seconds without a renewal of an agent's Lease after which its node is unhealthy and loses "
                   "its batch resources.")
@click.option("--eviction-timeout", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="Seconds a node stays unhealthy before its batch and free pods are evicted.")
@click.option("--eviction-rate", type=click.FloatRange(min=0), default=0.1, show_default=True,
              help="Nodes per second of a zone whose pods start being evicted; 0 disables evictions.")
@click.option("--unhealthy-zone-threshold", type=click.FloatRange(0, 1), default=0.55, show_default=True,
              help="A zone is partially disrupted while more than this fraction of its nodes is unhealthy...")
@click.option("--unhealthy-zone-min-nodes", type=click.IntRange(min=0), default=2, show_default=True,
              help="...and more than this many of its nodes are.")
@click.option("--secondary-eviction-rate", type=click.FloatRange(min=0), default=0.01, show_default=True,
              help="Nodes per second evicted in a partially disrupted zone of more than "
                   "--large-cluster-size-threshold nodes (a smaller one evicts none).")
@click.option("--large-cluster-size-threshold", type=click.IntRange(min=0), default=50, show_default=True,
              help="Nodes a zone must exceed to go on evicting, at --secondary-eviction-rate, while partially "
                   "disrupted.")
@click.option("--startup-grace", type=click.FloatRange(min=0), default=None,
              help="Seconds after becoming leader before any node is judged. Default: --node-grace-period.")
@click.option("--recovery-renewals", type=click.IntRange(min=1), default=2, show_default=True,
              help="On-time Lease renewals in a row that make an unhealthy node healthy again.")
@click.option("--shutdown-delay", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds a stopping replica (SIGTERM) stays up after releasing the Lease, answering /readyz "
                   "with 503 but still serving reads, so the Service drops it before it closes: longer than the "
                   "readiness probe takes to see it (the Deployment's: every 2 s, 2 failures) plus a second. A second "
                   "SIGTERM or SIGINT ends it at once.")
@click.option("--service-account-audiences", multiple=True, default=(),
              help="An audience bearer tokens may carry (repeat for more); give kube-apiserver's --api-audiences "
                   "if they are not its --service-account-issuer. Default: the issuer, as kube-apiserver's.")
@click.option("--controllers/--no-controllers", default=True, show_default=True,
              help="Run the controllers (NodeSLO, NodeResource, node health) on the leader.")
@click.option("--store", type=click.Choice(["memory", "nats"]), default="memory", show_default=True,
              help="Where NodeMetrics live: the leader's memory (standbys copy it), or a NATS JetStream bucket "
                   "every replica writes and reads (--nats-server).")
@click.option("--nats-server", "nats_servers", multiple=True, default=(),
              help="With --store nats: a NATS server URL (nats:// or tls://); repeat for each server of the cluster.")
@click.option("--nats-ca-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Verify the NATS servers' certificates against this CA.")
@click.option("--nats-user", default="", help="The NATS user this replica connects as.")
@click.option("--nats-password-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A file holding --nats-user's password (read at each connection).")
@click.option("--nats-storage", type=click.Choice(["file", "memory"]), default="file", show_default=True,
              help="The bucket's storage, when this replica creates it: file survives a restart of every server.")
@click.option("--nats-replicas", type=click.IntRange(1, 5), default=3, show_default=True,
              help="The bucket's replicas, when this replica creates it (3: one server may fail).")
@click.option("--evaluation-shards", type=click.IntRange(1, 16), default=1, show_default=True,
              help="With --store nats: share the evaluations of the nodes among the Ready replicas, in this many "
                   "shards, each held through a Lease of its own (1: the leader evaluates every node).")
@click.option("--scheduler-extender-port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Serve kube-scheduler's load-aware extender (POST /scheduler/filter and /scheduler/prioritize) "
                   "over HTTPS on this port, with the serving certificate, on every Ready replica; 0: not served. "
                   "Runs a Pod informer of bound pods.")
@click.option("--scheduler-extender-client-ca-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None,
              help="Require of every caller of the extender's port a client certificate these CAs (PEM) signed "
                   "(the scheduler's tlsConfig certFile/keyFile). Default: no client certificate asked; anyone "
                   "who reaches the port may call it.")
@common_options
def operator_command(kubeconfig: Path | None, namespace: str, identity: str | None, *, bind_address: str, port: int,
                     advertise_address: str, tls_cert_file: Path | None, tls_key_file: Path | None,
                     tls_ca_file: Path | None, serving_cert_validity: float, ca_validity: float,
                     cert_renew_fraction: float,
                     lease_duration: float, renew_deadline: float, retry_period: float, metric_ttl: float,
                     bookmark_interval: float, serve_resource_metrics: bool, serve_custom_metrics: bool,
                     custom_metrics_retention: float, custom_metrics_max_series: int, evaluation_interval: float,
                     node_grace_period: float, eviction_timeout: float, eviction_rate: float,
                     unhealthy_zone_threshold: float, unhealthy_zone_min_nodes: int, secondary_eviction_rate: float,
                     large_cluster_size_threshold: int, startup_grace: float | None,
                     recovery_renewals: int, shutdown_delay: float, service_account_audiences: tuple[str, ...],
                     controllers: bool, store: str, nats_servers: tuple[str, ...], nats_ca_file: str | None,
                     nats_user: str, nats_password_file: str | None, nats_storage: str, nats_replicas: int,
                     evaluation_shards: int, scheduler_extender_port: int,
                     scheduler_extender_client_ca_file: Path | None) -> None:
    """Run an operator replica: leader election, the NodeMetric aggregated API, standby replication,
    and on the leader the controllers (NodeSLO, NodeResource batch resources, node health and evictions).

    Exits 0 after SIGTERM/SIGINT (releasing the Lease), 3 when it loses the Lease and 1 when the
    controllers fail.
    """
    from colocation.controllers.settings import ControllerSettings
    from colocation.jetstream.nats_connection import NatsOptions
    from colocation.jetstream.nodemetric_log import LogSettings
    from colocation.kube.client import KubeConfigError
    from colocation.manager.operator_config import OperatorConfig
    from colocation.manager.predecessor_release import release_dead_predecessor
    from colocation.manager.serving_ca import CaPolicy

    if (tls_cert_file is None) != (tls_key_file is None):
        raise click.BadParameter("give both --tls-cert-file and --tls-key-file, or neither")
    if tls_ca_file is not None and tls_cert_file is None:
        raise click.BadParameter("--tls-ca-file goes with --tls-cert-file")
    if tls_cert_file is not None and tls_key_file is not None:
        _check_serving_files(tls_cert_file, tls_key_file)
    ca_policy = CaPolicy(ca_validity=dt.timedelta(seconds=ca_validity),
                         serving_validity=dt.timedelta(seconds=serving_cert_validity),
                         renew_fraction=cert_renew_fraction)
    if (problem := ca_policy.problem()) is not None:
        raise click.BadParameter(f"--ca-validity, --cert-renew-fraction: {problem}")
    if not lease_duration > renew_deadline > retry_period:
        raise click.BadParameter("need --lease-duration > --renew-deadline > --retry-period")
    nats = None
    if store == "nats":
        if not nats_servers:
            raise click.BadParameter("--store nats needs at least one --nats-server")
        nats = NatsOptions(servers=tuple(nats_servers), ca_file=nats_ca_file or "", user=nats_user,
                           password_file=nats_password_file or "")
    elif nats_servers:
        raise click.BadParameter("--nats-server goes with --store nats")
    if evaluation_shards > 1 and store != "nats":
        raise click.BadParameter("--evaluation-shards above 1 needs --store nats (every replica then holds every "
                                 "node's reports)")
    if scheduler_extender_client_ca_file is not None and scheduler_extender_port == 0:
        raise click.BadParameter("--scheduler-extender-client-ca-file goes with --scheduler-extender-port")
    if scheduler_extender_port != 0 and scheduler_extender_port == port:
        raise click.BadParameter("--scheduler-extender-port must differ from --port")
    config = OperatorConfig(kubeconfig=kubeconfig, namespace=namespace, identity=identity or _default_identity(),
                            bind_address=bind_address, port=port, advertise_address=advertise_address,
                            tls_cert_file=tls_cert_file, tls_key_file=tls_key_file, tls_ca_file=tls_ca_file,
                            lease_duration=lease_duration,
                            renew_deadline=renew_deadline, retry_period=retry_period, metric_ttl=metric_ttl,
                            bookmark_interval=bookmark_interval, serve_resource_metrics=serve_resource_metrics,
                            serve_custom_metrics=serve_custom_metrics,
                            custom_metrics_retention=custom_metrics_retention,
                            custom_metrics_max_series=custom_metrics_max_series,
                            controllers=ControllerSettings(
                                enabled=controllers, evaluation_interval=evaluation_interval,
                                node_grace_period=node_grace_period, eviction_timeout=eviction_timeout,
                                eviction_rate=eviction_rate, unhealthy_zone_threshold=unhealthy_zone_threshold,
                                unhealthy_zone_min_nodes=unhealthy_zone_min_nodes,
                                secondary_eviction_rate=secondary_eviction_rate,
                                large_cluster_size_threshold=large_cluster_size_threshold, startup_grace=startup_grace,
                                recovery_renewals=recovery_renewals),
                            shutdown_delay=shutdown_delay, pod_name=os.environ.get("POD_NAME", ""),
                            service_account_audiences=tuple(service_account_audiences), ca_policy=ca_policy,
                            nats=nats, nats_log=LogSettings(storage="file" if nats_storage == "file" else "memory",
                                                            replicas=nats_replicas),
                            evaluation_shards=evaluation_shards, scheduler_extender_port=scheduler_extender_port,
                            scheduler_extender_client_ca_file=scheduler_extender_client_ca_file)
    try:
        config = release_dead_predecessor(config)  # before importing the rest: every second counts
        from colocation.manager.operator_process import run

        code = run(config)
    except KubeConfigError as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:
        raise click.ClickException(f"cannot serve on {bind_address}:{port}: {error.strerror}") from None
    sys.exit(code)
