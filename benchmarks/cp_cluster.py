"""The whole system under test: `colocation sandbox` with operator replicas and simulated agents.

One subprocess runs the sandbox API server, which runs the operator replicas and the agents as
processes of their own (sandbox/replicas.py and sandbox/nodes.py): real HTTPS, real leader
election, the manifests' RBAC. This module reads what the benchmarks need from it: who leads, the
replicas' and agents' processes, the NodeMetrics a replica serves, the Nodes' batch resources.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from benchmarks import processes
from benchmarks.client import Client, Endpoint, Request
from colocation.apimachinery.clock import parse_time

NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
LEADER_LEASE = "/apis/coordination.k8s.io/v1/namespaces/colocation-system/leases/colocation-operator"
BATCH_CPU = "kubernetes.io/batch-cpu"


class ReplicaEndpoint(Endpoint):
    """An operator replica at its loopback port. Each replica makes its own CA at start and only the
    leader publishes it, so a standby cannot be verified; this client only measures what they serve."""

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context


@dataclass(frozen=True)
class CertEndpoint(Endpoint):
    """The real control plane's admin: a client certificate (its kubeconfig has no token)."""

    cert_file: str = ""
    key_file: str = ""

    def ssl_context(self) -> ssl.SSLContext:
        context = super().ssl_context()
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


@dataclass
class Replica:
    identity: str  # the pod name; the Lease holder is POD_NAME + "_" + a suffix
    port: int
    pid: int
    restarts: int
    host: str = "127.0.0.1"  # a pod's address on the real control plane


@dataclass
class Cluster:
    server: processes.ServerProcess
    state_dir: Path
    nodes: int
    client: Client
    replica_token: str = ""  # what replicas are asked with; default: the client's token
    _replica_clients: dict[tuple[str, int], Client] = field(default_factory=dict)

    @property
    def endpoint(self) -> Endpoint:
        return self.client.endpoint

    def replicas(self) -> list[Replica]:
        entries = orjson.loads((self.state_dir / "operators.json").read_bytes())
        return [Replica(e["identity"], int(e["port"]), int(e["pid"]), int(e["restarts"]), e.get("host", "127.0.0.1"))
                for e in entries]

    def agent_pids(self, simulated: bool) -> list[int]:
        entries = orjson.loads((self.state_dir / "agents.json").read_bytes())
        return [int(e["pid"]) for e in entries if bool(e["simulated"]) == simulated]

    def replica_client(self, replica: Replica) -> Client:
        key = (replica.host, replica.port)
        client = self._replica_clients.get(key)
        if client is None:
            client = Client(ReplicaEndpoint(f"https://{replica.host}:{replica.port}", b"",
                                            self.replica_token or self.endpoint.token), concurrency=2, timeout=10.0)
            self._replica_clients[key] = client
        return client

    async def lease_spec(self) -> dict[str, Any]:
        """The leader Lease's spec ({} when there is no Lease)."""
        status, body = await self.client.send(Request("GET", LEADER_LEASE))
        if status == 404:
            return {}
        if status != 200:
            raise RuntimeError(f"GET {LEADER_LEASE}: {status} {body[:300]!r}")
        return dict(orjson.loads(body).get("spec") or {})

    async def leader(self) -> str:
        """The Lease's holder identity; "" when nobody holds it."""
        return str((await self.lease_spec()).get("holderIdentity") or "")

    async def lease_renewed_since(self, wall_second: int) -> bool:
        """Whether the Lease names a holder that wrote it at `wall_second` (whole seconds) or later."""
        spec = await self.lease_spec()
        renewed = spec.get("renewTime") or ""
        return bool(spec.get("holderIdentity")) and bool(renewed) and parse_time(renewed) >= wall_second

    def replica_of(self, holder: str) -> Replica | None:
        pod = holder.rpartition("_")[0]
        return next((r for r in self.replicas() if r.identity == pod), None)

    async def leader_replica(self) -> Replica | None:
        holder = await self.leader()
        return self.replica_of(holder) if holder else None

    async def complete(self, count: int = 0) -> bool:
        """Whether the leader serves at least `count` (default: every node's) NodeMetrics."""
        leader = await self.leader_replica()
        if leader is None:
            return False
        served = await self.served_metrics(self.replica_client(leader))
        return served is not None and len(served) >= (count or self.nodes)

    async def served_metrics(self, client: Client) -> dict[str, str] | None:
        """name → resourceVersion of the NodeMetrics `client`'s server lists; None if it does not answer."""
        try:
            status, body = await client.send(Request("GET", NODEMETRICS))
        except (TimeoutError, OSError, aiohttp.ClientError):  # a replica dying or starting
            return None
        if status != 200:
            return None
        return {item["metadata"]["name"]: item["metadata"]["resourceVersion"]
                for item in orjson.loads(body)["items"]}

    async def nodes_with_batch(self) -> set[str]:
        nodes = await self.client.json(Request("GET", "/api/v1/nodes"))
        return {n["metadata"]["name"] for n in nodes["items"]
                if BATCH_CPU in ((n.get("status") or {}).get("allocatable") or {})}

    async def close(self) -> None:
        for client in self._replica_clients.values():
            await client.close()
        await self.client.close()
        await self.server.stop(timeout=30.0)


async def start(state_dir: Path, *, nodes: int, pods_per_node: int, operators: int = 2,
                operator_args: tuple[str, ...] = (), agent_args: tuple[str, ...] = (),
                extra: tuple[str, ...] = (), start_timeout: float = 300.0) -> Cluster:
    """Run `colocation sandbox` with `operators` replicas and `nodes` Nodes (one real agent, the rest simulated).

    Custom metrics are off (the operator's default outside the sandbox): these runs measure
    NodeMetric reports, heartbeats and the controllers, not sample batches.
    """
    args = ["-m", "colocation", "sandbox", "--port", "0", "--state-dir", str(state_dir), "--nodes", str(nodes),
            "--pods-per-node", str(pods_per_node), "--operators", str(operators), "--log-format", "json",
            "--no-serve-custom-metrics", "--no-serve-resource-metrics",
            *(f"--operator-arg={a}" for a in operator_args), *(f"--agent-arg={a}" for a in agent_args), *extra]
    server = await processes.start(args, state_dir / "sandbox.log", timeout=start_timeout)
    endpoint = Endpoint.from_kubeconfig(Path(server.ready["kubeconfig"]))
    if "kube" in extra:  # --apiserver kube: the admin's client certificate
        pki = state_dir / "pki"
        endpoint = CertEndpoint(endpoint.url, endpoint.ca_pem, "", str(pki / "admin.crt"), str(pki / "admin.key"))
    return Cluster(server, state_dir, nodes, Client(endpoint, concurrency=8, timeout=30.0))

