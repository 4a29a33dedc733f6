"""The system under test: the sandbox API server running one `colocation operator` replica, and N
Nodes, each with an agent pod and a ServiceAccount token bound to that pod.

The replica is the one the sandbox runs as the Deployment would (its own pod-bound token, the
manifests' RBAC), so the leader authenticates every report with a TokenReview and authorizes it
with a SubjectAccessReview against the sandbox (both cached, as upstream caches them), and
applies the node rule. Nodes are kubelet-shaped (benchmarks.workload), so each NodeMetric
carries a real Node's labels.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import orjson

from benchmarks import processes, workload
from benchmarks.client import Client, Endpoint, Request, say
from benchmarks.polling import eventually_async
from colocation.kube.leaderelection import LEADER_CA_ANNOTATION, LEADER_ENDPOINT_ANNOTATION
from colocation.kube.permissions import AGENT_SERVICE_ACCOUNT, LEADER_LEASE_NAME, OPERATOR_NAMESPACE

TOKEN_SECONDS = 24 * 3600
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/{LEADER_LEASE_NAME}"


@dataclass
class Cluster:
    sandbox: processes.ServerProcess
    admin: Client  # to the sandbox, as cluster admin
    state_dir: Path
    operator_pid: int = 0
    leader: Endpoint | None = None  # the operator leader, with the admin token (for reads)

    @property
    def sandbox_pid(self) -> int:
        return self.sandbox.pid

    async def stop(self) -> None:
        await self.admin.close()
        await self.sandbox.stop(timeout=30.0)


async def start(state_dir: Path, operator_args: list[str], *, concurrency: int = 48) -> Cluster:
    """Start the sandbox with one operator replica; return once that replica leads and serves."""
    kubeconfig = state_dir / "kubeconfig"
    args = ["-m", "colocation", "sandbox", "--port", "0", "--state-dir", str(state_dir), "--kubeconfig-out",
            str(kubeconfig), "--operators", "1", "--nodes", "0", "--log-level", "warning", "--no-serve-custom-metrics",
            "--no-serve-resource-metrics",
            "--operator-arg=--log-level=warning", *(f"--operator-arg={arg}" for arg in operator_args)]
    sandbox = await processes.start(args, state_dir.parent / f"{state_dir.name}.log", timeout=120.0)
    admin = Client(Endpoint.from_kubeconfig(Path(sandbox.ready["kubeconfig"])), concurrency=concurrency)
    cluster = Cluster(sandbox, admin, state_dir)
    try:
        cluster.leader = await _leader(admin)
        cluster.operator_pid = int(json.loads((state_dir / "operators.json").read_text())[0]["pid"])
    except BaseException:
        await cluster.stop()
        raise
    return cluster


async def _leader(admin: Client, timeout: float = 60.0) -> Endpoint:
    """The leader's endpoint and CA from the Lease annotations, once it answers /readyz."""
    async def serving_leader() -> Endpoint | None:
        status, body = await admin.send(Request("GET", LEASE_PATH))
        annotations = (orjson.loads(body)["metadata"].get("annotations") or {}) if status == 200 else {}
        if LEADER_ENDPOINT_ANNOTATION not in annotations or LEADER_CA_ANNOTATION not in annotations:
            return None
        leader = Endpoint(annotations[LEADER_ENDPOINT_ANNOTATION],
                          base64.b64decode(annotations[LEADER_CA_ANNOTATION]), admin.endpoint.token)
        probe = Client(leader, concurrency=1, timeout=5.0)
        try:
            return leader if (await probe.send(Request("GET", "/readyz")))[0] == 200 else None
        except OSError:
            return None
        finally:
            await probe.close()

    return await eventually_async(serving_leader, timeout, interval=0.25, message="an operator leader serving")


# ---- nodes and their agents' credentials -----------------------------------------------------

def agent_pod(node: str) -> dict[str, object]:
    """The DaemonSet's pod on `node`, as far as the token and the node rule care."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"colocation-agent-{node}", "namespace": OPERATOR_NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "colocation", "app.kubernetes.io/component": "agent"}},
            "spec": {"nodeName": node, "serviceAccountName": AGENT_SERVICE_ACCOUNT,
                     "containers": [{"name": "agent", "image": "colocation:bench"}]}}


# The sandbox recomputes a DaemonSet's status over every Node on each Node added, and a
# PodDisruptionBudget's over every pod of its namespace on each pod change: quadratic set-up at
# 20,000 nodes. Neither object plays any part in the operator's API, so they go first.
_SETUP_SHORTCUTS = (f"/apis/apps/v1/namespaces/{OPERATOR_NAMESPACE}/daemonsets/colocation-agent",
                    f"/apis/policy/v1/namespaces/{OPERATOR_NAMESPACE}/poddisruptionbudgets/colocation-operator")


async def create_nodes(admin: Client, count: int) -> tuple[list[str], list[str]]:
    """Create `count` Nodes and their agent pods; return (node names, one pod-bound token per node)."""
    for path in _SETUP_SHORTCUTS:
        status, body = await admin.send(Request("DELETE", path))
        if status not in (200, 202, 404):
            raise RuntimeError(f"DELETE {path}: {status} {body[:300]!r}")
    names = [workload.node_name(i) for i in range(count)]
    pod_uids: list[str] = [""] * count
    tokens: list[str] = [""] * count

    def keep_uid(index: int, status: int, body: bytes, _: float) -> None:
        if status == 201:
            pod_uids[index] = orjson.loads(body)["metadata"]["uid"]

    def keep_token(index: int, status: int, body: bytes, _: float) -> None:
        if status == 201:
            tokens[index] = orjson.loads(body)["status"]["token"]

    def token_request(index: int) -> Request:
        spec = {"expirationSeconds": TOKEN_SECONDS, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1", "name": f"colocation-agent-{names[index]}", "uid": pod_uids[index]}}
        return Request("POST", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts/{AGENT_SERVICE_ACCOUNT}/token",
                       orjson.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}))

    phases = [
        ("nodes", lambda i: Request("POST", "/api/v1/nodes", orjson.dumps(workload.node(i))), None),
        ("agent pods", lambda i: Request("POST", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods",
                                         orjson.dumps(agent_pod(names[i]))), keep_uid),
        ("pod-bound tokens", token_request, keep_token),
    ]
    for what, make, keep in phases:
        result = await admin.load(what, count, make, on_response=keep, progress=say)
        if result.errors:
            raise RuntimeError(f"creating {what}: {result.errors} errors; first: {result.first_error}")
        say(f"  {count:,} {what} in {result.elapsed:,.1f} s")
    return names, tokens
