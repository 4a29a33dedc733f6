"""What NodeMetrics on NATS JetStream cost a replica, per report, against the in-memory store (issue 36).

    python -m benchmarks.run --suite jetstream-costs [--jetstream-nodes 1000 --jetstream-repeats 7]

One process, a real 3-server cluster on loopback (nats-server from hack/nats/build.sh, file
storage, 3 replicas), the load client's reports (`benchmarks.ingest_reports`: 30 pods, each
report a change), validated beforehand (both stores take the same validated report). Per repeat:

- memory: `NodeMetricStore.put` of every node's report, one after the other;
- nats, ingest: `LogIngest.put` of every node's report, `--in-flight` at once, on a replica whose
  follower applies the stream meanwhile (as every replica does): the write, its
  acknowledgement, the follower's apply of it;
- nats, apply: a second replica's follower catching up with the whole stream from the start (one
  message per node): what each replica spends on every other replica's writes;
- nats-server: the three servers' CPU over the ingest, per report.

The replicas' figures are CPU time of this process (the ingest waits for acknowledgements, so its
wall time is not its cost); the in-process stages of `benchmarks.ingest_stages` (the whole report
path on the in-memory store, HTTP and TLS aside) are measured in the same run, so the whole path
on NATS is projected as that whole minus the memory store plus the NATS ingest. Target: the
projected whole at most 1.3x the measured one.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from pathlib import Path

from nats.aio.client import Client

from benchmarks import machine, processes
from benchmarks.client import say
from benchmarks.ingest_reports import Reports
from benchmarks.ingest_stages import measure as measure_stages
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.results import Record
from benchmarks.stats import percentile
from colocation.jetstream.log_follower import LogFollower
from colocation.jetstream.log_ingest import LogIngest
from colocation.jetstream.nats_connection import NatsOptions, connect
from colocation.jetstream.nodemetric_log import LogSettings, NodeMetricLog, ensure_stream
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import ValidatedReport, validate_report
from colocation.nodemetrics.resource_versions import LogPositions
from colocation_sandbox.launcher.nats_cluster import start_cluster

SUITE = SECTION = "jetstream-costs"
ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "benchmarks" / "plots" / "jetstream_costs.json"
TARGET_RATIO = 1.3
WHOLE_STAGE = "whole: middleware and report handler"
MEMORY_STAGE = "store: put and event, no watcher"
DEADLINE = 60.0  # for a follower to apply what was written


class JetStreamCosts(Record):
    nodes: int
    pods: int
    in_flight: int
    samples_us: dict[str, list[float]]  # per stage, one figure per repeat: µs per report
    verdict: str


def _cpu(pids: list[int]) -> float:
    return sum(processes.cpu_seconds(pid) for pid in pids)


class JetStreamReplica:
    """A connection to one server, a store on the stream and its follower (not yet started)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.js = client.jetstream(timeout=5.0)
        self.store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic, versions=LogPositions())
        self.follower = LogFollower(self.js, self.store)
        self.ingest = LogIngest(NodeMetricLog(self.js, timeout=5.0), self.follower, self.store)
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def connected(cls, url: str, name: str) -> JetStreamReplica:
        replica = cls(await connect(NatsOptions(servers=(url,)), name=name))
        await ensure_stream(replica.js, LogSettings(), wall=time.time)
        return replica

    def follow(self) -> None:
        self.task = asyncio.create_task(self.follower.run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.client.close()


async def measure(nodes: int, pods: int, repeats: int, in_flight: int) -> dict[str, list[float]]:
    reports = Reports([f"node-{index:05d}" for index in range(nodes)], pods)
    samples: dict[str, list[float]] = {"memory": [], "nats ingest": [], "nats apply": [], "nats-server": []}
    with tempfile.TemporaryDirectory(prefix="jetstream-costs-") as scratch:
        cluster = await start_cluster(Path(scratch))
        servers = [server.process.pid for server in cluster.servers if server.process is not None]
        ingesting = await JetStreamReplica.connected(cluster.urls[0], "ingesting")
        ingesting.follow()
        try:
            memory = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic)
            slots = asyncio.Semaphore(in_flight)

            async def put(report: ValidatedReport) -> None:
                async with slots:
                    await ingesting.ingest.put(report, {})

            for _ in range(repeats):
                batch = [validate_report(reports.next_body(index), reports.nodes[index]) for index in range(nodes)]
                gc.collect()
                started = time.process_time()
                for report in batch:
                    memory.put(report, {})
                samples["memory"].append((time.process_time() - started) / nodes * 1e6)
                server_cpu, started = _cpu(servers), time.process_time()
                await asyncio.gather(*map(put, batch))
                samples["nats ingest"].append((time.process_time() - started) / nodes * 1e6)
                samples["nats-server"].append((_cpu(servers) - server_cpu) / nodes * 1e6)
                applying = await JetStreamReplica.connected(cluster.urls[1], "applying")
                try:
                    started = time.process_time()
                    applying.follow()
                    if not await applying.follower.wait_for(ingesting.follower.position, DEADLINE):
                        raise RuntimeError("the second replica did not catch up with the stream")
                    samples["nats apply"].append((time.process_time() - started) / nodes * 1e6)
                finally:
                    await applying.close()
        finally:
            await ingesting.close()
            await cluster.stop()
    in_process = await measure_stages(nodes, pods, repeats)
    samples["whole, in-memory store"] = in_process[WHOLE_STAGE]
    samples["store stage of the whole"] = in_process[MEMORY_STAGE]
    return samples


def _median(values: list[float]) -> float:
    return percentile(values, 0.5)


def projected_ratio(samples: dict[str, list[float]]) -> float:
    """The whole report path on NATS (projected) over the whole on the in-memory store (measured)."""
    whole = _median(samples["whole, in-memory store"])
    return (whole - _median(samples["store stage of the whole"]) + _median(samples["nats ingest"])) / whole


def render(result: JetStreamCosts, where: machine.Machine, command: str, seconds: float) -> str:
    rows = [[name, *(f"{percentile(values, q):,.1f}" for q in (0.0, 0.5, 0.9, 1.0))]
            for name, values in result.samples_us.items()]
    ratio = projected_ratio(result.samples_us)
    lines = ["## NodeMetrics on NATS JetStream: a replica's CPU per report", "",
             *run_lines(command, where, seconds), "",
             f"{result.nodes:,} nodes x {result.pods} pods, {len(next(iter(result.samples_us.values())))} repeats, "
             f"{result.in_flight} reports in flight; a 3-server cluster on loopback (file storage, 3 replicas). "
             "How it is measured: the docstring of `benchmarks/jetstream_costs.py`.", "",
             "Target (issue 36): a replica's CPU per report on NATS at most 1.3x the in-memory store's, "
             "for the whole report path.", "",
             table(["µs per report", "min", "median", "p90", "max"], rows), "",
             f"The whole report path on NATS, projected (the whole on the in-memory store, minus its store "
             f"stage, plus the NATS ingest): **{ratio:.2f}x** the in-memory store's. "
             f"Verdict: **{result.verdict}**.", "",
             "Each replica also applies every other replica's writes (`nats apply`), and the servers "
             "pay `nats-server` between them, per report.", "",
             f"Raw samples: `{RAW.relative_to(ROOT)}`."]
    return "\n".join(lines)


def run(nodes: int, pods: int, repeats: int, in_flight: int, output: Path, command: str) -> JetStreamCosts:
    where, started = machine.describe(), time.monotonic()
    samples = asyncio.run(measure(nodes, pods, repeats, in_flight))
    verdict = "met" if projected_ratio(samples) <= TARGET_RATIO else "missed"
    result = JetStreamCosts(nodes=nodes, pods=pods, in_flight=in_flight, samples_us=samples, verdict=verdict)
    result.to_file(RAW)
    write_section(output, SECTION, render(result, where, command, time.monotonic() - started))
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jetstream-nodes", type=int, default=1000, help="jetstream-costs: nodes.")
    p.add_argument("--jetstream-pods-per-node", type=int, default=30)
    p.add_argument("--jetstream-repeats", type=int, default=7)
    p.add_argument("--jetstream-in-flight", type=int, default=64, help="jetstream-costs: reports written at once.")


def run_suite(args: argparse.Namespace, output: Path, command: str) -> JetStreamCosts:
    result = run(args.jetstream_nodes, args.jetstream_pods_per_node, args.jetstream_repeats, args.jetstream_in_flight,
                 output, command)
    say(f"jetstream costs: {result.verdict} (the whole report path on NATS projected at "
        f"{projected_ratio(result.samples_us):.2f}x); wrote {output}")
    return result
