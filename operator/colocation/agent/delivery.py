"""How an agent's PUTs reach the leader: NodeMetric reports and custom metric sample batches alike.

A PUT goes straight to the leader (endpoint and CA from the leader Lease). Where every replica
takes reports (the Lease says so: `--store nats`), a report goes to the replica its node ranks
first (`Leader.ranked_for`), then to the next ones; the replicas' answers keep the agent's list of
them current (`session_put`). A standby's 503 names
the leader, and the PUT goes there at once (through kube-apiserver, after one more read of the
Lease, for the CA). A leader that cannot be reached makes the agent ask
the other replicas the leader published; only when none takes it does it read the Lease again
and send the PUT through kube-apiserver (which may route it to any ready replica), and after
such a try fails, not again before `apiserver_backoff`. A leader that refuses our credentials
(401) sends it through kube-apiserver; any other refusal is final. A leader that names itself
in its 503 waits to renew its Lease after an API outage: kube-apiserver is not tried, and the
failure carries the leader's Retry-After (0 once it held the write). Retrying later is the
caller's business: the latest report, or the samples still held.

Why: docs/operator.md#how-agents-find-a-new-leader
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
import orjson

from colocation.agent.kubeapi import KubeApi
from colocation.agent.leader_locator import Leader, LeaderLocator
from colocation.apimachinery.event_wait import wait_set
from colocation.apimachinery.tables import metadata_only_accept
from colocation.kube.backoff import Backoff
from colocation.kube.lease_record import LEADER_CAUSE, REPLICAS_HEADER, REPLICAS_SEEN_HEADER


class DirectPut(Protocol):
    """PUT `path` with `body` to the leader within `timeout`: (status, decoded body)."""

    def __call__(self, leader: Leader, path: str, body: bytes, *, timeout: float) -> Awaitable[tuple[int, Any]]: ...


# Counts one failed attempt by reason (each caller has its own metric).
FailureCounter = Callable[[str], None]
# A request body, or what makes it at the moment of sending (after any wait for a slot): a report
# that waited carries the figures of when it was sent, not of when it was queued.
Body = bytes | Callable[[], bytes]


# A report is answered with its metadata only (as kube-apiserver shapes a write's answer for this
# Accept): nobody reads the object back, and it would be as many bytes again to encrypt. The other
# writes (samples, eviction requests) are answered as before: their answers say what was done.
_ACCEPT = metadata_only_accept()
# Replicas one request tries at most: the leader, the one a standby names, the others published.
MAX_REPLICA_TRIES = 4


class DeliveryFailed(Exception):
    def __init__(self, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        # Set when the leader itself asked for the write again this soon: it waits to renew its
        # Lease (it held the write first), or leads again (0: at once, with current figures).
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """No leader was reached (none, or none reachable), or it failed (a 5xx, a 429), as opposed
        to a refusal of the request. A leader whose checks time out while kube-apiserver is down
        answers 5xx: counted as a refusal, that pushed an agent's retry toward 30 s, past the thaw."""
        return (self.reason in ("unavailable", "timeout", "unreachable", "http-429")
                or self.reason.startswith("http-5"))


def session_put(session: aiohttp.ClientSession, token: Callable[[], str],
                *, learn_replicas: Callable[[str], None] = lambda text: None) -> DirectPut:
    """Direct PUTs over a shared aiohttp session, authenticated with the agent's bearer token.

    Where every replica takes reports, each PUT says which replicas the agent knows
    (REPLICAS_SEEN_HEADER); a replica that knows others answers with them, passed to `learn_replicas`."""

    async def put(leader: Leader, path: str, body: bytes, *, timeout: float) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Accept": _ACCEPT}
        if bearer := token():
            headers["Authorization"] = f"Bearer {bearer}"
        if leader.reports_anywhere:
            headers[REPLICAS_SEEN_HEADER] = leader.replicas_seen
        async with session.put(leader.endpoint + path, data=body, headers=headers, ssl=leader.ssl_context,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if (replicas := response.headers.get(REPLICAS_HEADER)) is not None:
                learn_replicas(replicas)
            raw = await response.read()
            try:
                return response.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return response.status, raw.decode(errors="replace")

    return put


def _http_reason(status: int) -> str:
    return "unavailable" if status == 503 else f"http-{status}"


def named_leader(answer: Any) -> tuple[str, str] | None:
    """(identity, endpoint) of the leader a standby's 503 names (`LEADER_CAUSE`), if it does."""
    details = answer.get("details") if isinstance(answer, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else ():
        if isinstance(cause, dict) and cause.get("reason") == LEADER_CAUSE:
            identity, endpoint = str(cause.get("field") or ""), str(cause.get("message") or "").rstrip("/")
            if identity and endpoint.startswith("https://"):
                return identity, endpoint
    return None


def retry_after_seconds(answer: Any) -> float | None:
    """The Status' `details.retryAfterSeconds`, if it has one."""
    details = answer.get("details") if isinstance(answer, dict) else None
    seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return float(seconds) if isinstance(seconds, int | float) and seconds >= 0 else None


def _message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body or "")[:200]


class Delivery:
    """One node's way to the leader. `slots` and `apiserver_slots` (shared by simulated agents) bound
    the requests in flight to the replicas and through kube-apiserver: two bounds, so that requests
    waiting out a frozen kube-apiserver's timeout never hold the slots the replicas' way needs."""

    def __init__(self, kube: KubeApi, locator: LeaderLocator, direct: DirectPut, *, timeout: float,
                 slots: asyncio.Semaphore | None = None, apiserver_slots: asyncio.Semaphore | None = None,
                 apiserver_backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.locator = locator
        self.direct = direct
        self.timeout = timeout
        self.slots = slots
        self.apiserver_slots = apiserver_slots
        self._apiserver_backoff = apiserver_backoff or Backoff(1.0, 30.0, jitter=0.5)
        self._apiserver_after = -math.inf  # monotonic: kube-apiserver is not asked again before then
        self._clock = clock

    @property
    def replicas_known(self) -> bool:
        """Whether a failed request can be sent again to the replicas, without kube-apiserver."""
        leader = self.locator.leader
        return leader is not None and leader.reachable

    async def put(self, path: str, body: Body, failed: FailureCounter,
                  *, any_replica: bool = False) -> tuple[str, str | None]:
        """PUT `body` to `path`: to the leader if possible, else through kube-apiserver. With
        `any_replica` (a report), to the replica `path` ranks first where every replica takes them.

        Returns (route: leader, replica or apiserver; identity of the replica it reached as far as
        known); raises DeliveryFailed. Each failed attempt on the way is passed to `failed` by reason.
        """
        route, identity, _ = await self.exchange(path, body, failed, any_replica=any_replica)
        return route, identity

    async def exchange(self, path: str, body: Body, failed: FailureCounter,
                       *, any_replica: bool = False) -> tuple[str, str | None, Any]:
        """`put`, also returning the decoded answer (for writes whose answer says what was done)."""
        leader = self.locator.leader
        asked: set[str] = set()  # the leaders (endpoints) this request already went to
        spread = path if any_replica else None
        if leader is not None and leader.reachable:
            asked.add(leader.endpoint)
            answer = await self._to_replicas(leader, path, body, failed=failed, spread=spread)
            if answer is not None:
                return answer
            if self._clock() < self._apiserver_after:
                raise DeliveryFailed("unavailable", "no replica took it, and kube-apiserver is not asked again yet")
            # The Lease may name a leader no replica knows of yet.
            if await self.locator.refresh() and (new := self.locator.leader) != leader and new is not None \
                    and new.reachable:
                asked.add(new.endpoint)
                if (answer := await self._to_replicas(new, path, body, failed=failed, spread=spread)) is not None:
                    return answer
        elif self._clock() < self._apiserver_after:
            raise DeliveryFailed("unavailable", "kube-apiserver is not asked again yet")
        return await self._through_apiserver(path, body, failed=failed, asked=asked, spread=spread)

    async def _to_replicas(self, leader: Leader, path: str, body: Body, *, failed: FailureCounter,
                           spread: str | None = None) -> tuple[str, str | None, Any] | None:
        """PUT to the leader; if it cannot be reached, to the leader a standby names, or to the
        other replicas in turn. None: none took it (or the leader refused our credentials).
        With `spread` (a key) where every replica takes the write: to the replicas in the key's order.

        When the leader named itself (it waits to renew its Lease) and no other replica took it,
        raises DeliveryFailed with the leader's Retry-After: kube-apiserver has nothing better to offer."""
        anywhere = spread is not None and leader.reports_anywhere
        queue = self.locator.ask_last(leader.ranked_for(spread)) if spread is not None and anywhere \
            else [leader, *leader.others()]
        tried = set[str]()
        waiting: DeliveryFailed | None = None  # the leader's own refusal, while it waits to renew
        while queue and len(tried) < MAX_REPLICA_TRIES:
            target = queue.pop(0)
            if target.endpoint in tried:
                continue
            tried.add(target.endpoint)
            try:
                status, answer = await self._limited(
                    functools.partial(self._direct, target, path, body), self.slots)
            except TimeoutError:
                failed("replica-timeout")
                self.locator.unanswered(target.endpoint)
                continue
            except (aiohttp.ClientError, OSError):
                failed("replica-unreachable")
                self.locator.unanswered(target.endpoint)
                continue
            if 200 <= status < 300:
                if anywhere:  # any replica takes it: the Lease's word on the leader stands
                    self.locator.answered(target.endpoint)
                    self.locator.confirm(leader)
                    return "leader" if target == leader else "replica", target.identity, answer
                if target == self.locator.leader:  # else only the leader accepts
                    self.locator.confirm(target)
                else:
                    self.locator.adopt(target)
                return "leader", target.identity, answer
            if status == 401:  # no token the leader accepts (a client certificate, say)
                failed("replica-unauthorized")
                return None
            if status != 503:
                failed(_http_reason(status))
                raise DeliveryFailed(_http_reason(status), _message(answer))
            named = named_leader(answer)
            if anywhere and named is None:  # it cannot write now (cut off from NATS): the next one can
                failed("replica-unavailable")
                self.locator.unanswered(target.endpoint)
                continue
            failed("standby")
            if named is not None and named[1] == target.endpoint:
                waiting = DeliveryFailed("unavailable", _message(answer), retry_after=retry_after_seconds(answer))
            elif named is not None and named[1] not in tried:
                queue.insert(0, target.at(*named))
        if waiting is not None:
            raise waiting
        return None

    async def _through_apiserver(self, path: str, body: Body, *, failed: FailureCounter,
                                 asked: set[str], spread: str | None) -> tuple[str, str | None, Any]:
        if self.apiserver_slots is not None:
            leader = await self._apiserver_slot(self.apiserver_slots, asked)
            if leader is not None:  # learned while this request waited for a slot: go there instead
                if (direct := await self._to_replicas(leader, path, body, failed=failed, spread=spread)) is not None:
                    return direct
                raise DeliveryFailed("unavailable", "no replica took it")
        try:
            status, answer = await self.kube.request("PUT", path, body=_made(body), timeout=self.timeout)
        except TimeoutError as error:
            failed("timeout")
            self._apiserver_failed()
            raise DeliveryFailed("timeout", "no answer from kube-apiserver") from error
        except Exception as error:  # the connection failed
            failed("unreachable")
            self._apiserver_failed()
            raise DeliveryFailed("unreachable", str(error) or type(error).__name__) from error
        finally:
            if self.apiserver_slots is not None:
                self.apiserver_slots.release()
        if 200 <= status < 300:
            self._apiserver_backoff.reset()
            self._apiserver_after = -math.inf
            leader = self.locator.leader
            return "apiserver", leader.identity if leader is not None else None, answer
        failed(_http_reason(status))
        if status in (429, 503) or status >= 500:
            self._apiserver_failed()
        if status == 503 \
                and (direct := await self._to_named_leader(answer, path, body, failed=failed, asked=asked)) is not None:
            return direct
        raise DeliveryFailed(_http_reason(status), _message(answer))

    async def _to_named_leader(self, answer: Any, path: str, body: Body, *, failed: FailureCounter,
                               asked: set[str]) -> tuple[str, str | None, Any] | None:
        """kube-apiserver routed the PUT to a standby, which named the leader: send it there, unless
        this request went there already (`asked`). The agent dials it if it knows it by now (another
        request may have learned it meanwhile), else reads the Lease once more, for the address and
        the CA. Without this the agent would wait for its next poll of the Lease (30 s), and during a
        control-plane outage it would not know the replicas to ask."""
        named, known = named_leader(answer), self.locator.leader
        if named is None:
            return None
        if known is None or not known.reachable or (known.identity, known.endpoint) != named:
            if not await self.locator.refresh():
                return None
            known = self.locator.leader
        if known is None or not known.reachable or known.endpoint in asked:
            return None
        return await self._to_replicas(known, path, body, failed=failed)

    async def _apiserver_slot(self, slots: asyncio.Semaphore, asked: set[str]) -> Leader | None:
        """Take one of the shared slots for kube-apiserver (None), or return the leader to dial
        instead: one the locator learned while this request waited and that it has not asked yet.

        Simulated agents' nodes share these slots; the wait is bounded by the request timeout
        (DeliveryFailed, "timeout"). Why: docs/agent.md#simulated-agents"""
        loop = asyncio.get_running_loop()
        acquiring: asyncio.Future[Any] = asyncio.ensure_future(slots.acquire())
        deadline = loop.time() + self.timeout
        taken = False
        try:
            while True:
                changed: asyncio.Future[Any] = self.locator.changed()
                done, _ = await asyncio.wait({acquiring, changed},
                                             timeout=max(0.0, deadline - loop.time()),
                                             return_when=asyncio.FIRST_COMPLETED)
                if acquiring in done:
                    taken = True
                    return None
                leader = self.locator.leader
                if leader is not None and leader.reachable and leader.endpoint not in asked:
                    return leader
                if not done:
                    raise DeliveryFailed("timeout", "no free slot for kube-apiserver within the request timeout")
        finally:
            if not taken:
                if not acquiring.done():
                    acquiring.cancel()
                elif not acquiring.cancelled() and acquiring.exception() is None:
                    slots.release()  # acquired as we gave up

    def _apiserver_failed(self) -> None:
        self._apiserver_after = self._clock() + self._apiserver_backoff.next_delay()

    def _direct(self, target: Leader, path: str, body: Body) -> Awaitable[tuple[int, Any]]:
        return self.direct(target, path, _made(body), timeout=self.timeout)

    @staticmethod
    async def _limited(request: Callable[[], Awaitable[tuple[int, Any]]],
                       slots: asyncio.Semaphore | None) -> tuple[int, Any]:
        if slots is None:
            return await request()
        async with slots:
            return await request()


def _made(body: Body) -> bytes:
    return body() if callable(body) else body


async def run_checks(check: Callable[[], Awaitable[float]], wake: asyncio.Event) -> None:
    """Call `check` forever; wait the seconds it returns, or less when `wake` is set meanwhile."""
    while True:
        delay = await check()
        if not wake.is_set():
            await wait_set(wake, delay)
        wake.clear()
