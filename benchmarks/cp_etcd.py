"""A real etcd on loopback, written through its v3 HTTP/JSON gateway: what an object stream costs it.

kube-apiserver keeps every object under /registry/... and every write is a put of the whole
object (etcd keeps each revision until kube-apiserver compacts, every 5 minutes). We replay the
writes of a measured window as puts of the same objects and report what etcd made of them: its
database size (`/v3/maintenance/status` dbSize) and the bytes the etcd process wrote to storage
(/proc/PID/io write_bytes: WAL and bbolt pages, after fsync batching).

etcd is Debian's etcd-server, never installed from here: without it the benchmark stops and says
which apt command to run.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from colocation_sandbox.launcher.port_claims import free_port

INSTALL_HINT = "apt-get install -y etcd-server"


class EtcdMissing(RuntimeError):
    pass


def binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise EtcdMissing(f"etcd is not installed: run `{INSTALL_HINT}` (Debian's etcd-server), or pass "
                          "--control-plane-etcd=skip to report the modeled byte counts only")
    return path


@dataclass(frozen=True)
class EtcdFigures:
    puts: int
    put_bytes: int  # keys + values sent
    db_growth: int  # dbSize after - before
    disk_writes: int  # /proc/PID/io write_bytes after - before
    seconds: float


class Etcd:
    def __init__(self, process: asyncio.subprocess.Process, url: str) -> None:
        self.process = process
        self.url = url
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16))

    async def _post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        async with self.session.post(self.url + path, data=orjson.dumps(body),
                                     timeout=aiohttp.ClientTimeout(total=30)) as response:
            payload = await response.read()
            if response.status != 200:
                raise RuntimeError(f"etcd {path}: {response.status} {payload[:300]!r}")
            result: dict[str, object] = orjson.loads(payload)
            return result

    async def db_size(self) -> int:
        return int(str((await self._post("/v3/maintenance/status", {}))["dbSize"]))

    def disk_writes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
        return 0

    async def put(self, key: str, value: bytes) -> None:
        await self._post("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                        "value": base64.b64encode(value).decode()})

    async def replay(self, writes: Iterable[tuple[str, bytes]], concurrency: int = 8) -> EtcdFigures:
        """Put every (key, value), `concurrency` at a time (as many clients write at once)."""
        loop = asyncio.get_running_loop()
        size_before, disk_before, started = await self.db_size(), self.disk_writes(), loop.time()
        iterator = iter(writes)
        puts = put_bytes = 0

        async def worker() -> None:
            nonlocal puts, put_bytes
            for key, value in iterator:
                await self.put(key, value)
                puts += 1
                put_bytes += len(key) + len(value)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = loop.time() - started
        await asyncio.sleep(0.5)  # the backend commits every 100 ms: let the last batch reach the disk
        return EtcdFigures(puts, put_bytes, await self.db_size() - size_before, self.disk_writes() - disk_before,
                           seconds)

    async def stop(self) -> None:
        await self.session.close()
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


async def start(data_dir: Path, log_path: Path) -> Etcd:
    """A single-member etcd on loopback ports, with its data in `data_dir` (must not exist yet)."""
    client_port, peer_port = free_port(), free_port()
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            binary(), "--name", "bench", "--data-dir", str(data_dir), "--listen-client-urls", client,
            "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"bench={peer}", "--log-outputs", "stderr",
            stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log)
    etcd = Etcd(process, client)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        try:
            async with etcd.session.get(client + "/health", timeout=aiohttp.ClientTimeout(total=2)) as response:
                if response.status == 200 and orjson.loads(await response.read()).get("health") == "true":
                    return etcd
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass
        if process.returncode is not None or loop.time() > deadline:
            await etcd.stop()
            raise RuntimeError(f"etcd did not become healthy; see {log_path}")
        await asyncio.sleep(0.2)  # polling its health endpoint while it starts
