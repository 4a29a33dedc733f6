"""The stream model answers as a real NATS cluster does: one scenario of every request colocation.jetstream
makes (creating the stream, compare-and-set writes and their refusals, deletions, direct gets, stream
info, pull consumers, a replica's copy, a restart after a loss), run on both, gives the same answers.

NATS stamps its own time on each write: the scenario runs on the real clock, and each time stamp is
checked to lie within the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Awaitable
from typing import Any

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, PubAck, RawStreamMsg, StreamInfo
from nats.js.client import JetStreamContext
from nats.js.errors import APIError

from colocation.jetstream.log_follower import LogFollower
from colocation.jetstream.nats_connection import NatsOptions, connect
from colocation.jetstream.nodemetric_log import (
    ALL_SUBJECTS,
    STREAM,
    Conflict,
    LogSettings,
    NodeMetricLog,
    ensure_stream,
    last_sequence,
    restart_after_loss,
    subject_of,
)
from colocation.jetstream.stream_reader import BATCH
from colocation.nodemetrics.nodemetric_store import NodeMetricStore, log_value
from colocation.nodemetrics.resource_versions import LogPositions
from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.unit.jetstream.stream_model import JetStreamModel, StreamModel
from tests.unit.jetstream.test_nodemetric_log import DEADLINE
from tests.unit.nodemetrics.test_nodemetric_store import drain, report

FIRST = 1_795_341_600.0  # the instant both streams start at: their first sequence is it in microseconds


def value(node: str, cpu: str) -> bytes:
    return log_value(report(node, cpu), {}, created="2026-11-29T00:00:00Z")


class Answers:
    """What each request answered, in a form two runs can compare; time stamps checked against the run."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.started = time.time()

    async def of(self, label: str, request: Awaitable[Any]) -> Any:
        try:
            answer = await request
        except (APIError, Conflict, TimeoutError) as error:
            self.seen.append((label, self._refusal(error)))
            return None
        self.seen.append((label, self._plain(answer)))
        return answer

    def note(self, label: str, what: Any) -> None:
        self.seen.append((label, what))

    def _refusal(self, error: Exception) -> Any:
        cause = error.__cause__ if isinstance(error, Conflict) else error
        if isinstance(cause, APIError):
            return type(error).__name__, type(cause).__name__, cause.code, cause.err_code, cause.description
        return type(error).__name__

    def _plain(self, answer: Any) -> Any:
        if isinstance(answer, StreamInfo):
            return answer.state.messages, answer.state.first_seq, answer.state.last_seq
        if isinstance(answer, PubAck):
            return answer.stream, answer.seq
        if isinstance(answer, RawStreamMsg):
            assert answer.time is not None
            self._check_time(answer.time)
            headers = {key: value for key, value in (answer.headers or {}).items() if key != "Nats-Time-Stamp"}
            return answer.subject, answer.seq, answer.data, headers
        if isinstance(answer, list) and all(isinstance(message, Msg) for message in answer):
            return [self._message(message) for message in answer]
        return answer

    def _message(self, message: Msg) -> Any:
        metadata = message.metadata
        self._check_time(metadata.timestamp)
        return (message.subject, message.data, message.headers, metadata.sequence.stream, metadata.sequence.consumer,
                metadata.num_pending, metadata.num_delivered, metadata.stream)

    def _check_time(self, stamp: dt.datetime) -> None:
        assert stamp.tzinfo is not None and self.started - 1 <= stamp.timestamp() <= time.time() + 1, stamp


async def scenario(js: JetStreamContext) -> list[tuple[str, Any]]:
    answers = Answers()
    log = NodeMetricLog(js, timeout=2.0)
    await answers.of("stream info before the stream", js.stream_info(STREAM))
    await answers.of("created", ensure_stream(js, LogSettings(), wall=lambda: FIRST))
    await answers.of("created again by a later replica", ensure_stream(js, LogSettings(), wall=lambda: FIRST + 5))
    await answers.of("last sequence of an empty stream", last_sequence(js))
    await answers.of("node-a's last, none", log.last("node-a"))
    await answers.of("a direct get of nothing", js.get_last_msg(STREAM, subject_of("node-a"), direct=True))
    first = await answers.of("node-a", log.append("node-a", value("node-a", "1"), last=0,
                                                  figures=report("node-a", "1").figures))
    await answers.of("node-a over nothing, refused", log.append("node-a", value("node-a", "2"), last=0))
    await answers.of("node-b over another's write, refused", log.append("node-b", value("node-b", "1"), last=first))
    second = await answers.of("node-a over its last", log.append("node-a", value("node-a", "2"), last=first))
    node_b = await answers.of("node-b", log.append("node-b", value("node-b", "1"), last=0))
    await answers.of("node-a removed over an old write, refused", log.remove("node-a", last=first))
    removed = await answers.of("node-a removed", log.remove("node-a", last=second))
    await answers.of("node-a's last, removed", log.last("node-a"))
    await answers.of("node-b's last", log.last("node-b"))
    await answers.of("a direct get of a delete marker", js.get_last_msg(STREAM, subject_of("node-a"), direct=True))
    await answers.of("a direct get of a report", js.get_last_msg(STREAM, subject_of("node-b"), direct=True))
    await answers.of("stream info", js.stream_info(STREAM))

    everything = await js.pull_subscribe(ALL_SUBJECTS, stream=STREAM, config=ConsumerConfig(
        deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE, mem_storage=True, num_replicas=1))
    await answers.of("fetch everything", everything.fetch(BATCH, timeout=1.0))
    await answers.of("fetch past the end", everything.fetch(1, timeout=0.2))
    await everything.unsubscribe()
    since = await js.pull_subscribe(ALL_SUBJECTS, stream=STREAM, config=ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=node_b + 1, ack_policy=AckPolicy.NONE,
        mem_storage=True, num_replicas=1))
    await answers.of("fetch from a sequence", since.fetch(BATCH, timeout=1.0))
    await since.unsubscribe()

    store = NodeMetricStore(clock_wall=time.time, clock_monotonic=time.monotonic, versions=LogPositions())
    watcher = store.watch("0")
    follower = LogFollower(js, store, idle=0.2)
    task = asyncio.create_task(follower.run())
    try:
        assert await follower.wait_for(removed, DEADLINE)
        answers.note("a replica's copy", ([(e.name, e.resource_version, e.body) for e in store.list()[0]],
                                          dict(follower.last_written), drain(watcher)))
        restarted = await answers.of("restarted above", restart_after_loss(js, above=removed + 10, wall=lambda: FIRST))
        after = await answers.of("node-c after the restart", log.append("node-c", value("node-c", "1"), last=0))
        await answers.of("node-b's last, purged", log.last("node-b"))
        await answers.of("stream info after the restart", js.stream_info(STREAM))
        assert await follower.wait_for(after, DEADLINE)
        answers.note("the copy after the restart", ([(e.name, e.resource_version) for e in store.list()[0]],
                                                    dict(follower.last_written), watcher.closed, restarted))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return answers.seen


async def test_the_model_answers_every_request_as_a_real_cluster_does(nats_cluster: NatsCluster) -> None:
    client = await connect(NatsOptions(servers=(nats_cluster.urls[0],)), name="real")
    try:
        real = await scenario(client.jetstream(timeout=2.0))
    finally:
        await client.close()
    modelled = await scenario(JetStreamModel(StreamModel(wall=time.time)).context())
    for (label, answer), (_, expected) in zip(modelled, real, strict=True):
        assert answer == expected, label

