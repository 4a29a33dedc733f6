"""`--nodes N`: Nodes, their pods, and their agents, run the way the DaemonSet in manifests/ runs them.

Node 0 is this machine, measured by a real `colocation agent` (label `colocation.dev/simulated:
"false"`). The others are simulated (`"true"`), with their synthetic pods, one agent process per
`SIMULATED_NODES_PER_PROCESS` nodes (`simulation_groups`; `--simulated-nodes-per-agent` fewer).
Every agent has a token of ServiceAccount colocation-agent bound to its own pod on its node, so
the leader's node rule and the agents' RBAC apply. Agent processes that exit restart after the
kubelet's back-off (`crash_loop_backoff`). `STATE_DIR/agents.json` lists them.

More: docs/development.md#the-sandbox
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import re
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from colocation.agent.simulated import SimulatedNode
from colocation.agent.synthetic import PROFILES, SIMULATED_LABEL
from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.quantity import format_bytes, format_millis
from colocation.kube import permissions
from colocation_sandbox.launcher.builtin_sandbox import Sandbox
from colocation_sandbox.launcher.child_processes import (
    TOKEN_SECONDS,
    ChildProcess,
    Supervisor,
    write_state,
)
from colocation_sandbox.launcher.crash_loop_backoff import CrashLoopBackOff
from colocation_sandbox.launcher.port_claims import free_port
from colocation_sandbox.server.admission import new_namespace

log = logging.getLogger(__name__)
SpecT = TypeVar("SpecT")

DEFAULT_PODS_PER_NODE = 10
MAX_PODS = 110
_REAL_RESERVED = (0, 100 * 2**20)  # (cpu millis, memory bytes)


def machine_node_name() -> str:
    """This machine's host name as a Node name (an RFC 1123 subdomain), as the kubelet derives it."""
    name = re.sub(r"[^a-z0-9.-]+", "-", socket.gethostname().lower()).strip("-.")
    return name[:63].strip("-.") or "localhost"


def machine_capacity() -> tuple[int, int]:
    """(cpu millis, memory bytes) of this machine."""
    memory = 0
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
                break
    return (os.cpu_count() or 1) * 1000, memory or 2**30


def machine_node(name: str, cpu_millis: int, memory_bytes: int, *, now: str) -> dict[str, Any]:
    """The Node of this machine, with what the kubelet keeps back by default (100Mi hard eviction)."""
    reserved = _REAL_RESERVED
    capacity = {"cpu": format_millis(cpu_millis), "memory": format_bytes(memory_bytes), "pods": str(MAX_PODS)}
    allocatable = {"cpu": format_millis(max(cpu_millis - reserved[0], 0)),
                   "memory": format_bytes(max(memory_bytes - reserved[1], 0)), "pods": str(MAX_PODS)}
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine() or "amd64")
    return _ready({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
            SIMULATED_LABEL: "false"}},
        "spec": {},
        "status": {
            "capacity": capacity, "allocatable": allocatable,
            "nodeInfo": {"architecture": arch, "operatingSystem": "linux", "kubeletVersion": "v1.32.0-sandbox"},
        },
    }, now)


NODE_ADDRESS = "127.0.0.1"  # every sandbox node's InternalIP: the processes all run on this machine


def pod_cidr(index: int) -> str:
    """Node `index`'s pod CIDR: a /24 of 10.128.0.0/9, as the node IPAM controller hands them out."""
    return f"10.{128 + index // 256}.{index % 256}.0/24"


def _with_pod_cidr(node: dict[str, Any], index: int) -> dict[str, Any]:
    cidr = pod_cidr(index)
    return {**node, "spec": {**(node.get("spec") or {}), "podCIDR": cidr, "podCIDRs": [cidr]}}


def _ready(node: dict[str, Any], now: str) -> dict[str, Any]:
    """A Node as a kubelet reports it once ready: a dated Ready condition and addresses."""
    status = dict(node.get("status") or {})
    status["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "sandbox node",
                             "lastHeartbeatTime": now, "lastTransitionTime": now}]
    status["addresses"] = [{"type": "InternalIP", "address": NODE_ADDRESS},
                           {"type": "Hostname", "address": node["metadata"]["name"]}]
    return {**node, "status": status}


# Python runs a process on one core: at 1,000 simulated nodes one process could not keep every
# node's heartbeat on time on a 2-core machine (BENCHMARKS.md), so larger sandboxes get more.
SIMULATED_NODES_PER_PROCESS = 500


def simulation_groups(specs: Sequence[SpecT], per_process: int = SIMULATED_NODES_PER_PROCESS) -> list[list[SpecT]]:
    """The simulated nodes dealt round-robin over ceil(n / per_process) agent processes."""
    processes = -(-len(specs) // per_process)
    return [list(specs[index::processes]) for index in range(processes)]


@dataclass(kw_only=True)
class AgentProcess:
    nodes: list[str]
    simulated: bool
    metrics_port: int
    child: ChildProcess

    def public(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "simulated": self.simulated, "metricsPort": self.metrics_port,
                "pid": self.child.pid, "restarts": self.child.restarts, "log": self.child.log}


class SandboxNodes:
    def __init__(self, sandbox: Sandbox, count: int, agent_args: tuple[str, ...] = (),
                 *, pods_per_node: int = DEFAULT_PODS_PER_NODE, scraped_share: float = 1.0,
                 run_agents: bool = True, nodes_per_agent: int = SIMULATED_NODES_PER_PROCESS) -> None:
        self.sandbox = sandbox
        self.count = count
        self.agent_args = agent_args
        self.run_agents = run_agents  # False: the Nodes and pods only (`--no-agents`)
        self.pods_per_node = pods_per_node
        self.scraped_share = scraped_share  # of each simulated node's pods with the scrape annotations
        self.nodes_per_agent = nodes_per_agent  # simulated nodes per agent process
        self.namespace = permissions.OPERATOR_NAMESPACE
        self.agents: list[AgentProcess] = []
        self._node_index: dict[str, int] = {}  # node -> its index, which picks its pod CIDR
        self._pods_on: dict[str, int] = {}  # node -> pods given an address so far
        # The kubelet's CrashLoopBackOff, as for the DaemonSet's pods (and --max-container-restart-period).
        restarts = functools.partial(CrashLoopBackOff, maximum=sandbox.config.max_restart_period)
        self._supervisor = Supervisor("agent", log, restarts, on_restart=lambda child: self._write_state())

    @property
    def state_dir(self) -> Path:
        return self.sandbox.config.state_dir

    @property
    def state_file(self) -> Path:
        return self.state_dir / "agents.json"

    # ---- objects -----------------------------------------------------------------------------------

    def _create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        api = self.sandbox.api
        return api.store.create(api.rt("", resource), obj)

    def _ensure_namespace(self, name: str) -> None:
        api = self.sandbox.api
        rt = api.rt("", "namespaces")
        if not any(ns["metadata"]["name"] == name for ns in api.store.objects(rt)):
            api.store.create(rt, new_namespace(name))

    def _running(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod as the kubelet reports it once it runs: every condition True, every container
        ready and running, and an address from its node's pod CIDR (`pod_cidr`)."""
        now = format_time(self.sandbox.api.clock())
        metadata = {k: v for k, v in (pod.get("metadata") or {}).items()
                    if k not in ("uid", "resourceVersion", "creationTimestamp")}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        ordinal = self._pods_on.get(node, 0) + 1
        self._pods_on[node] = ordinal
        pod_ip = self._pod_ip(node, ordinal)
        containers = [{"name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": True, "started": True,
                       "restartCount": 0, "state": {"running": {"startedAt": now}}}
                      for c in (pod.get("spec") or {}).get("containers") or () if isinstance(c, dict)]
        status = {**(pod.get("status") or {}), "phase": "Running", "startTime": now,
                  "conditions": [{"type": kind, "status": "True", "lastTransitionTime": now}
                                 for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                              "PodScheduled")],
                  "containerStatuses": containers, "hostIP": NODE_ADDRESS, "hostIPs": [{"ip": NODE_ADDRESS}]}
        if pod_ip:
            status.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
        return {**pod, "metadata": metadata, "status": status}

    def _pod_ip(self, node: str, ordinal: int) -> str:
        """The `ordinal`-th address of the node's pod CIDR (a /24: 254 addresses, the kubelet's
        110 pods fit), or "" once they run out."""
        index = self._node_index.get(node)
        if index is None or ordinal > 254:
            return ""
        return pod_cidr(index).removesuffix("0/24") + str(ordinal)

    def _agent_pod_and_token(self, node: str) -> str:
        api = self.sandbox.api
        pod = self._create("pods", self._running({
            "metadata": {"name": f"colocation-agent-{node}", "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/name": "colocation", "app.kubernetes.io/component": "agent",
                                    "app.kubernetes.io/part-of": "colocation"}},
            "spec": {"nodeName": node, "serviceAccountName": permissions.AGENT_SERVICE_ACCOUNT,
                     "containers": [{"name": "agent", "image": "colocation:sandbox",
                                     "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                                   "limits": {"cpu": "500m", "memory": "256Mi"}}}]}}))
        sa = api.store.get(api.rt("", "serviceaccounts"), self.namespace, permissions.AGENT_SERVICE_ACCOUNT)
        # Bound to the pod and its node (created before it), as the kubelet's TokenRequest gets it.
        token, _ = api.tokens.issue_service_account_token(self.namespace, permissions.AGENT_SERVICE_ACCOUNT,
                                                          sa["metadata"]["uid"], expiration_seconds=TOKEN_SECONDS,
                                                          bound_object=pod,
                                                          bound_node=api.store.get(api.rt("", "nodes"), "", node))
        return token

    def _simulated(self, index: int, token: str) -> SimulatedNode:
        return SimulatedNode(node=f"sim-node-{index}", token=token, seed=index,
                             profile=PROFILES[(index - 1) % len(PROFILES)],
                             pods=self.pods_per_node, scraped_share=self.scraped_share)

    def create_nodes(self) -> tuple[tuple[str, str] | None, list[SimulatedNode]]:
        """Create the Nodes, their pods and agent pods: ((real node, its token), simulated nodes)."""
        now = format_time(self.sandbox.api.clock())
        real: tuple[str, str] | None = None
        simulated: list[SimulatedNode] = []
        skipped = 0
        for index in range(self.count):
            if index == 0:
                name = machine_node_name()
                cpu, memory = machine_capacity()
                self._create("nodes", _with_pod_cidr(machine_node(name, cpu, memory, now=now), index))
                self._node_index[name] = index
                real = (name, self._agent_pod_and_token(name))
                continue
            spec = self._simulated(index, "")
            collector = spec.collector()
            self._create("nodes", _with_pod_cidr(_ready(collector.node(), now), index))
            self._node_index[spec.node] = index
            for pod in collector.pods():
                self._ensure_namespace(pod["metadata"].get("namespace") or "default")
                try:
                    self._create("pods", self._running(pod))
                except ApiError as error:
                    # Synthetic names are unique per node only (two nodes may both have a redis-0);
                    # the agent reports the pods its watch shows on its node, so it simply has one less.
                    if error.code != 409:
                        raise
                    skipped += 1
            simulated.append(self._simulated(index, self._agent_pod_and_token(spec.node)))
        if skipped:
            log.info("simulated pods left out: their names were taken on another node", extra={"pods": skipped})
        return real, simulated

    # ---- processes ---------------------------------------------------------------------------------

    def _common_args(self, port: int) -> list[str]:
        return ["--metrics-bind-address", "127.0.0.1", "--metrics-port", str(port),
                "--operator-namespace", self.namespace]

    async def start(self) -> None:
        if self.count <= 0:
            return
        real, simulated = self.create_nodes()
        if not self.run_agents:
            self._write_state()
            return
        python = [sys.executable, "-m", "colocation", "agent"]
        env = {"POD_NAMESPACE": self.namespace}
        if real is not None:
            node, token = real
            kubeconfig = self.sandbox.write_kubeconfig(self.state_dir / f"agent-{node}.kubeconfig", token=token)
            port = free_port()
            self.agents.append(AgentProcess(nodes=[node], simulated=False, metrics_port=port, child=ChildProcess(
                # It measures this machine, but its cgroups are not the sandbox's to throttle.
                command=[*python, "--kubeconfig", str(kubeconfig), "--node-name", node, "--proc-root", "/proc",
                         "--cgroup-root", "/sys/fs/cgroup", "--dry-run-enforcement", *self._common_args(port),
                         *self.agent_args],
                env=env, log=str(self.state_dir / f"agent-{node}.log"))))
        if simulated:
            # The kubeconfig gives the server and its CA; each simulated agent uses its own token.
            kubeconfig = self.sandbox.write_kubeconfig(self.state_dir / "simulated-agents.kubeconfig",
                                                       token=simulated[0].token)
        for index, group in enumerate(simulation_groups(simulated, self.nodes_per_agent)):
            nodes_file = self.state_dir / f"simulated-nodes-{index}.json"
            nodes_file.write_bytes(orjson.dumps([spec.to_json() for spec in group], option=orjson.OPT_INDENT_2))
            nodes_file.chmod(0o600)  # it holds tokens
            port = free_port()
            self.agents.append(AgentProcess(nodes=[spec.node for spec in group], simulated=True, metrics_port=port,
                                            child=ChildProcess(
                command=[*python, "--kubeconfig", str(kubeconfig), "--simulated-nodes", str(nodes_file),
                         *self._common_args(port), *self.agent_args],
                env=env, log=str(self.state_dir / f"agents-simulated-{index}.log"))))
        for agent in self.agents:
            await self._supervisor.start(agent.child, nodes=len(agent.nodes), simulated=agent.simulated,
                                         metrics_port=agent.metrics_port)
        self._write_state()

    def _write_state(self) -> None:
        write_state(self.state_file, [item.public() for item in self.agents])

    async def stop(self) -> None:
        await self._supervisor.stop()
