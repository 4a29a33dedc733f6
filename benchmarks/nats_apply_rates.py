"""A replica's CPU per write it applies, at several write rates (the nats-ingest suite's in-process step).

One process writes reports (`LogIngest.put`, every one a change, at most 64 in flight) at a given
rate for `window` s into a 3-server cluster on loopback (`start_cluster`); the follower probe of
`benchmarks.nats_ingest` (a process of its own, as a replica) applies the stream. Its CPU from the
window's start until it is idle again (it has applied everything) over the writes is a, as the
nats-ingest probe measures it in the sandbox, at that rate. One writer on this machine reaches a
few thousand writes a second; the rate achieved is what counts.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks import processes
from benchmarks.client import say
from benchmarks.ingest_reports import Reports
from benchmarks.jetstream_costs import JetStreamReplica
from benchmarks.nats_sizing import ApplyRate
from colocation.nodemetrics.report_schema import ValidatedReport, validate_report
from colocation_sandbox.launcher.nats_cluster import start_cluster

NODES = 2000
IN_FLIGHT = 64
IDLE_CPU = 0.02  # s of CPU a second: the probe is idle (caught up)
READY_TIMEOUT = 60.0


async def _until_idle(pid: int) -> None:
    last = processes.cpu_seconds(pid)
    while True:
        await asyncio.sleep(1.0)  # sampling the probe's CPU, not synchronisation
        now = processes.cpu_seconds(pid)
        if now - last < IDLE_CPU:
            return
        last = now


async def _window(writer: JetStreamReplica, reports: list[ValidatedReport], rate: float, window: float,
                  probe: int) -> ApplyRate:
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def put(report: ValidatedReport) -> None:
        async with slots:
            await writer.ingest.put(report, {})

    cpu, started = processes.cpu_seconds(probe), time.monotonic()
    tasks: list[asyncio.Task[None]] = []
    while (elapsed := time.monotonic() - started) < window:
        while len(tasks) < min(int(elapsed * rate), len(reports)):
            tasks.append(asyncio.create_task(put(reports[len(tasks)])))
        await asyncio.sleep(0.005)  # the writer's pace
    await asyncio.gather(*tasks)
    seconds = time.monotonic() - started
    await _until_idle(probe)
    return ApplyRate(rate=len(tasks) / seconds, writes=len(tasks), cpu=processes.cpu_seconds(probe) - cpu)


async def measure(rates: Sequence[float], window: float, pods: int) -> list[ApplyRate]:
    source = Reports([f"node-{index:05d}" for index in range(NODES)], pods)
    found = []
    with tempfile.TemporaryDirectory(prefix="nats-apply-rates-") as scratch:
        cluster = await start_cluster(Path(scratch))
        writer = await JetStreamReplica.connected(cluster.urls[0], "writer")
        writer.follow()
        probe = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.nats_ingest", "follow", "--server", cluster.urls[1],
            stdout=asyncio.subprocess.PIPE)
        try:
            assert probe.stdout is not None
            await asyncio.wait_for(probe.stdout.readline(), READY_TIMEOUT)  # "ready: ..."
            for rate in rates:
                count = int(rate * window) + 1
                reports = [validate_report(source.next_body(i % NODES), source.nodes[i % NODES]) for i in range(count)]
                point = await _window(writer, reports, rate, window, probe.pid)
                say(f"nats ingest: applies at {point.rate:,.0f} writes/s: {point.us:,.0f} µs per write")
                found.append(point)
        finally:
            probe.terminate()
            await probe.wait()
            await writer.close()
            await cluster.stop()
    return found
