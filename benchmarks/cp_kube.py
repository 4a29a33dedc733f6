"""Control-plane cost on the real kube-apiserver and etcd: this design against NodeMetric CRs.

Clusters, one after another, each `colocation sandbox --apiserver kube --nodes N` (kwok nodes
1..N-1, this machine's node 0):

- base: `--operators 0 --no-agents`: the Nodes, their kubelet Leases and pods, what both paths share;
- ours: the default, 2 operator replicas and every node's agent (reporting every 10 s: each
  report is its heartbeat);
- crd: like base, plus the Koordinator path's load: the NodeMetric CRD, one status PUT per node
  every 60 s (koordlet's default report interval) with a token bound to that node's agent pod,
  and one informer watching the CRs, as koord-manager does; crd-30 and crd-10 the same at 30 s
  and 10 s (`crd_interval`).

Each is measured over one window of steady state from both /metrics (kube-apiserver's, with the
admin client certificate, and etcd's): /metrics has no per-user figures, so a path's cost is its
cluster's delta minus the base cluster's.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from pydantic import ConfigDict, Field, SerializationInfo, TypeAdapter, field_serializer, field_validator

from benchmarks import processes
from benchmarks.client import say, sit_out
from benchmarks.control_plane import KOORD_PATH, koordinator_crd, koordinator_nodemetric, koordlet_rbac
from benchmarks.cp_kube_metrics import (
    APISERVER_WANTED,
    ETCD_WANTED,
    EtcdWindow,
    Samples,
    Traffic,
    delta,
    parse,
    traffic,
)
from benchmarks.nodemetric_store import report_body
from benchmarks.polling import NotReached, eventually_async
from benchmarks.results import CamelRecord
from colocation.agent import selfcheck
from colocation.apimachinery.stop_signals import on_stop_signals
from colocation.kube import permissions
from colocation_sandbox.launcher import child_processes
from colocation_sandbox.launcher.controlplane import fakenodes
from colocation_sandbox.launcher.controlplane.restclient import RestClient, client_for

SUITE = "control-plane-kube"
CLUSTERS = ("base", "ours", "crd", "crd-30", "crd-10")
NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{permissions.NODE_LEASE_NAMESPACE}/leases"
NODE_RESOURCES = "/apis/slo.colocation.dev/v1alpha1/noderesources"
JSON = "application/json"


class KubeCostConfig(CamelRecord):
    model_config = ConfigDict(frozen=True)

    nodes: int = 1000
    pods_per_node: int = 10
    window: float = 120.0
    report_interval: float = 60.0  # koordlet's default NodeMetric report interval
    clusters: tuple[str, ...] = CLUSTERS
    # How this run went about it, not what it measured: not saved.
    state_dir: Path = Field(default=Path(".bench"), exclude=True)
    start_timeout: float = Field(default=3600.0, exclude=True)
    warmup_timeout: float = Field(default=900.0, exclude=True)
    settle: float = Field(default=30.0, exclude=True)  # seconds waited after the steady state, before the window


class HeartbeatCheck(CamelRecord):
    """Was every agent heard during the window, and is every node's Lease registered and unexpired?"""

    expected: int = 0
    reported: int = 0  # nodes whose NodeMetric has a newer updateTime after the window than before
    registered: int = 0  # Leases in colocation-node-lease
    not_reported: list[str] = Field(default_factory=list)
    expired: list[str] = Field(default_factory=list)  # renewTime + leaseDurationSeconds before the window's end

    @property
    def ok(self) -> bool:
        return (self.reported >= self.expected and self.registered >= self.expected and not self.not_reported
                and not self.expired)

    def describe(self) -> str:
        parts = [f"{self.reported:,} of {self.expected:,} nodes reported, {self.registered:,} Leases"]
        if self.not_reported:
            parts.append(f"{len(self.not_reported):,} did not report in the window (e.g. {self.not_reported[0]})")
        if self.expired:
            parts.append(f"{len(self.expired):,} Leases expired at its end (e.g. {self.expired[0]})")
        return ", ".join(parts)


ApiserverKey = tuple[str, str, str]  # (group, resource, verb)
_TRAFFIC = TypeAdapter(Traffic)


class ClusterRun(CamelRecord):
    name: str
    nodes: int
    window_seconds: float = 0.0
    startup_seconds: float = 0.0
    warmup_seconds: float = 0.0
    # The window's delta; saved as a list of rows, each its (group, resource, verb) and its Traffic.
    apiserver: dict[ApiserverKey, Traffic] = Field(default_factory=dict)
    etcd: EtcdWindow = Field(default_factory=EtcdWindow)
    heard: HeartbeatCheck | None = None  # ours only
    crd_writes: int = 0  # crd only: status PUTs in the window
    crd_errors: int = 0
    crd_first_error: str = ""
    crd_object_bytes: float = 0.0  # mean NodeMetric body PUT
    node_object_bytes: float = 0.0  # ours only: mean Node in protobuf, what etcd stores per Node write
    problems: list[str] = Field(default_factory=list)
    agent_checks: dict[str, str] = Field(default_factory=dict)  # ours only: selfcheck summary by agent process

    @field_serializer("apiserver")
    def _apiserver_rows(self, apiserver: dict[ApiserverKey, Traffic], info: SerializationInfo) -> list[dict[str, Any]]:
        return [{"group": group, "resource": resource, "verb": verb,
                 **_TRAFFIC.dump_python(traffic, mode="json" if info.mode_is_json() else "python",
                                          by_alias=bool(info.by_alias))}
                for (group, resource, verb), traffic in sorted(apiserver.items())]

    @field_validator("apiserver", mode="before")
    @classmethod
    def _apiserver_from_rows(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        keys = ("group", "resource", "verb")
        return {tuple(row[k] for k in keys): {k: v for k, v in row.items() if k not in keys} for row in value}


class KubeCostReport(CamelRecord):
    """What benchmarks/plots/control_plane_kube*.json holds; rendered again from it without running."""

    config: KubeCostConfig
    seconds: float = 0.0
    runs: dict[str, ClusterRun] = Field(default_factory=dict)


# ---- scraping ------------------------------------------------------------------------------------

class Scraper:
    """Both /metrics of one kube sandbox, and its admin client."""

    def __init__(self, state_dir: Path) -> None:
        plane = orjson.loads((state_dir / "controlplane.json").read_bytes())
        self.server: str = plane["server"]
        self.etcd_url: str = plane["etcdMetrics"]
        pki = state_dir / "pki"
        self.ca_file = str(pki / "ca.crt")
        self.ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120),
                                             connector=aiohttp.TCPConnector(ssl=self.ssl, limit=64))
        self.rest: RestClient = client_for(self.server, pki, "admin")

    async def close(self) -> None:
        await self.session.close()
        await self.rest.close()

    async def _text(self, url: str) -> str:
        async with self.session.get(url) as response:
            text = await response.text()
            if response.status != 200:
                raise RuntimeError(f"GET {url}: {response.status} {text[:200]}")
            return text

    async def snapshot(self) -> tuple[Samples, Samples, float]:
        apiserver, etcd = await asyncio.gather(self._text(f"{self.server}/metrics"), self._text(self.etcd_url))
        return parse(apiserver, APISERVER_WANTED), parse(etcd, ETCD_WANTED), time.monotonic()

    async def get(self, path: str, **params: str) -> Any:
        return await self.rest.must("GET", path, params=params or None)

    async def protobuf_size(self, path: str) -> int:
        """Bytes of an object in kube-apiserver's protobuf encoding, about what etcd stores of it."""
        async with self.session.get(f"{self.server}{path}",
                                    headers={"Accept": "application/vnd.kubernetes.protobuf"}) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status}")
            return len(body)


# ---- the steady states -----------------------------------------------------------------------------

async def _pods_settled(scraper: Scraper) -> bool:
    """Every pod past Pending but an agent pod (this machine's stays Pending with --no-agents)."""
    pending = await scraper.get("/api/v1/pods", fieldSelector="status.phase=Pending", limit="20")
    return not pending["metadata"].get("continue") and all(
        p["metadata"]["namespace"] == permissions.OPERATOR_NAMESPACE for p in pending["items"])


async def _agents_steady(scraper: Scraper, nodes: int) -> bool:
    leases = (await scraper.get(LEASES))["items"]
    if len(leases) < nodes:
        return False
    items = (await scraper.get(NODE_RESOURCES))["items"]
    return len(items) >= nodes and all(
        condition.get("status") != "Unknown"
        for item in items for condition in (item.get("status") or {}).get("conditions") or ()
        if condition.get("type") == "AgentReady")


def check_heard(metrics_before: list[dict[str, Any]], metrics_after: list[dict[str, Any]],
                leases: list[dict[str, Any]], expected: int, now: datetime) -> HeartbeatCheck:
    """Every node reported in the window (a newer updateTime), and its Lease exists and is unexpired at its end."""
    first = {m["metadata"]["name"]: (m.get("status") or {}).get("updateTime") for m in metrics_before}
    last = {m["metadata"]["name"]: (m.get("status") or {}).get("updateTime") for m in metrics_after}
    check = HeartbeatCheck(expected=expected, registered=len(leases))
    for name, updated in sorted(last.items()):
        if updated and updated != first.get(name):
            check.reported += 1
        else:
            check.not_reported.append(name)
    for lease in sorted(leases, key=lambda item: str(item["metadata"]["name"])):
        spec = lease.get("spec") or {}
        renewed = spec.get("renewTime")
        until = (datetime.fromisoformat(renewed.replace("Z", "+00:00")).timestamp()
                 + float(spec.get("leaseDurationSeconds") or 0)) if renewed else 0.0
        if until < now.timestamp():
            check.expired.append(str(lease["metadata"]["name"]))
    return check


def crd_interval(name: str, config: KubeCostConfig) -> float:
    """The report interval of a CRD-path cluster: "crd" at the configured one, "crd-N" every N seconds."""
    _, _, seconds = name.partition("-")
    return float(seconds) if seconds else config.report_interval


# ---- the Koordinator path's load -------------------------------------------------------------------

class NodeMetricWriter:
    """koordlet's NodeMetric status updates: one PUT .../status per node per interval, with its token."""

    def __init__(self, scraper: Scraper, tokens: dict[str, str], pods_per_node: int, interval: float) -> None:
        self.scraper = scraper
        self.tokens = tokens
        self.pods = pods_per_node
        self.interval = interval
        self.resource_versions: dict[str, str] = {}
        self.writes = 0
        self.body_bytes = 0
        self.errors = 0
        self.first_error = ""
        self.sequence = 0
        # A bearer token per request, not the admin certificate: a session of its own.
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60), connector=aiohttp.TCPConnector(
            ssl=ssl.create_default_context(cafile=scraper.ca_file), limit=32))

    def _status(self, node: str) -> dict[str, Any]:
        self.sequence += 1
        return dict(orjson.loads(report_body(node, self.pods, self.sequence))["status"])

    async def create(self, node: str) -> None:
        rest = self.scraper.rest
        created = await rest.must("POST", KOORD_PATH, koordinator_nodemetric(node, {}), ok=(201, 409))
        if "metadata" in created:
            self.resource_versions[node] = created["metadata"]["resourceVersion"]

    async def write(self, node: str) -> None:
        body = orjson.dumps(koordinator_nodemetric(node, self._status(node), self.resource_versions.get(node, "")))
        headers = {"Content-Type": JSON, "Accept": JSON, "Authorization": f"Bearer {self.tokens[node]}"}
        async with self.session.put(f"{self.scraper.server}{KOORD_PATH}/{node}/status", data=body,
                                    headers=headers) as response:
            stored = await response.read()
        if response.status != 200:
            self.errors += 1
            self.first_error = self.first_error or f"PUT {node}/status: {response.status} {stored[:300]!r}"
            return
        self.resource_versions[node] = orjson.loads(stored)["metadata"]["resourceVersion"]
        self.writes += 1
        self.body_bytes += len(body)

    async def close(self) -> None:
        await self.session.close()

    async def run(self, stop: asyncio.Event) -> None:
        """Every node once per interval, spread evenly over it (reports are not synchronised)."""
        nodes = sorted(self.tokens)
        loop = asyncio.get_running_loop()
        started = loop.time()
        tasks: set[asyncio.Task[None]] = set()
        cycle = 0
        while not stop.is_set():
            for index, node in enumerate(nodes):
                due = started + cycle * self.interval + index * self.interval / len(nodes)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, due - loop.time()))  # pacing the writes
                if stop.is_set():
                    break
                task = asyncio.create_task(self.write(node))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            cycle += 1
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def _informer(scraper: Scraper, ready: asyncio.Event) -> None:
    """koord-manager's NodeMetric informer: a list, then a watch from its resourceVersion, events dropped."""
    listed = await scraper.get(KOORD_PATH)
    version = listed["metadata"]["resourceVersion"]
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    while True:
        url = f"{scraper.server}{KOORD_PATH}?watch=true&allowWatchBookmarks=true&resourceVersion={version}"
        async with scraper.session.get(url, timeout=timeout) as response:
            ready.set()
            async for line in response.content:
                with contextlib.suppress(orjson.JSONDecodeError):
                    event = orjson.loads(line)
                    version = (event.get("object") or {}).get("metadata", {}).get("resourceVersion", version)


async def _crd_setup(scraper: Scraper, config: KubeCostConfig) -> dict[str, str]:
    """The CRD, koordlet's RBAC, a token bound to the agent pod on each node: node → token."""
    rest = scraper.rest
    await rest.must("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", koordinator_crd(),
                    ok=(201, 409))
    for path, obj in koordlet_rbac():
        await rest.must("POST", path, obj, ok=(201, 409))

    async def served() -> bool:
        status, _ = await rest.request("GET", KOORD_PATH, params={"limit": "1"})
        return status == 200

    await eventually_async(served, 120.0, interval=0.5, message="the NodeMetric CRD being served")
    nodes = {n["metadata"]["name"] for n in (await scraper.get("/api/v1/nodes"))["items"]}
    namespace = permissions.OPERATOR_NAMESPACE

    async def agent_pods() -> dict[str, dict[str, Any]]:
        listed = await scraper.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=fakenodes.AGENT_SELECTOR)
        return {p["spec"]["nodeName"]: p for p in listed["items"]
                if p["spec"].get("nodeName") in nodes and not p["metadata"].get("deletionTimestamp")}

    async def every_node() -> bool:
        return len(await agent_pods()) >= len(nodes)

    with contextlib.suppress(NotReached, RuntimeError):  # this machine's node may have none without agents
        await eventually_async(every_node, 120.0, interval=2.0, message="an agent pod on every node")
    tokens: dict[str, str] = {}
    slots = asyncio.Semaphore(16)

    async def token(node: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        async with slots:
            answer = await rest.must(
                "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{permissions.AGENT_SERVICE_ACCOUNT}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": child_processes.TOKEN_SECONDS, "boundObjectRef": {
                     "apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}})
        tokens[node] = answer["status"]["token"]

    await asyncio.gather(*(token(node, pod) for node, pod in (await agent_pods()).items()))
    return tokens


# ---- one cluster ------------------------------------------------------------------------------------

# The agents sample usage every 5 s instead of every second: their reports keep their cadence and
# shape, and sampling costs the API server nothing, but on 2 cores the simulated agents' CPU goes
# to the heartbeats the self-check holds them to.
OURS_AGENT_ARGS = ("--collect-interval=5",)


def sandbox_args(name: str, config: KubeCostConfig, state_dir: Path) -> list[str]:
    args = ["-m", "colocation", "sandbox", "--apiserver", "kube", "--port", "0", "--state-dir", str(state_dir),
            "--nodes", str(config.nodes), "--pods-per-node", str(config.pods_per_node), "--no-serve-custom-metrics",
            "--no-serve-resource-metrics"]
    if name != "ours":
        return [*args, "--operators", "0", "--no-agents"]
    return [*args, *(f"--agent-arg={arg}" for arg in OURS_AGENT_ARGS)]


async def _window(scraper: Scraper, run: ClusterRun, config: KubeCostConfig, label: str) -> None:
    before_api, before_etcd, started = await scraper.snapshot()
    run.window_seconds = config.window
    await sit_out(config.window, started, 30.0, lambda elapsed: f"{label}: {elapsed:.0f}/{config.window:.0f} s")
    after_api, after_etcd, ended = await scraper.snapshot()
    run.window_seconds = ended - started
    run.apiserver = traffic(delta(before_api, after_api))
    run.etcd = EtcdWindow.of(before_etcd, after_etcd)


async def run_cluster(name: str, config: KubeCostConfig) -> ClusterRun:
    label = f"control plane (kube) {name}"
    state_dir = config.state_dir / f"cp-kube-{name}"
    run = ClusterRun(name=name, nodes=config.nodes)
    shutil.rmtree(state_dir, ignore_errors=True)  # a fresh etcd each time
    say(f"{label}: starting {config.nodes:,} nodes x {config.pods_per_node} pods")
    started = time.monotonic()
    server = await processes.start(sandbox_args(name, config, state_dir), state_dir / "sandbox.log",
                                   timeout=config.start_timeout)
    run.startup_seconds = time.monotonic() - started
    say(f"{label}: ready after {run.startup_seconds:,.0f} s")
    scraper = Scraper(state_dir)
    stop = asyncio.Event()
    background: list[asyncio.Task[None]] = []
    writer: NodeMetricWriter | None = None
    try:
        started = time.monotonic()
        await eventually_async(lambda: _pods_settled(scraper), config.warmup_timeout, interval=2.0,
                               message="every pod past Pending")
        if name == "ours":
            try:
                await eventually_async(lambda: _agents_steady(scraper, config.nodes), config.warmup_timeout,
                                       interval=2.0, message="every agent's Lease and every node judged")
            except (NotReached, RuntimeError) as exc:  # measured all the same (raw numbers), but no figures stated
                run.problems.append(f"no steady state: {exc}")
        if name.startswith("crd"):
            interval = crd_interval(name, config)
            tokens = await _crd_setup(scraper, config)
            writer = NodeMetricWriter(scraper, tokens, config.pods_per_node, interval)
            say(f"{label}: creating {len(tokens):,} NodeMetric CRs")
            await asyncio.gather(*(writer.create(node) for node in tokens))
            watching = asyncio.Event()
            background.append(asyncio.create_task(_informer(scraper, watching)))
            await asyncio.wait_for(watching.wait(), 60.0)
            background.append(asyncio.create_task(writer.run(stop)))
            # Steady state: every CR written once by the periodic writer.
            await eventually_async(_written(writer, len(tokens)), interval * 3, interval=1.0,
                                   message="every NodeMetric written once")
        await asyncio.sleep(config.settle)  # controllers and kwok finish reacting to the last changes
        run.warmup_seconds = time.monotonic() - started
        say(f"{label}: steady after {run.warmup_seconds:,.0f} s; counting for {config.window:.0f} s")
        metrics_before = (await scraper.get(NODEMETRICS))["items"] if name == "ours" else []
        agents_before = await selfcheck.read_sandbox(state_dir) if name == "ours" else {}
        writes_before = writer.writes if writer else 0
        bytes_before = writer.body_bytes if writer else 0
        await _window(scraper, run, config, label)
        if writer is not None:
            run.crd_writes = writer.writes - writes_before
            run.crd_object_bytes = (writer.body_bytes - bytes_before) / max(run.crd_writes, 1)
            run.crd_errors, run.crd_first_error = writer.errors, writer.first_error
            if writer.errors:
                run.problems.append(f"{writer.errors} NodeMetric status writes failed: {writer.first_error}")
            expected = len(writer.tokens) * run.window_seconds / writer.interval
            if run.crd_writes < 0.9 * expected:
                run.problems.append(f"only {run.crd_writes:,} NodeMetric writes in the window, "
                                    f"{expected:,.0f} expected")
            if len(writer.tokens) < config.nodes - 1:
                run.problems.append(f"agent pods (tokens) on only {len(writer.tokens)} of {config.nodes} nodes")
        if name == "ours":
            metrics_after = (await scraper.get(NODEMETRICS))["items"]
            run.heard = check_heard(metrics_before, metrics_after, (await scraper.get(LEASES))["items"],
                                    config.nodes, datetime.now(UTC))
            if not run.heard.ok:
                run.problems.append(f"the agents were not all heard: {run.heard.describe()}")
            sample = [m["metadata"]["name"] for m in metrics_after[:5]]
            sizes = [await scraper.protobuf_size(f"/api/v1/nodes/{name}") for name in sample]
            run.node_object_bytes = sum(sizes) / max(len(sizes), 1)
            agents_after = await selfcheck.read_sandbox(state_dir)
            run.agent_checks, found = selfcheck.sandbox_verdict(agents_before, agents_after)
            run.problems += [f"agent self-check: {problem}" for problem in found]
        say(f"{label}: {sum(t.requests for t in run.apiserver.values()):,.0f} requests, "
            f"{run.etcd.puts:,.0f} etcd puts in {run.window_seconds:.0f} s"
            + (f"; problems: {'; '.join(run.problems)}" if run.problems else ""))
    finally:
        stop.set()
        for task in background:
            if task.done():
                continue
            if task is background[-1] and name.startswith("crd"):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), 30.0)
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, TimeoutError):
                await task
        if writer is not None:
            await writer.close()
        await scraper.close()
        say(f"{label}: stopping the sandbox")
        await server.stop(timeout=120.0)
    return run


def _written(writer: NodeMetricWriter, nodes: int) -> Any:
    async def probe() -> bool:
        return writer.writes + writer.errors >= nodes
    return probe


async def run(config: KubeCostConfig) -> KubeCostReport:
    started = time.monotonic()
    report = KubeCostReport(config=config)
    with on_stop_signals():
        for name in config.clusters:
            try:
                report.runs[name] = await run_cluster(name, config)
            except (RuntimeError, OSError, aiohttp.ClientError, TimeoutError) as exc:
                say(f"control plane (kube) {name}: failed: {exc}")
                report.runs[name] = ClusterRun(name=name, nodes=config.nodes, problems=[f"the run failed: {exc}"])
    report.seconds = time.monotonic() - started
    return report
