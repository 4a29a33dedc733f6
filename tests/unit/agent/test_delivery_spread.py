"""Reports where every replica takes them (--store nats): each node to the replica it ranks first.

Replicas here are real API servers over HTTPS in this process, sharing one store as replicas share
the NodeMetric stream; the agents' side is the real Delivery and session_put. Expectations: reports
spread over the replicas, each node keeps to one; a replica that stops hands its nodes to the next
ones with no failed report; an answer tells an agent of replicas the Lease did not name, once; a
new leader gets no re-send.
"""

from __future__ import annotations

import base64
import random
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.delivery import Delivery, session_put
from colocation.agent.leader_locator import UNANSWERED_SECONDS, Leader, LeaderLocator, leader_from_lease
from colocation.agent.report import Reporter, ReportOptions, Snapshot
from colocation.apimachinery import certificates
from colocation.apimachinery.served_apigroups import Caller
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authentication import DelegatingAuthenticator, TokenReviewResult
from colocation.apiserver.delegated_authorization import DelegatingAuthorizer, SubjectAccessSpec
from colocation.apiserver.generic_apiserver import AggregatedApiServer
from colocation.apiserver.nodemetric_routes import NodeMetricGroup
from colocation.kube.lease_record import AdvertisedReplicas
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import ValidatedReport
from colocation.nodemetrics.storage_interface import Entry
from tests.clock import FakeClock
from tests.unit.agent.test_report import FakeKube, body, lease

AGENT = "system:serviceaccount:colocation-system:colocation-agent"
NODES = [f"node-{index}" for index in range(30)]


def report_path(node: str) -> str:
    return f"/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{node}/status"


def report(node: str, cpu: str = "2") -> bytes:
    sent = body(cpu=cpu)
    sent["metadata"]["name"] = node
    return orjson.dumps(sent)


class Replica:
    """An operator replica's API server over HTTPS: takes reports into the shared store, and
    advertises `advertised` replicas."""

    def __init__(self, identity: str, store: NodeMetricStore, ca: certificates.CertKey,
                 advertised: dict[str, str]) -> None:
        self.identity = identity
        self.taken: list[str] = []  # the nodes whose reports it took
        authorizer = DelegatingAuthorizer(self._may)

        async def shared(validated: ValidatedReport, labels: Mapping[str, str]) -> Entry:
            self.taken.append(validated.name)
            return store.put(validated, labels)

        group = NodeMetricGroup(store, authorizer, _Standby(), known_node=lambda node: True,
                                node_labels=lambda node: {}, metrics=ServerMetrics(), shared_writes=shared,
                                advertised_replicas=lambda: AdvertisedReplicas.of(advertised))
        api = AggregatedApiServer(DelegatingAuthenticator(self._review), authorizer, lambda: None,
                                  leadership=_Standby(), metrics=ServerMetrics(), groups=[group])
        self.cert = certificates.issue_certificate(ca, "colocation-operator", dns_names=("colocation-operator",))
        self.server = TestServer(api.application(), host="127.0.0.1")

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    @staticmethod
    async def _review(token: str) -> TokenReviewResult:  # the token is the node's name
        node = {"authentication.kubernetes.io/node-name": (token,)}
        return TokenReviewResult(True, Caller(username=AGENT, extra=node))

    @staticmethod
    async def _may(spec: SubjectAccessSpec) -> bool:
        return spec.user == AGENT


class _Standby:
    is_leader = False
    leader_identity = "op-0"
    leader_endpoint = ""


class Cluster:
    """Three replicas; the Lease names op-0 as the leader, and as `published` says, its replicas."""

    def __init__(self) -> None:
        self.ca = certificates.new_ca("colocation-ca")
        self.store = NodeMetricStore(clock_wall=lambda: 1_800_000_000.0, clock_monotonic=lambda: 0.0)
        self.advertised: dict[str, str] = {}
        self.replicas = {identity: Replica(identity, self.store, self.ca, self.advertised)
                         for identity in ("op-0", "op-1", "op-2")}
        self.kube = FakeKube()
        self.learned: list[str] = []
        self.locator = LeaderLocator(self.kube, poll_interval=60.0, min_refresh_gap=0.0)
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        for replica in self.replicas.values():
            await replica.server.start_server(ssl=certificates.ssl_server_context(replica.cert))
        self.advertised.update({identity: replica.endpoint for identity, replica in self.replicas.items()})
        self.session = aiohttp.ClientSession()

    def publish(self, identities: list[str], *, leader: str = "op-0", anywhere: bool = True) -> None:
        ports = {identity: self.replicas[identity].server.port or 0 for identity in [leader, *identities]}
        self.kube.lease = lease(leader, ports[leader], {identity: ports[identity] for identity in identities},
                                anywhere=anywhere, ca=base64.b64encode(self.ca.cert_pem).decode(),
                                endpoints=lambda port: f"https://127.0.0.1:{port}")

    def delivery(self, node: str) -> Delivery:
        assert self.session is not None

        def learn(text: str) -> None:
            self.learned.append(text)
            self.locator.learn_replicas(text)

        return Delivery(self.kube, self.locator, session_put(self.session, lambda: node, learn_replicas=learn),
                        timeout=5.0)

    async def report_all(self, failed: list[str] | None = None) -> dict[str, str]:
        """Every node reports once; node -> the replica that took it. Failed attempts on the way
        go to `failed`, else there must be none."""
        routes: dict[str, str] = {}
        attempts: list[str] = []
        for node in NODES:
            route, identity = await self.delivery(node).put(report_path(node), report(node), attempts.append,
                                                             any_replica=True)
            assert identity is not None and route in ("leader", "replica")
            routes[node] = identity
        if failed is None:
            assert attempts == []
        else:
            failed += attempts
        assert ("PUT", report_path(NODES[0])) not in self.kube.calls  # never through kube-apiserver
        return routes

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        for replica in self.replicas.values():
            await replica.server.close()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    cluster = Cluster()
    await cluster.start()
    yield cluster
    await cluster.close()


async def test_reports_spread_over_the_replicas_and_each_node_keeps_to_one(cluster: Cluster) -> None:
    cluster.publish(["op-0", "op-1", "op-2"])
    await cluster.locator.refresh()
    first, again = await cluster.report_all(), await cluster.report_all()
    assert first == again
    assert set(Counter(first.values())) == {"op-0", "op-1", "op-2"}
    assert min(Counter(first.values()).values()) >= 5  # of 30: none left idle
    assert [entry.name for entry in cluster.store.list()[0]] == sorted(NODES)
    assert cluster.learned == []  # the agent knew every replica: no answer repeated them


async def test_a_replica_that_stops_hands_its_nodes_to_the_others_and_no_report_fails(cluster: Cluster) -> None:
    cluster.publish(["op-0", "op-1", "op-2"])
    await cluster.locator.refresh()
    before = await cluster.report_all()
    await cluster.replicas["op-1"].server.close()
    failed: list[str] = []
    after = await cluster.report_all(failed)
    assert "op-1" not in after.values()
    # The first of op-1's nodes found it gone; the others of the process went to the next at once.
    assert failed == ["replica-unreachable"]
    # Only op-1's nodes moved (rendezvous ranking): the others' replicas kept their load.
    assert {node for node in NODES if before[node] != after[node]} == {node for node in NODES if before[node] == "op-1"}


async def test_an_answer_tells_the_agent_of_replicas_the_lease_did_not_name_once(cluster: Cluster) -> None:
    cluster.publish(["op-0"])  # published before the others were Ready
    await cluster.locator.refresh()
    first = await cluster.report_all()
    assert first[NODES[0]] == "op-0"  # the one replica the agent knew
    assert len(cluster.learned) == 1  # that answer named all three; the agent's next reports said it knew them
    leader = cluster.locator.leader
    assert leader is not None and dict(leader.replicas) == cluster.advertised
    assert set((await cluster.report_all()).values()) == {"op-0", "op-1", "op-2"}
    assert len(cluster.learned) == 1
    assert [call for call in cluster.kube.calls if call[0] == "GET"] == [cluster.kube.calls[0]]  # one Lease read


def test_a_replica_that_goes_moves_only_the_nodes_it_ranked_first() -> None:
    replicas = tuple((f"op-{index}", f"https://10.0.0.{index}:8443") for index in range(4))
    leader = Leader(identity="op-0", endpoint=replicas[0][1], ca_pem=b"ca", replicas=replicas, reports_anywhere=True)
    without = Leader(identity="op-0", endpoint=replicas[0][1], ca_pem=b"ca", replicas=replicas[:3],
                     reports_anywhere=True)
    keys = [report_path(f"node-{index}") for index in range(4000)]
    firsts = {key: leader.ranked_for(key)[0].identity for key in keys}
    assert all(800 <= count <= 1200 for count in Counter(firsts.values()).values())  # 1000 each, give or take
    moved = {key for key in keys if without.ranked_for(key)[0].identity != firsts[key]}
    assert moved == {key for key in keys if firsts[key] == "op-3"}
    assert [replica.identity for replica in leader.ranked_for(keys[0])] \
        == [replica.identity for replica in leader.ranked_for(keys[0])]  # the same order every time
    assert len(leader.ranked_for(keys[0])) == 4


def node_a_reporter(delivery: Delivery, metrics: AgentMetrics, clock: FakeClock) -> Reporter:
    return Reporter("node-a", delivery, lambda: Snapshot.of(body()), options=ReportOptions(), metrics=metrics,
                    clock=clock, rng=random.Random(7))


async def test_where_every_replica_takes_reports_a_new_leader_gets_no_resend() -> None:
    kube, clock = FakeKube(), FakeClock(1000.0)
    kube.lease = lease("op-0", 1, {"op-0": 1, "op-1": 2}, anywhere=True)
    locator = LeaderLocator(kube, poll_interval=10.0, min_refresh_gap=0.0, clock=clock)
    sent: list[str] = []

    async def put(leader: Leader, path: str, body: bytes, *, timeout: float) -> tuple[int, Any]:
        sent.append(leader.identity)
        return 200, {}

    metrics = AgentMetrics()
    reporter = node_a_reporter(Delivery(kube, locator, put, timeout=5.0, clock=clock), metrics, clock)
    await reporter.check()
    assert len(sent) == 1
    kube.lease = lease("op-1", 2, {"op-0": 1, "op-1": 2}, anywhere=True)
    assert await locator.refresh()
    clock.advance(1)
    await reporter.check()
    assert len(sent) == 1  # nothing to re-send: the replicas share one store
    assert leader_from_lease(kube.lease) == locator.leader
    assert metrics.registry.get_sample_value("colocation_agent_reports_sent_total",
                                             {"route": "leader", "trigger": "leader-changed"}) is None


def test_a_replica_that_did_not_answer_is_asked_last_for_a_while_then_in_its_turn_again() -> None:
    clock = FakeClock(1000.0)
    locator = LeaderLocator(FakeKube(), clock=clock)
    replicas = [Leader(identity=f"op-{index}", endpoint=f"https://10.0.0.{index}:8443") for index in range(3)]
    locator.unanswered(replicas[0].endpoint)
    assert [r.identity for r in locator.ask_last(replicas)] == ["op-1", "op-2", "op-0"]
    clock.advance(UNANSWERED_SECONDS + 1)
    assert [r.identity for r in locator.ask_last(replicas)] == ["op-0", "op-1", "op-2"]
    locator.unanswered(replicas[1].endpoint)
    locator.answered(replicas[1].endpoint)  # it took the next one
    assert [r.identity for r in locator.ask_last(replicas)] == ["op-0", "op-1", "op-2"]


async def test_a_replica_that_cannot_write_is_passed_over_at_once_and_asked_last_for_a_while() -> None:
    kube, clock = FakeKube(), FakeClock(1000.0)
    kube.lease = lease("op-0", 1, {"op-0": 1, "op-1": 2}, anywhere=True)
    locator = LeaderLocator(kube, poll_interval=10.0, min_refresh_gap=0.0, clock=clock)
    published = leader_from_lease(kube.lease)
    assert published is not None
    ranked = published.ranked_for(report_path("node-a"))
    first = ranked[0]
    sent: list[str] = []

    async def put(leader: Leader, path: str, body: bytes, *, timeout: float) -> tuple[int, Any]:
        sent.append(leader.identity)
        if leader.identity == first.identity:  # cut off from NATS: 503, naming no leader
            return 503, {"kind": "Status", "code": 503, "message": "the NodeMetric stream did not take the report",
                         "details": {"retryAfterSeconds": 1}}
        return 200, {}

    metrics = AgentMetrics()
    reporter = node_a_reporter(Delivery(kube, locator, put, timeout=5.0, clock=clock), metrics, clock)
    await reporter.check()
    assert sent[0] == first.identity and len(sent) == 2  # the other replica took it in the same attempt
    assert metrics.registry.get_sample_value("colocation_agent_reports_failed_total",
                                             {"reason": "replica-unavailable"}) == 1
    assert locator.ask_last(ranked)[-1] == first  # the next reports ask it last while it may still be cut off
    clock.advance(UNANSWERED_SECONDS + 1)
    assert locator.ask_last(ranked)[0] == first
