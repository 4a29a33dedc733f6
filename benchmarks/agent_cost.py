"""Agent cost: a real `colocation agent` on a node of 110 pods, every NodeSLO strategy on. Its CPU and RSS.

    python -m benchmarks.run --suite agent-cost [--agent-cost-windows 5 --agent-cost-window 60]

`colocation sandbox` (builtin API server, one operator replica, custom metrics served) with no
nodes of its own; the benchmark makes one Node (8 cpus, 32 GiB) with an agent pod (whose bound
token the agent uses, as a DaemonSet pod's) and 109 workload pods: 110 pods, the kubelet's
default maximum. 65 are best-effort (batch-cpu and batch-memory), 44 latency-sensitive, 20 of
these annotated for scraping (a small /metrics served by this process). colocation-config
enables, for every node, CPU suppress (cpuset policy, Koordinator's default), memory and CPU
eviction, and cpuBurstStrategy auto (the LS pods have a 1-cpu limit, so each gets its cfs burst
and may have its quota raised); batch cgroups follow the pods' batch requests; the agent runs with
`--system-settings` (the kernel settings under the fake /proc/sys/vm). The agent
runs with its default intervals, enforcement not dry run, on a fake /proc and cgroup v2 tree
under a temporary directory (benchmarks/agent_cost_host.py), whose counters move in real time.

Once the agent has reported, suppressed, limited the batch pods and sent custom metrics, a warm-up,
then `windows` windows of `window` seconds: the agent's CPU (utime + stime from /proc) over each,
its VmRSS and VmHWM at each end, and its own counters (samples, reports, scrapes, eviction rounds)
to check it did its rounds. Before that, `import_runs` fresh interpreters import what the agent
imports and print their VmRSS: the cost of the code alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from pydantic import ConfigDict, Field

from benchmarks import cp_cluster, processes
from benchmarks.agent_cost_host import CPUS, MEMORY, FakeHost, NodePod, node_pods, pod_manifest, running_status
from benchmarks.client import Client, Request, say, sit_out
from benchmarks.cp_kube_metrics import parse, total
from benchmarks.failover_probes import agent_token
from benchmarks.machine import Machine
from benchmarks.polling import eventually_async
from benchmarks.results import Record
from colocation_sandbox.launcher.port_claims import free_port

SUITE = "agent-cost"
NAMESPACE = "colocation-system"
NODE = "agent-cost-node"
# What `colocation agent` imports before it connects: the command line and the runtime (kubernetes-asyncio
# only comes in for a kubeconfig the agent does not read itself: colocation.agent.api_connection).
AGENT_IMPORTS = ("colocation.cli", "colocation.agent.runtime")
COUNTERS = ("colocation_agent_samples_total", "colocation_agent_reports_sent_total",
            "colocation_agent_scrapes_total", "colocation_agent_custom_metric_samples_sent_total",
            "colocation_agent_eviction_rounds_total", "colocation_agent_evictions_total",
            "colocation_agent_cgroup_writes_total", "colocation_agent_batch_cgroup_writes_total",
            "colocation_agent_errors_total")
GAUGES = ("colocation_agent_cpu_suppress_millicores", "colocation_agent_batch_pods_managed")
RESOURCE_THRESHOLD = {"enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
                      "memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 60,
                      "cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 60}
CPU_BURST = {"policy": "auto"}
# A pod's exposition: a few series, as a small exporter has.
EXPOSITION = "".join(f"app_requests_total{{handler=\"h{n}\"}} {n * 7}\napp_latency_seconds{{handler=\"h{n}\"}} 0.{n}\n"
                     for n in range(5))


class CostConfig(Record):
    model_config = ConfigDict(frozen=True)

    pods: int = 110  # the agent's pod included
    windows: int = 5
    window: float = 60.0  # x 5: past the agent's 300 s aggregation window, whose rings then stop growing
    warmup: float = 10.0
    import_runs: int = 5
    collect_interval: float = 1.0  # the agent's default (--collect-interval): samples due per second
    state_dir: Path = Field(default=Path(".bench"), exclude=True)  # this run's scratch space: not saved


class CostWindow(Record):
    """One measured window: the agent's CPU seconds, its memory at the end, its counters' deltas."""

    seconds: float
    cpu_seconds: float
    rss: int
    hwm: int
    counters: dict[str, float] = Field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # os.getloadavg() at the end

    @property
    def cores(self) -> float:
        return self.cpu_seconds / self.seconds if self.seconds else 0.0


class CostReport(Record):
    """What benchmarks/plots/agent_cost.json holds."""

    config: CostConfig
    agent_args: list[str] = Field(default_factory=list)
    import_rss: list[int] = Field(default_factory=list)  # bytes, one per fresh interpreter
    import_modules: int = 0
    windows: list[CostWindow] = Field(default_factory=list)
    gauges: dict[str, float] = Field(default_factory=dict)  # at the end of the last window
    written: dict[str, int] = Field(default_factory=dict)  # cgroup files the agent changed, per name
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    machine_busy: float = 0.0  # cores busy machine-wide over the windows (/proc/stat), the agent's included
    failures: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    machine: Machine | None = None  # where it ran, described before the run


def import_rss(runs: int) -> tuple[list[int], int]:
    """VmRSS (bytes) of `runs` fresh interpreters right after importing AGENT_IMPORTS, and their module count."""
    program = ("import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)\n"
               "rss = [l for l in open('/proc/self/status') if l.startswith('VmRSS:')][0].split()[1]\n"
               "print(int(rss) * 1024, len(sys.modules))")
    sizes, modules = [], 0
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", program, *AGENT_IMPORTS], capture_output=True, text=True,
                             timeout=120, check=True, env={**os.environ, "PYTHONPATH": processes.python_path()})
        rss, count = out.stdout.split()
        sizes.append(int(rss))
        modules = int(count)
    return sizes, modules


def _busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of this machine so far, all cpus (/proc/stat's first line)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


async def _serve_exposition() -> tuple[web.AppRunner, int]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=EXPOSITION, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def _configure(client: Client) -> None:
    data = {"resource-threshold-config": json.dumps({"clusterStrategy": RESOURCE_THRESHOLD}),
            "cpu-burst-config": json.dumps({"clusterStrategy": CPU_BURST})}
    await client.json(Request("PATCH", f"/api/v1/namespaces/{NAMESPACE}/configmaps/colocation-config",
                              json.dumps({"data": data}).encode(), content_type="application/merge-patch+json"))


async def _post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return await client.json(Request("POST", path, json.dumps(body).encode()))


async def _make_node(client: Client, pods: list[NodePod], scrape_port: int) -> tuple[str, dict[str, NodePod]]:
    """The Node, its agent pod's bound token, and the workload pods Running on it (uid → pod)."""
    resources = {"cpu": str(CPUS), "memory": f"{MEMORY // 2**30}Gi", "pods": "110"}
    token = await agent_token(client, NODE)
    await client.json(Request("PATCH", f"/api/v1/nodes/{NODE}/status",
                              json.dumps({"status": {"capacity": resources, "allocatable": resources}}).encode(),
                              content_type="application/merge-patch+json"))
    by_uid = {}
    for pod in pods:
        created = await _post(client, "/api/v1/namespaces/default/pods", pod_manifest(pod, NODE, scrape_port))
        created["status"] = running_status(pod)
        path = f"/api/v1/namespaces/default/pods/{pod.name}/status"
        await client.json(Request("PUT", path, json.dumps(created).encode()))
        by_uid[created["metadata"]["uid"]] = pod
    return token, by_uid


def _agent_kubeconfig(admin: Path, token: str, out: Path) -> Path:
    config = yaml.safe_load(admin.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    out.write_text(yaml.safe_dump(config))
    return out


@contextlib.asynccontextmanager
async def _agent(args: list[str], log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "colocation", "agent", *args, stdout=asyncio.subprocess.DEVNULL, stderr=out,
            env={**os.environ, "PYTHONPATH": processes.python_path()})
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _scrape(session: aiohttp.ClientSession, port: int) -> dict[str, float]:
    async with session.get(f"http://127.0.0.1:{port}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as response:
        samples = parse(await response.text(), (*COUNTERS, *GAUGES))
    return {name: total(samples, name) for name in (*COUNTERS, *GAUGES)}


async def _enforcing(session: aiohttp.ClientSession, port: int, best_effort: int) -> bool:
    """The agent reported, suppressed, limited every batch pod and sent custom metrics."""
    try:
        values = await _scrape(session, port)
    except (aiohttp.ClientError, TimeoutError):
        return False
    return (values["colocation_agent_reports_sent_total"] >= 1
            and values["colocation_agent_cpu_suppress_millicores"] > 0
            and values["colocation_agent_batch_pods_managed"] == best_effort
            and values["colocation_agent_custom_metric_samples_sent_total"] >= 1)


def _progress(config: CostConfig, index: int, pid: int, cpu_before: float) -> Callable[[float], str]:
    def line(elapsed: float) -> str:
        share = (processes.cpu_seconds(pid) - cpu_before) / max(elapsed, 1e-9)
        return f"agent cost: window {index + 1}/{config.windows}, {share * 100:.2f} % of a core"

    return line


async def _windows(config: CostConfig, report: CostReport, pid: int, session: aiohttp.ClientSession,
                   port: int) -> None:
    busy_before = _busy_ticks()
    for index in range(config.windows):
        before, cpu_before = await _scrape(session, port), processes.cpu_seconds(pid)
        started = time.monotonic()
        await sit_out(config.window, started, config.window, _progress(config, index, pid, cpu_before))
        cpu, seconds = processes.cpu_seconds(pid) - cpu_before, time.monotonic() - started
        after = await _scrape(session, port)
        report.windows.append(CostWindow(seconds=seconds, cpu_seconds=cpu, rss=processes.rss_bytes(pid),
                                         hwm=processes.rss_bytes(pid, "VmHWM"),
                                         counters={name: after[name] - before[name] for name in COUNTERS},
                                         load=os.getloadavg()))
        report.gauges = {name: after[name] for name in GAUGES}
    busy_after = _busy_ticks()
    ticks = os.sysconf("SC_CLK_TCK")
    elapsed = (busy_after[1] - busy_before[1]) / ticks / max(len(os.sched_getaffinity(0)), 1)
    report.machine_busy = (busy_after[0] - busy_before[0]) / ticks / elapsed if elapsed else 0.0


async def _tick(host: FakeHost) -> None:
    started = time.monotonic()
    while True:
        host.advance(time.monotonic() - started)
        # The counters move in steps of this; the agent reads them at its own pace, so a rate it
        # measures over a second is off by up to one step (10 %).
        await asyncio.sleep(0.1)


async def run(config: CostConfig) -> CostReport:
    started = time.perf_counter()
    report = CostReport(config=config, load_before=os.getloadavg())
    say(f"agent cost: RSS after importing {', '.join(AGENT_IMPORTS)} in {config.import_runs} fresh interpreters")
    report.import_rss, report.import_modules = import_rss(config.import_runs)
    work = config.state_dir / "agent-cost"
    work.mkdir(parents=True, exist_ok=True)
    say("agent cost: starting the sandbox (1 operator replica, custom metrics served, no nodes)")
    cluster = await cp_cluster.start(work / "sandbox", nodes=0, pods_per_node=0, operators=1,
                                     extra=("--serve-custom-metrics",))
    exposition, scrape_port = await _serve_exposition()
    ticker: asyncio.Task[None] | None = None
    try:
        await _configure(cluster.client)
        pods = node_pods(config.pods - 1)
        say(f"agent cost: node {NODE} with {len(pods) + 1} pods ({sum(p.qos == 'BE' for p in pods)} BE)")
        token, by_uid = await _make_node(cluster.client, pods, scrape_port)
        host = FakeHost(Path(cluster.state_dir) / "host", by_uid)
        ticker = asyncio.create_task(_tick(host))
        port = free_port()
        report.agent_args = ["--node-name", NODE, "--proc-root", str(host.proc), "--cgroup-root", str(host.cgroup),
                             "--metrics-port", str(port), "--metrics-bind-address", "127.0.0.1", "--log-format", "json",
                             "--system-settings"]
        kubeconfig = _agent_kubeconfig(Path(cluster.server.ready["kubeconfig"]), token, work / "agent.kubeconfig")
        async with _agent(["--kubeconfig", str(kubeconfig), *report.agent_args], work / "agent.log") as agent, \
                aiohttp.ClientSession() as session:
            best_effort = sum(pod.qos == "BE" for pod in pods)
            polled = time.monotonic()
            await eventually_async(lambda: _enforcing(session, port, best_effort), 180.0, interval=1.0,
                                   message="the agent reporting, suppressing, limiting batch pods and sending samples")
            waited = time.monotonic() - polled
            say(f"agent cost: the agent enforces after {waited:.0f} s; {config.warmup:g} s of warm-up")
            await asyncio.sleep(config.warmup)  # the measured steady state starts after the start-up work
            await _windows(config, report, agent.pid, session, port)
            report.written = host.written()
    except (TimeoutError, RuntimeError, OSError, aiohttp.ClientError) as error:
        report.failures.append(repr(error))
        say(f"agent cost: failed: {error!r}")
    finally:
        if ticker is not None:
            ticker.cancel()
        await exposition.cleanup()
        await cluster.close()
    report.seconds = time.perf_counter() - started
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    c = CostConfig()
    p.add_argument("--agent-cost-windows", type=int, default=c.windows, help="Measured windows (>= 5).")
    p.add_argument("--agent-cost-window", type=float, default=c.window, help="Seconds per window.")
    p.add_argument("--agent-cost-warmup", type=float, default=c.warmup,
                   help="Seconds of steady state left out after the agent first enforces.")


def config_from(args: argparse.Namespace, state_dir: Path) -> CostConfig:
    return CostConfig(windows=args.agent_cost_windows, window=args.agent_cost_window, warmup=args.agent_cost_warmup,
                      state_dir=state_dir)
