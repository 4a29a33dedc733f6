"""Sandbox capacity: can the sandbox hold a 5,000-node, 150,000-pod cluster credibly?

Measured against `colocation sandbox --api-only` as a real subprocess over real HTTPS: create
throughput (namespaces, nodes, pods, pod status), list latency (everything, paginated, the
agent's per-node field selector, a label selector, a Table), watch fan-out (delivery delay to
N watchers during status updates, and completeness), and the server's memory. The same creates
are first sent to a bare aiohttp server (benchmarks.baseline_server), the floor any server
that parses and keeps JSON cannot go below, and the figures are reported as ratios to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import orjson

from benchmarks import processes, workload
from benchmarks.client import STRATEGIC, TABLE, Client, Endpoint, LoadResult, Request, say
from benchmarks.stats import Latency
from benchmarks.watchers import WatchFigures, measure_fan_out
from benchmarks.workload import Sizes


@dataclass(frozen=True)
class CapacityConfig:
    nodes: int = 5000
    pods_per_node: int = 30
    namespaces: int = 50
    concurrency: int = 48  # requests in flight, per client
    status_updates: int = 50_000  # pods whose Running status is written; -1: all
    watchers: int = 20
    watch_updates: int = 5000
    list_repeats: int = 3
    selector_repeats: int = 10
    pagination_repeats: int = 1
    page_size: int = 500
    state_dir: Path = Path(".bench")
    progress_every: float = 10.0

    @property
    def sizes(self) -> Sizes:
        return Sizes(self.nodes, self.pods_per_node, self.namespaces)

    @property
    def status_count(self) -> int:
        return self.sizes.pods if self.status_updates < 0 else min(self.status_updates, self.sizes.pods)


@dataclass(frozen=True)
class WriteFigures:
    name: str
    count: int
    seconds: float
    per_second: float
    latency: Latency
    errors: int
    first_error: str
    server_cpu_per_request: float  # seconds
    client_cpu_share: float  # client CPU time / wall time: near 1.0 means the client was the limit
    request_bytes: float  # mean

    @classmethod
    def of(cls, result: LoadResult) -> WriteFigures:
        n = max(result.count, 1)
        return cls(result.name, result.count, result.elapsed, result.rate, Latency.of(result.latencies),
                   result.errors, result.first_error, result.server_cpu / n,
                   result.client_cpu / result.elapsed if result.elapsed else 0.0, result.request_bytes / n)


@dataclass(frozen=True)
class ReadFigures:
    name: str
    request: str  # what was asked, for the report
    latency: Latency
    response_bytes: float  # mean per request (per page for pagination)
    items: int  # items returned (per pass for pagination)
    pass_seconds: float = 0.0  # pagination: the whole walk through the collection (median)


@dataclass(frozen=True)
class MemoryFigures:
    empty: int  # RSS before loading, bytes
    loaded: int  # after creating every node and pod
    after_status: int  # after the status updates (the watch window holds old and new objects)
    final: int
    peak: int  # VmHWM at the end (lists make large transient responses)
    objects: int

    @property
    def per_object(self) -> float:
        return (self.loaded - self.empty) / self.objects if self.objects else 0.0


@dataclass
class CapacityReport:
    config: CapacityConfig
    baseline_writes: list[WriteFigures] = field(default_factory=list)
    baseline_reads: list[ReadFigures] = field(default_factory=list)
    baseline_memory: MemoryFigures | None = None
    writes: list[WriteFigures] = field(default_factory=list)
    reads: list[ReadFigures] = field(default_factory=list)
    watch: WatchFigures | None = None
    memory: MemoryFigures | None = None
    pod_json_bytes: float = 0.0
    seconds: float = 0.0


# ---- the requests ------------------------------------------------------------------------------

def _create_namespace(index: int) -> Request:
    return Request("POST", "/api/v1/namespaces", orjson.dumps(workload.namespace(index)))


def _create_node(index: int) -> Request:
    return Request("POST", "/api/v1/nodes", orjson.dumps(workload.node(index)))


def _create_pod(sizes: Sizes) -> Callable[[int], Request]:
    def make(index: int) -> Request:
        ref = workload.pod_ref(index, sizes)
        return Request("POST", f"/api/v1/namespaces/{ref.namespace}/pods", orjson.dumps(workload.pod(index, sizes)))
    return make


def status_patch(sizes: Sizes, index: int, restarts: int) -> Request:
    ref = workload.pod_ref(index, sizes)
    return Request("PATCH", f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}/status",
                   orjson.dumps(workload.running_status(index, sizes, restarts)), STRATEGIC)


def _query(path: str, **params: str | int) -> str:
    return f"{path}?{urlencode(params)}" if params else path


# ---- the phases --------------------------------------------------------------------------------

async def _writes(client: Client, server: processes.ServerProcess, name: str, count: int,
                  make: Callable[[int], Request], config: CapacityConfig) -> WriteFigures:
    say(f"{name}: {count:,} requests")
    cpu_before = server.cpu()
    result = await client.load(name, count, make, progress=say, progress_every=config.progress_every)
    result.server_cpu = server.cpu() - cpu_before
    figures = WriteFigures.of(result)
    say(f"{name}: {figures.per_second:,.0f}/s, p50 {figures.latency.p50 * 1000:.1f} ms, "
        f"p99 {figures.latency.p99 * 1000:.1f} ms, errors {figures.errors}")
    if figures.errors:
        say(f"  first error: {figures.first_error}")
    return figures


async def _load_cluster(client: Client, server: processes.ServerProcess, config: CapacityConfig) -> list[WriteFigures]:
    sizes = config.sizes
    return [await _writes(client, server, "namespaces", sizes.namespaces, _create_namespace, config),
            await _writes(client, server, "nodes", sizes.nodes, _create_node, config),
            await _writes(client, server, "pods", sizes.pods, _create_pod(sizes), config)]


async def _timed_reads(client: Client, name: str, request: Request, repeats: int,
                       count_items: Callable[[bytes], int] | None = None) -> ReadFigures:
    latencies: list[float] = []
    sizes: list[int] = []
    items = 0
    for repeat in range(repeats):
        started = time.perf_counter()
        status, body = await client.send(request)
        latencies.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"{request.path}: {status} {body[:300]!r}")
        sizes.append(len(body))
        if repeat == 0 and count_items is not None:
            items = count_items(body)
    figures = ReadFigures(name, request.path, Latency.of(latencies), sum(sizes) / len(sizes), items)
    say(f"{name}: p50 {figures.latency.p50 * 1000:,.1f} ms, p99 {figures.latency.p99 * 1000:,.1f} ms, "
        f"{figures.response_bytes / 1e6:,.1f} MB, {items:,} items")
    return figures


def _count_items(body: bytes) -> int:
    return len(orjson.loads(body)["items"])


def _count_rows(body: bytes) -> int:
    return len(orjson.loads(body)["rows"])


async def _paginate(client: Client, config: CapacityConfig) -> ReadFigures:
    """Walk every pod, `page_size` at a time, as informers' initial lists and `kubectl get` do."""
    latencies: list[float] = []
    sizes: list[int] = []
    passes: list[float] = []
    items = 0
    for _ in range(config.pagination_repeats):
        items, token, pass_started = 0, "", time.perf_counter()
        while True:
            params: dict[str, str | int] = {"limit": config.page_size}
            if token:
                params["continue"] = token
            started = time.perf_counter()
            status, body = await client.send(Request("GET", _query("/api/v1/pods", **params)))
            latencies.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"pagination: {status} {body[:300]!r}")
            sizes.append(len(body))
            page = orjson.loads(body)
            items += len(page["items"])
            token = page["metadata"].get("continue", "")
            if not token:
                break
        passes.append(time.perf_counter() - pass_started)
    figures = ReadFigures(f"pods, pages of {config.page_size}", f"/api/v1/pods?limit={config.page_size}&continue=…",
                          Latency.of(latencies), sum(sizes) / len(sizes), items, sorted(passes)[len(passes) // 2])
    say(f"pagination: {len(latencies):,} pages, page p50 {figures.latency.p50 * 1000:,.1f} ms, "
        f"p99 {figures.latency.p99 * 1000:,.1f} ms, whole walk {figures.pass_seconds:,.1f} s, {items:,} items")
    return figures


async def _reads(client: Client, config: CapacityConfig) -> list[ReadFigures]:
    sizes = config.sizes
    reads = [await _timed_reads(client, "pods, all namespaces (JSON)", Request("GET", "/api/v1/pods"),
                                config.list_repeats, _count_items)]
    reads.append(await _paginate(client, config))
    node_latencies: list[float] = []
    node_bytes: list[int] = []
    node_items: set[int] = set()
    for repeat in range(config.selector_repeats):
        node = workload.node_name(repeat * 7919 % sizes.nodes)  # spread over the key space
        path = _query("/api/v1/pods", fieldSelector=f"spec.nodeName={node}")
        started = time.perf_counter()
        body = await client.send(Request("GET", path))
        node_latencies.append(time.perf_counter() - started)
        node_bytes.append(len(body[1]))
        node_items.add(_count_items(body[1]))
    reads.append(ReadFigures("pods on one node (fieldSelector)", "/api/v1/pods?fieldSelector=spec.nodeName%3DNODE",
                             Latency.of(node_latencies), sum(node_bytes) / len(node_bytes), max(node_items)))
    say(f"field selector: p50 {reads[-1].latency.p50 * 1000:,.1f} ms, p99 {reads[-1].latency.p99 * 1000:,.1f} ms, "
        f"items per node {sorted(node_items)}")
    reads.append(await _timed_reads(client, "pods by label, all namespaces",
                                    Request("GET", _query("/api/v1/pods", labelSelector="app=web,tier in (frontend)")),
                                    config.selector_repeats, _count_items))
    namespace = workload.namespace_name(0)
    reads.append(await _timed_reads(client, "pods of one namespace as Table",
                                    Request("GET", f"/api/v1/namespaces/{namespace}/pods", accept=TABLE),
                                    config.list_repeats, _count_rows))
    reads.append(await _timed_reads(client, "nodes, all (JSON)", Request("GET", "/api/v1/nodes"),
                                    config.list_repeats, _count_items))
    return reads


# ---- the run -----------------------------------------------------------------------------------

async def _baseline(config: CapacityConfig, report: CapacityReport) -> None:
    say("baseline: starting the bare aiohttp server")
    server = await processes.start(["-m", "benchmarks.baseline_server", "--state-dir", str(config.state_dir)],
                                   config.state_dir / "baseline.log")
    client = Client(Endpoint.from_ca_file(server.ready["url"], Path(server.ready["ca"])),
                    concurrency=config.concurrency)
    try:
        empty = server.rss()
        report.baseline_writes = await _load_cluster(client, server, config)
        loaded = server.rss()
        report.baseline_reads = [await _timed_reads(client, "pods, all (bare list)", Request("GET", "/api/v1/pods"),
                                                    config.list_repeats, _count_items)]
        report.baseline_memory = MemoryFigures(empty, loaded, loaded, server.rss(), server.peak_rss(),
                                               config.nodes + config.sizes.pods)
    finally:
        await client.close()
        await server.stop()


async def _sandbox(config: CapacityConfig, report: CapacityReport) -> None:
    say("sandbox: starting `colocation sandbox --api-only`")
    kubeconfig = config.state_dir / "sandbox" / "kubeconfig"
    server = await processes.start(
        ["-m", "colocation", "sandbox", "--api-only", "--port", "0", "--state-dir", str(config.state_dir / "sandbox"),
         "--kubeconfig-out", str(kubeconfig), "--log-level", "warning"],
        config.state_dir / "sandbox.log")
    say(f"sandbox: pid {server.pid}, kubeconfig {server.ready['kubeconfig']}")
    client = Client(Endpoint.from_kubeconfig(Path(server.ready["kubeconfig"])), concurrency=config.concurrency)
    try:
        empty = server.rss()
        report.writes = await _load_cluster(client, server, config)
        loaded = server.rss()
        say(f"sandbox RSS: {empty / 2**20:,.0f} MiB empty, {loaded / 2**20:,.0f} MiB loaded")
        if config.status_count:
            report.writes.append(await _writes(client, server, "pod status (strategic merge patch)",
                                               config.status_count, lambda i: status_patch(config.sizes, i, 0),
                                               config))
        after_status = server.rss()
        report.reads = await _reads(client, config)
        if config.watchers and config.watch_updates:
            report.watch = await measure_fan_out(client, config.watchers, config.watch_updates,
                                                 lambda i: status_patch(config.sizes, i % config.sizes.pods,
                                                                        1 + i // config.sizes.pods),
                                                 server_cpu=server.cpu)
        report.memory = MemoryFigures(empty, loaded, after_status, server.rss(), server.peak_rss(),
                                      config.nodes + config.sizes.pods)
    finally:
        await client.close()
        await server.stop()


async def run(config: CapacityConfig) -> CapacityReport:
    started = time.perf_counter()
    report = CapacityReport(config)
    report.pod_json_bytes = sum(len(orjson.dumps(workload.pod(i, config.sizes))) for i in range(100)) / 100
    await _baseline(config, report)
    await _sandbox(config, report)
    report.seconds = time.perf_counter() - started
    say(f"sandbox capacity: done in {report.seconds:,.0f} s")
    return report


__all__ = ["CapacityConfig", "CapacityReport", "MemoryFigures", "ReadFigures", "WriteFigures", "run"]
