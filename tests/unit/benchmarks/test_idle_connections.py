"""Counting the connections a process serves, and what idle ones cost it."""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

from aiohttp import web

from benchmarks import processes
from benchmarks.client import Client
from benchmarks.leader_scale_probes import ProbeNodes
from tests.timing import eventually_async


async def test_a_process_serves_the_connections_it_accepted_not_those_it_opened() -> None:
    server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    before = processes.served_connections(os.getpid())
    opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
    try:
        # Both ends are this process: the five it accepted count, the five it opened do not.
        assert processes.served_connections(os.getpid()) - before == 5
    finally:
        for _, writer in opened:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_idle_connections_to_the_leader_are_opened_counted_and_closed() -> None:
    app = web.Application()

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    probes = ProbeNodes(cast(Client, None), 0, 10.0)  # no admin calls: the leader's endpoint is given

    async def leader() -> tuple[str, Any]:
        return f"http://127.0.0.1:{port}", None

    probes.target.get = leader  # type: ignore[method-assign]
    grown = iter(range(0, 10**9, 1000))  # the "RSS" grows by 1,000 bytes at each read
    try:
        served = processes.served_connections(os.getpid())
        opened, per_connection = await probes.idle_connections_cost(
            20, lambda: next(grown), lambda: processes.served_connections(os.getpid()), timeout=10.0)
        assert opened == 20 and per_connection == 1000 / 20
        # Closed when it returns: the server sees every one go.
        await eventually_async(lambda: _served_now(served), 10.0, interval=0.05, message="the idle connections closed")
    finally:
        await probes.close()
        await runner.cleanup()


async def _served_now(count: int) -> bool:
    return processes.served_connections(os.getpid()) == count
