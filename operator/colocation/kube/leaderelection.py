"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

The pure core (`ElectionState`, over colocation.kube.lease_record's `LeaderElectionRecord`) decides;
`LeaderElector` does the I/O (through a `leases.LeaseStore`). Expiry is judged on this replica's
monotonic clock, from when it saw the record change; every update is a PUT with the
resourceVersion last read. A leader stops leading once it has not renewed within the renew
deadline: `is_leader` is judged when asked, and `write_budget()` bounds each write so that it
lands before a successor may start. A process whose pod restarted frees its dead predecessor's
lease at once; `suspect_leader()` makes a standby read the Lease more often.

Why: docs/operator.md#failover and docs/operator.md#fencing
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from colocation.apimachinery.clock import wall_time
from colocation.kube.backoff import Backoff
from colocation.kube.lease_record import LEADER_CA_ANNOTATION as LEADER_CA_ANNOTATION
from colocation.kube.lease_record import LEADER_ENDPOINT_ANNOTATION as LEADER_ENDPOINT_ANNOTATION
from colocation.kube.lease_record import LeaderElectionRecord as LeaderElectionRecord
from colocation.kube.leases import KubernetesLeases, LeaseConflict, LeaseError, LeaseStore

logger = logging.getLogger(__name__)


# --- The record and the pure decisions -------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class ElectionState:
    """What one candidate knows; every method is pure and returns a new state or a decision.

    `now` is always the candidate's monotonic clock (seconds); wall-clock datetimes are only
    ever written into records.
    """

    identity: str
    observed: LeaderElectionRecord | None = None
    observed_at: float = 0.0  # when `observed` was last seen to change
    renewed_at: float | None = None  # when we sent our last successful write as the holder
    transitions_seen: int = 0  # holder changes this candidate has observed

    @property
    def holds(self) -> bool:
        """Whether the last record observed names us as the holder."""
        return self.observed is not None and self.observed.holder_identity == self.identity

    @property
    def holder(self) -> str:
        return self.observed.holder_identity if self.observed is not None else ""

    def observe(self, record: LeaderElectionRecord, now: float) -> ElectionState:
        """Remember a record read from the API; the expiry clock restarts only if it changed."""
        if record.same_spec(self.observed):
            return dataclasses.replace(self, observed=record)  # annotations may still have changed
        changed_holder = self.observed is not None and record.holder_identity != self.observed.holder_identity
        return dataclasses.replace(
            self, observed=record, observed_at=now,
            renewed_at=self.renewed_at if record.holder_identity == self.identity else None,
            transitions_seen=self.transitions_seen + changed_holder)

    def wrote(self, record: LeaderElectionRecord, *, sent_at: float, now: float) -> ElectionState:
        """Remember a record we wrote successfully (sent at `sent_at`, answered at `now`)."""
        state = self.observe(record, now)
        return dataclasses.replace(state, renewed_at=sent_at if record.holder_identity == self.identity else None)

    @property
    def expires_at(self) -> float:
        """When the observed lease runs out on our clock: its last observed change plus its duration."""
        if self.observed is None:
            return -math.inf
        return self.observed_at + self.observed.lease_duration_seconds

    def expired(self, now: float) -> bool:
        """Whether the observed lease has run out, judged on our clock from its last observed change."""
        return self.expires_at < now

    def leads(self, *, now: float, renew_deadline: float) -> bool:
        """Whether we may act as the leader: we hold the lease and renewed it within the deadline."""
        return self.holds and self.renewed_at is not None and now - self.renewed_at < renew_deadline

    def next_record(self, *, now: float, wall: datetime, lease_duration_seconds: int,
                    annotations: Mapping[str, str],
                    holder_ended: bool = False) -> LeaderElectionRecord | None:
        """The record to write to renew or acquire the observed lease; None while another holds it.

        A released lease (no holder) is free at once; another holder's only after expiry, or at
        once when its process is known to have ended (`holder_ended`, colocation.kube.lease_holder).
        """
        observed = self.observed
        if observed is None:
            return initial_record(self.identity, wall, lease_duration_seconds, annotations=annotations)
        merged = {**observed.annotations, **annotations}
        if observed.holder_identity == self.identity:
            return dataclasses.replace(observed, lease_duration_seconds=lease_duration_seconds, renew_time=wall,
                                       annotations=merged)
        if observed.holder_identity and not self.expired(now) and not holder_ended:
            return None
        return LeaderElectionRecord(holder_identity=self.identity, lease_duration_seconds=lease_duration_seconds,
                                    acquire_time=wall, renew_time=wall,
                                    leader_transitions=observed.leader_transitions + 1, annotations=merged)

    def release_record(self, wall: datetime, unpublish: frozenset[str] = frozenset()) -> LeaderElectionRecord | None:
        """The record that gives up the lease (no holder, 1 s duration, now); None if we don't hold it.

        The annotations in `unpublish` (the ones we published as leader) are removed with it.
        """
        if self.observed is None or not self.holds:
            return None
        return _freed(self.observed, wall, unpublish)

    def predecessor_release_record(self, *, now: float, wall: datetime, is_predecessor: Callable[[str], bool],
                                   unpublish: frozenset[str] = frozenset()) -> LeaderElectionRecord | None:
        """The record that frees a lease still held by a dead predecessor of ours; None otherwise.

        A predecessor is the previous process of our own pod (the container restarted): it cannot
        be alive, so nobody needs to wait for its lease to expire. Freeing it (rather than taking
        it) lets a warm standby, which holds a full copy, take over first.
        """
        observed = self.observed
        if observed is None or self.holds or self.expired(now) or not observed.holder_identity:
            return None
        if not is_predecessor(observed.holder_identity):
            return None
        return _freed(observed, wall, unpublish)


def _freed(observed: LeaderElectionRecord, wall: datetime, unpublish: frozenset[str]) -> LeaderElectionRecord:
    kept = {k: v for k, v in observed.annotations.items() if k not in unpublish}
    return LeaderElectionRecord(holder_identity="", lease_duration_seconds=1, acquire_time=wall, renew_time=wall,
                                leader_transitions=observed.leader_transitions, annotations=kept)


def initial_record(identity: str, wall: datetime, lease_duration_seconds: int,
                   *, annotations: Mapping[str, str]) -> LeaderElectionRecord:
    """The record that creates the Lease: we hold it, nobody held it before."""
    return LeaderElectionRecord(holder_identity=identity, lease_duration_seconds=lease_duration_seconds,
                                acquire_time=wall, renew_time=wall,
                                leader_transitions=0, annotations=annotations)


def default_identity() -> str:
    """Unique per process, readable per host (client-go's convention: hostname_uuid)."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


# What a round can fail with and still be retried: the API or the network, never a bug.
# A standby reads an expiring Lease this long after it could have run out (`expired` is strict).
EXPIRY_MARGIN = 0.01
_TRANSIENT = (LeaseError, ApiException, TimeoutError, aiohttp.ClientError, OSError)


# --- The elector ---------------------------------------------------------------------------------------

class LeaderElector:
    """Campaigns for a Lease, then keeps renewing it; tells the caller when leadership starts and ends.

    Leadership ends (`on_stopped_leading()`) when no renewal succeeded within `renew_deadline`, or
    another holder is seen. `run()` then returns, and the caller stops its leader's work (the
    operator exits non-zero), unless `rejoin_after_loss` > 0 and the lease may still be ours: the
    renewals failed because the API did not answer, and the last record read names us. Then it
    keeps trying to renew, for up to `rejoin_after_loss` seconds: once the API answers and the
    record still names us, the renewal makes us lead again (`on_started_leading()` once more).
    Nobody else can have led meanwhile, since taking the lease changes its holder. `run()`
    returns when another holder (or none) is read, or when the time is up. Cancel `run()` to stop
    campaigning, then `await release()` to hand the lease over at once. Callbacks are plain
    functions called from the election task: they must not block (set an event, start a task).
    """

    def __init__(
        self,
        api: ApiClient | None,
        namespace: str,
        name: str,
        *,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        annotations_provider: Callable[[], Mapping[str, str]] = dict,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
        on_new_leader: Callable[[str], None] = lambda identity: None,
        is_predecessor: Callable[[str], bool] = lambda holder: False,
        holder_ended: Callable[[LeaderElectionRecord], bool] = lambda record: False,
        acquire_after: float = -math.inf,
        rejoin_after_loss: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        leases: LeaseStore | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("leader election needs lease_duration > renew_deadline > retry_period > 0, got "
                             f"{lease_duration} / {renew_deadline} / {retry_period}")
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if leases is None:
            if api is None:
                raise ValueError("leader election needs an ApiClient or a LeaseStore")
            leases = KubernetesLeases(api, namespace, name)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration_seconds = math.ceil(lease_duration)  # the API takes whole seconds: never less
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        # Each call must leave time to retry within the renew deadline.
        self.call_timeout = min(renew_deadline / 2, 5.0)
        self._leases = leases
        self._annotations_provider = annotations_provider
        self._on_started_leading = on_started_leading
        self._on_stopped_leading = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._is_predecessor = is_predecessor
        self._holder_ended = holder_ended
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._state = ElectionState(identity=identity)
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written
        self._published: frozenset[str] = frozenset()
        self._leading = False
        self._reported_leader: str | None = None
        self._wake = asyncio.Event()
        # While the leader looks dead, a standby reads the Lease this often (see suspect_leader).
        self.suspect_period = retry_period / 8
        self._suspect_until = -math.inf
        # We take no lease before then: after freeing a dead predecessor's lease, warm standbys get
        # it first; after an API outage, its holder gets to renew it first.
        self.acquire_after = acquire_after
        self.rejoin_after_loss = rejoin_after_loss
        self._lost_at: float | None = None  # when leadership ended, while we may still rejoin
        self._transition: asyncio.Future[None] | None = None  # see next_transition()
        self._api_away = False  # the last round failed: the API did not answer
        # Jitter only shortens waits: a leader renews at least every retry period.
        self._period = Backoff(retry_period, retry_period, factor=1.0, jitter=0.2, rng=rng)
        # A failed call is tried again within a retry period at the latest, as client-go does: a
        # standby then takes a lease that expired during an API outage within one period of its end.
        self._errors = Backoff(retry_period / 4, retry_period, factor=2.0, jitter=0.2, rng=rng)
        self._standby_period = Backoff(retry_period / 2, retry_period / 2, factor=1.0, jitter=0.2, rng=rng)
        self._log = {"lease": f"{namespace}/{name}", "identity": identity}

    # -- what the rest of the process reads (also for Prometheus gauges) --

    @property
    def is_leader(self) -> bool:
        """Whether we may act as the leader now: judged at the moment of asking, so a leader stops
        accepting writes the instant its renew deadline passes, not at its next round."""
        return self._leading and self._state.leads(now=self._clock(), renew_deadline=self.renew_deadline)

    def write_budget(self) -> float:
        """Seconds a write sent now may take to land: 0 unless leading.

        Another replica may take over from our last renewal plus the lease duration (it waits that
        long from when it saw the renewal, which was after we sent it), so a write bounded by this
        budget lands before any successor can act. Sent at the renew deadline at the latest, a
        write gets at most lease duration - renew deadline.
        """
        if not self.is_leader or self._state.renewed_at is None:
            return 0.0
        return max(0.0, self._state.renewed_at + self.lease_duration_seconds - self._clock())

    def suspect_leader(self) -> None:
        """The leader looks dead (its connection refused): read the Lease every `suspect_period`
        until the lease could have expired, so a release (by the restarted pod) is seen at once."""
        if self._leading:
            return
        now = self._clock()
        suspected = now < self._suspect_until
        self._suspect_until = now + self.lease_duration_seconds
        if not suspected:
            self._wake.set()

    @property
    def rejoining(self) -> bool:
        """Whether leadership ended but the lease may still be ours (`rejoin_after_loss`)."""
        return self._lost_at is not None

    def next_transition(self) -> asyncio.Future[None]:
        """Done when this replica next starts or stops leading, or the election ends."""
        if self._transition is None or self._transition.done():
            self._transition = asyncio.get_running_loop().create_future()
        return self._transition

    def _transitioned(self) -> None:
        if self._transition is not None and not self._transition.done():
            self._transition.set_result(None)

    @property
    def leader_identity(self) -> str:
        """The holder last observed ("" for none or not yet known)."""
        return self._state.holder

    @property
    def leader_endpoint(self) -> str:
        """Where the holder last observed serves, as it published it ("" for none or not known)."""
        observed = self._state.observed
        if observed is None or not observed.holder_identity:
            return ""
        return observed.annotations.get(LEADER_ENDPOINT_ANNOTATION, "").rstrip("/")

    @property
    def observed_record(self) -> LeaderElectionRecord | None:
        return self._state.observed

    @property
    def transitions_seen(self) -> int:
        """Holder changes observed by this elector since it started."""
        return self._state.transitions_seen

    async def current_record(self) -> LeaderElectionRecord | None:
        """The Lease as kube-apiserver has it now (a read outside the election loop, which it does not
        change); wakes the loop when the holder differs from what the loop last observed."""
        try:
            lease = await self._leases.get(self.call_timeout)
        except _TRANSIENT as error:
            raise ConnectionError(f"reading the Lease failed: {error}") from error
        if lease is None:
            return None
        record = LeaderElectionRecord.from_lease(lease)
        if record.holder_identity != self._state.holder:
            self.wake()
        return record

    def wake(self) -> None:
        """Retry now instead of at the end of the current wait (e.g. a watch saw the lease released)."""
        self._wake.set()

    # -- the loop --

    async def run(self) -> None:
        try:
            await self._campaign()
        finally:
            self._lost_at = None  # the election ended: the lease is not ours to renew any more
            self._transitioned()

    async def _campaign(self) -> None:
        while True:
            try:
                await self._try_acquire_or_renew()
                failed = False
            except _TRANSIENT as error:
                failed = True
                level = logging.WARNING if self._leading or self._lost_at is not None else logging.INFO
                logger.log(level, "leader election: lease call failed: %s", error, extra=self._log)
            self._api_away = failed
            self._report_leader()
            now = self._clock()
            leads = self._state.leads(now=now, renew_deadline=self.renew_deadline)
            if leads and not self._leading:
                self._leading = True
                if self._lost_at is not None:
                    logger.warning("leader election: renewed the lease %.1f s after losing it: leading again",
                                   now - self._lost_at, extra=self._log)
                self._lost_at = None
                logger.info("leader election: started leading", extra=self._log)
                self._on_started_leading()
                self._transitioned()
            elif self._leading and not leads:
                self._leading = False
                logger.error("leader election: lost the lease (holder %r, last renewal %s s ago)",
                             self._state.holder, _ago(now, self._state.renewed_at), extra=self._log)
                self._on_stopped_leading()
                self._transitioned()
                if self.rejoin_after_loss <= 0 or not self._state.holds:
                    return
                self._lost_at = now
                logger.warning("leader election: the API did not answer; renewing again when it does, for "
                               "up to %g s", self.rejoin_after_loss, extra=self._log)
            elif self._lost_at is not None and (not self._state.holds
                                                or now - self._lost_at >= self.rejoin_after_loss):
                logger.error("leader election: not leading again (holder %r, %.1f s after the loss)",
                             self._state.holder, now - self._lost_at, extra=self._log)
                return
            await self._pause(self._next_delay(failed, now))

    def _next_delay(self, failed: bool, now: float) -> float:
        if self._leading:
            # Wake no later than the renew deadline, so leadership ends on time even while waiting.
            assert self._state.renewed_at is not None
            return min(self._period.next_delay(), self._state.renewed_at + self.renew_deadline - now)
        if failed:
            if self._lost_at is not None:  # standbys leave us a retry period once the API is back
                return min(self._errors.next_delay(), self.retry_period / 4)
            return self._errors.next_delay()
        self._errors.reset()
        # A standby reads the Lease every half retry period: it sees the last renewal of a leader that
        # stopped at most that late, so it takes over at most that long after the lease ran out.
        delay = self._standby_period.next_delay()
        if now < self._suspect_until:
            delay = min(delay, self.suspect_period)
        if self._state.holder and not self._state.expired(now):
            # ... and reads it again the moment it could expire, not on the next tick after.
            delay = min(delay, self._state.expires_at - now + EXPIRY_MARGIN)
        return delay

    async def _pause(self, delay: float) -> None:
        if delay > 0 and not self._wake.is_set():
            woken = asyncio.ensure_future(self._wake.wait())
            slept = asyncio.ensure_future(self._sleep(delay))
            try:
                await asyncio.wait((woken, slept), return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
                slept.cancel()
        self._wake.clear()

    def _timeout(self) -> float:
        """Per-call timeout; as leader, never past the renew deadline."""
        if self._leading and self._state.renewed_at is not None:
            return min(self.call_timeout, self._state.renewed_at + self.renew_deadline - self._clock())
        return self.call_timeout

    async def _try_acquire_or_renew(self) -> None:
        if self._leading and self._lease is not None:
            # Fast path: assume the lease is as we last wrote it; a 409 says otherwise.
            renewal = self._state.next_record(now=self._clock(), wall=self._now(),
                                              lease_duration_seconds=self.lease_duration_seconds,
                                              annotations=self._annotations())
            assert renewal is not None  # we hold the lease, so there is always a renewal to write
            try:
                await self._write(renewal)
                return
            except LeaseConflict as error:
                logger.info("leader election: renewal conflicted, re-reading: %s", error, extra=self._log)
        lease = await self._leases.get(self._timeout())
        if lease is None:
            if self._clock() < self.acquire_after:
                return  # not ours to take yet, created or not
            first = initial_record(self.identity, self._now(), self.lease_duration_seconds,
                                   annotations=self._annotations())
            sent_at = self._clock()
            created = await self._leases.create(first.to_lease(self.namespace, self.name), self._timeout())
            self._remember(created, sent_at)
            return
        self._read(lease)
        annotations = self._annotations()
        if await self._free_predecessors_lease(annotations):
            return
        now = self._clock()
        ended = self._another_holder_ended(now)
        if self._api_away and self._state.holder and not self._state.holds and not ended:
            # The API is back after an outage. A holder that only lost its lease to it renews within
            # a retry period (`rejoin_after_loss`): taking the lease from it first would move the
            # agents and restart it for nothing.
            self.acquire_after = max(self.acquire_after, now + self.retry_period)
        if not self._state.holds and not ended and now < self.acquire_after:
            return
        record = self._state.next_record(now=now, wall=self._now(), lease_duration_seconds=self.lease_duration_seconds,
                                         annotations=annotations, holder_ended=ended)
        if record is not None:
            if ended:
                logger.info("leader election: taking over from %r: its pod's container stopped or restarted "
                            "after its last renewal", self._state.holder, extra=self._log)
            await self._write(record)

    def _another_holder_ended(self, now: float) -> bool:
        """Whether another replica holds the unexpired lease and its process is known to have ended."""
        observed = self._state.observed
        return (observed is not None and bool(observed.holder_identity) and not self._state.holds
                and not self._state.expired(now) and self._holder_ended(observed))

    async def _free_predecessors_lease(self, annotations: Mapping[str, str]) -> bool:
        """Free the observed lease if our pod's previous process holds it; whether we did."""
        # Whatever it published as leader goes too, so agents stop dialing its address.
        unpublish = frozenset(annotations) | {LEADER_ENDPOINT_ANNOTATION, LEADER_CA_ANNOTATION}
        freed = self._state.predecessor_release_record(now=self._clock(), wall=self._now(),
                                                       is_predecessor=self._is_predecessor,
                                                       unpublish=unpublish)
        if freed is None:
            return False
        predecessor = self._state.holder
        await self._write(freed)
        self.acquire_after = self._clock() + self.retry_period
        logger.info("leader election: freed the lease of %r, this pod's previous process", predecessor,
                    extra=self._log)
        return True

    async def free_dead_predecessor(self) -> bool:
        """One read of the Lease, outside the loop: free it if our pod's previous process holds it.

        For a restarted process to call first thing, before the rest of its start-up: the sooner
        the lease is free, the sooner a warm standby takes over. `acquire_after` then says until
        when this process should leave the lease to the standbys (pass it to its elector).
        """
        lease = await self._leases.get(self.call_timeout)
        if lease is None:
            return False
        self._read(lease)
        return await self._free_predecessors_lease(self._annotations())

    async def _write(self, record: LeaderElectionRecord) -> None:
        assert self._lease is not None, "a Lease is written only after it was read or created"
        sent_at = self._clock()
        written = await self._leases.replace(record.to_lease(self.namespace, self.name, self._lease), self._timeout())
        self._remember(written, sent_at)

    def _read(self, lease: dict[str, Any]) -> None:
        """Remember a Lease as read from the API (not written by us)."""
        self._lease = lease
        self._state = self._state.observe(LeaderElectionRecord.from_lease(lease), self._clock())

    def _remember(self, lease: dict[str, Any], sent_at: float) -> None:
        self._lease = lease
        self._state = self._state.wrote(LeaderElectionRecord.from_lease(lease), sent_at=sent_at, now=self._clock())

    def _annotations(self) -> dict[str, str]:
        published = dict(self._annotations_provider())
        self._published |= published.keys()
        return published

    def _now(self) -> datetime:
        return wall_time(self._wall())

    def _report_leader(self) -> None:
        holder = self._state.holder
        if self._state.observed is not None and holder != self._reported_leader:
            self._reported_leader = holder
            logger.info("leader election: leader is now %r", holder, extra=self._log)
            self._on_new_leader(holder)

    # -- shutdown --

    async def release(self) -> bool:
        """Give the lease up if we hold it, so a standby takes over within about one retry period.

        Call after cancelling `run()`. Returns whether we released it; never raises for API errors
        (the lease then simply expires). Calls no callbacks.
        """
        self._leading = False
        for _ in range(2):  # a conflict means the Lease changed: re-read it once and decide again
            record = self._state.release_record(self._now(), self._published)
            if record is None or self._lease is None:
                return False
            try:
                await self._write(record)
            except LeaseConflict:
                try:
                    lease = await self._leases.get(self.call_timeout)
                except _TRANSIENT as error:
                    logger.warning("leader election: release failed: %s", error, extra=self._log)
                    return False
                if lease is None:
                    return False
                self._read(lease)
                continue
            except _TRANSIENT as error:
                logger.warning("leader election: release failed: %s", error, extra=self._log)
                return False
            logger.info("leader election: released the lease", extra=self._log)
            return True
        return False


def _ago(now: float, then: float | None) -> str:
    return "never" if then is None else f"{now - then:.1f}"
