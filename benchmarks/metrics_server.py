"""metrics-server beside us (issue 38): who serves metrics.k8s.io cheaper, fresher, and through a kill?

    python -m benchmarks.run --suite metrics-server [--ms-nodes 100 --ms-window-seconds 300 ...]

The same cluster and load twice, one after the other: `colocation sandbox --apiserver kube` with
`--ms-nodes` nodes (the simulated ones' usage from their annotations, which kwok's resource metrics
and our simulated agents both read), 2 operator replicas and custom metrics off; first with
`--metrics-server 2` (two metrics-server processes behind v1beta1.metrics.k8s.io, the operators
not serving it), then with the operators serving it (`--serve-resource-metrics`). Per system:

- over a `--ms-window-seconds` window once every simulated node is served: CPU seconds and the
  resident memory at its end of every process of the sandbox, by component, and kube-apiserver's
  requests and bytes (its /metrics, before and after). What serving metrics.k8s.io adds is each
  serving component's use beyond the other run (`SERVING_COMPONENTS`);
- `--ms-steps` load steps: one pod's cpu annotation raised by 2 cores, then the seconds until
  GET /apis/metrics.k8s.io/v1beta1/nodes/NODE (what `kubectl top node` reads) shows 90 % of it;
- a SIGKILL of one serving replica (the first metrics-server process, or the operators' leader),
  then `--ms-kill-seconds` of reads of the node list, 5 a second: how many fail, and the longest
  stretch without a good answer. The sandbox restarts either as a kubelet would (for
  metrics-server: out of its EndpointSlice at once, back once its /readyz answers).

Per-node figures divide by the simulated nodes (those metrics-server scrapes). The verdicts say
for each row whether we are ahead, unless the agents' self-check found a problem over a window
(then none is given). Raw samples: benchmarks/plots/metrics_server.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from benchmarks import cp_cluster, cp_kube_metrics, machine, markdown, processes
from benchmarks.client import Request, say
from benchmarks.outage_recovery import CpuUse, component_of
from benchmarks.polling import eventually_async
from benchmarks.results import Record
from colocation.agent import selfcheck
from colocation.agent.synthetic import CPU_USAGE_ANNOTATION
from colocation.apimachinery.quantity import cpu_millis, format_millis, parse_quantity

SUITE = "metrics-server"
SYSTEMS = ("metrics-server", "colocation")
# The components whose work serving metrics.k8s.io changes: every one runs in both runs, so what it
# uses beyond the other run is the serving's cost. kwok answers metrics-server's scrapes, as
# kubelets would; the operators' other work is the same in both runs; the agents report the
# same either way.
SERVING_COMPONENTS = {"metrics-server": ("metrics-server", "kwok"), "colocation": ("operator replicas",)}
TRAFFIC_ROWS = 6  # kube-apiserver rows shown: those whose bytes differ most between the runs
RAW = Path(__file__).resolve().parent / "plots" / "metrics_server.json"
NODES_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
STEP_MILLIS = 2000
SEEN_SHARE = 0.9  # a step is seen once the node's cpu rose by this share of it
POLL_EVERY = 0.25
READ_EVERY = 0.2
STEP_TIMEOUT = 120.0
SERVED_TIMEOUT = 600.0
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, kw_only=True)
class MetricsServerConfig:
    state_dir: Path = Path("unused")
    nodes: int = 100
    pods_per_node: int = 10
    window_seconds: float = 300.0
    steps: int = 5
    kill_seconds: float = 60.0


@dataclass
class Phase:
    system: str
    simulated_nodes: int
    window_seconds: float = 0.0
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # by component, over the window
    rss_bytes: dict[str, int] = field(default_factory=dict)  # by component, at the window's end
    apiserver_requests: float = 0.0
    apiserver_bytes: float = 0.0
    # "group/resource verb": (requests, bytes), over the window
    apiserver_traffic: dict[str, tuple[float, float]] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    kill_reads: list[tuple[float, int]] = field(default_factory=list)  # (seconds after the kill, status; 0: none)
    killed: str = ""
    agent_problems: list[str] = field(default_factory=list)  # the agents' self-check over the window

    def per_node_minute(self, value: float) -> float:
        return value / self.simulated_nodes / (self.window_seconds / 60)

    def millicores_per_node(self, component: str) -> float:
        return self.cpu_seconds.get(component, 0.0) / self.window_seconds * 1000 / self.simulated_nodes

    def rss_per_node(self, component: str) -> float:
        return self.rss_bytes.get(component, 0) / self.simulated_nodes

    @property
    def sandbox_millicores_per_node(self) -> float:
        """Every process of the sandbox (the same cluster and load in both runs, but who serves)."""
        used = sum(v for k, v in self.cpu_seconds.items() if k != "benchmark client")
        return used / self.window_seconds * 1000 / self.simulated_nodes

    @property
    def sandbox_rss_per_node(self) -> float:
        return sum(self.rss_bytes.values()) / self.simulated_nodes

    @property
    def failed_reads(self) -> int:
        return sum(1 for _, status in self.kill_reads if status != 200)

    @property
    def longest_gap(self) -> float:
        """The longest time between two good answers after the kill (from the kill to the first) with a
        failed read between them; 0 when no read failed (the read interval is not a gap)."""
        if not self.failed_reads:
            return 0.0
        good = [0.0, *(at for at, status in self.kill_reads if status == 200)]
        end = self.kill_reads[-1][0] if self.kill_reads else 0.0
        if self.kill_reads and self.kill_reads[-1][1] != 200:
            good.append(end)  # still failing at the end: counts to the end
        return max((b - a for a, b in itertools.pairwise(good)), default=0.0)


def _sandbox_args(system: str) -> tuple[str, ...]:
    # Without the scheduler extender: it serves neither side, and its pod watches would load both.
    common = ("--apiserver", "kube", "--kwok-resource-metrics", "--no-scheduler-extender")
    if system == "metrics-server":
        return (*common, "--metrics-server", "2")
    return (*common, "--serve-resource-metrics")  # after cp_cluster's --no-serve-resource-metrics: it wins


def rss_by_component(root: int) -> dict[str, int]:
    found: dict[str, int] = {}
    for pid in processes.descendants(root):
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            name = component_of(processes.command_line(pid))
            found[name] = found.get(name, 0) + processes.rss_bytes(pid)
    return found


async def served_cpu(cluster: cp_cluster.Cluster, node: str) -> float | None:
    """The node's cpu in metrics.k8s.io, milli-cpus; None when it has none."""
    try:
        status, body = await cluster.client.send(Request("GET", f"{NODES_PATH}/{node}"))
    except (TimeoutError, OSError, aiohttp.ClientError):
        return None
    if status != 200:
        return None
    return float(parse_quantity(orjson.loads(body)["usage"]["cpu"]) * 1000)


async def all_served(cluster: cp_cluster.Cluster, nodes: list[str]) -> bool:
    status, body = await cluster.client.send(Request("GET", NODES_PATH))
    return status == 200 and set(nodes) <= {item["metadata"]["name"] for item in orjson.loads(body)["items"]}


async def apiserver_metrics(cluster: cp_cluster.Cluster) -> cp_kube_metrics.Samples:
    status, body = await cluster.client.send(Request("GET", "/metrics", accept="text/plain"))
    if status != 200:
        raise RuntimeError(f"GET /metrics: {status}")
    return cp_kube_metrics.parse(body.decode(), cp_kube_metrics.APISERVER_WANTED)


async def measure_window(cluster: cp_cluster.Cluster, phase: Phase, seconds: float) -> None:
    cpu = CpuUse(cluster.server.pid)
    checks_before = await selfcheck.read_sandbox(cluster.state_dir)
    before = await apiserver_metrics(cluster)
    cpu.read()
    started = time.monotonic()
    await asyncio.sleep(seconds)  # the measurement window itself
    cpu.read()
    after = await apiserver_metrics(cluster)
    _, phase.agent_problems = selfcheck.sandbox_verdict(checks_before, await selfcheck.read_sandbox(cluster.state_dir))
    phase.window_seconds = time.monotonic() - started
    phase.cpu_seconds = cpu.used()
    phase.rss_bytes = rss_by_component(cluster.server.pid)
    rows = window_traffic(cp_kube_metrics.delta(before, after))
    total = cp_kube_metrics.sum_traffic(rows.values())
    phase.apiserver_requests, phase.apiserver_bytes = total.requests, total.bytes
    phase.apiserver_traffic = {f"{group or 'core'}/{resource} {verb}": (row.requests, row.bytes)
                               for (group, resource, verb), row in rows.items() if not row.is_zero()}


def window_traffic(window: cp_kube_metrics.Samples) -> dict[cp_kube_metrics.Key, cp_kube_metrics.Traffic]:
    """kube-apiserver's traffic over a window, by row, without the watch requests' response bytes:
    kube-apiserver counts those when a watch ends, all of its life at once, so they fall in a
    window or not by chance; what watches send in the window is in the "watch event" rows."""
    rows = cp_kube_metrics.traffic(window)
    return {key: replace(row, response_bytes=0.0) if key[2] == "watch" else row for key, row in rows.items()}


async def annotated_pod(cluster: cp_cluster.Cluster, node: str) -> dict[str, Any]:
    pods = await cluster.client.json(Request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node}"))
    return next(p for p in pods["items"] if CPU_USAGE_ANNOTATION in (p["metadata"].get("annotations") or {}))


async def set_cpu(cluster: cp_cluster.Cluster, pod: dict[str, Any], millis: int) -> None:
    meta = pod["metadata"]
    body = orjson.dumps({"metadata": {"annotations": {CPU_USAGE_ANNOTATION: format_millis(millis)}}})
    await cluster.client.json(Request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                      body, content_type=MERGE_PATCH))


async def load_step(cluster: cp_cluster.Cluster, node: str) -> float:
    """Seconds from raising a pod's cpu by STEP_MILLIS until metrics.k8s.io shows 90 % of it."""
    pod = await annotated_pod(cluster, node)
    base = cpu_millis(pod["metadata"]["annotations"][CPU_USAGE_ANNOTATION])
    before = await eventually_async(lambda: served_cpu(cluster, node), 60, interval=1.0,
                                    message=f"{node} served before the step")
    await set_cpu(cluster, pod, base + STEP_MILLIS)
    started = time.monotonic()

    async def seen() -> bool:
        now = await served_cpu(cluster, node)
        return now is not None and now >= before + SEEN_SHARE * STEP_MILLIS

    try:
        await eventually_async(seen, STEP_TIMEOUT, interval=POLL_EVERY, message=f"{node}: the step")
        return time.monotonic() - started
    finally:
        await set_cpu(cluster, pod, base)


async def victim(cluster: cp_cluster.Cluster, system: str) -> tuple[str, int]:
    if system == "metrics-server":
        pids = sorted(pid for pid in processes.descendants(cluster.server.pid)
                      if component_of(processes.command_line(pid)) == "metrics-server")
        return "the first metrics-server process", pids[0]
    leader = await cluster.leader_replica()
    if leader is None:
        raise RuntimeError("no operator leader to kill")
    return f"the operators' leader ({leader.identity})", leader.pid


async def kill_and_read(cluster: cp_cluster.Cluster, phase: Phase, seconds: float) -> None:
    phase.killed, pid = await victim(cluster, phase.system)
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        try:
            status, _ = await asyncio.wait_for(cluster.client.send(Request("GET", NODES_PATH)), 5.0)
        except (TimeoutError, OSError, aiohttp.ClientError):
            status = 0
        phase.kill_reads.append((round(elapsed, 3), status))
        await asyncio.sleep(max(0.0, READ_EVERY - (time.monotonic() - started - elapsed)))  # the read rate


async def run_system(config: MetricsServerConfig, system: str) -> Phase:
    nodes = [f"sim-node-{i}" for i in range(1, config.nodes)]
    phase = Phase(system=system, simulated_nodes=len(nodes))
    say(f"{SUITE}: {system}: starting a sandbox of {config.nodes} nodes")
    cluster = await cp_cluster.start(config.state_dir / system, nodes=config.nodes,
                                     pods_per_node=config.pods_per_node, extra=_sandbox_args(system),
                                     start_timeout=SERVED_TIMEOUT)
    try:
        await eventually_async(lambda: all_served(cluster, nodes), SERVED_TIMEOUT, interval=2.0,
                               message=f"{system} serving every simulated node")
        say(f"{SUITE}: {system}: every node served; measuring {config.window_seconds:.0f} s")
        await measure_window(cluster, phase, config.window_seconds)
        for index in range(config.steps):
            phase.step_seconds.append(round(await load_step(cluster, nodes[index % len(nodes)]), 3))
            say(f"{SUITE}: {system}: step {index + 1} seen in {phase.step_seconds[-1]:.1f} s")
        await kill_and_read(cluster, phase, config.kill_seconds)
        say(f"{SUITE}: {system}: after the kill {phase.failed_reads} of {len(phase.kill_reads)} reads failed")
    finally:
        await cluster.close()
    return phase


async def run(config: MetricsServerConfig) -> list[Phase]:
    return [await run_system(config, system) for system in SYSTEMS]


# ---- the report ---------------------------------------------------------------------------------

def serving_added(phases: list[Phase], per_node: Callable[[Phase, str], float]) -> tuple[float, float]:
    """What serving metrics.k8s.io adds, per node, for each system: over its SERVING_COMPONENTS, what
    each uses in its own run beyond the other run."""
    theirs, ours = phases
    return (sum(per_node(theirs, c) - per_node(ours, c) for c in SERVING_COMPONENTS[theirs.system]),
            sum(per_node(ours, c) - per_node(theirs, c) for c in SERVING_COMPONENTS[ours.system]))


PairedRow = tuple[str, Callable[[list[Phase]], tuple[float, float]], Callable[[float], str]]
PAIRED_ROWS: tuple[PairedRow, ...] = (
    ("CPU added by serving metrics.k8s.io, millicores per node",
     lambda phases: serving_added(phases, Phase.millicores_per_node), lambda v: f"{v:,.3f}"),
    ("RSS added by serving metrics.k8s.io, KiB per node",
     lambda phases: serving_added(phases, lambda p, c: p.rss_per_node(c) / 1024), lambda v: f"{v:,.0f}"),
)
Row = tuple[str, Callable[[Phase], float], Callable[[float], str]]
ROWS: tuple[Row, ...] = (
    ("CPU of the whole sandbox, millicores per node", lambda p: p.sandbox_millicores_per_node,
     lambda v: f"{v:,.3f}"),
    ("RSS of the whole sandbox, KiB per node", lambda p: p.sandbox_rss_per_node / 1024, lambda v: f"{v:,.0f}"),
    ("kube-apiserver requests per node per minute", lambda p: p.per_node_minute(p.apiserver_requests),
     lambda v: f"{v:,.2f}"),
    ("kube-apiserver bytes per node per minute", lambda p: p.per_node_minute(p.apiserver_bytes),
     lambda v: f"{v:,.0f}"),
    ("load step seen by metrics.k8s.io, median s", lambda p: statistics.median(p.step_seconds) if p.step_seconds
     else float("nan"), lambda v: f"{v:.1f}"),
    ("after a SIGKILL: failed reads", lambda p: float(p.failed_reads), lambda v: f"{v:.0f}"),
    ("after a SIGKILL: longest time without an answer, s", lambda p: p.longest_gap, lambda v: f"{v:.1f}"),
)


def verdict(theirs: float, ours: float) -> str:
    """Every row is 'less is better'."""
    if ours != ours or theirs != theirs:  # NaN: nothing measured
        return "not measured"
    if ours < theirs:
        return "ahead"
    return "even" if ours == theirs else "behind"


def render(phases: list[Phase], config: MetricsServerConfig, where: machine.Machine, command: str,
           seconds: float) -> str:
    theirs, ours = phases
    problems = [f"{p.system} run: {problem}" for p in phases for problem in p.agent_problems]
    rows = []
    pairs = [(label, values(phases), fmt) for label, values, fmt in PAIRED_ROWS]
    for label, (a, b), fmt in [*pairs, *((label, (value(theirs), value(ours)), fmt) for label, value, fmt in ROWS)]:
        ratio = f"{b / a:,.2f}" if a > 0 and b >= 0 else "—"
        rows.append([label, fmt(a), fmt(b), ratio, "inconclusive" if problems else verdict(a, b)])
    components = sorted(set(theirs.cpu_seconds) | set(ours.cpu_seconds))
    raw_cpu = [[name, f"{theirs.cpu_seconds.get(name, 0.0):,.2f}", f"{ours.cpu_seconds.get(name, 0.0):,.2f}",
                f"{theirs.rss_bytes.get(name, 0) / 2**20:,.0f}", f"{ours.rss_bytes.get(name, 0) / 2**20:,.0f}"]
               for name in components]
    lines = [
        "## metrics-server beside us", "",
        *markdown.run_lines(command, where, seconds,
                            f"{config.nodes} nodes ({theirs.simulated_nodes} simulated), {config.pods_per_node} pods "
                            f"each, {config.window_seconds:.0f} s windows."), "",
        "The same cluster and load twice ([benchmarks/metrics_server.py](benchmarks/metrics_server.py) says how): "
        "metrics-server v0.9.0 (2 processes) serving metrics.k8s.io from kwok's resource metrics, then our "
        "2 operator replicas serving it from the agents' reports. Both runs run everything else alike. "
        "\"Added by serving\" is, for metrics-server, what its processes use plus what kwok uses beyond the "
        "other run (kwok answers its scrapes, as kubelets would); for us, what the operator replicas use beyond "
        "the other run (their other work is the same in both). The whole sandbox's rows compare everything. "
        "Less is better on every row.", "",
        markdown.table(["", "metrics-server", "colocation", "ratio (ours / theirs)", "verdict"], rows), "",
        f"Killed: {theirs.killed}; {ours.killed}.", "",
        *([f"No verdict: the agents' self-check found problems over a window: {'; '.join(problems)}.", ""]
          if problems else ["The agents' self-check was clean over both windows.", ""]),
        "Raw: CPU seconds over the window and RSS (MiB) at its end, by component:", "",
        markdown.table(["component", "CPU s, metrics-server run", "CPU s, colocation run", "RSS, metrics-server run",
                        "RSS, colocation run"], raw_cpu), "",
        f"Load steps seen (s): metrics-server {theirs.step_seconds}; colocation {ours.step_seconds}.", "",
        f"kube-apiserver, the {TRAFFIC_ROWS} rows whose bytes differ most between the runs, per node per minute "
        "(group/resource verb; requests, bytes):", "",
        markdown.table(["row", "metrics-server run", "colocation run"], traffic_rows(theirs, ours)),
    ]
    return "\n".join(lines)


def traffic_rows(theirs: Phase, ours: Phase) -> list[list[str]]:
    def at(phase: Phase, key: str) -> tuple[float, float]:
        requests, sent = phase.apiserver_traffic.get(key, (0.0, 0.0))
        return phase.per_node_minute(requests), phase.per_node_minute(sent)

    keys = sorted(set(theirs.apiserver_traffic) | set(ours.apiserver_traffic),
                  key=lambda key: -abs(at(ours, key)[1] - at(theirs, key)[1]))
    return [[key, *(f"{requests:,.2f}; {sent:,.0f}" for requests, sent in (at(theirs, key), at(ours, key)))]
            for key in keys[:TRAFFIC_ROWS]]


class RawSamples(Record):
    """What benchmarks/plots/metrics_server.json holds: the machine, and each system's phase."""

    machine: machine.Machine
    phases: list[Phase]


def save_raw(phases: list[Phase], path: Path, where: machine.Machine) -> None:
    RawSamples(machine=where, phases=phases).to_file(path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    c = MetricsServerConfig()
    p.add_argument("--ms-nodes", type=int, default=c.nodes, help="metrics-server: nodes (one is this machine's).")
    p.add_argument("--ms-pods-per-node", type=int, default=c.pods_per_node)
    p.add_argument("--ms-window-seconds", type=float, default=c.window_seconds,
                   help="metrics-server: the window CPU, memory and kube-apiserver traffic are measured over.")
    p.add_argument("--ms-steps", type=int, default=c.steps, help="metrics-server: load steps per system.")
    p.add_argument("--ms-kill-seconds", type=float, default=c.kill_seconds,
                   help="metrics-server: seconds of reads after the SIGKILL.")
    p.add_argument("--ms-raw", type=Path, default=RAW, help="metrics-server: where the raw samples go (JSON).")


def config_from(args: argparse.Namespace, state_dir: Path) -> MetricsServerConfig:
    return MetricsServerConfig(state_dir=state_dir, nodes=args.ms_nodes, pods_per_node=args.ms_pods_per_node,
                               window_seconds=args.ms_window_seconds, steps=args.ms_steps,
                               kill_seconds=args.ms_kill_seconds)


def run_suite(config: MetricsServerConfig, output: Path, command: str, raw: Path = RAW) -> list[Phase]:
    where = machine.describe()  # before the run: its outputs (tracked files) would read as "+changes"
    started = time.monotonic()
    phases = asyncio.run(run(config))
    save_raw(phases, raw, where)
    markdown.write_section(output, SUITE, render(phases, config, where, command, time.monotonic() - started))
    say(f"wrote the {SUITE} section of {output} and {raw}")
    return phases


__all__ = ["SUITE", "MetricsServerConfig", "Phase", "RawSamples", "add_arguments", "config_from", "render", "run_suite"]
