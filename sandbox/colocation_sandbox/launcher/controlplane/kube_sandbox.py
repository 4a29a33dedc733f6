"""`colocation sandbox --apiserver kube`: the real control plane, the project installed, its processes.

The order is a cluster's: network and certificates, etcd, kube-apiserver, the controller manager,
the scheduler and kwok; then (unless --api-only) crds/ and manifests/ applied with kubectl as a
user applies them; this machine's node with its kubelet, which runs the operator replicas and
this node's agent from the pods the Deployment and the DaemonSet create; the simulated nodes and
their agents. With `store="nats"`, a NATS cluster (colocation_sandbox.launcher.nats_cluster) starts
before the nodes, serving clients on the bridge's second address, where the operator pods reach
it. With `metrics_servers`, metrics-server processes serve metrics.k8s.io from kwok's resource
metrics (colocation_sandbox.launcher.controlplane.metricsserver), started once the nodes exist.
Every replica serves the load-aware scheduler extender; once the project's APIServices are
Available, kube-scheduler restarts with it (`scheduler_extender`: through a relay on loopback to a
Ready replica, whose URL STATE_DIR/controlplane.json names as `schedulerExtender`), unless
`scheduler_extender` is off (kube-scheduler then places pods alone).
`ready: kubeconfig=PATH` is printed once every APIService of the project is Available.
With `image`, the operator replicas and the agents run from that image's root filesystem (image_root).
With the `cert-manager` component, cert-manager's CRDs are applied before the project and its
controller and cainjector (hack/cert-manager/build.sh) run as processes with the admin kubeconfig.
SIGINT/SIGTERM stops everything started, last first, and removes the pod network.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from colocation.agent.synthetic import SIMULATED_LABEL
from colocation.apimachinery.event_wait import wait_set
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation_sandbox.launcher.child_processes import (
    run,
    start_logged,
    terminate,
    write_state,
)
from colocation_sandbox.launcher.controlplane import fakenodes, kwokstages, metricsserver, pki
from colocation_sandbox.launcher.controlplane.binaries import Binaries, locate, locate_cert_manager
from colocation_sandbox.launcher.controlplane.components import ClusterSettings, ControlPlane
from colocation_sandbox.launcher.controlplane.image_root import CLUSTER_CA, ImageRoot, Mount
from colocation_sandbox.launcher.controlplane.kubelet import NodeKubelet
from colocation_sandbox.launcher.controlplane.podnetwork import PodNetwork
from colocation_sandbox.launcher.controlplane.restclient import RestClient, client_for
from colocation_sandbox.launcher.controlplane.scheduler_extender import (
    EXTENDER_PORT,
    SERVICE_NAME,
    ExtenderSettings,
    ServiceRelay,
)
from colocation_sandbox.launcher.kubeconfig_files import kubeconfig_document, write_kubeconfig
from colocation_sandbox.launcher.nats_cluster import NatsCluster, locate_nats_server, start_cluster
from colocation_sandbox.launcher.port_claims import free_port
from colocation_sandbox.launcher.project_install import load_crds, project_root, render_manifests
from colocation_sandbox.launcher.sandbox_nodes import (
    SIMULATED_NODES_PER_PROCESS,
    machine_capacity,
    machine_node_name,
    simulation_groups,
)

log = logging.getLogger(__name__)

SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's ClusterIP: a SAN of the serving certificate
AVAILABLE_TIMEOUT_SECONDS = 300.0
KUBECTL_TIMEOUT_SECONDS = 120.0
SIMULATED_AGENT_STOP_GRACE = 10.0
CERT_MANAGER = "cert-manager"  # the component (manifests/components/cert-manager) that needs cert-manager
CERT_MANAGER_STOP_GRACE = 10.0


@dataclass(frozen=True, kw_only=True)
class KubeSandboxConfig:
    state_dir: Path
    kubeconfig_out: Path | None = None
    port: int = 0
    api_only: bool = False
    operators: int = 2
    operator_args: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    nodes: int = 3
    pods_per_node: int = 10
    scraped_share: float = 1.0  # of each simulated node's pods with the scrape annotations
    simulated_nodes_per_agent: int = SIMULATED_NODES_PER_PROCESS
    agents: bool = True
    agent_args: tuple[str, ...] = ()
    audit_log: Path | None = None  # kube-apiserver's audit log of writes (components.AUDIT_POLICY)
    max_restart_period: float = 300.0  # the kubelet's crashLoopBackOff.maxContainerRestartPeriod
    store: str = "memory"  # "nats": the operator replicas keep NodeMetrics in a NATS cluster started here
    # kwok serves kubelet-style resource metrics of the simulated nodes, whose usage (theirs and their
    # agents') is then what their annotations say (controlplane.metricsserver)
    kwok_resource_metrics: bool = False
    metrics_servers: int = 0  # metrics-server processes behind v1beta1.metrics.k8s.io (implies the above)
    image: str | None = None  # the operators and agents run from this image's root filesystem (image_root)
    scheduler_extender: bool = True  # kube-scheduler restarts with the operators' extender once they serve


def kubectl(binaries: Binaries, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = run([binaries.kubectl, "--kubeconfig", str(kubeconfig), *args], input=stdin,
                 timeout=KUBECTL_TIMEOUT_SECONDS)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _project_objects(root: Path, config: KubeSandboxConfig, kubectl_path: str) -> list[dict[str, Any]]:
    """manifests/ rendered with the chosen components, with the operator replicas the flag asks for."""
    objects = []
    for obj in render_manifests(root, components=config.components, kubectl=kubectl_path):
        if obj["kind"] == "APIService" and config.operators == 0:
            continue  # no replica to serve it: an unavailable APIService breaks discovery for everyone
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "colocation-operator":
            obj = {**obj, "spec": {**obj["spec"], "replicas": config.operators}}
        objects.append(obj)
    return objects


async def _wait(what: str, probe: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    backoff = Backoff(initial=0.2, maximum=2.0, jitter=0.3)
    while not await probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(backoff.next_delay())  # polling the cluster, with backoff


class KubeSandbox:
    def __init__(self, config: KubeSandboxConfig) -> None:
        self.config = config
        self.network: PodNetwork | None = None
        self.plane: ControlPlane | None = None
        self.client: RestClient | None = None
        self.kubelet: NodeKubelet | None = None
        self.simulated_agents: list[asyncio.subprocess.Process] = []
        self._simulated_states: list[dict[str, Any]] = []
        self.nats: NatsCluster | None = None
        self.metrics_servers: metricsserver.MetricsServers | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self.cert_manager: list[asyncio.subprocess.Process] = []
        self.image_root: ImageRoot | None = None
        self.operator_args = config.operator_args  # the flags of every replica, the store's first
        self.relay: ServiceRelay | None = None
        self._relay_stop = asyncio.Event()
        self._relay_task: asyncio.Task[None] | None = None

    @property
    def kubeconfig_path(self) -> Path:
        return self.config.kubeconfig_out or self.config.state_dir / "kubeconfig"

    async def start(self) -> None:
        config = self.config
        config.state_dir.mkdir(parents=True, exist_ok=True)
        binaries = await asyncio.to_thread(locate)
        with_cert_manager = CERT_MANAGER in config.components and not config.api_only
        cert_manager = await asyncio.to_thread(locate_cert_manager) if with_cert_manager else None
        with_nats = config.store == "nats" and not config.api_only and config.operators > 0
        nats_server = await asyncio.to_thread(locate_nats_server) if with_nats else None
        with_metrics_server = config.metrics_servers > 0 and not config.api_only
        metrics_server = await asyncio.to_thread(metricsserver.locate_metrics_server) if with_metrics_server else None
        if config.image is not None and not config.api_only:
            self.image_root = await asyncio.to_thread(ImageRoot.open, config.image)
        self.network = network = await asyncio.to_thread(PodNetwork.create)
        pki_ = pki.create(config.state_dir / "pki", apiserver_ips=(network.gateway, SERVICE_IP))
        kwok_metrics = self.usage_annotations
        settings = ClusterSettings(apiserver_host=network.gateway,
                                   apiserver_port=config.port or free_port(network.gateway),
                                   kwok_stages=kwokstages.write(config.state_dir / "kwok-stages.yaml",
                                                                metricsserver.kwok_documents() if kwok_metrics else []),
                                   audit_log=config.audit_log.resolve() if config.audit_log else None,
                                   kwok_metrics_port=free_port(network.gateway) if kwok_metrics else 0)
        self.plane = ControlPlane(binaries=binaries, pki=pki_, state_dir=config.state_dir, settings=settings)
        await self.plane.start(node_ip=network.gateway)
        (config.state_dir / "controlplane.json").write_bytes(orjson.dumps({  # where benchmarks scrape metrics
            "server": self.plane.server, "etcdMetrics": f"http://127.0.0.1:{self.plane.etcd_metrics_port}/metrics"}))
        admin = pki_.client("admin", pki.ADMIN_USER, ("system:masters",))
        write_kubeconfig(self.kubeconfig_path, kubeconfig_document(
            self.plane.server, pki_.ca.cert_pem, name="colocation-kube", user=pki.ADMIN_USER, client=admin))
        self.client = client_for(self.plane.server, pki_.directory, "admin")
        await _wait("the default ServiceAccount", self._default_service_account, AVAILABLE_TIMEOUT_SECONDS)
        # Every replica serves the scheduler extender, to callers with a client certificate of the cluster's CA.
        client_ca = pki_.file("ca.crt") if config.image is None else CLUSTER_CA
        self.operator_args = (f"--scheduler-extender-port={EXTENDER_PORT}",
                              f"--scheduler-extender-client-ca-file={client_ca}", *self.operator_args)
        if nats_server is not None:
            # On the bridge's second address: the operator pods' network namespaces have no route to
            # loopback, and a test can cut a pod off from NATS alone (tests/e2e/test_nats_partition.py).
            self.nats = await start_cluster(config.state_dir / "nats", binary=nats_server,
                                            client_host=network.beside_address, secure=True)
            self.operator_args = (*self.nats.operator_args(), *self.operator_args)
        if not config.api_only:
            if cert_manager is not None:
                await self._start_cert_manager(binaries, cert_manager)
            await self._install(binaries)
            await self._start_nodes(pki_)
            if metrics_server is not None:
                await self._start_metrics_servers(binaries, metrics_server)
            await _wait("the project's APIServices Available", self._apiservices_available,
                        AVAILABLE_TIMEOUT_SECONDS)
            if config.operators > 0 and config.scheduler_extender:
                await self._schedule_with_extender(pki_)
            if config.nodes > 0 and config.agents:
                await _wait("this node's agent running", self._node_agent_running, AVAILABLE_TIMEOUT_SECONDS)
            self._write_agents_state()

    @property
    def usage_annotations(self) -> bool:
        return self.config.kwok_resource_metrics or self.config.metrics_servers > 0

    async def _start_metrics_servers(self, binaries: Binaries, binary: str) -> None:
        assert self.network is not None and self.plane is not None
        self.metrics_servers = servers = metricsserver.MetricsServers(
            binary=binary, plane=self.plane, host=self.network.gateway, replicas=self.config.metrics_servers,
            node_selector=f"{SIMULATED_LABEL}=true")  # this machine's stand-in kubelet serves no resource metrics
        await asyncio.to_thread(kubectl, binaries, self.kubeconfig_path, "apply", "-f", "-", stdin=yaml.safe_dump_all(
            metricsserver.objects(self.network.gateway, servers.claim_ports(), self.plane.pki.ca.cert_pem)))
        await servers.start()
        self._supervisor = asyncio.create_task(servers.supervise(self._set_metrics_server_ready))
        await _wait("metrics-server's APIService Available", self._metrics_server_available, AVAILABLE_TIMEOUT_SECONDS)
        log.info("metrics-server serving metrics.k8s.io", extra={"replicas": len(servers.ports)})

    async def _set_metrics_server_ready(self, index: int, ready: bool) -> None:
        assert self.client is not None and self.metrics_servers is not None
        await self.client.must("PATCH", f"/apis/discovery.k8s.io/v1/namespaces/{metricsserver.NAMESPACE}/"
                                        f"endpointslices/{metricsserver.NAME}-{index}",
                               metricsserver.endpoint_slice_ready_patch(self.metrics_servers.host, ready),
                               content_type="application/merge-patch+json")

    async def _metrics_server_available(self) -> bool:
        assert self.client is not None and self.metrics_servers is not None
        if self._supervisor is not None and self._supervisor.done():
            self._supervisor.result()  # the supervisor failed: say why
        status, body = await self.client.request("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/"
                                                         f"{metricsserver.APISERVICE}")
        return status == 200 and any(c.get("type") == "Available" and c.get("status") == "True"
                                     for c in (body.get("status") or {}).get("conditions") or ())

    async def _schedule_with_extender(self, pki_: pki.Pki) -> None:
        """kube-scheduler with the operator's extender, through a relay to a Ready replica."""
        assert self.client is not None and self.plane is not None
        client = self.client
        status, secret = await client.request("GET", f"/api/v1/namespaces/{permissions.OPERATOR_NAMESPACE}/secrets/"
                                                     f"{permissions.CA_SECRET_NAME}")
        if status != 200:  # the cert-manager component: another CA, which this sandbox does not wire
            log.warning("no operator CA Secret: kube-scheduler runs without the extender", extra={"status": status})
            return
        ca_pem = base64.b64decode(secret["data"]["ca.crt"])

        slices = f"/apis/discovery.k8s.io/v1/namespaces/{permissions.OPERATOR_NAMESPACE}/endpointslices"

        async def list_slices() -> dict[str, Any]:
            return dict(await client.must("GET", slices, params={
                "labelSelector": f"kubernetes.io/service-name={SERVICE_NAME}"}))

        self.relay = ServiceRelay(list_slices)
        url = f"https://127.0.0.1:{await self.relay.start()}/scheduler"
        self._relay_task = asyncio.create_task(self.relay.follow_endpoints(self._relay_stop))
        cert, key = pki_.client("scheduler-extender-client", "system:kube-scheduler")
        await self.plane.restart_scheduler(ExtenderSettings(url_prefix=url, ca_pem=ca_pem, client_cert_file=cert,
                                                            client_key_file=key))
        path = self.config.state_dir / "controlplane.json"
        path.write_bytes(orjson.dumps({**orjson.loads(path.read_bytes()), "schedulerExtender": url}))
        log.info("kube-scheduler restarted with the load-aware extender", extra={"url": url})

    async def _default_service_account(self) -> bool:
        assert self.client is not None
        status, _ = await self.client.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200

    async def _install(self, binaries: Binaries) -> None:
        root = project_root()
        if root is None:
            raise RuntimeError("cannot find the project's crds/ and manifests/ (run from a source checkout, "
                               "or use --api-only)")
        kubeconfig = self.kubeconfig_path
        crds = load_crds(root)
        await asyncio.to_thread(kubectl, binaries, kubeconfig, "apply", "--server-side", "-f", "-",
                                stdin=yaml.safe_dump_all(crds))
        await asyncio.to_thread(kubectl, binaries, kubeconfig, "wait", "--for=condition=Established",
                                "--timeout=60s", *(f"crd/{crd['metadata']['name']}" for crd in crds))
        objects = _project_objects(root, self.config, binaries.kubectl)
        await asyncio.to_thread(kubectl, binaries, kubeconfig, "apply", "-f", "-",
                                stdin=yaml.safe_dump_all(objects))
        log.info("project installed with kubectl", extra={"crds": len(crds), "objects": len(objects)})

    async def _start_cert_manager(self, binaries: Binaries, directory: Path) -> None:
        """cert-manager's CRDs, then its controller and cainjector, as a user installs cert-manager
        before the component that uses it."""
        kubeconfig = self.kubeconfig_path
        crds = [doc for path in sorted((directory / "crds").glob("*.yaml"))
                for doc in yaml.safe_load_all(path.read_text()) if doc]
        await asyncio.to_thread(kubectl, binaries, kubeconfig, "apply", "--server-side", "-f", "-",
                                stdin=yaml.safe_dump_all(crds))
        await asyncio.to_thread(kubectl, binaries, kubeconfig, "wait", "--for=condition=Established",
                                "--timeout=60s", *(f"crd/{crd['metadata']['name']}" for crd in crds))
        logs = self.config.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name in ("cert-manager-controller", "cert-manager-cainjector"):
            process = await start_logged([str(directory / name), f"--kubeconfig={kubeconfig}"],
                                         logs / f"{name}.log", {})
            self.cert_manager.append(process)
            log.info("cert-manager started", extra={"program": name, "pid": process.pid})

    async def _start_nodes(self, pki_: pki.Pki) -> None:
        assert self.network is not None and self.plane is not None and self.client is not None
        config = self.config
        name = machine_node_name()
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  SIMULATED_LABEL: "false"}
        self.kubelet = NodeKubelet(name=name, server=self.plane.server, pki_=pki_, network=self.network,
                                   state_dir=config.state_dir, capacity=machine_capacity(), labels=labels,
                                   extra_args={"operator": self.operator_args, "agent": config.agent_args},
                                   run_agents=config.nodes > 0 and config.agents, on_state=self._write_agents_state,
                                   max_restart_period=config.max_restart_period, image_root=self.image_root)
        await self.kubelet.start()
        specs = fakenodes.simulated_specs(config.nodes, config.pods_per_node, scraped_share=config.scraped_share,
                                          usage_annotations=self.usage_annotations)
        if specs:
            await fakenodes.create_nodes(self.client, specs)
        if specs and config.agents:
            specs = await fakenodes.agent_tokens(self.client, specs, timeout=AVAILABLE_TIMEOUT_SECONDS)
            await self._start_simulated_agents(pki_, specs)

    async def _start_simulated_agents(self, pki_: pki.Pki, specs: list[Any]) -> None:
        assert self.plane is not None
        state = self.config.state_dir
        # The kubeconfig gives the server and its CA; each simulated agent uses its own token.
        kubeconfig = write_kubeconfig(state / "simulated-agents.kubeconfig", kubeconfig_document(
            self.plane.server, pki_.ca.cert_pem, name="colocation-kube", user="simulated-agents",
            token=specs[0].token, namespace=permissions.OPERATOR_NAMESPACE))
        for index, group in enumerate(simulation_groups(specs, self.config.simulated_nodes_per_agent)):
            nodes_file = state / f"simulated-nodes-{index}.json"
            nodes_file.write_bytes(orjson.dumps([spec.to_json() for spec in group], option=orjson.OPT_INDENT_2))
            nodes_file.chmod(0o600)  # it holds tokens
            port = free_port()
            log_path = state / "logs" / f"agents-simulated-{index}.log"
            env = {"POD_NAMESPACE": permissions.OPERATOR_NAMESPACE}
            files = {"--kubeconfig": kubeconfig, "--simulated-nodes": nodes_file}
            image = self.image_root
            paths = {flag: str(path) if image is None else f"/run/colocation-sandbox/{path.name}"
                     for flag, path in files.items()}
            program = ["agent", *(item for pair in paths.items() for item in pair),
                       "--metrics-bind-address", "127.0.0.1", "--metrics-port", str(port),
                       "--operator-namespace", permissions.OPERATOR_NAMESPACE, *self.config.agent_args]
            if image is None:
                command = [sys.executable, "-m", "colocation", *program]
            else:
                for path in files.values():
                    os.chown(path, *image.user)  # owner-only files, read by the image's user
                command = image.command(["colocation", *program], user=image.user, env=env, mounts=[
                    Mount(path, paths[flag]) for flag, path in files.items()])
            process = await start_logged(command, log_path, env)
            self.simulated_agents.append(process)
            self._simulated_states.append({"nodes": [s.node for s in group], "simulated": True, "host": "127.0.0.1",
                                           "metricsPort": port, "pid": process.pid, "restarts": 0,
                                           "log": str(log_path)})
            log.info("simulated agents started", extra={"nodes": len(group), "pid": process.pid})
        self._write_agents_state()

    async def _node_agent_running(self) -> bool:
        return self.kubelet is not None and bool(self.kubelet.agent_processes)

    async def _apiservices_available(self) -> bool:
        assert self.client is not None
        listed = await self.client.must("GET", "/apis/apiregistration.k8s.io/v1/apiservices",
                                        params={"labelSelector": "app.kubernetes.io/part-of=colocation"})
        return all(any(c.get("type") == "Available" and c.get("status") == "True"
                       for c in (item.get("status") or {}).get("conditions") or ())
                   for item in listed["items"])

    def _write_agents_state(self) -> None:
        """STATE_DIR/agents.json as the builtin sandbox writes it: this node's agent (as the kubelet
        runs it now) and the simulated agents' processes."""
        entries = list(self.kubelet.agent_processes) if self.kubelet is not None else []
        entries.extend(self._simulated_states)
        write_state(self.config.state_dir / "agents.json", entries)

    async def watch_health(self, stop: asyncio.Event) -> None:
        """Until `stop`: fail loudly if a control-plane component dies (nothing restarts them)."""
        assert self.plane is not None
        while not stop.is_set():
            self.plane.check_running()
            await wait_set(stop, 2.0)

    async def stop(self) -> None:
        await terminate(self.simulated_agents, SIMULATED_AGENT_STOP_GRACE)
        self._relay_stop.set()
        if self._relay_task is not None:
            await self._relay_task
        if self.relay is not None:
            await self.relay.close()
        if self.kubelet is not None:
            await self.kubelet.stop()
        if self.client is not None:
            await self.client.close()
        if self.nats is not None:
            await self.nats.stop()
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self.metrics_servers is not None:
            await self.metrics_servers.stop()
        await terminate(self.cert_manager, CERT_MANAGER_STOP_GRACE)
        if self.image_root is not None:
            await asyncio.to_thread(self.image_root.close)
        if self.plane is not None:
            await self.plane.stop()
        if self.network is not None:
            await asyncio.to_thread(self.network.teardown)


async def serve_kube_sandbox(config: KubeSandboxConfig, stop: asyncio.Event) -> None:
    sandbox = KubeSandbox(config)
    try:
        await sandbox.start()
        print(f"ready: kubeconfig={sandbox.kubeconfig_path}", flush=True)
        await sandbox.watch_health(stop)
    finally:
        await sandbox.stop()
