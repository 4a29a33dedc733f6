"""NodeMetrics on NATS JetStream while NATS servers fail (`--store nats` only; skipped otherwise).

The module starts its own sandbox with `--store nats` (3 nats-servers with TLS and the operators'
user, file storage: the default) and two operator replicas. The test is the agents: each of its
nodes reports in turn, straight to the leader with a token bound to the node's agent pod, every
report numbered (the number is its CPU usage, in millicores), every answer kept. It SIGKILLs
servers (found in STATE_DIR/nats/cluster.json) and starts them again with their configuration and
`store_dir`, as a StatefulSet would.

- One server down (the stream's leader): nothing acknowledged is lost, and reports are taken again.
- Two down (no quorum): every report gets 503 with Retry-After; reads are served from each
  replica's copy, with a Warning header that it may be stale (`JetStreamNodeMetrics.read_barrier`
  and `stale_warning`), through the APIService and from each replica directly.
- All back: every node is fresh on every replica within one report interval (the agents' default,
  10 s, times the timing factor).

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import aiohttp
import orjson
import pytest

from colocation.apimachinery.quantity import cpu_millis
from colocation_sandbox.launcher.nats_cluster import NatsCluster, NatsServer
from tests.e2e.kube import Kube, bound_token
from tests.e2e.nats_sandbox import nats_sandbox
from tests.e2e.test_operator import BASE, leader, make_node, replicas, report
from tests.timing import TIME_FACTOR, eventually_async

STREAM = "KV_colocation-nodemetrics"
REPORT_INTERVAL = 10.0  # the agents' default --report-interval: "every node fresh within one report interval"
PACE = 0.3  # between two rounds of the test's agents (their pace, not synchronisation)
NODES = 3
NATS_REQUEST_TIMEOUT = 2.0  # the operator's (nats_connection.NatsOptions.timeout)


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    yield from nats_sandbox(request, tmp_path_factory, [])


@pytest.fixture
async def reader_token(admin: Kube) -> str:
    return await bound_token(admin, "e2e-nats-reader", [{
        "apiGroups": ["metrics.colocation.dev"], "resources": ["nodemetrics"], "verbs": ["get", "list", "watch"]}])


# ---- NATS servers ------------------------------------------------------------------------------

async def jetstream_detail(server: NatsServer) -> dict[str, Any] | None:
    """The NodeMetric stream as `server`'s monitoring port describes it (None: no answer, or no stream)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session, session.get(
                f"http://127.0.0.1:{server.monitor_port}/jsz?streams=true") as response:
            jsz = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    streams = [s for account in jsz.get("account_details") or () for s in account.get("stream_detail") or ()]
    return next((s for s in streams if s["name"] == STREAM), None)


async def stream_leader(cluster: NatsCluster) -> NatsServer:
    async def named() -> str | None:
        for server in cluster.servers:
            detail = await jetstream_detail(server) if server.pid else None
            if detail and detail["cluster"].get("leader"):
                return str(detail["cluster"]["leader"])
        return None

    name = await eventually_async(named, timeout=30, message="the NodeMetric stream has a leader")
    return next(server for server in cluster.servers if server.name == name)


async def stream_whole(cluster: NatsCluster) -> bool:
    """Whether the stream has a leader and both other replicas are current."""
    for server in cluster.servers:
        detail = await jetstream_detail(server)
        if detail and detail["cluster"].get("leader") == server.name:
            peers = detail["cluster"].get("replicas") or []
            return len(peers) == len(cluster.servers) - 1 and all(peer.get("current") for peer in peers)
    return False


async def start_again(cluster: NatsCluster, servers: list[NatsServer]) -> None:
    """Start killed servers again (their configuration, ports and store_dir) and wait for the cluster."""
    for server in servers:
        await cluster.start_server(server)
    await cluster.wait_ready(timeout=30 * TIME_FACTOR)
    for server in servers:  # this test's event loop ends with it: later ones know the server by its pid
        server.process = None


# ---- the test's agents -------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Answer:
    node: str
    number: int  # the report's own number, sent as its CPU usage in millicores
    status: int
    retry_after: str | None
    version: int  # the resourceVersion answered (0 unless 200)
    sent_at: float  # time.monotonic()


@dataclass
class Agents:
    """The nodes' agents: a round of reports every PACE seconds, each node's straight to the leader."""

    admin: Kube
    nodes: dict[str, str]  # node -> its agent's token
    answers: list[Answer] = field(default_factory=list)
    numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    async def run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10 * TIME_FACTOR)) as session:
            while True:
                _, endpoint, context = await leader(self.admin)
                await asyncio.gather(*(self._report(session, endpoint, context, node, token)
                                       for node, token in self.nodes.items()))
                await asyncio.sleep(PACE)  # the agents' pace

    async def _report(self, session: aiohttp.ClientSession, endpoint: str, context: ssl.SSLContext, node: str,
                      token: str) -> None:
        number, sent_at = next(self.numbers), time.monotonic()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        try:
            async with session.put(f"{endpoint}{BASE}/{node}/status", data=orjson.dumps(report(node, cpu=f"{number}m")),
                                   headers=headers, ssl=context) as response:
                body = orjson.loads(await response.read() or b"{}")
                status, retry_after = response.status, response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError):
            status, retry_after, body = 0, None, {}
        version = int(body["metadata"]["resourceVersion"]) if status == 200 else 0
        self.answers.append(Answer(node=node, number=number, status=status, retry_after=retry_after,
                                   version=version, sent_at=sent_at))

    def acked(self, *, since: float = 0.0) -> dict[str, Answer]:
        """Each node's last acknowledged report sent at `since` or later."""
        last: dict[str, Answer] = {}
        for answer in self.answers:
            if answer.status == 200 and answer.sent_at >= since:
                last[answer.node] = answer
        return last

    def every_node_acked(self, *, since: float = 0.0) -> bool:
        return set(self.acked(since=since)) == set(self.nodes)


@contextlib.asynccontextmanager
async def reporting(agents: Agents) -> AsyncIterator[Agents]:
    task = asyncio.create_task(agents.run())
    try:
        yield agents
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def new_nodes(admin: Kube) -> dict[str, str]:
    return dict([await make_node(admin) for _ in range(NODES)])


def number_of(item: dict[str, Any]) -> int:
    return cpu_millis(item["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"])


async def list_through_the_apiservice(admin: Kube) -> tuple[int, Any, str | None]:
    """A list of NodeMetrics through kube-apiserver: (status, body, its Warning header)."""
    assert admin.session is not None
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {admin.token}"} if admin.token else {})}
    async with admin.session.get(admin.server + BASE, ssl=admin.ssl, headers=headers) as response:
        return response.status, orjson.loads(await response.read()), response.headers.get("Warning")


async def served_through_the_apiservice(admin: Kube, nodes: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Each node's (number, resourceVersion) as a list through kube-apiserver serves it."""
    status, listed = await admin.request("GET", BASE)
    assert status == 200, listed
    return {item["metadata"]["name"]: (number_of(item), int(item["metadata"]["resourceVersion"]))
            for item in listed["items"] if item["metadata"]["name"] in nodes}


async def get_with_warning(replica: dict[str, Any], path: str, token: str) -> tuple[int, Any, str | None]:
    """`tests.e2e.kube.get_from_replica`, with the answer's Warning header."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    url = f"https://{replica.get('host', '127.0.0.1')}:{replica['port']}{path}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10 * TIME_FACTOR)) as session, session.get(
            url, ssl=unverified, headers={"Authorization": f"Bearer {token}"}) as response:
        return response.status, orjson.loads(await response.read()), response.headers.get("Warning")


@overload
async def served_by_each_replica(state: Path, token: str, nodes: dict[str, str], reads: list[Read] | None = None,
                                 *, until_refused: Literal[False] = False) -> list[dict[str, tuple[int, int]]]: ...


@overload
async def served_by_each_replica(state: Path, token: str, nodes: dict[str, str], reads: list[Read] | None = None,
                                 *, until_refused: Literal[True]) -> list[dict[str, tuple[int, int]]] | None: ...


async def served_by_each_replica(state: Path, token: str, nodes: dict[str, str], reads: list[Read] | None = None,
                                 *, until_refused: bool = False) -> list[dict[str, tuple[int, int]]] | None:
    """Each replica's answer to a get of each node, straight from it (each read added to `reads`).
    Every get must answer 200; with `until_refused`, the first that does not makes it None."""
    served = []
    for replica in replicas(state):
        copy = {}
        for node in nodes:
            started = time.monotonic()
            status, item, warning = await get_with_warning(replica, f"{BASE}/{node}", token)
            if until_refused and status != 200:
                return None
            assert status == 200, (replica["identity"], node, item)
            copy[node] = (number_of(item), int(item["metadata"]["resourceVersion"]))
            if reads is not None:
                reads.append(Read(seconds=time.monotonic() - started, warning=warning))
        served.append(copy)
    return served


@dataclass(frozen=True, kw_only=True)
class Read:
    seconds: float
    warning: str | None

    @property
    def unanswered(self) -> bool:
        """Whether NATS did not answer the read's question (the stream's last sequence) in its
        request timeout (the operator's, 2 s)."""
        return self.seconds >= NATS_REQUEST_TIMEOUT

    @property
    def marked_stale(self) -> bool:
        return self.warning is not None and "may be stale" in self.warning


def lost(acked: dict[str, Answer], served: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Acknowledged reports neither served nor superseded by a later one (a higher number and version)."""
    return {node: (answer.number, answer.version, served.get(node)) for node, answer in acked.items()
            if node not in served or served[node][0] < answer.number or served[node][1] < answer.version}


# ---- the tests ---------------------------------------------------------------------------------

async def test_one_server_down_loses_no_acknowledged_report_and_reports_go_on(
        admin: Kube, sandbox: tuple[Path, Path], nats: NatsCluster, reader_token: str) -> None:
    await eventually_async(lambda: stream_whole(nats), timeout=30, message="the stream whole on three servers")
    nodes = await new_nodes(admin)
    async with reporting(Agents(admin, nodes)) as agents:
        await eventually_async(agents.every_node_acked, timeout=30, message="every node's report taken")
        victim = await stream_leader(nats)  # the hardest one to lose: the stream elects another leader
        await nats.kill_server(victim)
        killed_at = time.monotonic()
        await eventually_async(lambda: agents.every_node_acked(since=killed_at), timeout=30,
                               message="every node's report taken with one server down")
    took = agents.acked(since=killed_at)
    refused = [a for a in agents.answers if a.status != 200 and a.sent_at >= killed_at]
    acked = agents.acked()
    assert lost(acked, await served_through_the_apiservice(admin, nodes)) == {}
    for copy in await served_by_each_replica(sandbox[1], reader_token, nodes):
        assert lost(acked, copy) == {}
    reports = len([a for a in agents.answers if a.sent_at >= killed_at])
    print(f"one server ({victim.name}, the stream's leader) down: {reports} reports sent after the kill, "
          f"{len(refused)} refused ({sorted({a.status for a in refused})}), the first taken "
          f"{min(a.sent_at for a in took.values()) - killed_at:.2f}s after it")
    await start_again(nats, [victim])
    await eventually_async(lambda: stream_whole(nats), timeout=30, message="the restarted server current again")


async def test_two_servers_down_refuse_writes_with_retry_after_and_serve_reads_then_all_back_every_node_fresh(
        admin: Kube, sandbox: tuple[Path, Path], nats: NatsCluster, reader_token: str,
        record_property: Any) -> None:
    await eventually_async(lambda: stream_whole(nats), timeout=30, message="the stream whole on three servers")
    nodes = await new_nodes(admin)
    agents = Agents(admin, nodes)
    async with reporting(agents):
        await eventually_async(agents.every_node_acked, timeout=30, message="every node's report taken")
    # Every replica's copy holds every acknowledged report before NATS loses its quorum (a read
    # without a resourceVersion waits for that), so what the copies serve afterwards is known.
    acked = agents.acked()
    before = await served_by_each_replica(sandbox[1], reader_token, nodes)
    assert all(lost(acked, copy) == {} for copy in before), before
    _, listed = await admin.request("GET", BASE)
    version_before = int(listed["metadata"]["resourceVersion"])

    leader_server = await stream_leader(nats)
    down = [leader_server, next(s for s in nats.servers if s is not leader_server)]
    for server in down:
        await nats.kill_server(server)
    killed_at = time.monotonic()
    async with reporting(agents):
        def refused_since_kill() -> list[Answer]:
            return [a for a in agents.answers if a.sent_at >= killed_at and a.status != 200]
        await eventually_async(lambda: len(refused_since_kill()) >= 2 * NODES, timeout=30,
                               message="reports refused without a quorum")
        # Reads meanwhile: every replica serves its copy, which holds every acknowledged report,
        # and says that it may be stale.
        read_started = time.monotonic()
        status, listed, list_warning = await list_through_the_apiservice(admin)
        reads = [Read(seconds=time.monotonic() - read_started, warning=list_warning)]
        copies = await served_by_each_replica(sandbox[1], reader_token, nodes, reads)
    assert status == 200 and int(listed["metadata"]["resourceVersion"]) == version_before, listed
    through_apiservice = {item["metadata"]["name"]: (number_of(item), int(item["metadata"]["resourceVersion"]))
                          for item in listed["items"] if item["metadata"]["name"] in nodes}
    assert lost(acked, through_apiservice) == {}
    # A read that NATS did not answer says the copy may be stale; the first did not get an answer
    # (nats-server answers a leaderless stream's info from its own state only some 10 s later).
    assert reads[0].unanswered and reads[0].marked_stale, reads[0]
    assert [read for read in reads if read.unanswered and not read.marked_stale] == [], reads
    assert all(lost(acked, copy) == {} for copy in copies)
    assert through_apiservice == before[0] and copies == before  # nothing newer was written
    refused = refused_since_kill()
    first_refused = min(a.sent_at for a in refused)
    after_first = [a for a in agents.answers if a.sent_at > first_refused + 0.1 * TIME_FACTOR]
    # Once a report was refused, none is taken while two servers are down; each refusal says when to retry.
    assert [a for a in after_first if a.status == 200] == []
    assert {(a.status, a.retry_after is not None) for a in refused} == {(503, True)}, \
        sorted({(a.status, a.retry_after) for a in refused})

    await start_again(nats, down)
    back_at = time.monotonic()
    async with reporting(agents):
        async def every_node_fresh() -> bool:
            if not agents.every_node_acked(since=back_at):
                return False
            fresh = agents.acked(since=back_at)
            # Until a replica's follower has subscribed again (its backoff), a consistent read there
            # waits for its copy and gets 503: not fresh yet (When NATS fails, "All back").
            copies = await served_by_each_replica(sandbox[1], reader_token, nodes, until_refused=True)
            return copies is not None and all(lost(fresh, copy) == {} for copy in copies)
        await eventually_async(every_node_fresh, timeout=REPORT_INTERVAL, interval=0.1,
                               message="every node fresh on every replica after all servers are back")
    fresh_seconds = time.monotonic() - back_at
    assert lost(agents.acked(), await served_through_the_apiservice(admin, nodes)) == {}
    record_property("nats_two_down_read_seconds", round(reads[0].seconds, 3))
    record_property("nats_all_back_fresh_seconds", round(fresh_seconds, 3))
    print(f"two servers down: {len(refused)} reports refused with 503 and Retry-After; a list through the "
          f"APIService took {reads[0].seconds:.2f}s, with the Warning {list_warning!r}; gets from the replicas "
          f"{[round(read.seconds, 2) for read in reads[1:]]}s, {sum(r.marked_stale for r in reads[1:])} marked "
          f"stale; all back: every node fresh on every replica {fresh_seconds:.2f}s after the servers started again")
    await eventually_async(lambda: stream_whole(nats), timeout=30, message="the stream whole again")
