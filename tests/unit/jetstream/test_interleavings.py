"""Any interleaving of reports, retries and deletions on several replicas, over the stream model: every
replica ends serving the same NodeMetrics at the same list resourceVersion, an older report never
lands over a newer one, and every watch sees strictly increasing resourceVersions that replay to
what the replica serves.

Each replica is what `JetStreamNodeMetrics.run` leaves once connected (its store, follower, log and
ingest), on the model of the stream (`stream_model`), whose requests are held until the test lets
one through: Hypothesis chooses which replica's request reaches the stream next, so followers
apply the stream at their own pace and puts race each other. One event loop, no real time: the
stream stamps its writes with the fake clock.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.jetstream.jetstream_store import JetStreamNodeMetrics
from colocation.jetstream.log_follower import LogFollower
from colocation.jetstream.log_ingest import LogIngest
from colocation.jetstream.nats_connection import NatsOptions
from colocation.jetstream.nodemetric_log import (
    FIGURES,
    LogSettings,
    NodeMetricLog,
    clock_position,
    decode_figures,
    name_of,
    stream_config,
)
from colocation.nodemetrics.nodemetric_store import NodeMetricStore
from colocation.nodemetrics.report_schema import ValidatedReport, figures_of
from colocation.nodemetrics.resource_versions import LogPositions
from colocation.nodemetrics.storage_interface import Entry
from tests.clock import FakeClock
from tests.unit.jetstream.stream_model import HeldRequests, JetStreamModel, Stored, StreamModel
from tests.unit.nodemetrics.test_nodemetric_store import T0, lines, report

NODES = ("node-a", "node-b", "node-c")
LABELS = {"pool": "web"}
FIRST_REPORT = T0 - 600  # a node's report number k says it was taken k seconds after this
# An answer waits this long for the replica's own copy: 0 answers from the write itself unless the
# copy has it already; the other never runs out within a run (its copy always gets there).
APPLY_TIMEOUTS = (0.0, 3600.0)
# Enough passes of the event loop for every task to run until it waits again, on a held request or
# on its copy: a request's answer resumes its caller within a few passes.
SETTLE_PASSES = 20
DRAIN_LIMIT = 5_000  # requests let through at the end before the run is called stuck


@dataclass(frozen=True)
class Report:
    """The node's agent sends its next report through `replica`."""

    node: int
    replica: int


@dataclass(frozen=True)
class Retry:
    """The node's agent sends a report it sent before through `replica`: its last (`back` 0) or an
    older one, which arrives late."""

    node: int
    back: int
    replica: int


@dataclass(frozen=True)
class Delete:
    """The leader deletes the node's NodeMetric (its Node was deleted) on `replica`'s copy."""

    node: int
    replica: int


@dataclass(frozen=True)
class Deliver:
    """One of `replica`'s held requests (a put's, a deletion's or its follower's) reaches the stream."""

    replica: int
    pick: int


Action = Report | Retry | Delete | Deliver


@dataclass(frozen=True)
class Run:
    apply_timeouts: list[float]  # one per replica
    actions: list[Action]


@st.composite
def runs(draw: st.DrawFn) -> Run:
    count = draw(st.integers(2, 4))
    node, replica = st.integers(0, len(NODES) - 1), st.integers(0, count - 1)
    deliver = st.builds(Deliver, replica, st.integers(0, 3))
    action = st.one_of(st.builds(Report, node, replica), st.builds(Retry, node, st.integers(0, 3), replica),
                       st.builds(Delete, node, replica), deliver, deliver)
    timeouts = draw(st.lists(st.sampled_from(APPLY_TIMEOUTS), min_size=count, max_size=count))
    return Run(timeouts, draw(st.lists(action, min_size=20, max_size=80)))


def numbered(node: str, number: int) -> ValidatedReport:
    return report(node, str(number), format_time(FIRST_REPORT + number))


class Replica:
    """An operator replica with --store nats: its store, watched from the start, and its copy of the stream."""

    def __init__(self, name: str, stream: StreamModel, requests: HeldRequests, clock: FakeClock, *,
                 apply_timeout: float) -> None:
        js = JetStreamModel(stream, turn=requests.turn_of(name), held=True).context()
        self.name = name
        self.store = NodeMetricStore(clock_wall=clock.wall, clock_monotonic=clock.monotonic, versions=LogPositions())
        self.watcher = self.store.watch("0")
        self.follower = LogFollower(js, self.store, wall=clock.wall)
        log = NodeMetricLog(js, timeout=2.0)
        # As run() leaves it once connected, with the test's clocks and apply timeout.
        self.shared = JetStreamNodeMetrics(self.store, NatsOptions(servers=()), LogSettings(), name=name,
                                           wall=clock.wall)
        self.shared.follower, self.shared._log, self.shared._js = self.follower, log, js
        self.shared._ingest = LogIngest(log, self.follower, self.store, wall=clock.wall, monotonic=clock.monotonic,
                                        apply_timeout=apply_timeout)
        self.task = asyncio.create_task(self.follower.run())

    def served(self) -> list[tuple[str, int, bytes]]:
        entries, _ = self.store.list()
        return [(entry.name, entry.resource_version, entry.body) for entry in entries]


@dataclass(frozen=True)
class Put:
    sent: ValidatedReport
    answer: asyncio.Task[Entry]


class Cluster:
    """The replicas over one stream, the agents' puts and the leader's deletions in flight."""

    def __init__(self, run: Run) -> None:
        self.clock = FakeClock(wall=T0)
        self.stream = StreamModel(wall=self.clock.wall)
        self.stream.create(stream_config(LogSettings(), first_seq=clock_position(self.clock.wall)))
        self.requests = HeldRequests()
        self.replicas = [Replica(f"replica-{index}", self.stream, self.requests, self.clock, apply_timeout=timeout)
                         for index, timeout in enumerate(run.apply_timeouts)]
        self.sent = dict.fromkeys(NODES, 0)  # reports each node's agent has sent
        self.puts: list[Put] = []
        self.deletions: list[asyncio.Task[bool]] = []

    async def play(self, action: Action) -> None:
        self.clock.advance(0.25)
        if isinstance(action, Report | Retry):
            node = NODES[action.node]
            if isinstance(action, Report):
                self.sent[node] += 1
            number = self.sent[node] - (action.back if isinstance(action, Retry) else 0)
            if number >= 1:
                self.put(self.replicas[action.replica], numbered(node, number))
        elif isinstance(action, Delete):
            self.deletions.append(asyncio.create_task(self.replicas[action.replica].shared.remove(NODES[action.node])))
        else:
            held = self.requests.of(self.replicas[action.replica].name)
            if held:
                self.requests.release(held[action.pick % len(held)])
        await settle()

    def put(self, replica: Replica, sent: ValidatedReport) -> asyncio.Task[Entry]:
        answer = asyncio.create_task(replica.shared.put(sent, LABELS))
        self.puts.append(Put(sent, answer))
        return answer

    async def let_through(self, replica: Replica, *kinds: str) -> None:
        """Let `replica`'s oldest held request of one of these kinds ("publish", "fetch", ...) through."""
        await settle()
        self.requests.release(next(request for request in self.requests.of(replica.name) if request.what in kinds))
        await settle()

    async def drain(self) -> None:
        """Let the held requests through, oldest first, until every put and deletion is answered
        and every copy has the stream's last write."""
        for _ in range(DRAIN_LIMIT):
            last = self.stream.history[-1].sequence if self.stream.history else 0
            if (all(put.answer.done() for put in self.puts) and all(task.done() for task in self.deletions)
                    and all(replica.follower.position == last for replica in self.replicas)):
                return
            self.requests.release(self.requests.waiting[0])
            await settle()
        raise AssertionError(f"the replicas did not settle after {DRAIN_LIMIT} requests")

    async def stop(self) -> None:
        tasks = [replica.task for replica in self.replicas] + [put.answer for put in self.puts] + self.deletions
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def settle() -> None:
    """Let every task run until it waits again: passes of the event loop, not a wait on the clock."""
    for _ in range(SETTLE_PASSES):
        await asyncio.sleep(0)


def update_time(stored: Stored) -> float:
    figures = decode_figures((stored.headers or {}).get(FIGURES))
    assert figures is not None, stored
    return figures.update_time


def check_every_replica_serves_the_same_reports(replicas: list[Replica], history: list[Stored]) -> None:
    """The same nodes with the same reports, at the same list resourceVersion; each object's
    resourceVersion is the sequence of a write of that very report. (Not always the same on every
    replica: `test_a_copy_that_replayed_an_unchanged_rewrite_serves_the_node_at_its_first_version`.)"""
    written = {stored.sequence: stored for stored in history}
    views = []
    for replica in replicas:
        entries, version = replica.store.list()
        view = []
        for entry in entries:
            served = orjson.loads(entry.body)
            stored = written[entry.resource_version]
            assert name_of(stored.subject) == entry.name and not stored.removed, (replica.name, entry.name)
            logged = orjson.loads(stored.data)
            assert (logged["status"], logged["metadata"].get("labels")) == (served["status"], entry.labels)
            view.append((entry.name, served["status"], entry.labels))
        views.append((view, version))
    assert all(view == views[0] for view in views[1:]), views


def check_the_stream_never_takes_an_older_report_over_a_newer_one(history: list[Stored]) -> None:
    last: dict[str, Stored] = {}
    for stored in history:
        previous = last.get(stored.subject)
        if previous is not None and not previous.removed and not stored.removed:
            assert update_time(stored) >= update_time(previous), (previous, stored)
        last[stored.subject] = stored


def check_every_node_holds_the_newest_report_taken(cluster: Cluster) -> None:
    """Every answer is the report sent or a newer one; a node never deleted holds the newest report
    any replica answered for (a put refused with 503 wrote nothing, and its agent would retry)."""
    deleted = {name_of(stored.subject) for stored in cluster.stream.history if stored.removed}
    newest: dict[str, float] = {}
    for put in cluster.puts:
        error = put.answer.exception()
        if error is not None:
            assert isinstance(error, ApiError) and error.code == 503, error
            continue
        answer, sent = put.answer.result(), put.sent
        assert answer.name == sent.name and answer.figures.update_time >= sent.figures.update_time, (answer, sent)
        newest[sent.name] = max(newest.get(sent.name, 0.0), sent.figures.update_time)
    for replica in cluster.replicas:
        for name, update in newest.items():
            entry = replica.store.get(name)
            if name not in deleted:
                assert entry is not None and entry.figures.update_time == update, (replica.name, name)


def check_the_watch(replica: Replica, history: list[Stored]) -> None:
    """Strictly increasing resourceVersions; a node's report never older than the one before unless
    the stream deleted the node in between; replayed, what the replica serves."""
    deletions = {(name_of(stored.subject), stored.sequence) for stored in history if stored.removed}
    events = lines(replica.watcher, 100_000)
    assert replica.watcher.error is None and not replica.watcher.closed
    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in events]
    assert all(earlier < later for earlier, later in itertools.pairwise(versions)), versions
    replayed: dict[str, dict[str, Any]] = {}
    for event, version in zip(events, versions, strict=True):
        name = event["object"]["metadata"]["name"]
        if event["type"] == "DELETED":
            replayed.pop(name)
            continue
        before = replayed.get(name)
        if before is not None:
            since = int(before["metadata"]["resourceVersion"])
            if not any(node == name and since < sequence < version for node, sequence in deletions):
                assert figures_of(event["object"]).update_time >= figures_of(before).update_time, (before, event)
        replayed[name] = event["object"]
    served = {entry.name: orjson.loads(entry.body) for entry in replica.store.list()[0]}
    assert replayed == served


@settings(max_examples=300)
@given(run=runs())
async def test_any_interleaving_ends_with_every_replica_serving_the_same_newest_reports(run: Run) -> None:
    cluster = Cluster(run)
    try:
        await settle()
        for action in run.actions:
            await cluster.play(action)
        await cluster.drain()
    finally:
        await cluster.stop()
    history = cluster.stream.history
    check_every_replica_serves_the_same_reports(cluster.replicas, history)
    check_the_stream_never_takes_an_older_report_over_a_newer_one(history)
    check_every_node_holds_the_newest_report_taken(cluster)
    for replica in cluster.replicas:
        check_the_watch(replica, history)


async def test_the_answer_to_a_report_is_never_an_older_report_than_the_one_written() -> None:
    """One replica writes node-a's report 2; before its copy reads that far, another replica writes
    node-b's report and then node-a's report 3, which replaces report 2 in the stream. One's copy
    reads node-b's write, past report 2's position, and still holds node-a's report 1: the answer
    to report 2 is report 2, as written."""
    cluster = Cluster(Run([APPLY_TIMEOUTS[1], APPLY_TIMEOUTS[0]], []))
    one, two = cluster.replicas
    try:
        await settle()
        cluster.put(one, numbered("node-a", 1))
        await cluster.drain()
        second = cluster.put(one, numbered("node-a", 2))
        await cluster.let_through(one, "publish")  # written: the answer waits for one's copy
        cluster.put(two, numbered("node-b", 1))
        await cluster.let_through(two, "publish")
        third = cluster.put(two, numbered("node-a", 3))
        while not third.done():  # refused over report 2, which two's copy has not read: read, written again
            await cluster.let_through(two, "publish", "get_last_msg")
        for _ in range(3):  # one's copy reads a message at a time: node-b's write first
            if second.done():
                break
            await cluster.let_through(one, "fetch", "stream_info")
        assert second.done() and one.follower.last_written == {"node-a": cluster.stream.history[0].sequence,
                                                                "node-b": cluster.stream.history[2].sequence}
        answer = second.result()
    finally:
        await cluster.stop()
    assert answer.figures.update_time == numbered("node-a", 2).figures.update_time
    assert answer.resource_version == cluster.stream.history[1].sequence


async def test_a_report_sent_again_is_written_once_and_every_copy_serves_one_version() -> None:
    """A report and the same report again (its agent's retry, the first answer lost), through either
    replica, are one content: the stream takes it once, so a copy that was behind serves the node
    at the version a current copy does, and the answer to the retry is the first write."""
    cluster = Cluster(Run([APPLY_TIMEOUTS[0], APPLY_TIMEOUTS[0]], []))
    one, two = cluster.replicas
    try:
        await settle()
        cluster.put(one, numbered("node-a", 1))
        await cluster.drain()
        first = cluster.put(one, numbered("node-a", 2))
        await cluster.drain()
        again = [cluster.put(one, numbered("node-a", 2)), cluster.put(two, numbered("node-a", 2))]
        await cluster.drain()
    finally:
        await cluster.stop()
    assert len(cluster.stream.history) == 2  # report 1, report 2: the retries wrote nothing
    assert {task.result().resource_version for task in (first, *again)} == {cluster.stream.history[1].sequence}
    assert one.served() == two.served()
