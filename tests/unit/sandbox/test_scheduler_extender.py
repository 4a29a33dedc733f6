"""The kube sandbox's scheduler configuration and its relay to a Ready operator replica."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from typing import Any

from colocation_sandbox.launcher.controlplane.scheduler_extender import (
    ExtenderSettings,
    ServiceRelay,
    ready_addresses,
    scheduler_configuration,
)


def test_the_scheduler_reads_its_kubeconfig_from_the_file_and_calls_the_extender_as_documented() -> None:
    assert "extenders" not in scheduler_configuration("/k", None)
    config = scheduler_configuration("/k", ExtenderSettings(url_prefix="https://127.0.0.1:1/scheduler", ca_pem=b"CA",
                                                            client_cert_file="/c", client_key_file="/key"))
    assert config["clientConnection"]["kubeconfig"] == "/k"  # --kubeconfig is ignored with --config
    (extender,) = config["extenders"]
    assert extender["filterVerb"] == "filter" and extender["prioritizeVerb"] == "prioritize"
    assert extender["ignorable"] is True and extender["nodeCacheCapable"] is True and extender["httpTimeout"] == "1s"
    assert extender["tlsConfig"]["serverName"] == "colocation-operator.colocation-system.svc"
    assert base64.b64decode(extender["tlsConfig"]["caData"]) == b"CA"
    assert (extender["tlsConfig"]["certFile"], extender["tlsConfig"]["keyFile"]) == ("/c", "/key")


def test_only_ready_endpoints_are_dialed() -> None:
    slices = {"items": [{"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
                                       {"addresses": ["10.0.0.2"], "conditions": {"ready": False}}]},
                        {"endpoints": [{"addresses": ["10.0.0.3"], "conditions": {}}, {"addresses": ["10.0.0.1"]}]}]}
    assert ready_addresses(slices) == ["10.0.0.1", "10.0.0.3"]


async def test_the_relay_passes_bytes_to_a_ready_endpoint_and_closes_without_one() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.readline())
        await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    ready: list[str] = []

    async def slices() -> dict[str, Any]:
        return {"items": [{"endpoints": [{"addresses": ready}]}]}

    relay = ServiceRelay(slices, port=upstream.sockets[0].getsockname()[1])
    port = await relay.start()
    once = asyncio.Event()
    once.set()  # follow_endpoints reads them once and returns
    try:
        await relay.follow_endpoints(once)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(reader.read(), 5) == b""  # no Ready replica: closed at once
        writer.close()
        ready.append("127.0.0.1")
        await relay.follow_endpoints(once)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello\n")
        assert await asyncio.wait_for(reader.read(), 5) == b"echo:hello\n"
        writer.close()
    finally:
        await relay.close()
        upstream.close()
