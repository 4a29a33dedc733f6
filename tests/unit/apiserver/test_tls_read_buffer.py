"""TLS connections served after `bound_tls_read_buffers` read through a 16 KiB buffer, and a body
many times that size still arrives whole."""

from __future__ import annotations

import asyncio.sslproto
import hashlib
import os
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from colocation.apimachinery import certificates
from colocation.apiserver.tls_read_buffer import TLS_READ_BUFFER, bound_tls_read_buffers


@pytest.fixture
def bounded() -> Iterator[None]:
    default = asyncio.sslproto.SSLProtocol.max_size
    assert bound_tls_read_buffers()
    yield
    asyncio.sslproto.SSLProtocol.max_size = default


async def test_a_large_body_arrives_whole_through_the_small_buffer(bounded: None) -> None:
    buffers: list[int] = []

    async def digest(request: web.Request) -> web.Response:
        protocol = getattr(request.transport, "_ssl_protocol", None)
        if protocol is not None:
            buffers.append(len(protocol._ssl_buffer))
        return web.Response(text=hashlib.sha256(await request.read()).hexdigest())

    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.router.add_put("/digest", digest)
    ca = certificates.new_ca("test-ca")
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=certificates.ssl_server_context(
        certificates.issue_certificate(ca, "server", ip_addresses=("127.0.0.1",))))
    body = os.urandom(40 * TLS_READ_BUFFER + 123)
    try:
        async with aiohttp.ClientSession() as session, session.put(
                f"https://127.0.0.1:{server.port}/digest", data=body,
                ssl=certificates.ssl_client_context(ca.cert_pem)) as response:
            assert response.status == 200
            assert await response.text() == hashlib.sha256(body).hexdigest()
    finally:
        await server.close()
    assert buffers == [TLS_READ_BUFFER]  # the server's read buffer for that connection
