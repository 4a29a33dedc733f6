"""Control-plane cost: what this design puts on the Kubernetes API and etcd, against NodeMetric CRs.

One window of steady state, counted by the sandbox (`/sandbox/stats`: requests and bytes per
user, verb, group and resource). In it run, at once:

- this design: the agents (node Lease registrations, their pod watch, leader Lease reads) and the
  operator replicas (their watches and writes, leader election, delegated authentication of the
  reports), as `colocation sandbox --nodes N` runs them; the reports go to the leader, not the API;
- the Koordinator-style path, for the same metrics at the same moments: every NodeMetric change
  the leader stores (read from its watch, outside the counted traffic) is written by a load client
  to a `nodemetrics.slo.koordinator.sh` custom resource with PUT .../status, as koordlet's
  UpdateStatus does, with that node's agent token; plus one informer watching them, as
  koord-manager does.

Then both object streams of the window are replayed into a real etcd, one fresh etcd each: the
CRD path's full NodeMetric objects (JSON, as kube-apiserver stores custom resources) against
ours, the Lease objects of every renewal and the NodeResource statuses written (protobuf, as it
stores built-in kinds, and JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from benchmarks import cp_cluster, cp_etcd, cp_protobuf
from benchmarks.client import JSON, Client, Request, say, sit_out
from benchmarks.cp_cluster import NODEMETRICS, Cluster
from benchmarks.cp_etcd import EtcdFigures
from benchmarks.polling import eventually_async
from colocation.agent import selfcheck
from colocation.kube import permissions

KOORD_GROUP = "slo.koordinator.sh"
KOORD_PATH = f"/apis/{KOORD_GROUP}/v1alpha1/nodemetrics"
AGENT_USER = f"system:serviceaccount:{permissions.OPERATOR_NAMESPACE}:{permissions.AGENT_SERVICE_ACCOUNT}"
OPERATOR_USER = f"system:serviceaccount:{permissions.OPERATOR_NAMESPACE}:{permissions.OPERATOR_SERVICE_ACCOUNT}"
ADMIN_USER = "sandbox-admin"


@dataclass(frozen=True)
class ControlPlaneConfig:
    # Simulated agents share a pool of 64 connections and hold one pod watch per node: past ~60 nodes
    # the watches take the whole pool and the agents' Lease renewals and reports starve.
    nodes: int = 50
    pods_per_node: int = 30
    window: float = 60.0
    etcd: str = "run"  # "skip": the modeled byte counts only (no etcd-server installed)
    state_dir: Path = Path(".bench")


@dataclass(frozen=True)
class Row:
    """One kind of request, per node per minute."""

    path: str  # "this design" or "NodeMetric CRD"
    client: str  # who sends it
    verb: str
    resource: str  # group/resource
    requests: float
    request_bytes: float
    response_bytes: float
    note: str = ""

    @property
    def bytes(self) -> float:
        return self.request_bytes + self.response_bytes


@dataclass
class ControlPlaneReport:
    config: ControlPlaneConfig
    window_seconds: float = 0.0
    reports: int = 0  # NodeMetric changes the leader stored in the window (= CRD status writes)
    rows: list[Row] = field(default_factory=list)
    crd_object_bytes: float = 0.0  # mean NodeMetric object as stored (JSON)
    lease_object_bytes: float = 0.0  # mean node Lease as stored (protobuf)
    lease_renewals: int = 0  # Lease writes in the window (agents and the leader)
    node_resource_writes: int = 0  # NodeResource status writes in the window (the leader)
    node_resource_bytes: float = 0.0  # mean NodeResource as stored (JSON)
    etcd_crd: EtcdFigures | None = None
    etcd_ours: EtcdFigures | None = None
    etcd_note: str = ""
    seconds: float = 0.0
    agent_checks: dict[str, str] = field(default_factory=dict)  # selfcheck summary by agent process
    problems: list[str] = field(default_factory=list)  # why no figure may be stated

    def per_node_minute(self, value: float) -> float:
        minutes = self.window_seconds / 60
        return value / self.config.nodes / minutes if minutes else math.nan

    def total(self, path: str) -> Row:
        rows = [r for r in self.rows if r.path == path]
        return Row(path, "total", "", "", sum(r.requests for r in rows), sum(r.request_bytes for r in rows),
                   sum(r.response_bytes for r in rows))


# ---- the NodeMetric CRD, as Koordinator defines it (schema reduced to what we write) --------------

def koordinator_crd() -> dict[str, Any]:
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"nodemetrics.{KOORD_GROUP}"},
            "spec": {"group": KOORD_GROUP, "scope": "Cluster",
                     "names": {"kind": "NodeMetric", "listKind": "NodeMetricList", "plural": "nodemetrics",
                               "singular": "nodemetric"},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                       "spec": open_object, "status": open_object}}}}]}}


def koordinator_nodemetric(name: str, status: dict[str, Any], resource_version: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": f"{KOORD_GROUP}/v1alpha1", "kind": "NodeMetric", "metadata": metadata,
            "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 300, "reportIntervalSeconds": 60,
                                             "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]}}},
            "status": status}


def koordlet_rbac() -> list[tuple[str, dict[str, Any]]]:
    """What koordlet is granted for its NodeMetric, given to the agents' ServiceAccount for the benchmark."""
    name = "benchmark-koordlet-nodemetrics"
    return [
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"apiGroups": [KOORD_GROUP], "resources": ["nodemetrics", "nodemetrics/status"],
                       "verbs": ["get", "list", "watch", "update", "patch"]}]}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": permissions.AGENT_SERVICE_ACCOUNT,
                          "namespace": permissions.OPERATOR_NAMESPACE}]}),
    ]


def agent_tokens(state_dir: Path) -> dict[str, str]:
    """node → the token of its agent (bound to its agent pod), as the sandbox wrote them."""
    tokens = {e["node"]: e["token"] for nodes_file in sorted(state_dir.glob("simulated-nodes-*.json"))
              for e in orjson.loads(nodes_file.read_bytes())}
    for kubeconfig in state_dir.glob("agent-*.kubeconfig"):
        node = kubeconfig.name.removeprefix("agent-").removesuffix(".kubeconfig")
        tokens[node] = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    return tokens


# ---- the CRD path's writer -----------------------------------------------------------------------

class Mirror:
    """Writes every NodeMetric the leader stores to its Koordinator-style CR, with the node's token."""

    def __init__(self, cluster: Cluster, tokens: dict[str, str]) -> None:
        self.cluster = cluster
        self.tokens = tokens
        self.resource_versions: dict[str, str] = {}
        self.counting = False
        self.stored: list[tuple[str, bytes]] = []  # (node, stored object) of every write in the window
        self.errors = 0
        self.first_error = ""
        self._locks: dict[str, asyncio.Lock] = {}
        self._slots = asyncio.Semaphore(32)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        return self.cluster.client.session

    async def create(self, name: str, status: dict[str, Any]) -> None:
        async with self.session.post(KOORD_PATH, data=orjson.dumps(koordinator_nodemetric(name, {})),
                                     headers={"Content-Type": JSON}) as response:
            body = await response.read()
            if response.status not in (201, 409):
                raise RuntimeError(f"creating NodeMetric {name}: {response.status} {body[:300]!r}")
            if response.status == 201:
                self.resource_versions[name] = orjson.loads(body)["metadata"]["resourceVersion"]
        await self.write(name, status)

    async def write(self, name: str, status: dict[str, Any]) -> None:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock, self._slots:
            body = orjson.dumps(koordinator_nodemetric(name, status, self.resource_versions.get(name, "")))
            headers = {"Content-Type": JSON, "Accept": JSON, "Authorization": f"Bearer {self.tokens[name]}"}
            async with self.session.put(f"{KOORD_PATH}/{name}/status", data=body, headers=headers) as response:
                stored = await response.read()
                if response.status != 200:
                    self.errors += 1
                    self.first_error = self.first_error or f"PUT {name}/status: {response.status} {stored[:300]!r}"
                    return
            self.resource_versions[name] = orjson.loads(stored)["metadata"]["resourceVersion"]
            if self.counting:
                self.stored.append((name, stored))

    def submit(self, name: str, status: dict[str, Any]) -> None:
        task = asyncio.create_task(self.write(name, status))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def follow(self, leader: Client, created: asyncio.Event) -> None:
        """Read the leader's NodeMetric watch: create the CRs from its initial state, then mirror changes."""
        pending = set(self.tokens)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with leader.session.get(f"{NODEMETRICS}?watch=true", headers={"Accept": JSON},
                                      timeout=timeout) as response:
            if response.status != 200:
                raise RuntimeError(f"watching the leader's NodeMetrics: {response.status}")
            async for line in response.content:
                event = orjson.loads(line)
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if event.get("type") not in ("ADDED", "MODIFIED") or name not in self.tokens:
                    continue
                if name in pending:
                    pending.discard(name)
                    await self.create(name, obj.get("status") or {})
                    if not pending:
                        created.set()
                else:
                    self.submit(name, obj.get("status") or {})


async def _informer(cluster: Cluster, stop: asyncio.Event) -> None:
    """koord-manager's NodeMetric informer: one watch of every CR, its events read and dropped."""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with cluster.client.session.get(f"{KOORD_PATH}?watch=true", headers={"Accept": JSON},
                                          timeout=timeout) as response:
        async for _ in response.content.iter_any():
            if stop.is_set():
                return


# ---- counting ------------------------------------------------------------------------------------

def _rows(report: ControlPlaneReport, items: list[dict[str, Any]]) -> list[Row]:
    per = report.per_node_minute
    rows: list[Row] = []
    for item in items:
        user, group, resource = item["user"], item["group"], item["resource"]
        name = f"{group}/{resource}" if group else resource
        values = (per(item["requests"]), per(item["requestBytes"]), per(item["responseBytes"]))
        if group == KOORD_GROUP:
            client = "koordlet (load client)" if user == AGENT_USER else "koord-manager informer"
            rows.append(Row("NodeMetric CRD", client, item["verb"], name, *values))
        elif user == AGENT_USER and group == "slo.colocation.dev":
            # Only the real agent follows its NodeSLO (simulated ones use the default policy).
            requests, sent, received = (v * report.config.nodes for v in values)
            rows.append(Row("this design", "agents", item["verb"], name, requests, sent, received,
                            note="the one real agent's, for every agent"))
        elif user in (AGENT_USER, OPERATOR_USER):
            rows.append(Row("this design", "agents" if user == AGENT_USER else "operator", item["verb"], name,
                            *values))
    return sorted(rows, key=lambda r: (r.path, r.client, -r.bytes))


# ---- etcd ----------------------------------------------------------------------------------------

def _stored_crd(report_writes: list[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
    for name, stored in report_writes:
        obj = orjson.loads(stored)
        obj["metadata"].pop("resourceVersion", None)  # etcd's revision is the version
        yield f"/registry/{KOORD_GROUP}/nodemetrics/{name}", orjson.dumps(obj)


def _stored_ours(leases: list[dict[str, Any]], renewals: int, node_resources: list[dict[str, Any]],
                 status_writes: int) -> Iterator[tuple[str, bytes]]:
    """Our writes of the window: a Lease per renewal (protobuf), a NodeResource per status write (JSON)."""
    for index in range(renewals):
        lease = leases[index % len(leases)]
        meta = lease["metadata"]
        yield f"/registry/leases/{meta['namespace']}/{meta['name']}", cp_protobuf.lease(lease)
    for index in range(status_writes if node_resources else 0):
        obj = dict(node_resources[index % len(node_resources)])
        obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        yield f"/registry/slo.colocation.dev/noderesources/{obj['metadata']['name']}", orjson.dumps(obj)


async def _etcd(config: ControlPlaneConfig, report: ControlPlaneReport, crd: list[tuple[str, bytes]],
                leases: list[tuple[str, bytes]]) -> None:
    if config.etcd == "skip":
        report.etcd_note = "etcd was not run (--control-plane-etcd=skip): the byte counts are modeled only."
        return
    for name, writes in (("crd", crd), ("ours", leases)):
        data_dir = config.state_dir / f"etcd-{name}"
        etcd = await cp_etcd.start(data_dir, config.state_dir / f"etcd-{name}.log")
        try:
            say(f"control plane: replaying {len(writes):,} writes ({name}) into etcd")
            figures = await etcd.replay(writes)
        finally:
            await etcd.stop()
        if name == "crd":
            report.etcd_crd = figures
        else:
            report.etcd_ours = figures


# ---- the run -------------------------------------------------------------------------------------

async def _window(cluster: Cluster, config: ControlPlaneConfig, report: ControlPlaneReport) -> Mirror:
    client = cluster.client
    await client.json(Request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                              orjson.dumps(koordinator_crd())))
    for path, obj in koordlet_rbac():
        await client.json(Request("POST", path, orjson.dumps(obj)))
    await eventually_async(lambda: _served(client), 30.0, interval=0.2, message="the NodeMetric CRD being served")
    leader = cluster.replica_of(await cluster.leader())
    assert leader is not None
    mirror = Mirror(cluster, agent_tokens(cluster.state_dir))
    created, stop = asyncio.Event(), asyncio.Event()
    follower = asyncio.create_task(mirror.follow(cluster.replica_client(leader), created))
    informer = asyncio.create_task(_informer(cluster, stop))
    try:
        await asyncio.wait_for(created.wait(), 300.0)
        await mirror.drain()
        say(f"control plane: {len(mirror.resource_versions):,} NodeMetric CRs created; counting for "
            f"{config.window:.0f} s")
        agents_before = await selfcheck.read_sandbox(cluster.state_dir)
        await client.json(Request("DELETE", "/sandbox/stats"))
        mirror.counting = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        await sit_out(config.window, started, 10.0, lambda elapsed: f"control plane: {elapsed:.0f}/"
                      f"{config.window:.0f} s, {len(mirror.stored):,} NodeMetric writes")
        counted = await client.json(Request("GET", "/sandbox/stats"))
        mirror.counting = False
        agents_after = await selfcheck.read_sandbox(cluster.state_dir)
    finally:
        stop.set()
        for task in (follower, informer):
            task.cancel()
        for task in (follower, informer):
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await task
    report.window_seconds = counted["seconds"]
    report.reports = len(mirror.stored)
    report.rows = _rows(report, counted["items"])
    report.lease_renewals = sum(i["requests"] for i in counted["items"] if i["resource"] == "leases"
                                and i["verb"] == "update" and i["user"] in (AGENT_USER, OPERATOR_USER))
    report.node_resource_writes = sum(i["requests"] for i in counted["items"] if i["user"] == OPERATOR_USER
                                      and i["resource"] == "noderesources/status" and i["verb"] in ("update", "patch"))
    report.agent_checks, found = selfcheck.sandbox_verdict(agents_before, agents_after)
    report.problems += [f"agent self-check: {problem}" for problem in found]
    if mirror.errors:
        say(f"control plane: {mirror.errors} NodeMetric writes failed: {mirror.first_error}")
        report.problems.append(f"{mirror.errors} NodeMetric writes failed: {mirror.first_error}")
    for problem in report.problems:
        say(f"control plane: problem: {problem}")
    return mirror


async def _served(client: Client) -> bool:
    status, _ = await client.send(Request("GET", f"{KOORD_PATH}?limit=1"))
    return status == 200


async def run(config: ControlPlaneConfig) -> ControlPlaneReport:
    started = time.perf_counter()
    report = ControlPlaneReport(config)
    if config.etcd != "skip":
        cp_etcd.binary()  # fail now, not after the window, when etcd is missing
    say(f"control plane: starting the sandbox with {config.nodes:,} nodes x {config.pods_per_node} pods, 2 operators")
    cluster = await cp_cluster.start(config.state_dir / "control-plane", nodes=config.nodes,
                                     pods_per_node=config.pods_per_node)
    try:
        polled = time.monotonic()
        await eventually_async(lambda: _complete(cluster), 300.0, interval=1.0, message="every node reporting")
        waited = time.monotonic() - polled
        say(f"control plane: all {config.nodes:,} nodes reported after {waited:.0f} s")
        # The window measures the steady state: the leader's startup grace ends with one status write
        # per node (the health conditions leave Unknown), a cost of each election, not of each minute.
        polled = time.monotonic()
        await eventually_async(lambda: _judged(cluster), 300.0, interval=1.0,
                               message="every node past the startup grace")
        waited = time.monotonic() - polled
        say(f"control plane: every node judged (startup grace over) after {waited:.0f} s more")
        mirror = await _window(cluster, config, report)
        leases = (await cluster.client.json(Request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{permissions.NODE_LEASE_NAMESPACE}/leases")))["items"]
        leader_lease = await cluster.client.json(Request("GET", cp_cluster.LEADER_LEASE))
        node_resources = (await cluster.client.json(Request(
            "GET", "/apis/slo.colocation.dev/v1alpha1/noderesources")))["items"]
    finally:
        await cluster.close()
    crd_writes = list(_stored_crd(mirror.stored))
    our_writes = list(_stored_ours([*leases, leader_lease], report.lease_renewals, node_resources,
                                   report.node_resource_writes))
    lease_writes, resource_writes = our_writes[:report.lease_renewals], our_writes[report.lease_renewals:]
    report.crd_object_bytes = sum(len(v) for _, v in crd_writes) / max(len(crd_writes), 1)
    report.lease_object_bytes = sum(len(v) for _, v in lease_writes) / max(len(lease_writes), 1)
    report.node_resource_bytes = sum(len(v) for _, v in resource_writes) / max(len(resource_writes), 1)
    await _etcd(config, report, crd_writes, our_writes)
    report.seconds = time.perf_counter() - started
    say(f"control plane: done in {report.seconds:,.0f} s")
    return report


async def _judged(cluster: Cluster) -> bool:
    items = (await cluster.client.json(Request("GET", "/apis/slo.colocation.dev/v1alpha1/noderesources")))["items"]
    return len(items) >= cluster.nodes and all(
        condition.get("status") != "Unknown"
        for item in items for condition in (item.get("status") or {}).get("conditions") or ()
        if condition.get("type") == "AgentReady")


async def _complete(cluster: Cluster) -> bool:
    holder = await cluster.leader()
    leader = cluster.replica_of(holder) if holder else None
    if leader is None:
        return False
    served = await cluster.served_metrics(cluster.replica_client(leader))
    return served is not None and len(served) >= cluster.nodes
