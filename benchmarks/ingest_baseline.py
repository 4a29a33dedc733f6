"""The ceiling for report ingest: a bare aiohttp HTTPS server doing a report's unavoidable work.

`PUT …/nodemetrics/NAME/status` does what the operator does on its fast path, without its
framework: the bearer token is looked up in a cache keyed by its SHA-256 (filled on a token's
first use from its node claim, unverified: once per token, as the operator's cache misses are),
the node in the path must be the token's (else 403), the body is parsed (orjson) and kept under
NAME, and the answer is what the operator answers: the object back, or its metadata when the
Accept header asks for PartialObjectMetadata, as the agents' does. A GET of the collection joins
the kept bytes into a list, a GET of `…/nodemetrics/NAME` answers one: the least any server must
do to serve the same reads. The same TLS as the operator (a `colocation.apimachinery.certificates`
EC P-256 certificate, client certificates of a CA asked for and optional), the same 1 MiB body
limit, no access log. Run as `python -m benchmarks.ingest_baseline --state-dir DIR`; prints
`ready: url=URL ca=PATH`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
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


def _bound_node(token: str) -> str | None:
    """The node claim of a ServiceAccount token (its signature is not checked: the ceiling)."""
    try:
        payload = token.split(".")[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims["kubernetes.io"]["node"]["name"])
    except (IndexError, KeyError, TypeError, ValueError):
        return None


class KeptReports:
    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        self.callers: dict[bytes, str | None] = {}  # SHA-256 of a bearer token -> its node
        self.versions = 0

    def _node_of(self, request: web.Request) -> str | None:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        key = hashlib.sha256(token.encode()).digest()
        if key not in self.callers:
            self.callers[key] = _bound_node(token)
        return self.callers[key]

    async def put(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if self._node_of(request) != name:
            raise web.HTTPForbidden()
        body = await request.read()
        report = orjson.loads(body)
        self.bodies[name] = body
        if "as=PartialObjectMetadata" in request.headers.get("Accept", ""):
            self.versions += 1
            return web.Response(body=orjson.dumps({
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": report["metadata"]["name"], "resourceVersion": str(self.versions),
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
    await serve_until_stopped(app, state_dir, "benchmark-ingest-baseline", client_ca=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    asyncio.run(serve(parser.parse_args().state_dir))


if __name__ == "__main__":
    main()
