"""The direct HTTPS transport: a watch whose server falls silent is given up, not followed forever."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from colocation.kube.transport import https_transport
from tests.unit.loopback import serve_on_loopback


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """A server whose watch sends one line, then nothing, as a frozen process would."""
    release = asyncio.Event()

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"BOOKMARK","object":{}}\n')
        await release.wait()
        return response

    app = web.Application()
    app.router.add_get("/watch", watch)
    try:
        async with serve_on_loopback(app) as base_url:
            yield base_url
    finally:
        release.set()


async def test_a_watch_silent_for_longer_than_the_stream_silence_fails_with_a_timeout(silent_server: str) -> None:
    async with aiohttp.ClientSession() as session:
        transport = https_transport(session, lambda: silent_server, ssl.create_default_context, token=lambda: "",
                                    stream_silence=0.5)
        started = time.monotonic()
        lines = []
        with pytest.raises(asyncio.TimeoutError):
            async with transport("/watch", {"watch": "true", "timeoutSeconds": "300"}, True) as response:
                async for line in response.lines():
                    lines.append(line)
        waited = time.monotonic() - started
    assert lines == [b'{"type":"BOOKMARK","object":{}}\n']
    # Given up after the silence, not after the watch's 300 s timeout plus the margin.
    assert 0.5 <= waited < 30, waited
