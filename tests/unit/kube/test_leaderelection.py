"""Lease leader election: client-go's rules, on a fake clock.

Expectations follow client-go's leaderelection package: expiry is judged from the moment the
candidate saw the record change, on its own clock; acquiring increments leaseTransitions;
renewing keeps acquireTime; a released lease (empty holder) is free at once; a leader that cannot
renew within the renew deadline stops leading — before the lease can expire for anyone else.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from colocation.apimachinery.clock import format_micro_time, parse_micro_time
from colocation.kube.client import KubeConfigError, api_client
from colocation.kube.leaderelection import (
    LEADER_CA_ANNOTATION,
    LEADER_ENDPOINT_ANNOTATION,
    ElectionState,
    LeaderElectionRecord,
    LeaderElector,
)
from colocation.kube.leases import LeaseConflict, LeaseError
from tests.clock import FakeClock

MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
T0 = datetime(2026, 11, 22, 1, 2, 3, 123, tzinfo=UTC)


# --- MicroTime -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("moment", "text"), [
    (datetime(2026, 11, 22, 1, 2, 3, 123, tzinfo=UTC), "2026-11-22T01:02:03.000123Z"),
    (datetime(2026, 11, 22, 1, 2, 3, tzinfo=UTC), "2026-11-22T01:02:03.000000Z"),  # zeros are written
    (datetime.fromisoformat("2026-11-22T03:02:03.5+02:00"), "2026-11-22T01:02:03.500000Z"),
])
def test_micro_time_is_written_in_utc_with_six_digits_and_z(moment: datetime, text: str) -> None:
    assert format_micro_time(moment) == text


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-22T01:02:03.000123Z", T0),
    ("2026-11-22T01:02:03.000123456Z", T0),  # nanoseconds, as some clients write: truncated
    ("2026-11-22T01:02:03.000123+00:00", T0),
    ("2026-11-22T03:02:03.000123+02:00", T0),
    ("2026-11-22T01:02:03Z", T0.replace(microsecond=0)),  # a plain Time
    ("2026-11-22T01:02:03.1Z", T0.replace(microsecond=100000)),
    ("2026-11-22T01:02:03.000123", T0),  # no zone: UTC
])
def test_micro_time_is_read_leniently(text: str, expected: datetime) -> None:
    assert parse_micro_time(text) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-40T01:02:03Z", None, 12])
def test_unreadable_times_are_none_rather_than_errors(text: object) -> None:
    assert parse_micro_time(text) is None


# --- The record on the wire ---------------------------------------------------------------------------

def test_a_lease_round_trips_and_keeps_what_it_does_not_own() -> None:
    stored: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "op", "namespace": "ns", "resourceVersion": "41", "labels": {"team": "x"},
                     "annotations": {"note": "keep me"}, "managedFields": [{"manager": "kubectl"}]},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2026-11-22T01:02:03.000123Z",
                 "renewTime": "2026-11-22T01:02:05.000000Z", "leaseTransitions": 3},
    }
    record = LeaderElectionRecord.from_lease(stored)
    assert record == LeaderElectionRecord(holder_identity="a", lease_duration_seconds=15, acquire_time=T0,
                                          renew_time=T0.replace(second=5, microsecond=0), leader_transitions=3,
                                          annotations={"note": "keep me"})
    renewed = LeaderElectionRecord(holder_identity="a", lease_duration_seconds=15, acquire_time=T0,
                                   renew_time=T0.replace(second=7), leader_transitions=3,
                                   annotations={"note": "keep me", "x": "y"})
    body = renewed.to_lease("ns", "op", stored)
    assert body["metadata"] == {"name": "op", "namespace": "ns", "resourceVersion": "41", "labels": {"team": "x"},
                                "annotations": {"note": "keep me", "x": "y"}}
    assert body["spec"] == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 3,
                            "acquireTime": "2026-11-22T01:02:03.000123Z", "renewTime": "2026-11-22T01:02:07.000123Z"}
    assert stored["metadata"]["managedFields"] == [{"manager": "kubectl"}]  # the base is not modified


def test_a_lease_with_missing_or_odd_fields_reads_as_released() -> None:
    assert LeaderElectionRecord.from_lease({"metadata": {"name": "op"}}) == LeaderElectionRecord()
    odd = {"spec": {"holderIdentity": None, "leaseDurationSeconds": "x", "renewTime": "soon"}}
    assert LeaderElectionRecord.from_lease(odd) == LeaderElectionRecord()


# --- The pure decisions ------------------------------------------------------------------------------

def held_by(holder: str, renew_time: datetime = T0, transitions: int = 2, duration: int = 15) -> LeaderElectionRecord:
    return LeaderElectionRecord(holder_identity=holder, lease_duration_seconds=duration, acquire_time=T0,
                                renew_time=renew_time, leader_transitions=transitions)


@pytest.mark.parametrize("renew_time", [datetime(2001, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)],
                         ids=["renewed-long-ago", "renewed-in-the-future"])
def test_another_holders_lease_expires_only_on_our_clock(renew_time: datetime) -> None:
    state = ElectionState(identity="b").observe(held_by("a", renew_time), now=100.0)
    assert state.next_record(now=114.9, wall=T0, lease_duration_seconds=15, annotations={}) is None
    assert state.next_record(now=115.0, wall=T0, lease_duration_seconds=15,
                             annotations={}) is None  # expired only once observed + duration < now
    taken = state.next_record(now=115.1, wall=T0, lease_duration_seconds=15, annotations={"k": "v"})
    assert taken == LeaderElectionRecord(holder_identity="b", lease_duration_seconds=15, acquire_time=T0, renew_time=T0,
                                         leader_transitions=3, annotations={"k": "v"})


def test_the_expiry_clock_restarts_only_when_the_record_changes() -> None:
    state = ElectionState(identity="b").observe(held_by("a"), now=100.0)
    same = state.observe(held_by("a"), now=110.0)  # read again, unchanged: no sign of life
    assert same.observed_at == 100.0 and same.expired(115.5)
    renewed = state.observe(held_by("a", T0.replace(second=13)), now=110.0)
    assert renewed.observed_at == 110.0 and not renewed.expired(115.5) and renewed.expired(125.5)


def test_a_released_lease_is_taken_at_once() -> None:
    released = LeaderElectionRecord(holder_identity="", lease_duration_seconds=1, acquire_time=T0, renew_time=T0,
                                    leader_transitions=5)
    state = ElectionState(identity="b").observe(released, now=100.0)
    assert state.next_record(now=100.0, wall=T0, lease_duration_seconds=15,
                             annotations={}) == LeaderElectionRecord(holder_identity="b", lease_duration_seconds=15,
                                                                     acquire_time=T0, renew_time=T0,
                                                                     leader_transitions=6)


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    later = T0.replace(minute=9)
    state = ElectionState(identity="a").wrote(held_by("a", transitions=4), sent_at=99.0, now=100.0)
    renewal = state.next_record(now=102.0, wall=later, lease_duration_seconds=15, annotations={"k": "v"})
    assert renewal == LeaderElectionRecord(holder_identity="a", lease_duration_seconds=15, acquire_time=T0,
                                           renew_time=later, leader_transitions=4, annotations={"k": "v"})


def test_leadership_lasts_until_the_renew_deadline_from_the_last_renewal_sent() -> None:
    state = ElectionState(identity="a").wrote(held_by("a"), sent_at=99.0, now=100.0)
    assert state.leads(now=108.9, renew_deadline=10)
    assert not state.leads(now=109.0, renew_deadline=10)
    # Someone else's record ends it at once, whatever the deadline.
    assert not state.observe(held_by("x", T0.replace(second=9)), now=101.0).leads(now=101.0, renew_deadline=10)


def test_holder_changes_are_counted() -> None:
    state = ElectionState(identity="c").observe(held_by("a"), now=0)
    state = state.observe(held_by("a", T0.replace(second=9)), now=5)  # renewal: same holder
    state = state.observe(held_by("b", T0.replace(second=20), transitions=3), now=30)
    state = state.observe(LeaderElectionRecord(holder_identity="", lease_duration_seconds=1, acquire_time=T0,
                                               renew_time=T0, leader_transitions=3), now=40)  # released
    assert state.transitions_seen == 2  # a→b, b→""


def test_release_clears_the_holder_and_only_our_annotations() -> None:
    ours = {LEADER_ENDPOINT_ANNOTATION: "https://10.0.0.1:8443", LEADER_CA_ANNOTATION: "Q0E=", "note": "keep"}
    state = ElectionState(identity="a").wrote(LeaderElectionRecord(holder_identity="a", lease_duration_seconds=15,
                                                                   acquire_time=T0, renew_time=T0, leader_transitions=4,
                                                                   annotations=ours), sent_at=0, now=0)
    release = state.release_record(T0.replace(second=9), frozenset({LEADER_ENDPOINT_ANNOTATION, LEADER_CA_ANNOTATION}))
    assert release == LeaderElectionRecord(holder_identity="", lease_duration_seconds=1,
                                           acquire_time=T0.replace(second=9), renew_time=T0.replace(second=9),
                                           leader_transitions=4, annotations={"note": "keep"})
    assert ElectionState(identity="b").observe(held_by("a"), now=0).release_record(T0) is None


def test_a_dead_predecessors_lease_is_freed_at_once_and_nobody_elses() -> None:
    ours = {LEADER_ENDPOINT_ANNOTATION: "https://10.0.0.1:8443", LEADER_CA_ANNOTATION: "Q0E=", "note": "keep"}
    predecessor = ElectionState(identity="pod-0_new").observe(
        LeaderElectionRecord(holder_identity="pod-0_old", lease_duration_seconds=15, acquire_time=T0, renew_time=T0,
                             leader_transitions=4, annotations=ours), now=100.0)
    same_pod = lambda holder: holder.startswith("pod-0_")  # noqa: E731
    unpublish = frozenset({LEADER_ENDPOINT_ANNOTATION, LEADER_CA_ANNOTATION})
    freed = predecessor.predecessor_release_record(now=100.5, wall=T0.replace(second=9), is_predecessor=same_pod,
                                                   unpublish=unpublish)
    assert freed == LeaderElectionRecord(holder_identity="", lease_duration_seconds=1,
                                         acquire_time=T0.replace(second=9), renew_time=T0.replace(second=9),
                                         leader_transitions=4, annotations={"note": "keep"})
    # Another pod's holder is alive as far as we know: only expiry frees its lease.
    other = ElectionState(identity="pod-0_new").observe(held_by("pod-1_x"), now=100.0)
    assert other.predecessor_release_record(now=100.5, wall=T0, is_predecessor=same_pod) is None
    # Nothing to free: our own lease, a released one, or one already expired (taken the usual way).
    assert ElectionState(identity="pod-0_old").observe(held_by("pod-0_old"), now=100.0).predecessor_release_record(
        now=100.5, wall=T0, is_predecessor=same_pod) is None
    assert ElectionState(identity="pod-0_new").observe(
        LeaderElectionRecord(holder_identity="", lease_duration_seconds=1, acquire_time=T0, renew_time=T0,
                             leader_transitions=4), now=100.0
    ).predecessor_release_record(now=100.5, wall=T0, is_predecessor=same_pod) is None
    assert predecessor.predecessor_release_record(now=116.0, wall=T0, is_predecessor=same_pod) is None


# --- The elector against a fake API and a fake clock ----------------------------------------------------

class FakeTime(FakeClock):
    """The tests' fake clock (its wall reading T0 at monotonic 0), moved only when the elector sleeps."""

    def __init__(self) -> None:
        super().__init__(1000.0, wall=T0.timestamp() + 1000.0)

    async def sleep(self, delay: float) -> None:
        self.advance(delay)
        await asyncio.sleep(0)


class FakeLeases:
    """One Lease with resourceVersions and 409s, like the API server."""

    def __init__(self, time: FakeTime, lease: dict[str, Any] | None = None) -> None:
        self.time = time
        self.lease = lease
        self.version = 1
        self.failing: int | None = None  # answer every PUT with this status
        self.puts: list[tuple[float, dict[str, Any]]] = []  # successful ones, with the time
        self.timeouts: list[tuple[float, float]] = []  # (when, timeout) of every call
        self.before_get: Callable[[], None] = lambda: None

    def store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    def write_spec(self, **spec: Any) -> None:
        """Another replica writes the Lease."""
        assert self.lease is not None
        self.store({**self.lease, "spec": {**self.lease["spec"], **spec}})

    async def get(self, timeout: float) -> dict[str, Any] | None:
        self.timeouts.append((self.time.now, timeout))
        self.before_get()
        return copy.deepcopy(self.lease)

    async def create(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.timeouts.append((self.time.now, timeout))
        if self.lease is not None:
            raise LeaseConflict(409, "already exists")
        return self.store(body)

    async def replace(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.timeouts.append((self.time.now, timeout))
        if self.failing:
            raise LeaseError(self.failing, "injected")
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise LeaseConflict(409, "the object has been modified")
        self.puts.append((self.time.now, body))
        return self.store(body)


def lease(holder: str, renew_time: str = "2026-11-22T01:02:03.000123Z", duration: int = 15,
          transitions: int = 2) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "op", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "leaseTransitions": transitions,
                     "acquireTime": renew_time, "renewTime": renew_time}}


class Candidate:
    """An elector and what its callbacks reported, with the fake time of each event."""

    def __init__(self, leases: FakeLeases, time: FakeTime, identity: str, **options: Any) -> None:
        self.events: list[tuple[str, str, float]] = []
        self.time = time
        self.elector = LeaderElector(
            None, "ns", "op", identity=identity, leases=leases, clock=time.monotonic, wall=time.wall,
            sleep=options.pop("sleep", time.sleep),
            on_started_leading=lambda: self.events.append(("started", identity, time.now)),
            on_stopped_leading=lambda: self.events.append(("stopped", identity, time.now)),
            on_new_leader=lambda leader: self.events.append(("leader", leader, time.now)),
            **options)
        self.task = asyncio.ensure_future(self.elector.run())

    def when(self, kind: str) -> float | None:
        return next((at for event, _, at in self.events if event == kind), None)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def until(condition: Callable[[], object], steps: int = 20_000) -> None:
    """Let the event loop run (fake time moves with it) until the condition holds."""
    for _ in range(steps):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


async def test_the_first_candidate_creates_the_lease_and_leads(time: FakeTime) -> None:
    leases = FakeLeases(time)
    published = {LEADER_ENDPOINT_ANNOTATION: "https://10.0.0.1:8443", LEADER_CA_ANNOTATION: "Q0E="}
    a = Candidate(leases, time, "a", annotations_provider=lambda: published)
    await until(lambda: a.elector.is_leader)
    await a.stop()
    assert a.events == [("leader", "a", 1000.0), ("started", "a", 1000.0)]
    assert leases.lease is not None
    assert leases.lease["metadata"]["annotations"] == published
    assert leases.lease["spec"] == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                                    "acquireTime": "2026-11-22T01:18:43.000123Z",
                                    "renewTime": "2026-11-22T01:18:43.000123Z"}  # T0 + 1000 s


async def test_the_leader_renews_every_retry_period_keeping_acquire_time(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a")
    await until(lambda: len(leases.puts) >= 6)
    await a.stop()
    times = [at for at, _ in leases.puts]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(1.6 <= gap <= 2.0 for gap in gaps), gaps  # retry period 2 s, jitter only shortens it
    specs = [body["spec"] for _, body in leases.puts]
    assert {s["acquireTime"] for s in specs} == {"2026-11-22T01:18:43.000123Z"}
    assert {s["leaseTransitions"] for s in specs} == {0}
    assert all(MICRO_TIME.fullmatch(s["renewTime"]) for s in specs)
    assert len({s["renewTime"] for s in specs}) == len(specs)
    assert max(timeout for _, timeout in leases.timeouts) <= 5.0  # every call well inside the 10 s renew deadline


@pytest.mark.parametrize("renew_time", ["2001-01-01T00:00:00.000000Z", "2100-01-01T00:00:00.000000Z"],
                         ids=["renewed-long-ago", "renewed-in-the-future"])
async def test_a_standby_takes_over_a_silent_lease_after_expiry_on_its_own_clock(
        time: FakeTime, renew_time: str) -> None:
    leases = FakeLeases(time, lease("a", renew_time, transitions=2))
    b = Candidate(leases, time, "b")
    await until(lambda: b.elector.is_leader)
    await b.stop()
    started = b.when("started")
    assert started is not None and 1015.0 < started <= 1015.1  # lease 15 s, read again the moment it runs out
    assert leases.lease is not None and leases.lease["spec"]["leaseTransitions"] == 3
    assert [e[:2] for e in b.events] == [("leader", "a"), ("leader", "b"), ("started", "b")]
    assert b.elector.transitions_seen == 1


async def test_a_leader_that_stops_renewing_is_replaced_within_half_a_retry_period_of_the_lease(
        time: FakeTime) -> None:
    leases = FakeLeases(time, lease("a"))
    stopped_at = 1031.3  # the leader renews every 2 s, then stops dead (SIGSTOP)
    last = [time.now]

    def holder_renews() -> None:
        while last[0] + 2 <= min(time.now, stopped_at):
            last[0] += 2
            leases.write_spec(renewTime=format_micro_time(datetime.fromtimestamp(T0.timestamp() + last[0], UTC)))

    leases.before_get = holder_renews
    b = Candidate(leases, time, "b")
    await until(lambda: b.elector.is_leader)
    await b.stop()
    started = b.when("started")
    # Seen at most half a retry period after it was written, the last renewal expires 15 s later.
    assert started is not None and last[0] + 15 < started <= last[0] + 15 + 1.0 + 0.1


async def test_a_standby_never_takes_a_lease_that_keeps_being_renewed(time: FakeTime) -> None:
    leases = FakeLeases(time, lease("a"))
    renewed_at = [time.now]

    def holder_renews() -> None:
        if time.now - renewed_at[0] >= 5:
            renewed_at[0] = time.now
            leases.write_spec(renewTime=format_micro_time(datetime.fromtimestamp(time.wall(), UTC)))

    leases.before_get = holder_renews
    b = Candidate(leases, time, "b")
    await until(lambda: time.now > 1100)
    await b.stop()
    assert not b.elector.is_leader and b.when("started") is None
    assert leases.puts == [] and b.elector.leader_identity == "a"


async def test_a_released_lease_is_taken_on_the_next_attempt(time: FakeTime) -> None:
    leases = FakeLeases(time, lease("", duration=1, transitions=5))
    b = Candidate(leases, time, "b")
    await until(lambda: b.elector.is_leader)
    await b.stop()
    assert b.when("started") == 1000.0
    assert leases.lease is not None and leases.lease["spec"]["leaseTransitions"] == 6


def outage(leases: FakeLeases, time: FakeTime, ends: float, landing: Callable[[], None] = lambda: None) -> None:
    """Every Lease call fails until `ends`; `landing` runs once, when the API answers again."""
    get, replace, landed = leases.get, leases.replace, list[float]()

    async def failing_get(timeout: float) -> dict[str, Any] | None:
        if time.now < ends:
            leases.timeouts.append((time.now, timeout))
            raise LeaseError(503, "the API server is down")
        if not landed:
            landed.append(time.now)
            landing()
        return await get(timeout)

    async def failing_replace(body: dict[str, Any], timeout: float) -> dict[str, Any]:
        if time.now < ends:
            raise LeaseError(503, "the API server is down")
        return await replace(body, timeout)

    leases.get = failing_get  # type: ignore[method-assign]
    leases.replace = failing_replace  # type: ignore[method-assign]


async def test_after_an_api_outage_longer_than_the_lease_a_standby_leads_within_two_retry_periods(
        time: FakeTime) -> None:
    # The first retry period is left to the holder, which may still be alive and renew.
    leases = FakeLeases(time, lease("a"))  # seen by the standby from 1000 on, renewed no more
    outage_starts, outage_ends = 1005.0, 1065.0  # a minute without an API server: the lease expires meanwhile
    b = Candidate(leases, time, "b")
    await until(lambda: time.now >= outage_starts)
    outage(leases, time, outage_ends)
    await until(lambda: b.elector.is_leader)
    await b.stop()
    started = b.when("started")
    # Its first read after the outage comes within a retry period (2 s); the holder's grace is one
    # more; then it reads every half retry period.
    assert started is not None and outage_ends + 2.0 <= started <= outage_ends + 5.0
    during = [at for at, _ in leases.timeouts if outage_starts <= at < outage_ends]
    assert len(during) <= 60 / 0.5 + 1  # retried with backoff (0.5 s at first), not in a busy loop


async def test_a_leader_that_lost_its_lease_to_an_outage_leads_again_when_the_api_returns(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a", rejoin_after_loss=300)
    await until(lambda: len(leases.puts) >= 2)
    assert leases.lease is not None
    acquired, transitions = leases.lease["spec"]["acquireTime"], leases.lease["spec"]["leaseTransitions"]
    ends = time.now + 40
    # A renewal sent just before the API stalled lands when it returns: the Lease still names "a".
    outage(leases, time, ends, lambda: leases.write_spec(renewTime="2026-11-22T02:00:00.000000Z"))
    await until(lambda: [event for event, _, _ in a.events].count("started") == 2)
    stopped, started_again = [at for event, _, at in a.events if event in ("stopped", "started")][1:]
    assert stopped < ends <= started_again <= ends + 2.0  # within a retry period of the API's return
    assert a.elector.is_leader and not a.task.done()
    spec = leases.lease["spec"]
    assert (spec["holderIdentity"], spec["acquireTime"], spec["leaseTransitions"]) == ("a", acquired, transitions)
    await a.stop()


async def test_waiters_learn_when_a_leader_stops_leads_again_and_when_its_election_ends(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a", rejoin_after_loss=300)
    await until(lambda: len(leases.puts) >= 2)
    stopped = a.elector.next_transition()
    ends = time.now + 40
    outage(leases, time, ends, lambda: leases.write_spec(renewTime="2026-11-22T02:00:00.000000Z"))
    await asyncio.wait_for(stopped, timeout=10)
    assert a.elector.rejoining and not a.elector.is_leader and time.now < ends
    waiters = [a.elector.next_transition() for _ in range(2)]
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=10)  # one renewal ends every wait
    started_again = [at for event, _, at in a.events if event == "started"][1]
    assert a.elector.is_leader and not a.elector.rejoining and ends <= started_again <= ends + 2.0
    outage(leases, time, time.now + 40, lambda: leases.write_spec(holderIdentity="b"))
    await until(lambda: a.elector.rejoining)
    ended = a.elector.next_transition()
    await asyncio.wait_for(a.task, timeout=10)
    assert ended.done() and not a.elector.rejoining  # the election is over: nothing more to wait for


async def test_after_an_api_outage_the_holder_renews_before_a_standby_may_take_its_lease(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a", rejoin_after_loss=300)
    await until(lambda: len(leases.puts) >= 2)
    b = Candidate(leases, time, "b")
    await until(lambda: b.when("leader") is not None)
    ends = time.now + 60  # past the lease: b sees it expired once the API answers
    outage(leases, time, ends)
    await until(lambda: [event for event, _, _ in a.events].count("started") == 2 and time.now >= ends + 10)
    assert b.when("started") is None and leases.lease is not None and leases.lease["spec"]["holderIdentity"] == "a"
    await a.stop()
    await b.stop()


async def test_a_lost_lease_another_replica_took_ends_the_election_without_a_write(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a", rejoin_after_loss=300)
    await until(lambda: len(leases.puts) >= 2)
    ends = time.now + 40
    outage(leases, time, ends, lambda: leases.write_spec(holderIdentity="b"))
    puts = len(leases.puts)
    await asyncio.wait_for(a.task, timeout=10)  # run() returns once "b" is read
    assert ends <= time.now <= ends + 2.0 and [event for event, _, _ in a.events].count("started") == 1
    assert len(leases.puts) == puts and leases.lease is not None and leases.lease["spec"]["holderIdentity"] == "b"


async def test_a_leader_gives_up_rejoining_when_the_api_stays_away(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a", rejoin_after_loss=60)
    await until(lambda: len(leases.puts) >= 2)
    outage(leases, time, time.now + 3600)
    await asyncio.wait_for(a.task, timeout=10)
    stopped = a.when("stopped")
    assert stopped is not None and stopped + 60 <= time.now <= stopped + 62  # tried every retry period at most
    assert not a.elector.is_leader


async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a")
    await until(lambda: len(leases.puts) >= 2)
    leases.failing = 500
    last_renewal = leases.puts[-1][0]
    await asyncio.wait_for(a.task, timeout=10)  # run() returns when leadership is lost
    stopped = a.when("stopped")
    assert stopped is not None and stopped - last_renewal <= 10.0  # renew deadline 10 s, lease 15 s
    assert not a.elector.is_leader
    # No call, however slow, could have kept it leading past the deadline.
    assert all(when + timeout <= last_renewal + 10.0 for when, timeout in leases.timeouts if when > last_renewal)


async def test_a_leader_that_sees_another_holder_stops_at_once_without_overwriting(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a")
    await until(lambda: a.elector.is_leader)
    overwritten_at = time.now
    leases.write_spec(holderIdentity="x", leaseTransitions=1)
    await asyncio.wait_for(a.task, timeout=10)
    stopped = a.when("stopped")
    assert stopped is not None and stopped - overwritten_at <= 2.0  # the next renewal finds out
    assert leases.lease is not None and leases.lease["spec"]["holderIdentity"] == "x"
    assert ("leader", "x") in [e[:2] for e in a.events]


async def test_release_hands_the_lease_over_and_withdraws_what_the_leader_published(time: FakeTime) -> None:
    leases = FakeLeases(time)
    published = {LEADER_ENDPOINT_ANNOTATION: "https://10.0.0.1:8443", LEADER_CA_ANNOTATION: "Q0E="}
    a = Candidate(leases, time, "a", annotations_provider=lambda: published)
    await until(lambda: a.elector.is_leader)
    assert leases.lease is not None
    leases.lease["metadata"]["annotations"]["note"] = "not ours"
    leases.write_spec(leaseTransitions=7)  # someone touched it: release must re-read and still release
    await a.stop()
    assert await a.elector.release() is True
    assert not a.elector.is_leader
    assert leases.lease["metadata"]["annotations"] == {"note": "not ours"}
    spec = leases.lease["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("", 1, 7)
    assert MICRO_TIME.fullmatch(spec["renewTime"])
    assert await a.elector.release() is False  # no longer ours

    released_at = time.now
    b = Candidate(leases, time, "b")
    await until(lambda: b.elector.is_leader)
    await b.stop()
    assert b.when("started") == released_at  # on its very first attempt


async def test_release_by_a_standby_changes_nothing(time: FakeTime) -> None:
    leases = FakeLeases(time, lease("a"))
    b = Candidate(leases, time, "b")
    await until(lambda: b.elector.leader_identity == "a")
    await b.stop()
    before = copy.deepcopy(leases.lease)
    assert await b.elector.release() is False
    assert leases.lease == before


async def test_wake_retries_at_once(time: FakeTime) -> None:
    leases = FakeLeases(time, lease("a"))
    b = Candidate(leases, time, "b", sleep=lambda delay: asyncio.Event().wait())  # never wakes by itself
    await until(lambda: b.elector.leader_identity == "a")
    leases.write_spec(holderIdentity="", leaseDurationSeconds=1)
    b.elector.wake()
    await until(lambda: b.elector.is_leader)
    await b.stop()
    assert time.now == 1000.0


@pytest.mark.parametrize(("lease_duration", "renew_deadline", "retry_period"), [(10, 10, 2), (15, 2, 2), (15, 10, 0)])
def test_inconsistent_durations_are_refused(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    with pytest.raises(ValueError):
        LeaderElector(None, "ns", "op", identity="a", leases=FakeLeases(FakeTime()), lease_duration=lease_duration,
                      renew_deadline=renew_deadline, retry_period=retry_period)


# --- The client it runs on ------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [None, "garbage: [", "apiVersion: v1\nkind: Config\n"],
                         ids=["missing", "not-yaml", "no-context"])
async def test_an_unusable_kubeconfig_is_one_clear_line(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kubeconfig.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KubeConfigError) as raised:
        await api_client(path)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"cannot use kubeconfig {path}: ")


async def test_a_restarted_process_frees_its_predecessors_lease_for_a_warm_standby(time: FakeTime) -> None:
    leases = FakeLeases(time, lease("pod-0_old"))
    standby = Candidate(leases, time, "pod-1_warm")
    await until(lambda: standby.elector.leader_identity == "pod-0_old")
    same_pod = lambda holder: holder.startswith("pod-0_") and holder != "pod-0_new"  # noqa: E731
    restarted = Candidate(leases, time, "pod-0_new", is_predecessor=same_pod)
    await until(lambda: leases.lease is not None and leases.lease["spec"]["holderIdentity"] == "")
    freed_at = time.now
    assert freed_at < 1000.0 + 15.0  # on its first attempt, not after the lease expired
    await until(lambda: standby.elector.is_leader)
    await until(lambda: time.now > freed_at + 10)
    await restarted.stop()
    await standby.stop()
    started = standby.when("started")
    assert started is not None and started - freed_at <= 2.0  # the warm standby's next attempt takes it
    assert restarted.when("started") is None and restarted.elector.leader_identity == "pod-1_warm"


async def test_a_freed_lease_goes_back_to_the_restarted_process_when_no_standby_takes_it(time: FakeTime) -> None:
    leases = FakeLeases(time, lease("pod-0_old"))
    restarted = Candidate(leases, time, "pod-0_new", is_predecessor=lambda holder: holder == "pod-0_old")
    await until(lambda: restarted.elector.is_leader)
    await restarted.stop()
    started = restarted.when("started")
    # It waits one retry period for a warm standby, then takes it on its next attempt.
    assert started is not None and 1000.0 + 2.0 <= started <= 1000.0 + 4.0


async def test_leadership_and_the_write_budget_end_exactly_at_the_renew_deadline(time: FakeTime) -> None:
    leases = FakeLeases(time)
    a = Candidate(leases, time, "a", sleep=lambda delay: asyncio.Event().wait())  # one round, then waits
    await until(lambda: a.elector.is_leader)
    renewed = time.now
    assert a.elector.write_budget() == 15.0  # until a successor could take over
    time.to(renewed + 9.9)
    assert a.elector.is_leader and a.elector.write_budget() == pytest.approx(5.1)
    time.to(renewed + 10.0)  # the renew deadline passed: no round has run, yet it is over
    assert not a.elector.is_leader and a.elector.write_budget() == 0.0
    await a.stop()


async def test_a_suspected_leader_makes_the_standby_read_the_lease_often_until_it_could_expire(
        time: FakeTime) -> None:
    leases = FakeLeases(time, lease("a", duration=15))
    b = Candidate(leases, time, "b")
    await until(lambda: b.elector.leader_identity == "a")
    start = time.now
    b.elector.suspect_leader()
    await until(lambda: time.now > start + 6)
    # After the wait already under way (this fake clock jumps when the elector starts sleeping):
    reads = [when for when, _ in leases.timeouts if start + 2 <= when]
    gaps = [later - earlier for earlier, later in itertools.pairwise(reads)]
    assert gaps and max(gaps) <= 0.25, gaps  # an eighth of the 2 s retry period
    leases.write_spec(holderIdentity="", leaseDurationSeconds=1)  # the restarted pod freed it
    freed_at = time.now
    await until(lambda: b.elector.is_leader)
    await b.stop()
    started = b.when("started")
    assert started is not None and started - freed_at <= 0.25


async def test_the_current_record_is_read_fresh_and_a_new_holder_wakes_the_loop(time: FakeTime) -> None:
    leases = FakeLeases(time, lease("a"))
    b = Candidate(leases, time, "b", sleep=lambda delay: asyncio.Event().wait())  # waits until woken
    await until(lambda: b.elector.leader_identity == "a")
    leases.write_spec(holderIdentity="c", leaseTransitions=3)  # another standby took over meanwhile
    record = await b.elector.current_record()
    assert record is not None and record.holder_identity == "c"
    await until(lambda: b.elector.leader_identity == "c")  # the loop looked again at once
    await b.stop()


async def test_a_restarted_process_frees_the_lease_first_thing_and_then_leaves_it_to_standbys(
        time: FakeTime) -> None:
    leases = FakeLeases(time, lease("pod-0_old"))
    assert leases.lease is not None
    leases.lease["metadata"]["annotations"] = {LEADER_ENDPOINT_ANNOTATION: "https://10.0.0.1:8443",
                                               LEADER_CA_ANNOTATION: "Q0E=", "note": "keep"}
    early = LeaderElector(None, "ns", "op", identity="pod-0_new", leases=leases, clock=time.monotonic, wall=time.wall,
                          is_predecessor=lambda holder: holder == "pod-0_old")
    assert await early.free_dead_predecessor() is True
    assert leases.lease["spec"]["holderIdentity"] == ""
    assert leases.lease["metadata"]["annotations"] == {"note": "keep"}  # agents stop dialing the dead address
    assert early.acquire_after == time.now + 2.0
    assert await early.free_dead_predecessor() is False  # nothing left to free

    restarted = Candidate(leases, time, "pod-0_new", acquire_after=early.acquire_after)
    await until(lambda: restarted.elector.is_leader)  # no standby here: it takes the lease itself, later
    await restarted.stop()
    started = restarted.when("started")
    assert started is not None and started >= early.acquire_after


async def test_a_candidate_that_may_not_take_the_lease_yet_does_not_create_it_either(time: FakeTime) -> None:
    leases = FakeLeases(time)  # no Lease yet
    watcher = Candidate(leases, time, "watcher", acquire_after=time.now + 30)
    await until(lambda: time.now > 1010.0)
    assert leases.lease is None and not watcher.elector.is_leader
    await until(lambda: watcher.elector.is_leader)  # from then on, it creates and takes it
    started = watcher.when("started")
    assert started is not None and started >= 1030.0
    await watcher.stop()


async def test_a_standby_takes_the_lease_at_once_when_the_holders_process_is_known_to_have_ended(
        time: FakeTime) -> None:
    leases = FakeLeases(time, lease("pod-0_old"))
    dead: set[str] = set()
    standby = Candidate(leases, time, "pod-1_warm",
                        holder_ended=lambda record: record.holder_identity in dead)
    await until(lambda: standby.elector.leader_identity == "pod-0_old")
    leases.write_spec(renewTime=format_micro_time(datetime.fromtimestamp(time.wall(), UTC)))  # still renewing
    await until(lambda: time.now > 1003.0)
    assert not standby.elector.is_leader
    dead.add("pod-0_old")  # its pod's container stopped after that renewal
    died = time.now
    standby.elector.wake()
    await until(lambda: standby.elector.is_leader)
    await standby.stop()
    started = standby.when("started")
    assert started is not None and started - died < 0.01  # not after the 15 s lease
    assert leases.lease is not None and leases.lease["spec"]["leaseTransitions"] == 3
