"""What `colocation operator` was asked to run: its flags, as one value the manager's parts share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from colocation.controllers.settings import ControllerSettings
from colocation.jetstream.nats_connection import NatsOptions
from colocation.jetstream.nodemetric_log import LogSettings
from colocation.manager.serving_ca import CaPolicy


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    kubeconfig: Path | None
    namespace: str
    identity: str
    bind_address: str
    port: int
    advertise_address: str
    tls_cert_file: Path | None
    tls_key_file: Path | None
    lease_duration: float
    renew_deadline: float
    retry_period: float
    metric_ttl: float
    expiry_interval: float = 10.0
    bookmark_interval: float = 10.0
    serve_resource_metrics: bool = False
    serve_custom_metrics: bool = False
    custom_metrics_retention: float = 600.0
    custom_metrics_max_series: int = 50_000
    controllers: ControllerSettings = field(default_factory=ControllerSettings)
    shutdown_delay: float = 5.0  # after SIGTERM: not ready, still serving, before the server closes
    pod_name: str = ""  # POD_NAME: a Lease holder named POD_NAME_* other than us is our dead predecessor
    acquire_after: float = -math.inf  # monotonic: leave a free Lease to warm standbys until then
    service_account_audiences: tuple[str, ...] = ()  # a bearer token's accepted audiences; empty: the issuer
    tls_ca_file: Path | None = None  # with --tls-cert-file: the CAs published for agents and standbys
    # Without --tls-cert-file: the shared CA's and the serving certificates' lifetimes.
    ca_policy: CaPolicy = field(default_factory=CaPolicy)
    # --store nats: NodeMetrics in a NATS JetStream bucket (colocation.jetstream), else in memory.
    nats: NatsOptions | None = None
    nats_log: LogSettings = field(default_factory=LogSettings)
    # --evaluation-shards (with --store nats): the nodes' evaluations shared among the replicas.
    evaluation_shards: int = 1
    # --scheduler-extender-port: kube-scheduler's load-aware extender on its own HTTPS listener (0: off).
    scheduler_extender_port: int = 0
    # --scheduler-extender-client-ca-file: callers must present a client certificate these CAs signed.
    scheduler_extender_client_ca_file: Path | None = None

    def is_predecessor(self, holder: str) -> bool:
        """Whether `holder` is this pod's previous process (the container restarted, so it is dead)."""
        pod = self.pod_name
        return bool(pod) and self.identity.startswith(f"{pod}_") and holder.startswith(f"{pod}_") \
            and holder != self.identity
