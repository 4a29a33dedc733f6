"""A real aiohttp server on a free loopback port, for tests of clients that must see real sockets."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serve_on_loopback(app: web.Application) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 until the block ends; yields its base URL (http://127.0.0.1:PORT)."""
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
