"""The control-plane processes and the flags each one runs with.

etcd listens on loopback only. kube-apiserver listens on the pod network's gateway (the one
address both this machine and the pods' namespaces reach) with the Node and RBAC authorizers,
service-account tokens, the front-proxy client certificate aggregation needs, and aggregator
routing to endpoints (there is no kube-proxy to route a ClusterIP). The controller manager runs
its default controllers (garbage collector, namespace, deployment, replicaset, daemonset,
endpoint, endpointslice, serviceaccount, serviceaccount-token, disruption among them) with
per-controller service-account credentials; the scheduler places the Deployment's pods (with the
operator's load-aware extender once it serves: `scheduler_extender`); kwok
keeps the simulated nodes' Leases and pods alive.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from colocation.apimachinery import certificates
from colocation_sandbox.launcher.child_processes import start_logged, terminate
from colocation_sandbox.launcher.controlplane import pki
from colocation_sandbox.launcher.controlplane.binaries import Binaries
from colocation_sandbox.launcher.controlplane.scheduler_extender import ExtenderSettings, scheduler_configuration
from colocation_sandbox.launcher.kubeconfig_files import kubeconfig_document, write_kubeconfig
from colocation_sandbox.launcher.port_claims import free_port

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.96.0.0/16"  # allocated, never routed: nothing here dials a ClusterIP
KWOK_POD_CIDR = "10.245.0.0/16"  # kwok's pods' addresses: written into their status, never dialed
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
STOP_GRACE_SECONDS = 15.0
START_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    apiserver_host: str
    apiserver_port: int
    etcd_compaction_interval: str = "1m"  # kube-apiserver's default is 5m; short so 410 paths get exercised
    kwok_stages: Path | None = None
    audit_log: Path | None = None  # opt-in: kube-apiserver's audit log of writes (AUDIT_POLICY)
    # opt-in: kwok serves kubelet-style resource metrics (controlplane.metricsserver) on the node
    # address at this port, which each Node's status names; 0: kwok listens on loopback only
    kwok_metrics_port: int = 0


# What `--audit-log` records: every write, at Metadata level (who, which verb on which object, the
# response code and when; no bodies), once its response is complete. Reads are not logged, nor are
# TokenReviews and SubjectAccessReviews: a `create` that stores nothing (every replica's API server
# sends them to authenticate and authorize its own clients, standbys included). The
# user's extra carries authentication.kubernetes.io/pod-name for a pod-bound ServiceAccount token,
# so a write can be attributed to the pod (and so the operator replica) that sent it.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    resources:
      - group: authentication.k8s.io
      - group: authorization.k8s.io
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"""


def audit_flags(state_dir: Path, audit_log: Path | None) -> list[str]:
    """kube-apiserver's audit flags for `audit_log` (none without it), writing the policy file.

    Blocking mode (the default): each event is in the file before its response is sent, so a
    reader of the file after a response sees every write up to it.
    """
    if audit_log is None:
        return []
    policy = state_dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit_log.parent.mkdir(parents=True, exist_ok=True)
    return ["--audit-policy-file", str(policy), "--audit-log-path", str(audit_log),
            "--audit-log-format", "json", "--audit-log-mode", "blocking", "--audit-log-maxsize", "0"]


@dataclass(kw_only=True)
class Component:
    name: str
    command: list[str]
    log_path: Path
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)

    async def start(self) -> None:
        # A session of its own: a terminal's Ctrl-C reaches the sandbox only, which stops the
        # components in order; the sandbox's death still ends it (child_processes).
        self.process = await start_logged(self.command, self.log_path, {}, start_new_session=True)
        log.info("control-plane component started", extra={"component": self.name, "pid": self.process.pid})

    def check_running(self) -> None:
        if self.process is None or self.process.returncode is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
            code = None if self.process is None else self.process.returncode
            raise RuntimeError(f"{self.name} exited (code {code}); the end of {self.log_path}:\n{tail}")


@dataclass(kw_only=True)
class ControlPlane:
    binaries: Binaries
    pki: pki.Pki
    state_dir: Path
    settings: ClusterSettings
    components: list[Component] = field(default_factory=list)
    etcd_client_port: int = 0
    etcd_metrics_port: int = 0

    @property
    def server(self) -> str:
        return f"https://{self.settings.apiserver_host}:{self.settings.apiserver_port}"

    def _log(self, name: str) -> Path:
        folder = self.state_dir / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{name}.log"

    def component_kubeconfig(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        document = kubeconfig_document(self.server, self.pki.ca.cert_pem, name="colocation-kube", user=user,
                                  client=self.pki.client(stem, user, groups))
        return write_kubeconfig(self.state_dir / f"{stem}.kubeconfig", document)

    def _etcd(self) -> Component:
        self.etcd_client_port, peer, self.etcd_metrics_port = free_port(), free_port(), free_port()
        client, peer_url = f"http://127.0.0.1:{self.etcd_client_port}", f"http://127.0.0.1:{peer}"
        return Component(name="etcd", command=[
            self.binaries.path("etcd"), "--name", "colocation", "--data-dir", str(self.state_dir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"colocation={peer_url}",
            "--listen-metrics-urls", f"http://127.0.0.1:{self.etcd_metrics_port}",
            # A test cluster on a shared disk: durability across power loss buys nothing here,
            # and fsync latency would dominate every write. Bytes written are unaffected.
            "--unsafe-no-fsync=true", "--log-level", "warn",
        ], log_path=self._log("etcd"))

    def _apiserver(self) -> Component:
        p = self.pki.file
        return Component(name="kube-apiserver", command=[
            self.binaries.path("kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{self.etcd_client_port}",
            "--etcd-compaction-interval", self.settings.etcd_compaction_interval,
            "--bind-address", self.settings.apiserver_host, "--advertise-address", self.settings.apiserver_host,
            "--secure-port", str(self.settings.apiserver_port),
            "--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
            "--client-ca-file", p("ca.crt"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--allow-privileged=true",
            "--requestheader-client-ca-file", p("front-proxy-ca.crt"),
            "--requestheader-allowed-names", pki.FRONT_PROXY_CLIENT,
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", p("front-proxy-client.crt"),
            "--proxy-client-key-file", p("front-proxy-client.key"),
            "--enable-aggregator-routing=true",
            "--profiling=false", "--v", "1",
            *audit_flags(self.state_dir, self.settings.audit_log),
        ], log_path=self._log("kube-apiserver"))

    def _controller_manager(self) -> Component:
        kubeconfig = str(self.component_kubeconfig("controller-manager", "system:kube-controller-manager"))
        return Component(name="kube-controller-manager", command=[
            self.binaries.path("kube-controller-manager"), "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false", "--use-service-account-credentials=true",
            "--service-account-private-key-file", self.pki.file("sa.key"),
            "--root-ca-file", self.pki.file("ca.crt"),
            "--controllers", "*",
            "--kube-api-qps", "200", "--kube-api-burst", "400",
            "--profiling=false", "--v", "1",
        ], log_path=self._log("kube-controller-manager"))

    def _scheduler(self, extender: ExtenderSettings | None = None) -> Component:
        kubeconfig = str(self.component_kubeconfig("scheduler", "system:kube-scheduler"))
        config = self.state_dir / "kube-scheduler.yaml"
        config.write_text(yaml.safe_dump(scheduler_configuration(kubeconfig, extender)))
        return Component(name="kube-scheduler", command=[
            self.binaries.path("kube-scheduler"), "--config", str(config),
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--profiling=false", "--v", "1",
        ], log_path=self._log("kube-scheduler"))

    async def restart_scheduler(self, extender: ExtenderSettings) -> None:
        """kube-scheduler again, its configuration now with the extender (pods wait meanwhile)."""
        index = next(i for i, component in enumerate(self.components) if component.name == "kube-scheduler")
        if self.components[index].process is not None:
            await terminate([self.components[index].process], STOP_GRACE_SECONDS)
        self.components[index] = scheduler = self._scheduler(extender)
        await scheduler.start()

    def _kwok(self, node_ip: str) -> Component:
        kubeconfig = str(self.component_kubeconfig("kwok", "kwok", ("system:masters",)))
        command = [
            self.binaries.path("kwok"), "--kubeconfig", kubeconfig,
            "--manage-nodes-with-annotation-selector", f"{KWOK_NODE_ANNOTATION}=fake",
            "--cidr", KWOK_POD_CIDR, "--node-ip", node_ip, "--node-lease-duration-seconds", "40",
        ]
        port = self.settings.kwok_metrics_port
        if port:
            # Where metrics-server dials a node: its address and status port, TLS as a kubelet's.
            certificates.issue_certificate(self.pki.ca, "kwok", ip_addresses=(node_ip,)).write(
                self.pki.directory, "kwok")
            command += ["--server-address", f"{node_ip}:{port}", "--node-port", str(port),
                        "--tls-cert-file", self.pki.file("kwok.crt"),
                        "--tls-private-key-file", self.pki.file("kwok.key")]
        else:
            command += ["--server-address", f"127.0.0.1:{free_port()}"]
        if self.settings.kwok_stages is not None:
            command += ["--config", str(self.settings.kwok_stages)]
        return Component(name="kwok", command=command, log_path=self._log("kwok"))

    async def start(self, *, node_ip: str) -> None:
        etcd = self._etcd()
        self.components.append(etcd)
        await etcd.start()
        await self._wait(etcd, self._etcd_healthy)
        apiserver = self._apiserver()
        self.components.append(apiserver)
        await apiserver.start()
        await self._wait(apiserver, self._apiserver_ready)
        for component in (self._controller_manager(), self._scheduler(), self._kwok(node_ip)):
            self.components.append(component)
            await component.start()

    async def _wait(self, component: Component, probe: object) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        delay = 0.1
        while True:
            component.check_running()
            if await probe():  # type: ignore[operator]
                log.info("control-plane component ready", extra={"component": component.name})
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{component.name} not ready within {START_TIMEOUT_SECONDS:.0f} s; "
                                   f"see {component.log_path}")
            await asyncio.sleep(delay)  # polling a starting process: backoff between probes
            delay = min(delay * 1.5, 1.0)

    async def _etcd_healthy(self) -> bool:
        return await _get_ok(f"http://127.0.0.1:{self.etcd_client_port}/health", None)

    async def _apiserver_ready(self) -> bool:
        context = ssl.create_default_context(cafile=self.pki.file("ca.crt"))
        context.load_cert_chain(*self.pki.client("admin", pki.ADMIN_USER, ("system:masters",)))
        return await _get_ok(f"{self.server}/readyz", context)

    def check_running(self) -> None:
        for component in self.components:
            component.check_running()

    async def stop(self) -> None:
        # Reverse order: the clients first, etcd last.
        for component in reversed(self.components):
            await terminate([component.process], STOP_GRACE_SECONDS)
        self.components.clear()


async def _get_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session, \
                session.get(url, ssl=context if context is not None else False) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False

