"""A small client of the real kube-apiserver for the launcher: client-certificate TLS, a timeout on
every call, retries with backoff and jitter on what a starting cluster answers transiently."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from colocation.kube.backoff import Backoff
from colocation.kube.informer import Transport
from colocation.kube.transport import https_transport

CALL_TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=5)
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
ATTEMPTS = 6


class ApiCallFailed(RuntimeError):
    def __init__(self, method: str, path: str, status: int, *, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.body = body


class RestClient:
    def __init__(self, server: str, ca_file: str, client_cert: tuple[str, str], *, pool: int = 32) -> None:
        self.server = server.rstrip("/")
        self.ssl = ssl.create_default_context(cafile=ca_file)
        self.ssl.load_cert_chain(*client_cert)
        self._session = aiohttp.ClientSession(timeout=CALL_TIMEOUT,
                                              connector=aiohttp.TCPConnector(limit=pool))

    async def close(self) -> None:
        await self._session.close()

    def transport(self) -> Transport:
        """For `colocation.kube.informer.Informer`: list and watch with these credentials."""
        return https_transport(self._session, lambda: self.server, lambda: self.ssl, token=lambda: "")

    async def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None,
                      content_type: str = "application/json") -> tuple[int, Any]:
        """One call, retried (with backoff) only on connection errors and 429/5xx: (status, body)."""
        data = None if body is None else orjson.dumps(body)
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        backoff = Backoff(initial=0.2, maximum=5.0, jitter=0.5)
        for attempt in range(ATTEMPTS):
            try:
                async with self._session.request(method, self.server + path, data=data, params=params,
                                                 headers=headers, ssl=self.ssl) as response:
                    raw = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                if attempt == ATTEMPTS - 1:
                    raise
                await asyncio.sleep(backoff.next_delay())  # backoff before the retry
                continue
            parsed = orjson.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode(errors="replace")
            if status in RETRIED_STATUSES and attempt < ATTEMPTS - 1:
                await asyncio.sleep(backoff.next_delay())  # backoff before the retry
                continue
            return status, parsed
        raise AssertionError("unreachable")

    async def must(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201),
                   params: dict[str, str] | None = None, content_type: str = "application/json") -> Any:
        """A call that must answer one of `ok`: its body."""
        status, answer = await self.request(method, path, body, params=params, content_type=content_type)
        if status not in ok:
            raise ApiCallFailed(method, path, status, body=answer)
        return answer


def client_for(server: str, pki_dir: Path, stem: str) -> RestClient:
    return RestClient(server, str(pki_dir / "ca.crt"), (str(pki_dir / f"{stem}.crt"), str(pki_dir / f"{stem}.key")))
