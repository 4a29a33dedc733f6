"""A NATS JetStream cluster as processes on loopback, for `--store nats` runs and the tests.

nats-server is built once by hack/nats/build.sh and cached outside the tree ($COLOCATION_NATS_SERVER
names another binary). Each server has its own client, route and monitoring port and its own
`store_dir`; the cluster is ready once its JetStream meta group has a leader.

`secure` (what `colocation sandbox --store nats` runs): TLS on the client and route listeners
with a CA made at start (routes are mutual TLS: a peer needs a certificate of that CA, so no route
user is needed), and one user for the operator replicas, its password in a file of mode 0600;
every file under the cluster's directory (`NatsSecurity`). Without it (the jetstream unit tests
and benchmarks), plain text and no users. The monitoring port is plain HTTP on loopback.
`cluster.json` there lists the servers (their pids, ports and configuration), for tests that
kill and restart them (`load_cluster`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from colocation.apimachinery import certificates
from colocation_sandbox.launcher.child_processes import start_logged, terminate, write_state
from colocation_sandbox.launcher.controlplane.binaries import locate_built
from colocation_sandbox.launcher.port_claims import free_port

BUILD_SCRIPT = Path("hack") / "nats" / "build.sh"
BIN_ENV = "COLOCATION_NATS_SERVER"
BUILD_TIMEOUT_SECONDS = 1800
START_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 10.0
OPERATOR_USER = "colocation-operator"
TLS_TIMEOUT_SECONDS = 2  # nats-server's TLS handshake timeout (its default, 0.5 s, fails on a loaded machine)
STATE_FILE = "cluster.json"
# What JetStream may reserve, per server, for the streams of either storage (limits, not
# allocations): the operators' streams with `--nats-storage memory` reserve as much as with file
# storage (the custom metric samples' stream alone 1 GiB, sample_log.MAX_BYTES).
MAX_STORE = "2GB"


class NatsServerMissing(RuntimeError):
    """nats-server is not built and cannot be; the message is one line, fit for a CLI."""


def locate_nats_server(*, build: bool = True) -> str:
    """The nats-server binary: $COLOCATION_NATS_SERVER, else hack/nats/build.sh's (built if needed
    and `build`, with its progress on stderr)."""
    return locate_built(BUILD_SCRIPT, what="nats-server", build=build, timeout=BUILD_TIMEOUT_SECONDS,
                        missing=NatsServerMissing, env=BIN_ENV)


@dataclass(frozen=True, kw_only=True)
class NatsSecurity:
    """The files of a secure cluster: its CA, the servers' certificate (serving clients and routes,
    and the client half of a route), and the operator's user."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    user: str
    password_file: Path

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()


def make_security(directory: Path, *, hosts: tuple[str, ...]) -> NatsSecurity:
    """A CA, a certificate for `hosts` and localhost signed by it, and a password for OPERATOR_USER,
    written to `directory` (keys and the password readable by the owner only)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = certificates.new_ca("colocation-nats-ca")
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)  # its key is not needed again: nothing else is signed
    server = certificates.issue_certificate(ca, "nats-server", dns_names=("localhost",), ip_addresses=hosts,
                                            server=True, client=True)
    cert_file, key_file = server.write(directory, "server")
    password_file = directory / "operator.password"
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as stream:
        stream.write(secrets.token_urlsafe(32) + "\n")
    os.chmod(password_file, 0o600)
    return NatsSecurity(ca_file=ca_file, cert_file=cert_file, key_file=key_file, user=OPERATOR_USER,
                        password_file=password_file)


@dataclass(kw_only=True)
class NatsServer:
    name: str
    client_host: str
    client_port: int
    route_port: int
    monitor_port: int
    store_dir: Path
    config: Path
    log: Path
    tls: bool = False
    pid: int = 0  # of the process serving it, whoever started it; 0 while none is known to
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)  # when started here

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{self.client_host}:{self.client_port}"


@dataclass(kw_only=True)
class NatsCluster:
    """The servers of one cluster; start, stop or kill any of them."""

    binary: str
    servers: list[NatsServer]
    security: NatsSecurity | None = None

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def operator_args(self) -> tuple[str, ...]:
        """The flags that make `colocation operator` keep NodeMetrics in this cluster."""
        args = ["--store=nats", *(f"--nats-server={url}" for url in self.urls)]
        if self.security is not None:
            args += [f"--nats-ca-file={self.security.ca_file}", f"--nats-user={self.security.user}",
                     f"--nats-password-file={self.security.password_file}"]
        return tuple(args)

    async def start_server(self, server: NatsServer) -> None:
        server.process = await start_logged([self.binary, "--config", str(server.config)], server.log, {})
        server.pid = server.process.pid

    async def stop_server(self, server: NatsServer) -> None:
        if server.process is not None:
            await terminate([server.process], STOP_GRACE_SECONDS)
            server.process = None
            server.pid = 0

    async def kill_server(self, server: NatsServer, timeout: float = STOP_GRACE_SECONDS) -> None:
        """SIGKILL the server's process, whoever started it (a test's crash), and wait until it is
        gone, its ports with it."""
        if server.process is not None:
            server.process.kill()
            await server.process.wait()
            server.process = None
        elif server.pid:
            os.kill(server.pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
            while not _exited(server.pid):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nats-server {server.name} (pid {server.pid}) outlived SIGKILL")
                await asyncio.sleep(0.02)  # polling /proc: the process is another's child
        server.pid = 0

    def write_state(self, path: Path) -> None:
        write_state(path, [{"name": s.name, "pid": s.pid, "url": s.url, "clientHost": s.client_host,
                            "clientPort": s.client_port, "routePort": s.route_port, "monitorPort": s.monitor_port,
                            "storeDir": str(s.store_dir), "config": str(s.config), "log": str(s.log),
                            "binary": self.binary} for s in self.servers])

    async def stop(self) -> None:
        await asyncio.gather(*(self.stop_server(server) for server in self.servers))

    async def wait_ready(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Until every running server's JetStream is up and the meta group has a leader."""
        deadline = time.monotonic() + timeout
        running = [s for s in self.servers if s.pid]
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


def _exited(pid: int) -> bool:
    """Whether process `pid` has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def _tls_block(security: NatsSecurity) -> str:
    return (f'tls {{ cert_file: "{security.cert_file}", key_file: "{security.key_file}", '
            f'ca_file: "{security.ca_file}", timeout: {TLS_TIMEOUT_SECONDS} }}')


def _config(server: NatsServer, routes: list[int], *, cluster_name: str, security: NatsSecurity | None) -> str:
    route_urls = ", ".join(f"nats-route://127.0.0.1:{port}" for port in routes)
    client_security = route_tls = ""
    if security is not None:
        client_security = (f'{_tls_block(security)}\n'
                           f'authorization {{ users: [ {{ user: "{security.user}", '
                           f'password: "{security.password}" }} ] }}\n')
        route_tls = f", {_tls_block(security)}"  # routes verify each other's certificates (mutual TLS)
    return (f'server_name: {server.name}\n'
            f'listen: {server.client_host}:{server.client_port}\n'
            f'http: 127.0.0.1:{server.monitor_port}\n'
            f'{client_security}'
            f'jetstream {{ store_dir: "{server.store_dir}", '
            f'max_memory_store: {MAX_STORE}, max_file_store: {MAX_STORE} }}\n'
            f'cluster {{ name: {cluster_name}, listen: 127.0.0.1:{server.route_port}, '
            f'routes: [{route_urls}]{route_tls} }}\n')


def lay_out(state_dir: Path, *, size: int, cluster_name: str, client_host: str = "127.0.0.1",
            security: NatsSecurity | None = None) -> list[NatsServer]:
    """Ports, directories and configuration files of `size` servers under `state_dir`; the clients'
    listener on `client_host` (routes and monitoring on loopback)."""
    servers = []
    for index in range(1, size + 1):
        name = f"nats-{index}"
        servers.append(NatsServer(name=name, client_host=client_host, client_port=free_port(client_host),
                                  route_port=free_port(), monitor_port=free_port(),
                                  store_dir=state_dir / name / "jetstream", tls=security is not None,
                                  config=state_dir / name / "nats-server.conf", log=state_dir / f"{name}.log"))
    for server in servers:
        server.store_dir.mkdir(parents=True, exist_ok=True)
        routes = [other.route_port for other in servers if other is not server]
        fd = os.open(server.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the password
        with os.fdopen(fd, "w") as stream:
            stream.write(_config(server, routes, cluster_name=cluster_name, security=security))
    return servers


async def start_cluster(state_dir: Path, *, size: int = 3, binary: str | None = None,
                        cluster_name: str = "colocation", client_host: str = "127.0.0.1",
                        secure: bool = False) -> NatsCluster:
    """Start `size` servers (3: the smallest cluster that keeps a quorum with one down) under
    `state_dir`, clients served on `client_host`, with TLS and the operator's user if `secure`;
    wait until the cluster is ready, and list it in STATE_FILE there."""
    binary = binary or locate_nats_server()
    security = make_security(state_dir / "pki", hosts=tuple(dict.fromkeys(("127.0.0.1", client_host)))) \
        if secure else None
    cluster = NatsCluster(binary=binary, security=security,
                          servers=lay_out(state_dir, size=size, cluster_name=cluster_name, client_host=client_host,
                                          security=security))
    try:
        for server in cluster.servers:
            await cluster.start_server(server)
        await cluster.wait_ready()
    except BaseException:
        await cluster.stop()
        raise
    cluster.write_state(state_dir / STATE_FILE)
    return cluster


def load_cluster(state_dir: Path) -> NatsCluster:
    """The cluster `start_cluster` started under `state_dir`, as its STATE_FILE lists it (for a test
    that kills and restarts servers another process started; `security` is left out)."""
    listed = orjson.loads((state_dir / STATE_FILE).read_bytes())
    servers = [NatsServer(name=entry["name"], client_host=entry["clientHost"], client_port=entry["clientPort"],
                          route_port=entry["routePort"], monitor_port=entry["monitorPort"],
                          store_dir=Path(entry["storeDir"]), config=Path(entry["config"]), log=Path(entry["log"]),
                          tls=entry["url"].startswith("tls://"), pid=entry["pid"]) for entry in listed]
    return NatsCluster(binary=listed[0]["binary"], servers=servers)
