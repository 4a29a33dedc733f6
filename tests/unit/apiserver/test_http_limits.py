"""Requests aiohttp's HTTP parser refuses before any handler runs are still answered with a Status.

Regression test of issue 17: a URL or a header over 8,190 bytes got a text/plain 400. Against a
real server on loopback, since the parser sits below the application.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer
from colocation.apiserver.generic_apiserver import AggregatedApiServer, ApiRunner
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import COLLECTION_PATH
from tests.unit.apiserver.test_nodemetric_reads import NOW, Leader, allowed, review


@pytest.fixture
async def port() -> AsyncIterator[int]:
    authorizer, metrics, leader = DelegatingAuthorizer(allowed), ServerMetrics(), Leader()
    group = NodeMetricGroup(NodeMetricStore(clock_wall=lambda: NOW, clock_monotonic=lambda: 100.0), authorizer, leader,
                            known_node=lambda node: True, node_labels=lambda node: {}, metrics=metrics,
                            wall=lambda: NOW)
    api = AggregatedApiServer(DelegatingAuthenticator(review), authorizer, lambda: None, leadership=leader,
                              metrics=metrics, groups=[group])
    runner = ApiRunner(api.application(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert runner.addresses
    yield runner.addresses[0][1]
    await runner.cleanup()


async def exchange(port: int, head: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send a request head as given; the status, headers and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)  # the server closes after the answer
    finally:
        writer.close()
    head_part, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head_part.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def request(target: str, *extra_headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", "Host: localhost", "Authorization: Bearer token", "Connection: close",
             *extra_headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("head", [
    request(f"{COLLECTION_PATH}?labelSelector=a%20in%20({'x,' * 4600}y)"),
    request(COLLECTION_PATH, f"X-Padding: {'p' * 9000}"),
    request(COLLECTION_PATH, f"X-{'n' * 9000}: v"),
    request(COLLECTION_PATH, *(f"X-Many-{index}: v" for index in range(200))),
], ids=["url", "header-value", "header-name", "header-count"])
async def test_a_request_over_the_parsers_limits_gets_a_431_status(port: int, head: bytes) -> None:
    code, headers, body = await exchange(port, head)
    assert (code, headers["content-type"]) == (431, "application/json")
    status = orjson.loads(body)
    assert (status["kind"], status["apiVersion"], status["status"], status["code"]) == ("Status", "v1", "Failure", 431)
    assert status["reason"] == "RequestHeaderFieldsTooLarge"
    assert "8190 bytes" in status["message"] and "xxxx" not in status["message"] and "pppp" not in status["message"]


async def test_malformed_http_gets_a_400_status(port: int) -> None:
    code, headers, body = await exchange(port, b"GET / HTTP/1.1\r\nHost: localhost\r\nBad Header: v\r\n\r\n")
    status = orjson.loads(body)
    assert (code, headers["content-type"], status["kind"], status["reason"]) == (
        400, "application/json", "Status", "BadRequest")


async def test_requests_within_the_limits_are_served(port: int) -> None:
    code, _, body = await exchange(port, request(COLLECTION_PATH, f"X-Padding: {'p' * 8000}"))
    assert (code, orjson.loads(body)["kind"]) == (200, "NodeMetricList")
