"""The reporter: when a report is due, where it goes, and what happens when that fails.

Fakes stand in for kube-apiserver (the leader Lease, the aggregated path) and for the leader's
own endpoint; the clock is the tests' fake clock, moved by the test. Expectations: reports go straight to the
leader named on the Lease; a standby's 503 sends the agent to the leader it names, or back to the
Lease; an unreachable leader is replaced by the replica that leads now, else bypassed through
kube-apiserver, which is asked less often than the replicas; a leader change gets the full report
at once.
"""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import Callable
from typing import Any

import pytest

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.delivery import Delivery, DeliveryFailed
from colocation.agent.leader_locator import Leader, LeaderLocator, leader_from_lease
from colocation.agent.report import Reporter, ReportOptions, Snapshot, moved, report_trigger
from colocation.kube.backoff import Backoff
from colocation.kube.informer import Transport
from colocation.kube.lease_record import (
    LEADER_CA_ANNOTATION,
    LEADER_CAUSE,
    LEADER_ENDPOINT_ANNOTATION,
    REPLICAS_ANNOTATION,
    REPORTS_ANNOTATION,
    REPORTS_TO_ANY_REPLICA,
    replicas_annotation,
)
from tests.clock import FakeClock
from tests.timing import eventually_async

REPORT_PATH = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics/node-a/status"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/colocation-system/leases/colocation-operator"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot parsed by these tests\n").decode()


def body(cpu: str = "2", memory: str = "4Gi", pods: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    pods = pods if pods is not None else {"default/web-0": ("500m", "1Gi")}
    return {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "node-a"},
            "status": {"updateTime": "2026-11-22T01:02:03Z",
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}},
                       "podsMetric": [{"namespace": key.split("/")[0], "name": key.split("/")[1],
                                       "podUsage": {"resources": {"cpu": c, "memory": m}}}
                                      for key, (c, m) in pods.items()]}}


# ---- the decision ------------------------------------------------------------------------------------

def test_a_snapshot_reads_the_usages_and_pods_of_its_report() -> None:
    snapshot = Snapshot.of(body())
    assert snapshot.usages == {("", "cpu"): 2000, ("", "memory"): 4 * 2**30,
                               ("default/web-0", "cpu"): 500, ("default/web-0", "memory"): 2**30}
    assert snapshot.pods == frozenset({"default/web-0"})


@pytest.mark.parametrize(("before", "after", "expected"), [
    (body(cpu="2"), body(cpu="2190m"), False),  # +9.5 %
    (body(cpu="2"), body(cpu="2210m"), True),  # +10.5 %
    (body(cpu="2"), body(cpu="1790m"), True),  # down counts too
    (body(memory="4Gi"), body(memory="4506Mi"), True),  # 4096Mi + 410Mi: just over 10 %
    (body(memory="4Gi"), body(memory="4505Mi"), False),  # 4096Mi + 409Mi: just under
    # An idle node or pod is judged against at least 1 core / 1 GiB: 20m -> 90m is not a move,
    # 20m -> 130m is.
    (body(cpu="20m"), body(cpu="90m"), False),
    (body(cpu="20m"), body(cpu="130m"), True),
    (body(pods={"default/web-0": ("5m", "1Mi")}), body(pods={"default/web-0": ("80m", "50Mi")}), False),
    (body(pods={"default/web-0": ("1500m", "1Gi")}), body(pods={"default/web-0": ("1700m", "1Gi")}), True),
])
def test_usage_moves_are_relative_to_the_last_report(before: dict[str, Any], after: dict[str, Any],
                                                     expected: bool) -> None:
    assert moved(Snapshot.of(before).usages, Snapshot.of(after).usages, 0.10) is expected


def with_recent(report: dict[str, Any], cpu: str, pod_cpu: str | None = None) -> dict[str, Any]:
    report["status"]["nodeMetric"]["recentUsage"] = {"resources": {"cpu": cpu, "memory": "4Gi"}, "windowSeconds": 10}
    if pod_cpu is not None:
        report["status"]["podsMetric"][0]["recentUsage"] = {"resources": {"cpu": pod_cpu, "memory": "1Gi"}}
    return report


def test_a_load_step_on_the_short_window_is_reported_before_the_long_average_moves() -> None:
    # 1 -> 3 cores: the 300 s average has moved 2 % when the 10 s one has tripled.
    last = Snapshot.of(with_recent(body(cpu="1"), "1", pod_cpu="500m"))
    assert last.usages[("recent:", "cpu")] == 1000 and last.usages[("recent:default/web-0", "cpu")] == 500
    options: dict[str, Any] = {"since_last": 1, "max_interval": 60.0, "threshold": 0.1}
    assert report_trigger(last, Snapshot.of(with_recent(body(cpu="1020m"), "3")), **options) == "usage-changed"
    assert report_trigger(last, Snapshot.of(with_recent(body(cpu="1"), "1", pod_cpu="2")), **options) \
        == "usage-changed"
    assert report_trigger(last, Snapshot.of(with_recent(body(cpu="1020m"), "1050m", pod_cpu="520m")),
                          **options) is None


def test_the_trigger_of_a_report() -> None:
    last = Snapshot.of(body())
    same = Snapshot.of(body())
    options: dict[str, Any] = {"max_interval": 60.0, "threshold": 0.1}
    assert report_trigger(None, same, since_last=0, **options) == "initial"
    assert report_trigger(last, same, since_last=59.9, **options) is None
    assert report_trigger(last, same, since_last=60, **options) == "max-interval"
    assert report_trigger(last, Snapshot.of(body(cpu="3")), since_last=1, **options) == "usage-changed"
    new_pod = body(pods={"default/web-0": ("500m", "1Gi"), "batch/job-1": ("1", "1Gi")})
    assert report_trigger(last, Snapshot.of(new_pod), since_last=1, **options) == "pods-changed"
    assert report_trigger(last, Snapshot.of(body(pods={})), since_last=1, **options) == "pods-changed"


# ---- fakes -------------------------------------------------------------------------------------------

def endpoint(port: int) -> str:
    return f"https://10.0.0.{port}:8443"


def lease(holder: str, port: int | None, replicas: dict[str, int] | None = None, *, anywhere: bool = False,
          ca: str = CA, endpoints: Callable[[int], str] | None = None) -> dict[str, Any]:
    """The leader Lease; `anywhere`: every replica takes reports (--store nats)."""
    address = endpoints or endpoint
    annotations = {LEADER_ENDPOINT_ANNOTATION: address(port), LEADER_CA_ANNOTATION: ca} \
        if port is not None else {}
    if replicas is not None:
        annotations[REPLICAS_ANNOTATION] = replicas_annotation({name: address(p) for name, p in replicas.items()})
    if anywhere:
        annotations[REPORTS_ANNOTATION] = REPORTS_TO_ANY_REPLICA
    return {"metadata": {"name": "colocation-operator", "annotations": annotations},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}


class FakeKube:
    """kube-apiserver: the leader Lease, and the aggregated path of PUTs to `put_path`."""

    def __init__(self, put_path: str = REPORT_PATH) -> None:
        self.lease: dict[str, Any] | None = lease("op-0_a", 1)
        self.put_path = put_path
        self.report_status = 200
        self.report_names: tuple[str, str] | None = None  # the leader a 503 on the aggregated path names
        self.on_put: Callable[[], object] = lambda: None  # what happens elsewhere while a PUT is on its way
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[bytes] = []

    def transport(self) -> Transport:
        raise NotImplementedError

    def bearer_token(self) -> str:
        return "agent-token"

    async def request(self, method: str, path: str, *, body: Any = None, timeout: float,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        self.calls.append((method, path))
        if path == LEASE_PATH:
            return (200, self.lease) if self.lease is not None else (404, {"kind": "Status", "code": 404})
        assert (method, path) == ("PUT", self.put_path)
        self.on_put()
        self.bodies.append(body)
        if self.report_status == 0:
            raise TimeoutError
        answer: dict[str, Any] = {"kind": "Status", "code": self.report_status, "message": "through apiserver"}
        if self.report_names is not None:
            identity, named = self.report_names
            answer["details"] = {"causes": [{"reason": LEADER_CAUSE, "field": identity, "message": named}]}
        return self.report_status, answer


class FakeLeaders:
    """The replicas' own endpoints: status per endpoint (0: refuses connections)."""

    def __init__(self) -> None:
        self.status: dict[str, int] = {}
        self.names: dict[str, tuple[str, str]] = {}  # endpoint -> the leader its 503 names
        self.sent: list[tuple[str, bytes]] = []
        self.attempts: list[str] = []  # every endpoint dialed, refused or not

    async def put(self, leader: Leader, path: str, body: bytes, timeout: float) -> tuple[int, Any]:
        assert path == REPORT_PATH and timeout > 0
        self.attempts.append(leader.endpoint)
        status = self.status.get(leader.endpoint, 200)
        if status == 0:
            raise ConnectionRefusedError("refused")
        self.sent.append((leader.identity, body))
        if status == 503:
            refusal: dict[str, Any] = {"kind": "Status", "code": 503, "reason": "ServiceUnavailable",
                                       "message": "this replica is a standby; send reports to the leader (op-1_b)"}
            if leader.endpoint in self.names:
                identity, named = self.names[leader.endpoint]
                refusal["details"] = {"causes": [{"reason": LEADER_CAUSE, "field": identity, "message": named}]}
            return 503, refusal
        return status, {}


class Setup:
    def __init__(self) -> None:
        self.clock = FakeClock(1000.0)
        self.kube = FakeKube()
        self.leaders = FakeLeaders()
        self.metrics = AgentMetrics()
        self.locator = LeaderLocator(self.kube, poll_interval=10.0, min_refresh_gap=0.0, clock=self.clock)
        self.current = body()
        self.delivery = Delivery(self.kube, self.locator, self.leaders.put, timeout=5.0, clock=self.clock,
                                 apiserver_backoff=Backoff(1.0, 30.0, jitter=0.5, rng=random.Random(3)))
        self.reporter = Reporter("node-a", self.delivery, lambda: Snapshot.of(self.current), options=ReportOptions(),
                                 metrics=self.metrics, clock=self.clock, rng=random.Random(7))

    def sent(self, route: str, trigger: str) -> float:
        return self.metrics.registry.get_sample_value("colocation_agent_reports_sent_total",
                                                      {"route": route, "trigger": trigger}) or 0.0

    def failed(self, reason: str) -> float:
        return self.metrics.registry.get_sample_value("colocation_agent_reports_failed_total",
                                                      {"reason": reason}) or 0.0


@pytest.fixture
def setup() -> Setup:
    return Setup()


# ---- delivery ----------------------------------------------------------------------------------------

def test_the_leader_lease_gives_the_address_only_with_an_endpoint_and_a_ca() -> None:
    leader = leader_from_lease(lease("op-0_a", 1))
    assert leader is not None and leader.reachable and leader.endpoint == "https://10.0.0.1:8443"
    unpublished = leader_from_lease(lease("op-0_a", None))
    assert unpublished == Leader(identity="op-0_a") and not unpublished.reachable
    assert leader_from_lease(lease("", None)) is None  # released: nobody leads


async def test_reports_go_to_the_leader_and_then_only_when_due(setup: Setup) -> None:
    # The next check is when the heartbeat falls due: 10 s, jittered earlier by up to 4 %.
    assert 9.6 <= await setup.reporter.check() <= 10.0
    assert [identity for identity, _ in setup.leaders.sent] == ["op-0_a"]
    assert setup.sent("leader", "initial") == 1
    assert ("PUT", REPORT_PATH) not in setup.kube.calls
    setup.clock.advance(5)
    assert 4.6 <= await setup.reporter.check() <= 5.0
    assert len(setup.leaders.sent) == 1  # nothing changed, and the heartbeat is not due yet
    setup.current = body(cpu="2500m")
    await setup.reporter.check()
    assert setup.sent("leader", "usage-changed") == 1
    setup.clock.advance(10)
    await setup.reporter.check()
    assert setup.sent("leader", "heartbeat") == 1  # unchanged, but the leader hears from the agent every 10 s
    setup.clock.advance(60)
    await setup.reporter.check()
    assert setup.sent("leader", "max-interval") == 1
    assert setup.reporter.age() == 0


async def test_without_a_heartbeat_interval_an_unchanged_state_waits_for_the_max_interval(setup: Setup) -> None:
    reporter = Reporter("node-a", setup.delivery, lambda: Snapshot.of(setup.current),
                        options=ReportOptions(heartbeat_interval=0), metrics=setup.metrics, clock=setup.clock)
    assert await reporter.check() == 10.0
    setup.clock.advance(50)
    assert await reporter.check() == 10.0
    assert len(setup.leaders.sent) == 1
    setup.clock.advance(10)
    await reporter.check()
    assert setup.sent("leader", "max-interval") == 1


async def test_every_accepted_report_tells_the_heartbeat(setup: Setup) -> None:
    heard: list[float] = []
    reporter = Reporter("node-a", setup.delivery, lambda: Snapshot.of(setup.current), metrics=setup.metrics,
                        on_accepted=lambda: heard.append(setup.clock.now), clock=setup.clock)
    await reporter.check()
    setup.leaders.status["https://10.0.0.1:8443"] = 422
    setup.clock.advance(10)
    await reporter.check()  # refused: no heartbeat
    assert heard == [1000.0]


async def test_a_new_leader_gets_the_latest_full_report_at_once(setup: Setup) -> None:
    await setup.reporter.check()
    setup.current = body(cpu="2010m")  # not a move worth a report by itself
    setup.kube.lease = lease("op-1_b", 2)
    assert await setup.locator.refresh()
    assert setup.reporter._wake.is_set()  # the loop checks now, not at the end of its interval
    await setup.reporter.check()
    identity, sent = setup.leaders.sent[-1]
    assert identity == "op-1_b" and b'"cpu":"2010m"' in sent
    assert setup.sent("leader", "leader-changed") == 1
    await setup.reporter.check()
    assert len(setup.leaders.sent) == 2  # once


async def test_a_standby_answering_503_sends_the_agent_back_to_the_lease(setup: Setup) -> None:
    await setup.reporter.check()
    # op-0 lost the lease and restarted as a standby; the Lease already names op-1.
    setup.leaders.status["https://10.0.0.1:8443"] = 503
    setup.kube.lease = lease("op-1_b", 2)
    setup.current = body(cpu="3")
    await setup.reporter.check()
    assert [identity for identity, _ in setup.leaders.sent] == ["op-0_a", "op-0_a", "op-1_b"]
    assert setup.failed("standby") == 1
    # Due for a usage change, but the first full report the new leader gets is the re-send.
    assert setup.sent("leader", "leader-changed") == 1
    assert setup.reporter.delivered_to == "op-1_b"


async def test_an_unreachable_leader_is_bypassed_through_kube_apiserver(setup: Setup) -> None:
    setup.leaders.status["https://10.0.0.1:8443"] = 0
    await setup.reporter.check()
    assert setup.failed("replica-unreachable") == 1
    assert setup.sent("apiserver", "initial") == 1
    assert setup.kube.calls.count(("PUT", REPORT_PATH)) == 1


async def test_without_a_leader_reports_go_through_kube_apiserver(setup: Setup) -> None:
    setup.kube.lease = None
    await setup.reporter.check()
    assert setup.sent("apiserver", "initial") == 1 and setup.leaders.sent == []


async def test_a_standby_behind_kube_apiserver_naming_the_leader_sends_the_report_there_at_once(
        setup: Setup) -> None:
    # The agent read the Lease before anybody led; kube-apiserver routes its report to a standby,
    # which names the leader. The agent reads the Lease again (for the CA) and reports straight to
    # the leader at once, not at its next poll: it also knows the replicas to ask in an outage.
    setup.kube.lease = None
    assert await setup.locator.refresh() and setup.locator.leader is None
    setup.kube.lease = lease("op-0_a", 1, replicas={"op-1_b": 2})
    setup.kube.report_status, setup.kube.report_names = 503, ("op-0_a", endpoint(1))
    await setup.reporter.check()
    assert setup.sent("leader", "initial") == 1 and [who for who, _ in setup.leaders.sent] == ["op-0_a"]
    assert setup.kube.calls.count(("GET", LEASE_PATH)) == 2
    assert setup.delivery.replicas_known
    setup.clock.advance(10)
    await setup.reporter.check()
    assert setup.sent("leader", "heartbeat") == 1 and setup.kube.calls.count(("PUT", REPORT_PATH)) == 1


async def test_a_503_through_kube_apiserver_naming_nobody_new_is_a_failure(setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", None)  # no address published: the Lease cannot make the leader dialable
    setup.kube.report_status, setup.kube.report_names = 503, ("op-0_a", endpoint(1))
    assert await setup.reporter.check() > 0
    assert setup.failed("unavailable") == 1 and setup.leaders.sent == [] and setup.reporter.last_sent is None


async def test_a_released_lease_leaves_the_last_leaders_replicas_to_ask(setup: Setup) -> None:
    # An outage: the leader gave the Lease up (no holder, nothing published) and restarted; its
    # standby op-1_b takes over. The agent still asks the replicas it knew, not kube-apiserver alone.
    setup.kube.lease = lease("op-0_a", 1, replicas={"op-1_b": 2})
    await setup.reporter.check()
    setup.kube.lease = {"metadata": {"name": "colocation-operator"}, "spec": {"holderIdentity": ""}}
    assert await setup.locator.refresh()
    assert setup.delivery.replicas_known  # so retries go to the replicas every 1 to 2 s
    setup.leaders.status[endpoint(1)] = 0  # the old leader's process is gone
    setup.current = body(cpu="3")
    await setup.reporter.check()
    assert setup.reporter.delivered_to == "op-1_b" and setup.locator.leader is not None \
        and setup.locator.leader.identity == "op-1_b"
    assert setup.kube.calls.count(("PUT", REPORT_PATH)) == 0


async def test_a_standby_behind_kube_apiserver_naming_a_leader_learned_meanwhile_sends_the_report_there(
        setup: Setup) -> None:
    setup.kube.lease = None  # nobody led when this report started on its way through kube-apiserver
    assert await setup.locator.refresh() and setup.locator.leader is None
    setup.kube.report_status, setup.kube.report_names = 503, ("op-0_a", endpoint(1))
    learned = leader_from_lease(lease("op-0_a", 1))
    assert learned is not None
    setup.kube.on_put = lambda: setup.locator.adopt(learned)  # another node's request found the leader meanwhile
    await setup.reporter.check()
    assert setup.sent("leader", "initial") == 1 and [who for who, _ in setup.leaders.sent] == ["op-0_a"]
    assert setup.kube.calls.count(("GET", LEASE_PATH)) == 1  # no second read: the leader was known


async def test_a_leader_a_request_already_went_to_is_not_dialled_again_when_a_standby_names_it(
        setup: Setup) -> None:
    setup.leaders.status[endpoint(1)] = 0  # the known leader refuses connections
    setup.kube.report_status, setup.kube.report_names = 503, ("op-0_a", endpoint(1))
    assert await setup.reporter.check() > 0
    assert setup.leaders.attempts.count(endpoint(1)) == 1 and setup.failed("unavailable") == 1


async def test_requests_stuck_on_a_frozen_kube_apiserver_leave_the_replicas_way_free() -> None:
    # Simulated agents share their bounds on requests in flight. One node's PUT through a frozen
    # kube-apiserver waits out its timeout; another node's report to the leader goes meanwhile.
    frozen, replicas_way, apiserver_way = FakeKube(), asyncio.Semaphore(1), asyncio.Semaphore(1)
    frozen.lease = None
    thawed = asyncio.Event()

    async def hanging(method: str, path: str, **options: Any) -> tuple[int, Any]:
        if path == LEASE_PATH:
            return 404, {"kind": "Status", "code": 404}
        await thawed.wait()
        return 503, {}

    frozen.request = hanging  # type: ignore[method-assign]
    leaders = FakeLeaders()
    stuck = Delivery(frozen, LeaderLocator(frozen), leaders.put, timeout=5.0, slots=replicas_way,
                     apiserver_slots=apiserver_way)
    waiting = asyncio.ensure_future(stuck.put(REPORT_PATH, b"{}", lambda reason: None))
    await eventually_async(apiserver_way.locked, 5.0)
    kube = FakeKube()
    locator = LeaderLocator(kube)
    assert await locator.refresh()
    other = Delivery(kube, locator, leaders.put, timeout=5.0, slots=replicas_way, apiserver_slots=apiserver_way)
    assert await asyncio.wait_for(other.put(REPORT_PATH, b"{}", lambda reason: None), 1.0) == ("leader", "op-0_a")
    thawed.set()
    await asyncio.gather(waiting, return_exceptions=True)


def frozen_kube() -> tuple[FakeKube, asyncio.Event]:
    """kube-apiserver frozen for PUTs until the event is set; the Lease is read as `lease` says."""
    frozen, thawed = FakeKube(), asyncio.Event()
    frozen.lease = None

    async def hanging(method: str, path: str, **options: Any) -> tuple[int, Any]:
        if path == LEASE_PATH:
            return (200, frozen.lease) if frozen.lease is not None else (404, {"kind": "Status", "code": 404})
        await thawed.wait()
        return 503, {}

    frozen.request = hanging  # type: ignore[method-assign]
    return frozen, thawed


async def test_a_report_queued_for_kube_apiserver_goes_to_a_leader_learned_meanwhile() -> None:
    # A simulated agent's nodes share one locator and the slots for kube-apiserver. One node's PUT
    # holds the only slot on a frozen kube-apiserver; another node's waits for it. When the
    # locator learns a leader it can dial, the waiting report goes there, not through the queue.
    frozen, thawed = frozen_kube()
    locator, leaders, apiserver_way = LeaderLocator(frozen), FakeLeaders(), asyncio.Semaphore(1)
    stuck = Delivery(frozen, locator, leaders.put, timeout=5.0, apiserver_slots=apiserver_way)
    holding = asyncio.ensure_future(stuck.put(REPORT_PATH, b"{}", lambda reason: None))
    await eventually_async(apiserver_way.locked, 5.0)
    queued = Delivery(frozen, locator, leaders.put, timeout=5.0, apiserver_slots=apiserver_way)
    waiting = asyncio.ensure_future(queued.put(REPORT_PATH, b"{}", lambda reason: None))
    await eventually_async(lambda: bool(apiserver_way._waiters), 5.0)  # queued for the slot
    assert not waiting.done() and leaders.sent == []
    frozen.lease = lease("op-0_a", 1)
    assert await locator.refresh()
    assert await asyncio.wait_for(waiting, 1.0) == ("leader", "op-0_a")
    assert not holding.done()  # the first still waits on kube-apiserver, holding its slot
    thawed.set()
    await asyncio.gather(holding, return_exceptions=True)
    assert not apiserver_way.locked()  # the slot is back


async def test_the_wait_for_a_slot_on_kube_apiserver_is_bounded_by_the_request_timeout() -> None:
    frozen, thawed = frozen_kube()
    locator, leaders, apiserver_way = LeaderLocator(frozen), FakeLeaders(), asyncio.Semaphore(1)
    holding = asyncio.ensure_future(Delivery(frozen, locator, leaders.put, timeout=5.0, apiserver_slots=apiserver_way)
                                    .put(REPORT_PATH, b"{}", lambda reason: None))
    await eventually_async(apiserver_way.locked, 5.0)
    queued = Delivery(frozen, locator, leaders.put, timeout=0.05, apiserver_slots=apiserver_way)
    with pytest.raises(DeliveryFailed) as failure:
        await asyncio.wait_for(queued.put(REPORT_PATH, b"{}", lambda reason: None), 1.0)
    assert failure.value.transient and "no free slot" in str(failure.value)
    thawed.set()
    await asyncio.gather(holding, return_exceptions=True)
    assert not apiserver_way.locked()  # the abandoned wait took no slot with it


async def test_failures_back_off_exponentially_and_retry_with_the_latest_state(setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", None)  # no address published: kube-apiserver is the only way
    setup.kube.report_status = 503  # the aggregation layer has no ready endpoint either
    delays = []
    for _ in range(7):
        delays.append(await setup.reporter.check())
        setup.clock.advance(delays[-1])
    # Nominal 1, 2, 4, 8, 16, 30, 30 s with up to 50 % jitter taken off.
    for delay, nominal in zip(delays, (1, 2, 4, 8, 16, 30, 30), strict=True):
        assert nominal / 2 <= delay <= nominal
    # kube-apiserver was asked once per backoff of its own at most (1, 2, 4, ... s, jittered too).
    assert 5 <= setup.failed("unavailable") == setup.kube.calls.count(("PUT", REPORT_PATH)) <= 7
    setup.kube.lease = lease("op-0_a", 1)
    await setup.locator.refresh()
    setup.current = body(cpu="1900m")
    assert 9.6 <= await setup.reporter.check() <= 10.0  # back to the normal interval
    _, sent = setup.leaders.sent[-1]
    assert b'"cpu":"1900m"' in sent  # the latest state, not the one that failed first
    assert setup.sent("leader", "initial") == 1  # still the reason it was first due
    setup.leaders.status[endpoint(1)] = 0
    setup.clock.advance(60)
    assert await setup.reporter.check() <= 1.0  # the backoff started over


async def test_an_unreachable_leader_is_replaced_by_the_replica_that_leads_now(setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", 1, replicas={"op-0_a": 1, "op-1_b": 2})
    await setup.reporter.check()
    setup.leaders.status[endpoint(1)] = 0  # the leader died; its standby op-1_b took over
    calls = len(setup.kube.calls)
    setup.clock.advance(10)
    await setup.reporter.check()
    assert setup.leaders.attempts[-2:] == [endpoint(1), endpoint(2)]
    assert setup.reporter.delivered_to == "op-1_b" and setup.sent("leader", "leader-changed") == 1
    assert setup.locator.leader is not None and setup.locator.leader.endpoint == endpoint(2)
    assert len(setup.kube.calls) == calls  # neither the Lease nor kube-apiserver was asked


async def test_a_standby_names_the_leader_and_the_report_goes_there_at_once(setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", 1, replicas={"op-0_a": 1, "op-1_b": 2})
    await setup.reporter.check()
    # op-0 restarted as a standby; op-2, a replica the Lease did not list yet, leads.
    setup.leaders.status[endpoint(1)] = 503
    setup.leaders.names[endpoint(1)] = ("op-2_c", endpoint(3))
    calls = len(setup.kube.calls)
    setup.clock.advance(10)
    await setup.reporter.check()
    assert setup.leaders.attempts[-2:] == [endpoint(1), endpoint(3)]
    assert setup.reporter.delivered_to == "op-2_c" and setup.failed("standby") == 1
    assert len(setup.kube.calls) == calls


async def test_while_no_replica_leads_they_are_asked_every_two_seconds_and_kube_apiserver_less_often(
        setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", 1, replicas={"op-0_a": 1, "op-1_b": 2})
    await setup.reporter.check()
    setup.leaders.status.update({endpoint(1): 0, endpoint(2): 503})  # a control-plane outage: nobody leads
    setup.leaders.names[endpoint(2)] = ("op-0_a", endpoint(1))
    setup.kube.report_status = 0  # kube-apiserver does not answer
    setup.clock.advance(10)
    started, delays = setup.clock.now, []
    while setup.clock.now - started < 60:
        delays.append(await setup.reporter.check())
        setup.clock.advance(delays[-1])
    assert all(0.5 <= delay <= 2.0 for delay in delays), delays
    assert len(delays) >= 30
    # kube-apiserver: at 0, ~1, ~3, ~7, ~15, ~31 s, its own backoff (1 s doubling to 30 s, jittered).
    puts = setup.kube.calls.count(("PUT", REPORT_PATH))
    assert 4 <= puts <= 8 and setup.kube.calls.count(("GET", LEASE_PATH)) <= puts + 1
    setup.leaders.status[endpoint(2)] = 200  # op-1_b leads
    setup.clock.advance(await setup.reporter.check())
    assert setup.reporter.delivered_to == "op-1_b"


def waiting_leader(setup: Setup, *, hold: float) -> list[bytes]:
    """op-0_a lost its Lease to an API outage: it holds each report `hold` seconds (on the fake
    clock), then asks for it again at once, naming itself, until it leads again."""
    own, standby = endpoint(1), endpoint(2)
    received: list[bytes] = []
    setup.leaders.status[standby], setup.leaders.names[standby] = 503, ("op-0_a", own)

    async def put(leader: Leader, path: str, body: bytes, *, timeout: float) -> tuple[int, Any]:
        if leader.endpoint != own:
            return await setup.leaders.put(leader, path, body, timeout)
        received.append(body)
        if setup.leaders.status.get(own) == 200:
            return 200, {}
        setup.clock.advance(hold)
        return 503, {"kind": "Status", "code": 503, "message": "this replica does not lead now",
                     "details": {"retryAfterSeconds": 0,
                                 "causes": [{"reason": LEADER_CAUSE, "field": "op-0_a", "message": own}]}}

    setup.delivery.direct = put
    setup.leaders.status[own] = 503
    return received


async def test_a_leader_waiting_to_renew_its_lease_is_asked_again_at_once_and_kube_apiserver_never(
        setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", 1, replicas={"op-0_a": 1, "op-1_b": 2})
    await setup.reporter.check()
    setup.clock.advance(10)
    received = waiting_leader(setup, hold=3.0)
    calls = len(setup.kube.calls)
    for cpu in ("3", "4"):
        setup.current = body(cpu=cpu)
        assert await setup.reporter.check() == 0  # held, then asked for again: at once
    assert len(setup.kube.calls) == calls  # the leader is alive: neither the Lease nor kube-apiserver
    setup.leaders.status[endpoint(1)] = 200  # it renewed its Lease
    setup.current = body(cpu="5")
    assert await setup.reporter.check() > 9  # accepted; the next report at the heartbeat
    assert [b'"cpu":"%s"' % cpu.encode() in sent for sent, cpu in zip(received, "345", strict=True)] == [True] * 3


async def test_a_leader_answering_at_once_with_retry_after_zero_twice_is_retried_with_backoff(setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", 1, replicas={"op-0_a": 1, "op-1_b": 2})
    await setup.reporter.check()
    setup.clock.advance(10)
    waiting_leader(setup, hold=0.0)  # an answer that held nothing: no busy loop
    delays = [await setup.reporter.check() for _ in range(4)]
    assert delays[0] == 0 and delays[1] >= 0.5 and delays[2] == 0 and delays[3] >= 0.5, delays


async def test_a_report_that_waited_for_a_slot_carries_the_figures_of_when_it_was_sent(setup: Setup) -> None:
    # Simulated agents' nodes share a bound on requests in flight: a report may wait for a slot.
    slots = asyncio.Semaphore(1)
    await slots.acquire()
    setup.delivery.slots = slots
    waiting = asyncio.ensure_future(setup.reporter.check())
    await eventually_async(lambda: bool(slots._waiters), 5.0)
    setup.clock.advance(20)  # ... for a long time, while the node's usage changed
    setup.current = body(cpu="7")
    slots.release()
    await asyncio.wait_for(waiting, 5.0)
    [(_, sent)] = setup.leaders.sent
    assert b'"cpu":"7"' in sent
    assert setup.reporter.last_sent is not None and setup.reporter.last_sent.usages[("", "cpu")] == 7000


async def test_a_refused_report_is_not_sent_elsewhere(setup: Setup) -> None:
    setup.leaders.status["https://10.0.0.1:8443"] = 422
    delay = await setup.reporter.check()
    assert delay <= 1.0
    assert setup.failed("http-422") == 1
    assert ("PUT", REPORT_PATH) not in setup.kube.calls


async def test_concurrent_lease_reads_share_one_request(setup: Setup) -> None:
    import asyncio

    setup.locator.min_refresh_gap = 5.0
    await asyncio.gather(*(setup.locator.refresh() for _ in range(10)))
    await setup.locator.refresh()
    assert setup.kube.calls.count(("GET", LEASE_PATH)) == 1
    setup.clock.advance(5)
    await setup.locator.refresh()
    assert setup.kube.calls.count(("GET", LEASE_PATH)) == 2


async def test_reports_the_leader_accepts_defer_the_leader_lease_poll(setup: Setup) -> None:
    # An agent that reports often never polls the Lease; an idle one polls once per interval.
    import asyncio

    slept: list[float] = []
    wake = asyncio.Event()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 1:  # while the locator sleeps, a report reaches the leader 6 s in
            setup.clock.advance(6.0)
            await setup.delivery.put(REPORT_PATH, b"{}", lambda reason: None)
            setup.clock.advance(seconds - 6.0)
            return
        setup.clock.advance(seconds)
        wake.set()
        await asyncio.Event().wait()  # the second sleep ends the test

    locator = setup.locator
    locator._sleep = sleep
    locator._period = Backoff(10.0, 10.0, factor=1.0, jitter=0.0)
    task = asyncio.create_task(locator.run())
    await asyncio.wait_for(wake.wait(), timeout=5)
    task.cancel()
    # The first sleep was the full interval; the report 6 s in moved the next read to 10 s after it.
    assert slept == [10.0, 6.0]
    assert setup.kube.calls.count(("GET", LEASE_PATH)) == 1
    assert setup.leaders.sent and setup.leaders.sent[-1][0] == "op-0_a"
