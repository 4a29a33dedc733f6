"""The node heartbeat Lease, renewed as the kubelet renews its own (KEP "Efficient Node Heartbeats").

A fake API answers like kube-apiserver: a resourceVersion per write, 409 on a stale one, 404 for
what does not exist, and it records every request so the tests can count them.
"""

from __future__ import annotations

import copy
import random
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.heartbeat import HeartbeatError, NodeHeartbeat
from colocation.kube.informer import Transport
from tests.clock import FakeClock

LEASES = "/apis/coordination.k8s.io/v1/namespaces/colocation-node-lease/leases"
MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
WALL = datetime(2026, 11, 22, 1, 2, 3, 456789, tzinfo=UTC).timestamp()


class FakeLeaseApi:
    def __init__(self, node_uid: str | None = "node-uid-1") -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.node_uid = node_uid
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[Any] = []
        self.rv = 100
        self.fail_next: list[BaseException] = []

    def transport(self) -> Transport:
        raise NotImplementedError

    def bearer_token(self) -> str:
        return "token"

    def _commit(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[name] = stored
        return copy.deepcopy(stored)

    def touch(self, name: str) -> None:
        """Someone else writes the Lease: our cached resourceVersion goes stale."""
        self._commit(name, self.leases[name])

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        assert timeout > 0
        self.calls.append((method, path))
        self.bodies.append(copy.deepcopy(body))
        if self.fail_next:
            raise self.fail_next.pop(0)
        if path.startswith("/api/v1/nodes/"):
            if self.node_uid is None:
                return 404, {"kind": "Status", "code": 404}
            return 200, {"metadata": {"name": path.rsplit("/", 1)[1], "uid": self.node_uid}}
        if method == "POST":
            name = body["metadata"]["name"]
            if name in self.leases:
                return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
            return 201, self._commit(name, body)
        name = path.rsplit("/", 1)[1]
        if name not in self.leases:
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
        if method == "GET":
            return 200, copy.deepcopy(self.leases[name])
        if body["metadata"].get("resourceVersion") != self.leases[name]["metadata"]["resourceVersion"]:
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        return 200, self._commit(name, body)


def heartbeat(api: FakeLeaseApi, **kwargs: Any) -> NodeHeartbeat:
    return NodeHeartbeat(api, "node-a", wall=lambda: WALL, **kwargs)


async def test_the_first_renewal_creates_the_lease_owned_by_its_node() -> None:
    api = FakeLeaseApi()
    await heartbeat(api).renew()
    assert api.calls == [("GET", f"{LEASES}/node-a"), ("GET", "/api/v1/nodes/node-a"), ("POST", LEASES)]
    lease = api.leases["node-a"]
    assert lease["spec"] == {"holderIdentity": "node-a", "leaseDurationSeconds": 40,
                             "renewTime": "2026-11-22T01:02:03.456789Z"}
    # As the kubelet sets it: no controller, no blockOwnerDeletion (the agent may not set finalizers).
    assert lease["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node-a",
                                                     "uid": "node-uid-1"}]
    assert lease["metadata"]["namespace"] == "colocation-node-lease"


async def test_a_renewal_is_one_put_from_the_cache_with_its_resource_version() -> None:
    api = FakeLeaseApi()
    beat = heartbeat(api)
    await beat.renew()
    api.calls.clear()
    api.bodies.clear()
    await beat.renew()
    await beat.renew()
    assert api.calls == [("PUT", f"{LEASES}/node-a")] * 2
    assert api.bodies[0]["metadata"]["resourceVersion"] == "101"
    assert api.bodies[1]["metadata"]["resourceVersion"] == "102"
    assert MICRO_TIME.fullmatch(api.leases["node-a"]["spec"]["renewTime"])


async def test_a_conflict_refetches_the_lease_and_renews_it() -> None:
    api = FakeLeaseApi()
    beat = heartbeat(api)
    await beat.renew()
    api.touch("node-a")  # now at 102; our cache says 101
    api.calls.clear()
    await beat.renew()
    assert api.calls == [("PUT", f"{LEASES}/node-a"), ("GET", f"{LEASES}/node-a"), ("PUT", f"{LEASES}/node-a")]
    assert api.bodies[-1]["metadata"]["resourceVersion"] == "102"
    assert api.leases["node-a"]["metadata"]["resourceVersion"] == "103"


async def test_a_deleted_lease_is_created_again() -> None:
    api = FakeLeaseApi()
    beat = heartbeat(api)
    await beat.renew()
    del api.leases["node-a"]
    api.calls.clear()
    await beat.renew()
    assert api.calls == [("PUT", f"{LEASES}/node-a"), ("GET", f"{LEASES}/node-a"), ("POST", LEASES)]
    assert "node-a" in api.leases


async def test_the_owner_reference_is_added_once_the_node_exists() -> None:
    api = FakeLeaseApi(node_uid=None)
    beat = heartbeat(api)
    await beat.renew()
    assert "ownerReferences" not in api.leases["node-a"]["metadata"]
    api.node_uid = "late-uid"
    await beat.renew()
    assert api.leases["node-a"]["metadata"]["ownerReferences"][0]["uid"] == "late-uid"
    api.calls.clear()
    await beat.renew()
    assert api.calls == [("PUT", f"{LEASES}/node-a")]  # the Node is not read again


async def test_failures_raise_with_a_reason_and_are_counted() -> None:
    api = FakeLeaseApi()
    metrics = AgentMetrics()
    beat = heartbeat(api, metrics=metrics)
    api.fail_next = [TimeoutError()]
    with pytest.raises(HeartbeatError) as failure:
        await beat.renew()
    assert failure.value.reason == "timeout"
    api.fail_next = [OSError("connection refused")]
    with pytest.raises(HeartbeatError) as failure:
        await beat.renew()
    assert failure.value.reason == "connection"
    assert metrics.registry.get_sample_value("colocation_agent_lease_renew_failures_total",
                                             {"reason": "timeout"}) == 1
    await beat.renew()  # and it recovers
    assert metrics.registry.get_sample_value("colocation_agent_lease_renew_duration_seconds_count") == 1


def test_timings_follow_the_kubelet_and_every_request_ends_before_the_next_renewal() -> None:
    api = FakeLeaseApi()
    default = heartbeat(api)
    assert default.renew_interval == 10 and default.timeout < 10
    short = heartbeat(api, lease_duration_seconds=3)
    assert short.renew_interval == 0.75 and short.timeout < 0.75
    with pytest.raises(ValueError, match="shorter than the lease duration"):
        heartbeat(api, lease_duration_seconds=3, renew_interval=3)


async def test_the_loop_renews_every_interval_and_retries_sooner_after_a_failure() -> None:
    api = FakeLeaseApi()
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 1:
            api.fail_next = [TimeoutError()]
        if len(delays) == 3:
            raise KeyboardInterrupt  # stop the loop

    clock = FakeClock(1000.0)
    beat = heartbeat(api, sleep=sleep, clock=clock)
    with pytest.raises(KeyboardInterrupt):
        await beat.run()
    renewed, after_failure, recovered = delays
    assert 9.6 <= renewed <= 10  # 4 % jitter, never longer than the interval
    assert after_failure < 1
    assert 9.6 <= recovered <= 10


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.0


class SlowLeaseApi(FakeLeaseApi):
    """Every request takes `latency` seconds of the fake clock."""

    def __init__(self, clock: FakeClock, latency: float) -> None:
        super().__init__()
        self.clock, self.latency = clock, latency

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        self.clock.now += self.latency
        return await super().request(method, path, body=body, timeout=timeout, params=params)


class Stop(Exception):
    pass


def sleeper(clock: FakeClock, delays: list[float], count: int) -> Any:
    """A sleep that advances the fake clock and records the delay; raises Stop at the `count`-th."""

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == count:
            raise Stop
        clock.now += seconds

    return sleep


async def test_renewals_start_at_a_fixed_rate_however_long_one_takes() -> None:
    clock = FakeClock(1000.0)
    api = SlowLeaseApi(clock, latency=1.0)
    delays: list[float] = []
    beat = heartbeat(api, clock=clock, sleep=sleeper(clock, delays, 3), rng=NoJitter())
    with pytest.raises(Stop):
        await beat.run()
    # Creating takes three requests (3 s), a renewal one (1 s): each next one starts 10 s after the last did.
    assert delays == [7.0, 9.0, 9.0]
    assert api.calls[3:] == [("PUT", f"{LEASES}/node-a")] * 2


async def test_a_renewal_after_the_interval_and_its_grace_is_late_and_the_lease_overdue_meanwhile() -> None:
    clock = FakeClock(1000.0)
    api = FakeLeaseApi()
    metrics = AgentMetrics()
    delays: list[float] = []
    overdue: list[bool] = []
    sleep = sleeper(clock, delays, 7)

    async def watching(seconds: float) -> None:
        overdue.append(beat.overdue())
        await sleep(seconds)

    beat = heartbeat(api, clock=clock, sleep=watching, rng=NoJitter(), metrics=metrics)
    assert beat.late_after == pytest.approx(11.0) and not beat.overdue()  # not started: nothing is due

    def late() -> float | None:
        return metrics.registry.get_sample_value("colocation_agent_heartbeats_late_total")

    original = api.request
    failures = iter([False, True, True, True, True, False, False])  # per renewal attempt, from the first

    async def request(method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        if method in ("PUT", "POST") and next(failures):
            raise TimeoutError()
        return await original(method, path, **kwargs)

    api.request = request  # type: ignore[method-assign]
    with pytest.raises(Stop):
        await beat.run()
    # t=0 created; t=10, 10.2, 10.6 and 11.4 time out (backoff 0.2, 0.4, 0.8, 1.6); t=13 renews: late.
    assert delays == pytest.approx([10.0, 0.2, 0.4, 0.8, 1.6, 10.0, 10.0])
    assert overdue == [False, False, False, False, True, False, False]
    assert late() == 1
    assert metrics.registry.get_sample_value("colocation_agent_lease_renew_failures_total",
                                             {"reason": "timeout"}) == 4


async def test_a_failure_without_a_message_is_described_by_its_type() -> None:
    class Silent(Exception):
        pass

    api = FakeLeaseApi()
    api.fail_next = [Silent()]
    with pytest.raises(HeartbeatError, match=r"connection: GET .*/node-a: Silent$"):
        await heartbeat(api).renew()


async def test_the_renew_time_is_stamped_once_the_request_has_its_slot_and_lateness_counts_from_it() -> None:
    clock = FakeClock(1000.0)
    metrics = AgentMetrics()

    class SlowSlots:
        """Every request waits 4 s for a slot, then takes 1 s."""

        async def __aenter__(self) -> None:
            clock.now += 4

        async def __aexit__(self, *exc: object) -> None:
            clock.now += 1

    api = FakeLeaseApi()
    beat = NodeHeartbeat(api, "node-a", wall=lambda: WALL + clock.now - 1000, clock=clock, metrics=metrics,
                         slots=SlowSlots())  # type: ignore[arg-type]
    beat.started_at = clock.now
    await beat.renew()  # GET, GET the Node, POST: the POST gets its slot at +14 s and lands at +15 s
    assert api.leases["node-a"]["spec"]["renewTime"] == "2026-11-22T01:02:17.456789Z"  # WALL + 14 s
    assert beat.age() == 1.0
    assert metrics.registry.get_sample_value("colocation_agent_heartbeats_late_total") == 1  # 15 s after start
    clock.now += 4
    await beat.renew()  # stamped at +23 s, lands at +24 s: 10 s after the renewTime it replaces
    assert api.leases["node-a"]["spec"]["renewTime"] == "2026-11-22T01:02:26.456789Z"
    assert metrics.registry.get_sample_value("colocation_agent_heartbeats_late_total") == 1
    clock.now += 5
    await beat.renew()  # stamped at +33 s, lands at +34 s: 11 s after the last renewTime, within the grace
    assert metrics.registry.get_sample_value("colocation_agent_heartbeats_late_total") == 1
    clock.now += 6
    await beat.renew()  # stamped at +44 s, lands at +45 s: 12 s after the last renewTime, late
    assert metrics.registry.get_sample_value("colocation_agent_heartbeats_late_total") == 2


# ---- reports are the heartbeat; the Lease registers and falls back ------------------------------

class Reports:
    """The reporter as the heartbeat sees it: seconds since the leader last accepted a report."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.accepted_at: float | None = None

    def age(self) -> float:
        return float("inf") if self.accepted_at is None else self.clock.now - self.accepted_at


async def test_while_reports_are_accepted_the_lease_is_renewed_only_as_a_registration() -> None:
    clock = FakeClock(1000.0)
    api, metrics, reports = FakeLeaseApi(), AgentMetrics(), Reports(clock)
    delays: list[float] = []
    sleep = sleeper(clock, delays, 70)
    beat: NodeHeartbeat

    async def reporting(seconds: float) -> None:
        await sleep(seconds)
        reports.accepted_at = clock.now  # a report every tick, accepted
        beat.heard()

    beat = heartbeat(api, clock=clock, sleep=reporting, rng=NoJitter(), metrics=metrics, reports=reports.age,
                     registration_interval=300)
    with pytest.raises(Stop):
        await beat.run()  # 70 ticks of 10 s: 700 s
    writes = [call for call in api.calls if call[0] in ("PUT", "POST")]
    assert len(writes) == 3  # at start, then every 300 s
    renewals = metrics.registry.get_sample_value("colocation_agent_lease_renewals_total", {"reason": "registration"})
    assert renewals == 3
    # The Lease promises the next registration, so it never looks expired in between.
    assert api.leases["node-a"]["spec"]["leaseDurationSeconds"] == 40 + 300
    assert not beat.overdue()
    assert metrics.registry.get_sample_value("colocation_agent_heartbeats_late_total") == 0


async def test_without_accepted_reports_the_lease_carries_the_heartbeat_every_interval() -> None:
    clock = FakeClock(1000.0)
    api, metrics, reports = FakeLeaseApi(), AgentMetrics(), Reports(clock)
    reports.accepted_at = clock.now
    delays: list[float] = []
    beat = heartbeat(api, clock=clock, sleep=sleeper(clock, delays, 8), rng=NoJitter(), metrics=metrics,
                     reports=reports.age)
    with pytest.raises(Stop):
        await beat.run()  # the leader never accepts another report: t=0 registers, t=10 is within 15 s
    fallback = metrics.registry.get_sample_value("colocation_agent_lease_renewals_total", {"reason": "fallback"})
    assert fallback == 6  # t=20, 30, 40, 50, 60, 70
    assert api.leases["node-a"]["spec"]["leaseDurationSeconds"] == 40
    assert beat.fallback_after == 15


async def test_an_accepted_report_is_a_heartbeat_and_a_late_one_is_counted() -> None:
    clock = FakeClock(1000.0)
    metrics = AgentMetrics()
    beat = heartbeat(FakeLeaseApi(), clock=clock, metrics=metrics, reports=lambda: 0.0)
    beat.started_at = clock.now
    clock.now += 9
    beat.heard()
    assert beat.age() == 0 and not beat.overdue()
    clock.now += 11.5
    assert beat.overdue()
    beat.heard()
    assert metrics.registry.get_sample_value("colocation_agent_heartbeats_late_total") == 1
    assert not beat.overdue()


def test_a_registration_interval_shorter_than_the_heartbeat_is_refused() -> None:
    with pytest.raises(ValueError, match="registration interval"):
        heartbeat(FakeLeaseApi(), registration_interval=5)


async def test_before_the_first_report_the_silence_counts_from_the_start() -> None:
    clock = FakeClock(1000.0)
    api, metrics = FakeLeaseApi(), AgentMetrics()
    beat = heartbeat(api, clock=clock, sleep=sleeper(clock, [], 3), rng=NoJitter(), metrics=metrics,
                     reports=lambda: float("inf"))
    with pytest.raises(Stop):
        await beat.run()  # ticks at 0 (registration), 10 (within 15 s of the start), 20 (fallback)
    assert metrics.registry.get_sample_value("colocation_agent_lease_renewals_total", {"reason": "fallback"}) == 1


async def test_when_reports_flow_again_the_lease_registers_at_once() -> None:
    clock = FakeClock(1000.0)
    api, metrics, reports = FakeLeaseApi(), AgentMetrics(), Reports(clock)
    reports.accepted_at = clock.now
    delays: list[float] = []
    sleep = sleeper(clock, delays, 6)

    async def resuming(seconds: float) -> None:
        await sleep(seconds)
        if clock.now >= 1030:  # the leader accepts reports again from t=30
            reports.accepted_at = clock.now

    beat = heartbeat(api, clock=clock, sleep=resuming, rng=NoJitter(), metrics=metrics, reports=reports.age)
    with pytest.raises(Stop):
        await beat.run()  # t=0 registers, t=20 falls back, t=30 registers again, t=40 and 50 leave it alone
    assert metrics.registry.get_sample_value("colocation_agent_lease_renewals_total", {"reason": "fallback"}) == 1
    assert metrics.registry.get_sample_value("colocation_agent_lease_renewals_total",
                                             {"reason": "registration"}) == 2
    assert api.leases["node-a"]["spec"]["leaseDurationSeconds"] == 640
