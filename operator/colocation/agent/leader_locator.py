"""Where the leader is: its report endpoint and CA bundle, read from the leader Lease.

The leader publishes `colocation.dev/leader-endpoint`, `colocation.dev/leader-ca` and
`colocation.dev/replica-endpoints` on Lease colocation-operator (colocation.kube.lease_record).
The locator reads it at start, then only when no request was accepted for a while (jittered) or
when no replica took a report; an accepted report counts as a read (`confirm`), and a replica
that took one becomes the leader (`adopt`). Concurrent requests for a fresh read share one GET,
and reads closer together than `min_refresh_gap` reuse the last answer.

Why: docs/operator.md#how-agents-find-a-new-leader
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from colocation.agent.kubeapi import KubeApi
from colocation.apimachinery.rendezvous import rendezvous_rank
from colocation.apimachinery.trust import trusting
from colocation.kube import permissions
from colocation.kube.backoff import Backoff
from colocation.kube.lease_record import (
    LEADER_CA_ANNOTATION,
    LEADER_ENDPOINT_ANNOTATION,
    REPLICAS_ANNOTATION,
    REPORTS_ANNOTATION,
    REPORTS_TO_ANY_REPLICA,
    LeaderElectionRecord,
    parse_replicas,
    replicas_digest,
)

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 30.0
# Where every replica takes reports, one that did not answer is asked last for this long, by every
# node of the process: its nodes go to the next replica at once instead of each trying it first.
UNANSWERED_SECONDS = 10.0

_GET_LEADER_LEASE = permissions.declared(permissions.AGENT_API_CALLS, permissions.ApiCall(
    group="coordination.k8s.io", resource="leases", verb="get", namespace=permissions.OPERATOR_NAMESPACE,
    name=permissions.LEADER_LEASE_NAME))


@dataclass(frozen=True, kw_only=True)
class Leader:
    """The current leader as the Lease names it; `endpoint` is "" when it published no address.

    `replicas` (identity, endpoint) are the replicas that followed it when it last published them:
    whom to ask when it cannot be reached. They do not make another leader (not compared).
    `reports_anywhere`: every replica takes NodeMetric reports (`ranked_for`).
    """

    identity: str
    endpoint: str = ""  # https://HOST:PORT
    ca_pem: bytes = b""
    replicas: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    reports_anywhere: bool = field(default=False, compare=False)

    @property
    def reachable(self) -> bool:
        return bool(self.identity and self.endpoint and self.ca_pem)

    @property
    def ssl_context(self) -> ssl.SSLContext:
        return _verifying(self.ca_pem)

    def at(self, identity: str, endpoint: str) -> Leader:
        """Another replica of the same operator: the same CA, the same replicas to ask."""
        return dataclasses.replace(self, identity=identity, endpoint=endpoint)

    def others(self) -> list[Leader]:
        """The other replicas, to ask who leads when this one cannot be reached."""
        return [self.at(identity, endpoint) for identity, endpoint in self.replicas if endpoint != self.endpoint]

    def ranked_for(self, key: str) -> list[Leader]:
        """Every replica, the leader too, in the order `key` (a node's) ranks them: the same order for
        the same key on every agent, and a replica that goes or comes moves only the keys it ranks
        first (rendezvous hashing). Reports spread evenly, and each node keeps to one replica."""
        replicas = {endpoint: identity for identity, endpoint in self.replicas}
        replicas.setdefault(self.endpoint, self.identity)
        return [self.at(identity, endpoint) for endpoint, identity in
                sorted(replicas.items(), key=lambda replica: rendezvous_rank(key, replica[1]), reverse=True)]

    @functools.cached_property
    def replicas_seen(self) -> str:
        """The digest of the replicas this answer knows (lease_record.replicas_digest)."""
        return replicas_digest(dict(self.replicas))


@functools.lru_cache(maxsize=8)
def _verifying(ca_pem: bytes) -> ssl.SSLContext:
    """One context per CA bundle, shared by every replica it verifies (and so their pooled connections)."""
    context = trusting(ca_pem)
    # The certificate names the Service; agents dial the address the leader advertised.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def leader_from_lease(lease: dict[str, object]) -> Leader | None:
    """The holder and its published address; None when nobody holds the Lease."""
    record = LeaderElectionRecord.from_lease(lease)
    if not record.holder_identity:
        return None
    endpoint = record.annotations.get(LEADER_ENDPOINT_ANNOTATION, "").rstrip("/")
    try:
        ca_pem = base64.b64decode(record.annotations.get(LEADER_CA_ANNOTATION, ""), validate=True)
    except ValueError:
        ca_pem = b""
    if not endpoint.startswith("https://") or not ca_pem:
        return Leader(identity=record.holder_identity)  # known, but only reachable through kube-apiserver
    replicas = tuple(parse_replicas(record.annotations.get(REPLICAS_ANNOTATION, "")).items())
    return Leader(identity=record.holder_identity, endpoint=endpoint, ca_pem=ca_pem, replicas=replicas,
                  reports_anywhere=record.annotations.get(REPORTS_ANNOTATION) == REPORTS_TO_ANY_REPLICA)


class LeaderLocator:
    """Follows the leader Lease; `leader` is the last answer (None: never read, no Lease, or nobody
    led yet). A released Lease keeps the last leader: its replicas are still the ones to ask."""

    def __init__(self, kube: KubeApi, namespace: str = permissions.OPERATOR_NAMESPACE, *,
                 poll_interval: float = DEFAULT_POLL_INTERVAL, timeout: float = 5.0, min_refresh_gap: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rng: random.Random | None = None) -> None:
        self.kube = kube
        self.path = (f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/"
                     f"{_GET_LEADER_LEASE.name}")
        self.poll_interval = poll_interval
        self.timeout = min(timeout, poll_interval)
        self.min_refresh_gap = min_refresh_gap
        self.leader: Leader | None = None
        self.read_once = False
        self._clock, self._sleep = clock, sleep
        self._last_read: float | None = None
        self._inflight: asyncio.Future[bool] | None = None
        self._next_change: asyncio.Future[None] | None = None
        self._subscribers: list[Callable[[Leader | None], None]] = []
        self._unanswered: dict[str, float] = {}  # endpoint -> when it last did not answer (monotonic)
        # Jitter only shortens the period: every agent still reads at least once per interval.
        self._period = Backoff(poll_interval, poll_interval, factor=1.0, jitter=0.3, rng=rng)
        self._errors = Backoff(min(1.0, poll_interval), poll_interval, jitter=0.5, rng=rng)

    def subscribe(self, callback: Callable[[Leader | None], None]) -> None:
        """Call `callback(leader)` on every change of holder or address (from the reading task)."""
        self._subscribers.append(callback)

    def changed(self) -> asyncio.Future[None]:
        """Done at the next change of holder or address. Shared by every waiter: await it through
        asyncio.wait or shield, never cancel it."""
        if self._next_change is None or self._next_change.done():
            self._next_change = asyncio.get_running_loop().create_future()
        return self._next_change

    def confirm(self, leader: Leader) -> None:
        """`leader` accepted a request just now: as good as reading the Lease, if it still names it."""
        if leader == self.leader:
            self._last_read = self._clock()

    def unanswered(self, endpoint: str) -> None:
        """A replica did not answer (refused, unreachable, timed out): ask it last for a while."""
        self._unanswered[endpoint] = self._clock()

    def answered(self, endpoint: str) -> None:
        self._unanswered.pop(endpoint, None)

    def ask_last(self, replicas: list[Leader]) -> list[Leader]:
        """`replicas` in the same order, but those that did not answer lately last."""
        if not self._unanswered:
            return replicas
        now = self._clock()
        for endpoint, at in list(self._unanswered.items()):
            if now - at > UNANSWERED_SECONDS:
                del self._unanswered[endpoint]
        return sorted(replicas, key=lambda replica: replica.endpoint in self._unanswered)

    def learn_replicas(self, text: str) -> None:
        """A replica answered with the replicas it knows (REPLICAS_HEADER): ask those from now on.
        Only a hint, as the Lease's list is: every replica's certificate is verified against its CA."""
        replicas = tuple(parse_replicas(text).items())
        leader = self.leader
        if leader is not None and replicas and dict(replicas) != dict(leader.replicas):
            log.info("replicas changed", extra={"replicas": ",".join(identity for identity, _ in replicas)})
            self.leader = dataclasses.replace(leader, replicas=replicas)

    def adopt(self, leader: Leader) -> None:
        """A replica named `leader`, or `leader` accepted a request as only the leader does: as good
        as reading the Lease. (A replica's word is trusted as far as its certificate is: every
        endpoint is verified against the CA the Lease published.)"""
        self._set(leader)
        self._last_read = self._clock()

    async def refresh(self) -> bool:
        """Read the Lease now (or share a read in flight or just made); True if it was read."""
        if self._inflight is None:
            if self._last_read is not None and self._clock() - self._last_read < self.min_refresh_gap:
                return True
            task = asyncio.ensure_future(self._read())
            task.add_done_callback(self._read_done)
            self._inflight = task
        # Shielded: one caller giving up (cancelled) does not cancel the read the others wait for.
        return await asyncio.shield(self._inflight)

    def _read_done(self, task: asyncio.Future[bool]) -> None:
        self._inflight = None

    async def _read(self) -> bool:
        try:
            status, body = await self.kube.request("GET", self.path, timeout=self.timeout)
        except Exception as error:  # network or client failure: keep the last answer
            log.info("reading the leader Lease failed", extra={"error": str(error) or type(error).__name__})
            return False
        if status == 404:
            self._set(None)
        elif status == 200 and isinstance(body, dict):
            leader = leader_from_lease(body)
            if leader is not None or self.leader is None or not self.leader.reachable:
                self._set(leader)
            # else: released, nobody leads yet. The last leader and its replicas stay the ones to
            # ask: a standby names the new leader, or is it (forgetting them left the agent only
            # kube-apiserver, with its back-off, during an outage).
        else:
            log.info("reading the leader Lease failed", extra={"status": status})
            return False
        self.read_once = True
        self._last_read = self._clock()
        return True

    def _set(self, leader: Leader | None) -> None:
        if leader == self.leader:
            if leader is not None and leader.replicas:
                self.leader = leader  # the same leader; the replicas beside it may have changed
            return
        log.info("leader changed", extra={"leader": leader.identity if leader else "<none>",
                                          "endpoint": leader.endpoint if leader else ""})
        self.leader = leader
        if self._next_change is not None and not self._next_change.done():
            self._next_change.set_result(None)
        for callback in self._subscribers:
            callback(leader)

    async def run(self) -> None:
        while True:
            ok = await self.refresh()
            if not ok:
                await self._sleep(self._errors.next_delay())
                continue
            self._errors.reset()
            delay = self._period.next_delay()
            # Confirmations while we slept push the next read back: sleep until the answer is that old.
            while self._last_read is not None and (due := self._last_read + delay - self._clock()) > 0:
                await self._sleep(due)
