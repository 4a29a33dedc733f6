"""How an agent reaches kube-apiserver: one small interface, two ways to back it.

Straight over aiohttp, or through a kubernetes-asyncio ApiClient; colocation.agent.api_connection
chooses. Simulated agents have a token each but share aiohttp sessions; their informers may use
a session of their own (`watch_session`). Bodies are plain JSON, as the API server writes them;
every request carries a timeout its caller chose.

Why: docs/agent.md#reaching-kube-apiserver
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
import orjson

from colocation.kube.informer import Transport
from colocation.kube.transport import https_transport, kube_transport


class KubeApi(Protocol):
    def transport(self) -> Transport: ...

    def bearer_token(self) -> str: ...

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        """(HTTP status, decoded JSON body or text or None) for every status; raises on transport errors."""
        ...


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")


def _encode(body: Any) -> bytes | None:
    if body is None or isinstance(body, bytes):
        return body
    return orjson.dumps(body)


class ApiClientKube:
    """KubeApi over a kubernetes-asyncio ApiClient (the real agent, for a kubeconfig it does not read itself)."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def transport(self) -> Transport:
        return kube_transport(self.api)

    def bearer_token(self) -> str:
        configuration = self.api.configuration
        keys = configuration.api_key or {}
        key = keys.get("authorization") or keys.get("BearerToken")
        if not key:
            return ""
        prefix = (configuration.api_key_prefix or {}).get("authorization", "")
        text = f"{prefix} {key}".strip() if prefix else str(key)
        return text.removeprefix("Bearer ").strip()

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        if timeout <= 0:
            raise TimeoutError("no time left for the request")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
            # kubernetes-asyncio serializes JSON bodies itself; it takes objects, not bytes.
            body = orjson.loads(body) if isinstance(body, bytes) else body
        async with asyncio.timeout(timeout):
            response = await self.api.call_api(
                path, method, query_params=list((params or {}).items()), header_params=headers, body=body,
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)
            try:
                raw = await response.read()
            finally:
                response.release()
        return int(response.status), _decode(raw)


class SessionKube:
    """KubeApi over an aiohttp session with a token of its own (simulated agents; the real one, directly)."""

    def __init__(self, session: aiohttp.ClientSession, server: str, ssl_context: ssl.SSLContext,
                 *, token: Callable[[], str], watch_session: aiohttp.ClientSession | None = None) -> None:
        self.session = session
        self.watch_session = watch_session or session
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context
        self._token = token

    def transport(self) -> Transport:
        return https_transport(self.watch_session, lambda: self.server, lambda: self.ssl_context, token=self._token)

    def bearer_token(self) -> str:
        return self._token()

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        if timeout <= 0:
            raise TimeoutError("no time left for the request")
        headers = {"Accept": "application/json", "Authorization": f"Bearer {self._token()}"}
        data = _encode(body)
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.session.request(method, self.server + path, params=params, data=data, headers=headers,
                                        ssl=self.ssl_context,
                                        timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            return response.status, _decode(await response.read())
