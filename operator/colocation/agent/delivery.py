"""How an agent's PUTs reach the leader: NodeMetric reports and custom metric sample batches alike.

Delivery goes straight to the leader (endpoint and CA from the leader Lease), else through
kube-apiserver's aggregation layer, which routes to whichever replica is ready (the leader):
- a 503 from a standby means the Lease moved on: read it again and retry the new leader;
- a leader that cannot be reached (refused, timed out) or that cannot authenticate us (a
  kubeconfig with a client certificate has no token to show it) → kube-apiserver;
- any other refusal is final for this request.
Retrying a failed request later (with backoff and jitter) is the caller's business: each caller
knows what to send again — the latest report, or the samples still held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from colocation.agent.kubeapi import KubeApi
from colocation.agent.leader_locator import Leader, LeaderLocator
from colocation.apimachinery.event_wait import wait_set
from colocation.apimachinery.tables import metadata_only_accept

# PUT `path` with `body` to the leader within `timeout`: (status, decoded body).
DirectPut = Callable[[Leader, str, bytes, float], Awaitable[tuple[int, Any]]]
# Counts one failed attempt by reason (each caller has its own metric).
FailureCounter = Callable[[str], None]


# A report is answered with its metadata only (as kube-apiserver shapes a write's answer for this
# Accept): nobody reads the object back, and it would be as many bytes again to encrypt. The other
# writes (samples, eviction requests) are answered as before: their answers say what was done.
_ACCEPT = metadata_only_accept()


class DeliveryFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def session_put(session: aiohttp.ClientSession, token: Callable[[], str]) -> DirectPut:
    """Direct PUTs over a shared aiohttp session, authenticated with the agent's bearer token."""

    async def put(leader: Leader, path: str, body: bytes, timeout: float) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Accept": _ACCEPT}
        if bearer := token():
            headers["Authorization"] = f"Bearer {bearer}"
        async with session.put(leader.endpoint + path, data=body, headers=headers, ssl=leader.ssl_context,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            raw = await response.read()
            try:
                return response.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return response.status, raw.decode(errors="replace")

    return put


def _http_reason(status: int) -> str:
    return "unavailable" if status == 503 else f"http-{status}"


def _message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body or "")[:200]


class Delivery:
    """One node's way to the leader; `slots` (shared by simulated agents) bounds requests in flight."""

    def __init__(self, kube: KubeApi, locator: LeaderLocator, direct: DirectPut, *, timeout: float,
                 slots: asyncio.Semaphore | None = None) -> None:
        self.kube = kube
        self.locator = locator
        self.direct = direct
        self.timeout = timeout
        self.slots = slots

    async def put(self, path: str, body: bytes, failed: FailureCounter) -> tuple[str, str | None]:
        """PUT `body` to `path`: to the leader if possible, else through kube-apiserver.

        Returns (route, identity of the leader it reached as far as known); raises DeliveryFailed.
        Each failed attempt on the way is passed to `failed` by reason.
        """
        route, identity, _ = await self.exchange(path, body, failed)
        return route, identity

    async def exchange(self, path: str, body: bytes, failed: FailureCounter) -> tuple[str, str | None, Any]:
        """`put`, also returning the decoded answer (for writes whose answer says what was done)."""
        skip_direct = False
        for _ in range(3):  # leader, a new leader after a 503, kube-apiserver
            leader = self.locator.leader
            if leader is None or not leader.reachable or skip_direct:
                return await self._through_apiserver(path, body, failed)
            try:
                status, answer = await self._limited(self.direct(leader, path, body, self.timeout))
            except TimeoutError:
                failed("leader-timeout")
            except (aiohttp.ClientError, OSError):
                failed("leader-unreachable")
            else:
                if 200 <= status < 300:
                    self.locator.confirm(leader)
                    return "leader", leader.identity, answer
                if status == 401:  # no token the leader accepts (a client certificate, say)
                    failed("leader-unauthorized")
                    skip_direct = True
                    continue
                if status != 503:
                    failed(_http_reason(status))
                    raise DeliveryFailed(_http_reason(status), _message(answer))
                failed("standby")
            # Unreachable, or a standby answered: the Lease may name someone else by now.
            await self.locator.refresh()
            if self.locator.leader == leader:
                skip_direct = True
        return await self._through_apiserver(path, body, failed)

    async def _through_apiserver(self, path: str, body: bytes, failed: FailureCounter) -> tuple[str, str | None, Any]:
        try:
            status, answer = await self._limited(self.kube.request("PUT", path, body=body, timeout=self.timeout))
        except TimeoutError as error:
            failed("timeout")
            raise DeliveryFailed("timeout", "no answer from kube-apiserver") from error
        except Exception as error:  # the connection failed
            failed("unreachable")
            raise DeliveryFailed("unreachable", str(error) or type(error).__name__) from error
        if 200 <= status < 300:
            leader = self.locator.leader
            return "apiserver", leader.identity if leader is not None else None, answer
        failed(_http_reason(status))
        raise DeliveryFailed(_http_reason(status), _message(answer))

    async def _limited(self, request: Awaitable[tuple[int, Any]]) -> tuple[int, Any]:
        if self.slots is None:
            return await request
        async with self.slots:
            return await request


async def run_checks(check: Callable[[], Awaitable[float]], wake: asyncio.Event) -> None:
    """Call `check` forever; wait the seconds it returns, or less when `wake` is set meanwhile."""
    while True:
        delay = await check()
        if not wake.is_set():
            await wait_set(wake, delay)
        wake.clear()
