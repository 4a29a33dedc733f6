"""The floor: a bare aiohttp HTTPS server that does the least any API server must do.

It accepts a POST of any object, parses it with orjson, keeps it in a dict and answers 201 with
the object; a GET of a collection answers every stored object of that resource. Same TLS setup
as the sandbox (apimachinery.certificates, EC P-256, loopback), same body limit, no access log. Run as
`python -m benchmarks.baseline_server --state-dir DIR`; prints `ready: url=URL ca=PATH`.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from colocation.apimachinery import certificates
from colocation.apimachinery.stop_signals import on_stop_signals
from colocation_sandbox.server.request_bodies import MAX_BODY_BYTES

HOST = "127.0.0.1"


class BareStore:
    """Objects by resource (the last path segment) and (namespace, name)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[tuple[str, str], Any]] = {}

    async def create(self, request: web.Request) -> web.Response:
        obj = orjson.loads(await request.read())
        meta = obj.get("metadata") or {}
        resource = request.path.rstrip("/").rsplit("/", 1)[-1]
        self.objects.setdefault(resource, {})[(meta.get("namespace", ""), meta.get("name", ""))] = obj
        return web.Response(body=orjson.dumps(obj), status=201, content_type="application/json")

    async def list(self, request: web.Request) -> web.Response:
        resource = request.path.rstrip("/").rsplit("/", 1)[-1]
        items = list(self.objects.get(resource, {}).values())
        return web.Response(body=orjson.dumps({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}),
                            content_type="application/json")


def _certificates(state_dir: Path, name: str) -> tuple[certificates.CertKey, Path]:
    """A serving certificate, and the path of its CA for the client (as the sandbox's kubeconfig)."""
    ca = certificates.new_ca(f"{name}-ca")
    serving = certificates.issue_certificate(ca, name, dns_names=("localhost",), ip_addresses=(HOST,))
    state_dir.mkdir(parents=True, exist_ok=True)
    ca_path = state_dir / f"{name.removeprefix('benchmark-')}-ca.crt"
    ca_path.write_bytes(ca.cert_pem)
    return serving, ca_path


async def serve_until_stopped(app: web.Application, state_dir: Path, name: str, *, client_ca: bool = False) -> None:
    """Serve `app` over HTTPS on a free loopback port, print `ready: url=URL ca=PATH`, stop on SIGINT/SIGTERM.
    With `client_ca`, client certificates of a CA of its own are asked for, optional, as the
    operator asks for the front-proxy's."""
    serving, ca_path = _certificates(state_dir, name)
    client_ca_pem = certificates.new_ca(f"{name}-client-ca").cert_pem if client_ca else None
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    await web.SockSite(runner, sock, ssl_context=certificates.ssl_server_context(serving, client_ca_pem)).start()
    print(f"ready: url=https://{HOST}:{sock.getsockname()[1]} ca={ca_path}", flush=True)
    stop = asyncio.Event()
    with on_stop_signals(stop.set):
        try:
            await stop.wait()
        finally:
            await runner.cleanup()


async def serve(state_dir: Path) -> None:
    store = BareStore()
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/{tail:.*}", store.create)
    app.router.add_get("/{tail:.*}", store.list)
    await serve_until_stopped(app, state_dir, "benchmark-baseline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    asyncio.run(serve(parser.parse_args().state_dir))


if __name__ == "__main__":
    main()
