"""metrics-server beside the real control plane, scraping kwok's kubelet-style resource metrics.

kwok serves, for each simulated node, what a kubelet's /metrics/resource says (its `Metric`
configuration, below), from one source the simulated agents read too: the pods' usage
annotations (`ClusterResourceUsage`) plus the node's system usage annotations
(colocation.agent.synthetic). It listens on the node address (the pod network's gateway) with a
certificate of the cluster CA, on the port each Node's status names (`--node-port`); each Node is
annotated with the path metrics-server (0.7 and later) scrapes.

metrics-server (hack/metrics-server/build.sh) runs as processes on the gateway address, one port
each, as the user `metrics-server` with the RBAC its own manifests give it (delegated
authentication and authorization through kube-apiserver). The APIService v1beta1.metrics.k8s.io
routes to them through a selector-less Service and an EndpointSlice per replica (kube-apiserver
routes aggregated APIs to endpoints here). The sandbox then leaves out the operator's own
metrics.k8s.io: one APIService serves a group version.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from colocation.agent.synthetic import (
    CPU_USAGE_ANNOTATION,
    MEMORY_USAGE_ANNOTATION,
    SYSTEM_CPU_ANNOTATION,
    SYSTEM_MEMORY_ANNOTATION,
)
from colocation.apimachinery import certificates
from colocation_sandbox.launcher.child_processes import terminate
from colocation_sandbox.launcher.controlplane.binaries import locate_built
from colocation_sandbox.launcher.controlplane.components import Component, ControlPlane
from colocation_sandbox.launcher.crash_loop_backoff import CrashLoopBackOff
from colocation_sandbox.launcher.port_claims import free_port

log = logging.getLogger(__name__)

BUILD_SCRIPT = Path("hack") / "metrics-server" / "build.sh"
BIN_ENV = "COLOCATION_METRICS_SERVER"
BUILD_TIMEOUT_SECONDS = 1800
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
NAMESPACE = "kube-system"
NAME = "metrics-server"
USER = "metrics-server"
APISERVICE = "v1beta1.metrics.k8s.io"
PART_OF_LABEL = {"app.kubernetes.io/part-of": "colocation-sandbox"}
RESOLUTION = "15s"  # metrics-server's default and its manifests' setting
STOP_GRACE_SECONDS = 10.0
# metrics-server's own manifests: readinessProbe httpGet /readyz, initialDelaySeconds 20, periodSeconds 10.
READINESS_DELAY_SECONDS = 20.0
READINESS_PERIOD_SECONDS = 10.0
PROBE_TIMEOUT_SECONDS = 1.0


class MetricsServerMissing(RuntimeError):
    """metrics-server is not built and cannot be; the message is one line, fit for a CLI."""


def locate_metrics_server(*, build: bool = True) -> str:
    """The metrics-server binary: $COLOCATION_METRICS_SERVER, else hack/metrics-server/build.sh's
    (built if needed and `build`, with its progress on stderr)."""
    return locate_built(BUILD_SCRIPT, what="metrics-server", build=build, timeout=BUILD_TIMEOUT_SECONDS,
                        missing=MetricsServerMissing, env=BIN_ENV)


# ---- kwok ---------------------------------------------------------------------------------------

def metrics_path(node: str) -> str:
    return f"/metrics/nodes/{node}/metrics/resource"


def node_annotations(node: str) -> dict[str, str]:
    return {RESOURCE_METRICS_PATH_ANNOTATION: metrics_path(node)}


def _from_annotation(key: str) -> str:
    # A pod without the annotation uses nothing, as the simulated agents count it.
    return f'"{key}" in pod.metadata.annotations ? Quantity(pod.metadata.annotations["{key}"]) : Quantity("0")'


def _series(name: str, kind: str, dimension: str, *, value: str, help_: str) -> dict[str, Any]:
    labels = {"container": [("container", "container.name")], "pod": []}.get(dimension)
    series: dict[str, Any] = {"name": name, "kind": kind, "dimension": dimension, "help": help_, "value": value}
    if labels is not None:
        series["labels"] = [{"name": label, "value": expression} for label, expression in labels] + [
            {"name": "namespace", "value": "pod.metadata.namespace"}, {"name": "pod", "value": "pod.metadata.name"}]
    return series


def kwok_documents() -> list[dict[str, Any]]:
    """kwok's configuration for the resource metrics: where usage comes from, and the series a
    kubelet's /metrics/resource has (those metrics-server reads). A node's cpu counter grows by its
    pods' usage and its system's (annotated in cores); its working set is theirs plus the system's."""
    system_cpu = f'double(node.metadata.annotations["{SYSTEM_CPU_ANNOTATION}"])'
    system_memory = f'double(node.metadata.annotations["{SYSTEM_MEMORY_ANNOTATION}"])'
    usage = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterResourceUsage",
             "metadata": {"name": "colocation-usage-from-annotations"},
             "spec": {"usages": [{"usage": {
                 "cpu": {"expression": _from_annotation(CPU_USAGE_ANNOTATION)},
                 "memory": {"expression": _from_annotation(MEMORY_USAGE_ANNOTATION)}}}]}}
    metric = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Metric",
              "metadata": {"name": "colocation-resource-metrics"},
              "spec": {"path": "/metrics/nodes/{nodeName}/metrics/resource", "metrics": [
                  _series("scrape_error", "gauge", "node", value="0",
                          help_="1 if there was an error getting the node's metrics"),
                  _series("node_cpu_usage_seconds_total", "counter", "node",
                          value=f'node.CumulativeUsage("cpu") + node.SinceSecond() * {system_cpu}',
                          help_="Cumulative cpu time consumed by the node in core-seconds"),
                  _series("node_memory_working_set_bytes", "gauge", "node",
                          value=f'node.Usage("memory") + {system_memory}',
                          help_="Current working set of the node in bytes"),
                  _series("container_start_time_seconds", "gauge", "container", value="pod.SinceSecond()",
                          help_="Start time of the container since unix epoch in seconds"),
                  _series("container_cpu_usage_seconds_total", "counter", "container",
                          value='pod.CumulativeUsage("cpu", container.name)',
                          help_="Cumulative cpu time consumed by the container in core-seconds"),
                  _series("container_memory_working_set_bytes", "gauge", "container",
                          value='pod.Usage("memory", container.name)',
                          help_="Current working set of the container in bytes"),
                  _series("pod_cpu_usage_seconds_total", "counter", "pod", value='pod.CumulativeUsage("cpu")',
                          help_="Cumulative cpu time consumed by the pod in core-seconds"),
                  _series("pod_memory_working_set_bytes", "gauge", "pod", value='pod.Usage("memory")',
                          help_="Current working set of the pod in bytes"),
              ]}}
    return [usage, metric]


# ---- metrics-server -----------------------------------------------------------------------------

def _rbac() -> list[dict[str, Any]]:
    user = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
    meta = {"labels": PART_OF_LABEL}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "colocation-sandbox:metrics-server", **meta},
         "rules": [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "colocation-sandbox:metrics-server", **meta}, "subjects": user,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "colocation-sandbox:metrics-server"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "colocation-sandbox:metrics-server:auth-delegator", **meta}, "subjects": user,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "colocation-sandbox:metrics-server:auth-reader", "namespace": NAMESPACE, **meta},
         "subjects": user,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "extension-apiserver-authentication-reader"}},
    ]


def routing_objects(host: str, ports: list[int], ca_pem: bytes) -> list[dict[str, Any]]:
    """The Service, one EndpointSlice per replica (each its own port), and the APIService."""
    meta = {"namespace": NAMESPACE, "labels": PART_OF_LABEL}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, **meta},
         "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}]
    for index, port in enumerate(ports):
        objects.append({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{NAME}-{index}", "namespace": NAMESPACE,
                         "labels": {**PART_OF_LABEL, "kubernetes.io/service-name": NAME,
                                    "endpointslice.kubernetes.io/managed-by": "colocation-sandbox"}},
            "addressType": "IPv4", "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            "endpoints": [_endpoint(host, True)]})
    objects.append({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": APISERVICE, "labels": PART_OF_LABEL},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                 "versionPriority": 100, "caBundle": base64.b64encode(ca_pem).decode(),
                 "service": {"namespace": NAMESPACE, "name": NAME, "port": 443}}})
    return objects


def objects(host: str, ports: list[int], ca_pem: bytes) -> list[dict[str, Any]]:
    return [*_rbac(), *routing_objects(host, ports, ca_pem)]


def _endpoint(host: str, ready: bool) -> dict[str, Any]:
    return {"addresses": [host], "conditions": {"ready": ready}}


def endpoint_slice_ready_patch(host: str, ready: bool) -> dict[str, Any]:
    """A merge patch of a replica's EndpointSlice (its list is replaced whole): its endpoint, ready or not."""
    return {"endpoints": [_endpoint(host, ready)]}


@dataclass(kw_only=True)
class MetricsServers:
    """`replicas` metrics-server processes on `host` (the gateway), each on a port of its own.

    `supervise` plays the kubelet and the EndpointSlice controller for them, as metrics-server's own
    manifests would have them (restartPolicy Always, a readiness probe of /readyz after 20 s, then
    every 10 s): a process that exits is taken out of its EndpointSlice at once and restarted with
    the kubelet's CrashLoopBackOff, and put back once its /readyz answers.
    """

    binary: str
    plane: ControlPlane
    host: str
    replicas: int
    node_selector: str
    components: list[Component] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)

    def _command(self, index: int, port: int) -> list[str]:
        kubeconfig = str(self.plane.component_kubeconfig("metrics-server", USER))
        pki_ = self.plane.pki
        certificates.issue_certificate(pki_.ca, f"{NAME}.{NAMESPACE}.svc", dns_names=(f"{NAME}.{NAMESPACE}.svc",),
                                       ip_addresses=(self.host,)).write(pki_.directory, f"metrics-server-{index}")
        return [
            self.binary, "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", self.host, "--secure-port", str(port),
            "--tls-cert-file", pki_.file(f"metrics-server-{index}.crt"),
            "--tls-private-key-file", pki_.file(f"metrics-server-{index}.key"),
            # As kwokctl runs it, but verifying kwok's certificate, which the cluster CA signed, and
            # dialing the InternalIP (the Hostname address is a name nothing resolves here).
            "--kubelet-preferred-address-types=InternalIP", "--kubelet-use-node-status-port",
            "--kubelet-certificate-authority", pki_.file("ca.crt"),
            "--metric-resolution", RESOLUTION, "--node-selector", self.node_selector,
            "--profiling=false", "--v", "1",
        ]

    def claim_ports(self) -> list[int]:
        """A port for each replica, known before they start (the objects name them)."""
        self.ports = [free_port(self.host) for _ in range(self.replicas)]
        return self.ports

    async def start(self) -> None:
        """Start the replicas (on the claimed ports); their RBAC must exist by then, or they exit."""
        for index, port in enumerate(self.ports or self.claim_ports()):
            component = Component(name=f"metrics-server-{index}", command=self._command(index, port),
                                  log_path=self.plane.state_dir / "logs" / f"metrics-server-{index}.log")
            await component.start()
            self.components.append(component)

    def check_running(self) -> None:
        for component in self.components:
            component.check_running()

    async def ready(self, index: int) -> bool:
        """Whether replica `index` answers /readyz (its certificate checked against the cluster CA)."""
        context = ssl.create_default_context(cafile=self.plane.pki.file("ca.crt"))
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_SECONDS)) as session, \
                    session.get(f"https://{self.host}:{self.ports[index]}/readyz", ssl=context) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def supervise(self, set_ready: Callable[[int, bool], Awaitable[None]]) -> None:
        """Until cancelled: restart each replica that exits, out of its EndpointSlice until ready again."""
        backoffs = [CrashLoopBackOff() for _ in self.components]
        for backoff in backoffs:
            backoff.started()
        await asyncio.gather(*(self._keep(index, backoffs[index], set_ready) for index in range(len(self.components))))

    async def _keep(self, index: int, backoff: CrashLoopBackOff, set_ready: Callable[[int, bool], Awaitable[None]]) \
            -> None:
        component = self.components[index]
        while True:
            assert component.process is not None
            code = await component.process.wait()
            log.warning("metrics-server exited; restarting it", extra={"replica": index, "code": code})
            await set_ready(index, False)
            await asyncio.sleep(backoff.exited())  # the kubelet's restart delay (0 the first time)
            await component.start()
            backoff.started()
            await asyncio.sleep(READINESS_DELAY_SECONDS)  # the probe's initialDelaySeconds
            while component.process.returncode is None:
                if await self.ready(index):
                    await set_ready(index, True)
                    break
                await asyncio.sleep(READINESS_PERIOD_SECONDS)  # the probe's periodSeconds

    async def stop(self) -> None:
        await terminate([c.process for c in self.components], STOP_GRACE_SECONDS)
        self.components.clear()
