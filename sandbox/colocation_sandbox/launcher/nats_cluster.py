"""A NATS JetStream cluster as processes on loopback, for `--store nats` runs and the tests.

nats-server is built once by hack/nats/build.sh and cached outside the tree ($COLOCATION_NATS_SERVER
names another binary). Each server has its own client, route and monitoring port and its own
`store_dir`; the cluster is ready once its JetStream meta group has a leader.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from colocation_sandbox.launcher.child_processes import start_logged, terminate
from colocation_sandbox.launcher.controlplane.binaries import run_build_script, source_root
from colocation_sandbox.launcher.port_claims import free_port

BUILD_SCRIPT = Path("hack") / "nats" / "build.sh"
BIN_ENV = "COLOCATION_NATS_SERVER"
BUILD_TIMEOUT_SECONDS = 1800
START_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 10.0


class NatsServerMissing(RuntimeError):
    """nats-server is not built and cannot be; the message is one line, fit for a CLI."""


def locate_nats_server(*, build: bool = True) -> str:
    """The nats-server binary: $COLOCATION_NATS_SERVER, else hack/nats/build.sh's (built if needed
    and `build`, with its progress on stderr)."""
    given = os.environ.get(BIN_ENV)
    if given:
        if not os.access(given, os.X_OK):
            raise NatsServerMissing(f"{BIN_ENV}={given} is not an executable")
        return given
    root = source_root(BUILD_SCRIPT)
    if root is None:
        raise NatsServerMissing(f"no source checkout with {BUILD_SCRIPT}: set {BIN_ENV} to a nats-server binary")
    if build and shutil.which("go") is None:
        raise NatsServerMissing("nats-server is built from its Go module and go is not on the PATH (Go 1.26 is needed)")
    return run_build_script(root / BUILD_SCRIPT, build=build, timeout=BUILD_TIMEOUT_SECONDS, missing=NatsServerMissing)


@dataclass(kw_only=True)
class NatsServer:
    name: str
    client_port: int
    route_port: int
    monitor_port: int
    store_dir: Path
    config: Path
    log: Path
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"


@dataclass(kw_only=True)
class NatsCluster:
    """The servers of one cluster; start or stop any of them."""

    binary: str
    servers: list[NatsServer]

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    async def start_server(self, server: NatsServer) -> None:
        server.process = await start_logged([self.binary, "--config", str(server.config)], server.log, {})

    async def stop_server(self, server: NatsServer) -> None:
        if server.process is not None:
            await terminate([server.process], STOP_GRACE_SECONDS)
            server.process = None

    async def stop(self) -> None:
        await asyncio.gather(*(self.stop_server(server) for server in self.servers))

    async def wait_ready(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Until every running server's JetStream is up and the meta group has a leader."""
        deadline = time.monotonic() + timeout
        running = [s for s in self.servers if s.process is not None]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as session:
            while True:
                if all([await _meta_leader(session, server) for server in running]):
                    return
                for server in running:
                    if server.process is not None and server.process.returncode is not None:
                        raise RuntimeError(f"nats-server {server.name} exited ({server.process.returncode}); "
                                           f"see {server.log}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the NATS cluster was not ready within {timeout:.0f} s; see {running[0].log}")
                await asyncio.sleep(0.1)


async def _meta_leader(session: aiohttp.ClientSession, server: NatsServer) -> bool:
    try:
        async with session.get(f"http://127.0.0.1:{server.monitor_port}/jsz") as response:
            jsz = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False
    return bool((jsz.get("meta_cluster") or {}).get("leader"))


def _config(server: NatsServer, routes: list[int], cluster_name: str) -> str:
    route_urls = ", ".join(f"nats-route://127.0.0.1:{port}" for port in routes)
    return (f'server_name: {server.name}\n'
            f'listen: 127.0.0.1:{server.client_port}\n'
            f'http: 127.0.0.1:{server.monitor_port}\n'
            f'jetstream {{ store_dir: "{server.store_dir}", max_memory_store: 256MB, max_file_store: 2GB }}\n'
            f'cluster {{ name: {cluster_name}, listen: 127.0.0.1:{server.route_port}, routes: [{route_urls}] }}\n')


def lay_out(state_dir: Path, *, size: int, cluster_name: str) -> list[NatsServer]:
    """Ports, directories and configuration files of `size` servers under `state_dir`."""
    servers = []
    for index in range(1, size + 1):
        name = f"nats-{index}"
        servers.append(NatsServer(name=name, client_port=free_port(), route_port=free_port(),
                                  monitor_port=free_port(), store_dir=state_dir / name / "jetstream",
                                  config=state_dir / name / "nats-server.conf", log=state_dir / f"{name}.log"))
    for server in servers:
        server.store_dir.mkdir(parents=True, exist_ok=True)
        routes = [other.route_port for other in servers if other is not server]
        server.config.write_text(_config(server, routes, cluster_name))
    return servers


async def start_cluster(state_dir: Path, *, size: int = 3, binary: str | None = None,
                        cluster_name: str = "colocation") -> NatsCluster:
    """Start `size` servers (3: the smallest cluster that keeps a quorum with one down) under
    `state_dir`, and wait until the cluster is ready."""
    cluster = NatsCluster(binary=binary or locate_nats_server(),
                          servers=lay_out(state_dir, size=size, cluster_name=cluster_name))
    try:
        for server in cluster.servers:
            await cluster.start_server(server)
        await cluster.wait_ready()
    except BaseException:
        await cluster.stop()
        raise
    return cluster
