"""The clients the failover benchmark runs while it kills leaders, each as a user's client would be.

All but the reporter go through the API server's aggregated path (the APIService), never to a
replica directly:

- `Poller`: GETs on a fixed pace (lists and gets of NodeMetrics, discovery). A failed request is
  retried once after a short jittered backoff; the retry and a second failure are both counted,
  and every list's resourceVersion is kept, to check it never goes back.
- `Watcher`: one watch of NodeMetrics for the whole run. When its stream ends it watches again
  from the last resourceVersion it saw (a continue); on 410 Gone it lists again (a relist) and
  checks nothing was lost: every node there and the reported node at least at the last value seen.
- `Reporter`: a report for one node every 100 ms (one at a time), as an agent sends it, straight to
  the replica the Lease names (its endpoint and CA are on the Lease's annotations), with a token bound to the
  node's agent pod. Every accepted report carries a higher CPU figure, its sequence number.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from benchmarks.client import Client, Request
from benchmarks.cp_cluster import LEADER_LEASE, NODEMETRICS

FAILURES = (TimeoutError, OSError, aiohttp.ClientError, orjson.JSONDecodeError)
NAMESPACE = "colocation-system"
REPORTER_NODE = "bench-reporter"


@dataclass(frozen=True)
class Attempted:
    """One request as the client saw it: started, ended, retried once, failed twice."""

    kind: str
    started: float
    ended: float
    retried: bool
    failed: bool
    detail: str = ""
    resource_version: int = -1  # a list's


class Poller:
    """GET `paths` in turn every `interval` seconds; each retried once on failure."""

    def __init__(self, client: Client, kind: str, paths: Callable[[], list[str]], interval: float = 0.2) -> None:
        self.client, self.kind, self.paths, self.interval = client, kind, paths, interval
        self.done: list[Attempted] = []

    async def _once(self, path: str) -> tuple[bool, str, int]:
        try:
            status, body = await self.client.send(Request("GET", path))
        except FAILURES as error:
            return False, f"{type(error).__name__}: {error}", -1
        if status != 200:
            return False, f"{status} {body[:200]!r}", -1
        rv = -1
        if path == NODEMETRICS:
            rv = int(orjson.loads(body)["metadata"]["resourceVersion"])
        return True, "", rv

    async def _get(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        ok, detail, rv = await self._once(path)
        retried = not ok
        if retried:
            await asyncio.sleep(random.uniform(0.1, 0.3))  # the client's retry backoff, with jitter
            ok, second, rv = await self._once(path)
            detail = detail if ok else f"{detail}; then {second}"
        self.done.append(Attempted(self.kind, started, loop.time(), retried, not ok, detail, rv))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.gather(*(self._get(path) for path in self.paths()))
            await asyncio.sleep(max(0.0, due - loop.time()))  # the client's pace


@dataclass
class WatchEvent:
    at: float
    what: str  # "continue", "relist", "lost: ...", "backwards: ..."


@dataclass
class Watcher:
    """One NodeMetric watch through the APIService, resumed or relisted for the whole run."""

    client: Client
    expected: Callable[[], set[str]]
    reported: Callable[[], int]  # the last report value accepted before now
    names: set[str] = field(default_factory=set)
    values: dict[str, int] = field(default_factory=dict)  # the reported node's CPU millis, as last seen
    version: int = 0
    outcomes: list[WatchEvent] = field(default_factory=list)

    def _take(self, item: dict[str, Any]) -> None:
        meta = item["metadata"]
        self.names.add(meta["name"])
        if meta["name"] == REPORTER_NODE:
            self.values[REPORTER_NODE] = cpu_millis(item)

    async def _list(self) -> None:
        status, body = await self.client.send(Request("GET", NODEMETRICS))
        if status != 200:
            raise aiohttp.ClientError(f"list: {status} {body[:200]!r}")
        listed = orjson.loads(body)
        self.names = set()
        for item in listed["items"]:
            self._take(item)
        self.version = int(listed["metadata"]["resourceVersion"])

    async def _relist(self, loop: asyncio.AbstractEventLoop) -> None:
        last_seen = self.values.get(REPORTER_NODE, 0)
        accepted = self.reported()
        await self._list()
        missing = self.expected() - self.names
        value = self.values.get(REPORTER_NODE, 0)
        if missing or value < max(last_seen, accepted):
            self.outcomes.append(WatchEvent(loop.time(), f"lost: {len(missing)} nodes missing, reported value "
                                                         f"{value} < {max(last_seen, accepted)}"))
        self.outcomes.append(WatchEvent(loop.time(), "relist"))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        await self._list()
        timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
        gone = False
        while True:
            if gone:
                try:
                    await self._relist(loop)
                except (*FAILURES, KeyError) as error:
                    self.outcomes.append(WatchEvent(loop.time(), f"relist failed: {error!r}"))
                    await asyncio.sleep(0.5)  # the informer's relist backoff
                    continue
            path = f"{NODEMETRICS}?watch=true&allowWatchBookmarks=true&resourceVersion={self.version}"
            try:
                async with self.client.session.get(path, timeout=timeout, headers={"Accept": "application/json"}) \
                        as response:
                    gone = response.status == 410
                    if response.status == 200:
                        async for line in response.content:
                            event = orjson.loads(line)
                            obj = event.get("object") or {}
                            if event.get("type") == "ERROR":
                                gone = obj.get("code") == 410
                                break
                            self._event(event["type"], obj, loop)
            except FAILURES:
                pass  # the stream broke: resumed below, as an informer resumes it
            if not gone:
                self.outcomes.append(WatchEvent(loop.time(), "continue"))
                await asyncio.sleep(0.1)  # a reflector's pause before it watches again

    def _event(self, kind: str, obj: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        rv = int(obj["metadata"].get("resourceVersion") or 0)
        if rv < self.version and kind != "BOOKMARK":
            self.outcomes.append(WatchEvent(loop.time(), f"backwards: {rv} after {self.version}"))
        self.version = max(self.version, rv)
        if kind in ("ADDED", "MODIFIED"):
            if obj["metadata"]["name"] == REPORTER_NODE and cpu_millis(obj) < self.values.get(REPORTER_NODE, 0):
                self.outcomes.append(WatchEvent(loop.time(), f"backwards: value {cpu_millis(obj)}"))
            self._take(obj)


def cpu_millis(item: dict[str, Any]) -> int:
    cpu = str(item["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"])
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


def report(node: str, sequence: int) -> bytes:
    now = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    usage = {"resources": {"cpu": f"{sequence}m", "memory": "2Gi"}}
    return orjson.dumps({
        "apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
        "status": {"updateTime": now, "nodeMetric": {
            "nodeUsage": usage, "systemUsage": {"resources": {"cpu": "100m"}},
            "aggregatedNodeUsages": [{"duration": "5m0s", "usage": {k: usage for k in ("avg", "p50", "p90", "p95",
                                                                                       "p99")}}]},
            "podsMetric": []}})


@dataclass(frozen=True)
class Sent:
    started: float
    ended: float
    holder: str  # the Lease holder it was sent to
    status: int
    sequence: int


class Reporter:
    """A report every `interval` seconds to the replica the Lease names, with a pod-bound agent token."""

    def __init__(self, admin: Client, token: str, interval: float = 0.1) -> None:
        self.admin, self.token, self.interval = admin, token, interval
        self.sent: list[Sent] = []
        self.accepted = 0  # the highest sequence accepted
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2))
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def _leader(self) -> tuple[str, str, ssl.SSLContext | None]:
        lease = await self.admin.json(Request("GET", LEADER_LEASE))
        annotations = lease["metadata"].get("annotations") or {}
        ca = annotations.get("colocation.dev/leader-ca")  # absent while nobody leads
        context = self._contexts.get(ca) if ca else None
        if ca and context is None:
            context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
            context.check_hostname = False
            self._contexts[ca] = context
        return (lease["spec"].get("holderIdentity") or ""), annotations.get("colocation.dev/leader-endpoint", ""), \
            context

    async def _send(self, sequence: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        holder, status = "", 0
        try:
            holder, endpoint, context = await self._leader()
            if holder and endpoint and context is not None:
                async with self.session.put(f"{endpoint}{NODEMETRICS}/{REPORTER_NODE}/status",
                                            data=report(REPORTER_NODE, sequence), ssl=context, headers={
                                                "Content-Type": "application/json",
                                                "Authorization": f"Bearer {self.token}"}) as response:
                    status = response.status
                    await response.read()
        except (*FAILURES, RuntimeError):
            status = 0
        if status == 200:
            self.accepted = max(self.accepted, sequence)
        self.sent.append(Sent(started, loop.time(), holder, status, sequence))

    async def run(self) -> None:
        """One report at a time, as an agent sends them: a later report never overtakes an earlier one,
        so the node's stored value only rises unless an accepted report is lost."""
        loop = asyncio.get_running_loop()
        sequence = 1000
        while True:
            sequence += 1
            await self._send(sequence)
            await asyncio.sleep(self.interval - loop.time() % self.interval)  # the agent's pace

    async def close(self) -> None:
        await self.session.close()


async def agent_token(admin: Client, node: str = REPORTER_NODE, body: dict[str, Any] | None = None) -> str:
    """A Node (`body`, default: a bare one) and an agent pod on it (tolerating every taint: no kubelet ever
    renews this Node); a ServiceAccount token bound to that pod, as the agent on the node has."""
    await admin.json(Request("POST", "/api/v1/nodes", orjson.dumps(body or {"metadata": {"name": node}})))
    pod = {"metadata": {"name": f"agent-{node}", "namespace": NAMESPACE},
           "spec": {"nodeName": node, "serviceAccountName": "colocation-agent",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": "colocation:bench"}]}}
    created = await admin.json(Request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", orjson.dumps(pod)))
    request = {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
        "kind": "Pod", "apiVersion": "v1", "name": f"agent-{node}", "uid": created["metadata"]["uid"]}}}
    answer = await admin.json(Request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/colocation-agent/token",
                                      orjson.dumps(request)))
    return str(answer["status"]["token"])


async def reader_token(admin: Client, name: str = "bench-nodemetrics-reader") -> str:
    """A token that may read NodeMetrics, to ask a replica directly what it serves (replicas take
    bearer tokens, not the real control plane's admin client certificate)."""
    rule = {"apiGroups": ["metrics.colocation.dev"], "resources": ["nodemetrics"], "verbs": ["get", "list", "watch"]}
    subject = {"kind": "ServiceAccount", "name": name, "namespace": "default"}
    for path, body in (
            ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": name}}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterroles", {"metadata": {"name": name}, "rules": [rule]}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                "metadata": {"name": name}, "subjects": [subject],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}})):
        status, answer = await admin.send(Request("POST", path, orjson.dumps(body)))
        if status not in (201, 409):
            raise RuntimeError(f"POST {path}: {status} {answer[:300]!r}")
    answer = await admin.json(Request("POST", f"/api/v1/namespaces/default/serviceaccounts/{name}/token",
                                      orjson.dumps({"spec": {"expirationSeconds": 3600}})))
    return str(answer["status"]["token"])


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, *FAILURES):
            await task
