"""The ceiling for report ingest: a bare aiohttp HTTPS server that reads each report and keeps it.

`PUT …/nodemetrics/NAME/status` reads the body, keeps the bytes under NAME (no parsing, no
authentication) and answers 200 with them, or, when the Accept header asks for
PartialObjectMetadata as the agents' does, with metadata of the size the operator answers with
(name, resourceVersion, creationTimestamp, labels). A GET of
the collection joins the kept bytes into a list, a GET of `…/nodemetrics/NAME` answers one: the
least any server must do to serve the same reads. Same TLS setup as the operator (a
`colocation.apimachinery.certificates` EC P-256 certificate), same 1 MiB body limit, no access log. Run as
`python -m benchmarks.ingest_baseline --state-dir DIR`; prints `ready: url=URL ca=PATH`.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import orjson
from aiohttp import web

from benchmarks.baseline_server import serve_until_stopped
from colocation.apiserver.generic_apiserver import MAX_REPORT_BYTES

HOST = "127.0.0.1"
COLLECTION = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
# What a kubelet-shaped Node's labels weigh in the operator's answer (the ingest suite's Nodes).
_NODE_LABELS = {"kubernetes.io/hostname": "node-00000", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "colocation.dev/simulated": "true"}


class KeptReports:
    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        self.versions = 0

    async def put(self, request: web.Request) -> web.Response:
        body = await request.read()
        name = request.match_info["name"]
        self.bodies[name] = body
        if "as=PartialObjectMetadata" in request.headers.get("Accept", ""):
            self.versions += 1
            return web.Response(body=orjson.dumps({
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": name, "resourceVersion": str(self.versions),
                             "creationTimestamp": "2026-11-22T10:00:00Z", "labels": _NODE_LABELS}}),
                content_type="application/json")
        return web.Response(body=body, content_type="application/json")

    async def list(self, request: web.Request) -> web.Response:
        return web.Response(body=b"".join((b'{"items":[', b",".join(self.bodies.values()), b"]}")),
                            content_type="application/json")

    async def get(self, request: web.Request) -> web.Response:
        body = self.bodies.get(request.match_info["name"])
        if body is None:
            raise web.HTTPNotFound()
        return web.Response(body=body, content_type="application/json")


async def serve(state_dir: Path) -> None:
    kept = KeptReports()
    app = web.Application(client_max_size=MAX_REPORT_BYTES)
    app.router.add_put(COLLECTION + "/{name}/status", kept.put)
    app.router.add_get(COLLECTION, kept.list)
    app.router.add_get(COLLECTION + "/{name}", kept.get)
    await serve_until_stopped(app, state_dir, "benchmark-ingest-baseline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    asyncio.run(serve(parser.parse_args().state_dir))


if __name__ == "__main__":
    main()
