"""HTTP transports for the informer: kube-apiserver through kubernetes-asyncio, or direct HTTPS."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp

from colocation.kube.informer import Transport

CONNECT_TIMEOUT = 5.0
LIST_TIMEOUT = 30.0
# A watch carries no overall deadline; silence longer than the server's own watch timeout plus
# this margin means the connection is dead (bookmarks and events both count as traffic).
STREAM_SILENCE_MARGIN = 60.0


class _Adapter:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def read(self) -> bytes:
        return await self._response.read()

    async def lines(self) -> AsyncIterator[bytes]:
        async for line in self._response.content:
            yield line


def _timeout(stream: bool, params: dict[str, str], stream_silence: float | None = None) -> aiohttp.ClientTimeout:
    if not stream:
        return aiohttp.ClientTimeout(total=LIST_TIMEOUT, sock_connect=CONNECT_TIMEOUT)
    silence = stream_silence or float(params.get("timeoutSeconds", "300")) + STREAM_SILENCE_MARGIN
    return aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, sock_read=silence)


def kube_transport(api_client: Any) -> Transport:
    """GETs through a kubernetes-asyncio ApiClient (its authentication, TLS and token refresh)."""

    @contextlib.asynccontextmanager
    async def open_(path: str, params: dict[str, str], stream: bool) -> AsyncIterator[_Adapter]:
        response = await api_client.call_api(
            path, "GET", query_params=list(params.items()), header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=_timeout(stream, params))
        try:
            yield _Adapter(response)
        finally:
            response.release()

    return open_


def https_transport(session: aiohttp.ClientSession, base_url: Callable[[], str],
                    ssl_context: Callable[[], ssl.SSLContext], *, token: Callable[[], str],
                    stream_silence: float | None = None, headers: Mapping[str, str] | None = None) -> Transport:
    """GETs straight to an HTTPS server (the leader), with a bearer token; all three may change.
    An empty token sends none (the TLS context then carries a client certificate). `headers` go
    with every request.

    `stream_silence`: seconds without a byte after which a watch is dead, for a server known to
    send bookmarks at least that often (default: its watch timeout plus a margin)."""

    @contextlib.asynccontextmanager
    async def open_(path: str, params: dict[str, str], stream: bool) -> AsyncIterator[_Adapter]:
        sent = {**(headers or {}), "Accept": "application/json"}
        if bearer := token():
            sent["Authorization"] = f"Bearer {bearer}"
        async with session.get(base_url() + path, params=params, headers=sent, ssl=ssl_context(),
                               timeout=_timeout(stream, params, stream_silence)) as response:
            yield _Adapter(response)

    return open_
