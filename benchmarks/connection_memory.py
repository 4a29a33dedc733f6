"""Leader memory per agent connection: what one kept-alive TLS connection costs the server's RSS.

    python -m benchmarks.run --suite connection-memory [--connections 1000 --connection-runs 5]

Every agent keeps one HTTPS connection to the leader for its reports, so each node costs the leader
a connection on top of its NodeMetric and its pods. The leader-scale suite cannot show it: its
simulated agents share a pool of connections. Here a server process (aiohttp over TLS, the
project's serving certificate code, answering a report-sized PUT) takes `connections` clients, each
with a connection of its own that sends one report and stays open; its RSS (VmRSS) before and after
gives the bytes per connection. Two settings, alternating, `runs` times each: asyncio's own TLS
read buffer (256 KiB) and the operator's (`apiserver.tls_read_buffer`, 16 KiB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import aiohttp
from pydantic import ConfigDict, Field

from benchmarks import machine, processes
from benchmarks.client import say
from benchmarks.markdown import run_lines, table, write_section
from benchmarks.results import CamelRecord, Record
from benchmarks.stats import percentile, size
from colocation.apimachinery import certificates

SUITE = "connection-memory"
RAW = Path(__file__).resolve().parent / "plots" / "connection_memory.json"
SETTINGS = ("asyncio default", "operator")
REPORT_BYTES = 7 * 1024  # about a report of 30 pods
SETTLE_SECONDS = 1.0  # after the last answer, before RSS is read: the connections idle, as between reports
EXTRAPOLATE_NODES = 10_000


class ConnectionConfig(Record):
    model_config = ConfigDict(frozen=True)

    connections: int = 1000
    runs: int = 5
    state_dir: Path = Path(".bench")


class ConnectionReport(CamelRecord):
    """What benchmarks/plots/connection_memory.json holds."""

    config: ConnectionConfig
    per_connection: dict[str, list[float]] = Field(default_factory=dict)  # setting -> bytes, one per run
    seconds: float = 0.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    defaults = ConnectionConfig()
    p.add_argument("--connections", type=int, default=defaults.connections,
                   help="connection-memory: kept-alive TLS connections per run")
    p.add_argument("--connection-runs", type=int, default=defaults.runs,
                   help="connection-memory: runs per TLS read buffer setting")


def config_from(args: argparse.Namespace, state_dir: Path) -> ConnectionConfig:
    return ConnectionConfig(connections=args.connections, runs=args.connection_runs, state_dir=state_dir)


# ---- the server process ------------------------------------------------------------------------

async def _serve(cert_dir: Path, bounded: bool) -> None:
    from aiohttp import web

    from colocation.apiserver.tls_read_buffer import bound_tls_read_buffers

    if bounded:
        bound_tls_read_buffers()

    async def report(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"kind": "NodeMetric"})

    app = web.Application()
    app.router.add_put("/report", report)
    cert = certificates.CertKey((cert_dir / "tls.crt").read_bytes(), (cert_dir / "tls.key").read_bytes())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificates.ssl_server_context(cert))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"ready: port={port}", flush=True)
    await asyncio.Event().wait()


# ---- the client: the benchmark ----------------------------------------------------------------

async def _one_run(config: ConnectionConfig, cert_dir: Path, ca_pem: bytes, bounded: bool, index: int) -> float:
    args = ["-m", "benchmarks.connection_memory", "--serve", str(cert_dir), *(["--bounded"] if bounded else [])]
    server = await processes.start(args, config.state_dir / f"connection-server-{index}.log")
    sessions: list[aiohttp.ClientSession] = []
    try:
        port = int(server.ready["port"])
        context = certificates.ssl_client_context(ca_pem)
        body = os.urandom(REPORT_BYTES // 2).hex().encode()
        slots = asyncio.Semaphore(64)

        async def connect() -> None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, ssl=context),
                                            timeout=aiohttp.ClientTimeout(total=60))
            sessions.append(session)
            async with slots, session.put(f"https://127.0.0.1:{port}/report", data=body) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"PUT /report: {response.status}")

        await connect()  # the first connection warms the server's code paths; the rest are measured
        await asyncio.sleep(SETTLE_SECONDS)  # an idle server, not synchronisation with it
        before = processes.rss_bytes(server.pid)
        await asyncio.gather(*(connect() for _ in range(config.connections)))
        await asyncio.sleep(SETTLE_SECONDS)
        after = processes.rss_bytes(server.pid)
        return (after - before) / config.connections
    finally:
        await asyncio.gather(*(session.close() for session in sessions))
        await server.stop(timeout=10.0)


async def run(config: ConnectionConfig) -> ConnectionReport:
    report = ConnectionReport(config=config, per_connection={setting: [] for setting in SETTINGS})
    started = time.monotonic()
    cert_dir = config.state_dir / "connection-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    ca = certificates.new_ca("benchmark-ca")
    serving = certificates.issue_certificate(ca, "leader", ip_addresses=("127.0.0.1",))
    (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
    (cert_dir / "tls.key").write_bytes(serving.key_pem)
    for run_index in range(config.runs):
        for setting in SETTINGS:
            value = await _one_run(config, cert_dir, ca.cert_pem, setting == "operator", run_index)
            report.per_connection[setting].append(value)
            say(f"connection memory: run {run_index + 1}/{config.runs}, {setting}: "
                f"{value / 1024:,.1f} KiB per connection")
    report.seconds = time.monotonic() - started
    return report


def render(report: ConnectionReport, where: machine.Machine, command: str) -> str:
    c = report.config
    rows = []
    medians = {}
    for setting in SETTINGS:
        samples = report.per_connection[setting]
        medians[setting] = percentile(samples, 0.5)
        rows.append([setting, *(f"{percentile(samples, q) / 1024:,.1f}" for q in (0.0, 0.5, 1.0)),
                     size(medians[setting] * EXTRAPOLATE_NODES)])
    saved = medians["asyncio default"] - medians["operator"]
    lines = ["## Leader memory per agent connection", "",
             *run_lines(command, where, report.seconds), "",
             f"A server process (aiohttp over TLS, the project's serving certificate) takes {c.connections:,} "
             f"clients, each on a connection of its own that sends one {REPORT_BYTES // 1024} KiB report and "
             "stays open, as an agent's does between reports; the bytes per connection are the server's VmRSS "
             f"after them less before, over {c.connections:,}. {c.runs} runs per setting, alternating: asyncio's "
             "own TLS read buffer (256 KiB per connection, zero-filled when it opens) and the operator's (16 KiB, "
             "`colocation.apiserver.tls_read_buffer`). The leader-scale suite counts its agents' connections "
             "apart (its simulated agents share up to 33 per process of 500 nodes) and measures their cost on "
             "its own leader.", "",
             table(["Setting", "KiB per connection, min", "median", "max",
                    f"At {EXTRAPOLATE_NODES:,} agents (median)"], rows), "",
             f"The operator's setting saves {saved / 1024:,.1f} KiB per connection (medians), "
             f"{size(saved * EXTRAPOLATE_NODES)} at {EXTRAPOLATE_NODES:,} agents. Raw samples: "
             f"`benchmarks/plots/{RAW.name}`."]
    return "\n".join(lines)


def run_suite(config: ConnectionConfig, output: Path, command: str) -> ConnectionReport:
    say(f"connection memory: {config.connections:,} connections, {config.runs} runs per setting")
    report = asyncio.run(run(config))
    report.to_file(RAW)
    write_section(output, SUITE, render(report, machine.describe(), command))
    say(f"wrote the {SUITE} section of {output} and {RAW}")
    return report


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--serve":
    asyncio.run(_serve(Path(sys.argv[2]), "--bounded" in sys.argv[3:]))
