"""Clients of the leader-scale suite that act as nodes of their own, and a NodeMetric freshness watch.

- `ProbeNodes`: K Nodes shaped like the sandbox's simulated ones (labelled `colocation.dev/leader-probe`),
  each with an agent pod, a token bound to it and a node Lease this client renews, as an agent would.
  Their reports go straight to the leader the Lease names, like an agent's. Between samples every probe
  re-sends its current report each report interval; a sample switches one probe between a low and a
  high usage and times, from just before the PUT, until a watch of the probe Nodes shows
  `status.allocatable["kubernetes.io/batch-cpu"]` moved the right way (the controllers' next
  evaluation and its Node patch).
- `Freshness`: a NodeMetric watch on one replica, keeping each node's last updateTime, to see when a
  new leader holds a report from after a kill for every node.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import itertools
import math
import ssl
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
import orjson

from benchmarks.client import JSON, Client, Request
from benchmarks.cp_cluster import BATCH_CPU, LEADER_LEASE, NODEMETRICS
from benchmarks.failover_probes import FAILURES, agent_token, report
from benchmarks.polling import eventually_async
from colocation.kube import permissions

PROBE_LABEL = "colocation.dev/leader-probe"
KWOK = "kwok.x-k8s.io/"  # the annotations by which kwok manages a Node
LOW, HIGH = 1000, 8000  # the probes' reported CPU usage (node and system), millicores
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{permissions.NODE_LEASE_NAMESPACE}/leases"
STREAM = aiohttp.ClientTimeout(total=None, sock_read=None)


def probe_node(template: dict[str, Any], name: str) -> dict[str, Any]:
    """A Node like `template` (a simulated one), named `name`, without batch resources. On the real
    control plane kwok keeps it Ready as it does the template (its annotation), as no kubelet does."""
    status = template.get("status") or {}
    resources = {key: {k: v for k, v in (status.get(key) or {}).items() if not k.startswith("kubernetes.io/batch")}
                 for key in ("capacity", "allocatable")}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    kwok = {k: v for k, v in annotations.items() if k.startswith(KWOK)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  PROBE_LABEL: "true"}, **({"annotations": kwok} if kwok else {})},
            "spec": {}, "status": {**resources, "conditions": status.get("conditions") or [],
                                   "nodeInfo": status.get("nodeInfo") or {}}}


def batch_cpu(node: dict[str, Any]) -> int | None:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(BATCH_CPU)
    return None if value is None else int(str(value).removesuffix("m"))


def probe_report(name: str, millis: int) -> bytes:
    """A report with node and system CPU usage at `millis` (the batch formula subtracts systemUsage)."""
    body = orjson.loads(report(name, millis))
    body["status"]["nodeMetric"]["systemUsage"]["resources"]["cpu"] = f"{millis}m"
    return orjson.dumps(body)


def _now() -> str:
    return dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderTarget:
    """The leader's endpoint and CA, from the Lease's annotations; read again after a failure."""

    def __init__(self, admin: Client) -> None:
        self.admin = admin
        self.cached: tuple[str, ssl.SSLContext] | None = None

    async def get(self) -> tuple[str, ssl.SSLContext] | None:
        if self.cached is None:
            lease = await self.admin.json(Request("GET", LEADER_LEASE))
            annotations = lease["metadata"].get("annotations") or {}
            endpoint = annotations.get("colocation.dev/leader-endpoint")
            ca = annotations.get("colocation.dev/leader-ca")
            if endpoint and ca:
                context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
                context.check_hostname = False
                self.cached = endpoint, context
        return self.cached


class ProbeNodes:
    def __init__(self, admin: Client, count: int, interval: float) -> None:
        self.admin, self.interval = admin, interval
        self.names = [f"leader-probe-{i}" for i in range(count)]
        self.tokens: dict[str, str] = {}
        self.levels = dict.fromkeys(self.names, LOW)
        self.batch: dict[str, int | None] = dict.fromkeys(self.names)
        self.changed = asyncio.Condition()
        self.target = LeaderTarget(admin)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        self.send_failures = 0
        self.tasks: list[asyncio.Task[None]] = []

    async def create(self, template: dict[str, Any]) -> None:
        for name in self.names:
            self.tokens[name] = await agent_token(self.admin, name, probe_node(template, name))
            lease = {"metadata": {"name": name, "namespace": permissions.NODE_LEASE_NAMESPACE},
                     "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": _now()}}
            await self.admin.json(Request("POST", LEASES, orjson.dumps(lease)))
        self.tasks = [asyncio.create_task(self._watch()), asyncio.create_task(self._keep_alive())]

    async def send(self, name: str, body: bytes | None = None) -> int:
        """This probe's current report (or `body`) to the leader; the status (0: no answer)."""
        data = probe_report(name, self.levels[name]) if body is None else body
        for _ in range(2):
            target = await self.target.get()
            if target is None:
                return 0
            endpoint, context = target
            try:
                async with self.session.put(f"{endpoint}{NODEMETRICS}/{name}/status",
                                            data=data, ssl=context, headers={
                                                "Content-Type": JSON, "Authorization": f"Bearer {self.tokens[name]}"}
                                            ) as response:
                    await response.read()
                    if response.status == 200:
                        return 200
                    status = response.status
            except FAILURES:
                status = 0
            self.target.cached = None  # maybe another leader now: read the Lease again
        self.send_failures += 1
        return status

    async def flood(self, seconds: float, concurrency: int, status: dict[str, Any], rate: float) -> tuple[int, int]:
        """Reports with `status` (a simulated node's, pods and all) sent for the probes at `rate` a
        second (or as many as `concurrency` requests in flight allow), for `seconds`, each one a change
        (its first pod's CPU usage counts up), so each is stored, kept in the watch window and streamed
        to the watchers, as an agent's is. (Accepted, failed)."""
        pods = status.get("podsMetric") or [{"namespace": "default", "name": "burst", "podUsage": {}}]
        status = {**status, "podsMetric": [{**pods[0], "podUsage": {"resources": {"cpu": "1m"}}}, *pods[1:]]}
        usage = status["podsMetric"][0]["podUsage"]["resources"]
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        counts = [0, 0]
        sequence = itertools.count(1)

        async def sender(index: int) -> None:
            name = self.names[index % len(self.names)]
            step = concurrency / rate  # each sender's share of the rate
            due = loop.time() + index * step / concurrency
            while (now := loop.time()) < end:
                await asyncio.sleep(max(0.0, due - now))  # the load's pace
                due += step
                usage["cpu"] = f"{next(sequence) % 100_000 + 1}m"  # written out before another sender changes it
                body = orjson.dumps({"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric",
                                     "metadata": {"name": name}, "status": status})
                counts[0 if await self.send(name, body) == 200 else 1] += 1

        await asyncio.gather(*(sender(index) for index in range(concurrency)))
        return counts[0], counts[1]

    async def idle_connections_cost(self, count: int, rss: Callable[[], int], served: Callable[[], int],
                                    timeout: float = 30.0) -> tuple[int, float]:
        """Open `count` kept-alive TLS connections to the leader (one GET /healthz each, as an agent's
        connection idles between reports): (connections the leader gained, RSS bytes it grew by per
        connection, NaN if it gained none). The connections are closed before this returns."""
        target = await self.target.get()
        if target is None:
            return 0, math.nan
        endpoint, context = target
        before, served_before = rss(), served()
        connector = aiohttp.TCPConnector(limit=count, ssl=context, keepalive_timeout=timeout * 2)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as idle:
            async def one() -> None:
                async with idle.get(f"{endpoint}/healthz") as response:
                    await response.read()

            with contextlib.suppress(*FAILURES):
                await asyncio.gather(*(one() for _ in range(count)))
            async def all_served() -> bool:
                return served() - served_before >= count

            with contextlib.suppress(TimeoutError):  # fewer than asked: it measures those it got
                await eventually_async(all_served, timeout, interval=0.1,
                                       message="the leader holding the idle connections")
            gained, grown = served() - served_before, rss() - before
        return gained, (grown / gained if gained > 0 else math.nan)

    async def _renew(self, name: str) -> None:
        patch = orjson.dumps({"spec": {"renewTime": _now()}})
        await self.admin.send(Request("PATCH", f"{LEASES}/{name}", patch, "application/merge-patch+json"))

    async def _keep_alive(self) -> None:
        """Every interval, as an agent: renew each probe's Lease and re-send its current report."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            with contextlib.suppress(*FAILURES, RuntimeError):
                await asyncio.gather(*(self._renew(name) for name in self.names))
                await asyncio.gather(*(self.send(name) for name in self.names))
            await asyncio.sleep(max(0.0, due - loop.time()))  # the agents' pace

    async def _watch(self) -> None:
        path = f"/api/v1/nodes?watch=1&labelSelector={PROBE_LABEL}%3Dtrue"
        while True:
            with contextlib.suppress(*FAILURES):
                async with self.admin.session.get(path, timeout=STREAM, headers={"Accept": JSON}) as response:
                    async for line in response.content:
                        event = orjson.loads(line)
                        obj = event.get("object") or {}
                        name = (obj.get("metadata") or {}).get("name")
                        if event.get("type") in ("ADDED", "MODIFIED") and name in self.batch:
                            async with self.changed:
                                self.batch[name] = batch_cpu(obj)
                                self.changed.notify_all()
            await asyncio.sleep(0.2)  # a reflector's pause before it watches again

    async def _until(self, check: Any, timeout: float) -> bool:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(check), timeout)
            except TimeoutError:
                return False
        return True

    async def ready(self, timeout: float) -> bool:
        """Every probe Node offers batch resources (the leader took the probes' reports and evaluated)."""
        return await self._until(lambda: all(v is not None for v in self.batch.values()), timeout)

    async def sample(self, name: str, timeout: float) -> tuple[float | None, str]:
        """Seconds from a report that moves the probe's usage to the Node patch showing it; (None, why)."""
        before = self.batch[name]
        if before is None:
            return None, f"{name}: no batch resources before the sample"
        self.levels[name] = HIGH if self.levels[name] == LOW else LOW
        rising = self.levels[name] == LOW  # less usage, more batch resources
        loop = asyncio.get_running_loop()
        started = loop.time()
        status = await self.send(name)
        if status != 200:
            return None, f"{name}: the report was answered {status}"

        def moved() -> bool:
            value = self.batch[name]
            return value is not None and (value > before if rising else value < before)

        if not await self._until(moved, timeout):
            return None, f"{name}: batch-cpu still {self.batch[name]} (was {before}) after {timeout:.0f} s"
        return loop.time() - started, ""

    async def latencies(self, count: int, timeout: float) -> tuple[list[float], list[str]]:
        """`count` samples, the probes taking turns in parallel, a short pause between a probe's samples."""
        samples: list[float] = []
        failures: list[str] = []

        async def one_probe(name: str, rounds: int) -> None:
            for _ in range(rounds):
                seconds, why = await self.sample(name, timeout)
                if seconds is None:
                    failures.append(why)
                else:
                    samples.append(seconds)
                await asyncio.sleep(0.5 + 0.25 * self.names.index(name))  # spread the probes over the evaluations

        per_probe = -(-count // len(self.names))
        await asyncio.gather(*(one_probe(name, per_probe) for name in self.names))
        return samples, failures

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, *FAILURES):
                await task
        await self.session.close()


def parse_time(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Freshness:
    """One NodeMetric watch of a replica (watched again when it ends): each node's last updateTime."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.times: dict[str, float] = {}

    async def run(self) -> None:
        while True:
            with contextlib.suppress(*FAILURES):
                async with self.client.session.get(f"{NODEMETRICS}?watch=true", timeout=STREAM,
                                                   headers={"Accept": JSON}) as response:
                    async for line in response.content:
                        obj = orjson.loads(line).get("object") or {}
                        name = (obj.get("metadata") or {}).get("name")
                        updated = (obj.get("status") or {}).get("updateTime")
                        if name and updated:
                            self.times[name] = parse_time(updated)
            await asyncio.sleep(0.2)  # a reflector's pause before it watches again

    def stale(self, names: Iterable[str], since: float) -> list[str]:
        """The nodes whose last report seen is older than `since` (whole seconds, as updateTime is written)."""
        return [name for name in names if self.times.get(name, -1.0) < since]
