"""An in-memory model of the NodeMetric stream, answering the part of nats-py's JetStreamContext that
colocation.jetstream calls, as nats-server v2.15 answers it.

What it keeps, as the server does: one stream with a sequence that grows by one per write from
its `first_seq`, a subject's last message only (`max_msgs_per_subject=1`), compare-and-set on
`Nats-Expected-Last-Subject-Sequence` (400, err_code 10071, "wrong last sequence: N" when the
subject's last sequence is not N), headers stored as written (a delete marker is a message whose
`KV-Operation` header says DEL), direct gets of a subject's last message, stream info, purges up to
a sequence, and pull consumers without acknowledgements whose messages carry their metadata in the
reply subject, parsed by nats-py itself. `test_stream_model.py` runs one scenario on a real cluster
and on the model and compares every answer.

Left out: bytes in the stream's state (0 here), message TTLs (a `Nats-TTL` header is kept, never
acted on), other `Nats-Expected-*` headers (refused), acknowledgements, durable consumers, and
timing: a fetch with nothing to deliver waits `timeout` and raises nats-py's TimeoutError, but
with `batch` > 1 it returns once something comes, where nats-py waits out the rest of the timeout
for more.

Every request first takes a turn (`turn`, one pass of the event loop by default). A test that
holds requests (`HeldRequests`) decides when each one reaches the server: the interleaving of
replicas is then its choice, and no real time passes; a held fetch with nothing to deliver raises
the timeout at once, as if its timeout had run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import nats.errors
from nats.aio.msg import Msg
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    PubAck,
    RawStreamMsg,
    StreamConfig,
    StreamInfo,
    StreamState,
)
from nats.js.client import JetStreamContext
from nats.js.errors import BadRequestError, NoStreamResponseError, NotFoundError

EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071
STREAM_NAME_IN_USE = 10058
STREAM_NOT_FOUND = 10059
NANOSECONDS = 1_000_000_000

Turn = Callable[[str], Awaitable[None]]


async def one_pass(request: str) -> None:
    """A request's round trip: at least one pass of the event loop."""
    await asyncio.sleep(0)


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, a final `>` one or more."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > index
        if index >= len(tokens) or token not in ("*", tokens[index]):
            return False
    return len(tokens) == len(wanted)


@dataclass(frozen=True)
class Stored:
    """A message as the stream keeps it."""

    sequence: int
    subject: str
    data: bytes
    headers: dict[str, str] | None
    nanoseconds: int  # the server's clock when it took the write

    @property
    def removed(self) -> bool:
        return (self.headers or {}).get("KV-Operation") in ("DEL", "PURGE")


class StreamModel:
    """The server's side: one stream, and every write it ever took (`history`, for the tests' checks)."""

    def __init__(self, *, wall: Callable[[], float]) -> None:
        self._wall = wall
        self.config: StreamConfig | None = None
        self.first_seq = 0
        self.last_seq = 0
        self._messages: dict[int, Stored] = {}  # in sequence order: written in that order
        self._last_of: dict[str, int] = {}
        self.history: list[Stored] = []
        self.refused = 0  # writes refused by compare-and-set
        self._written = asyncio.Event()  # set by each write, for fetches that wait on the real clock

    def create(self, config: StreamConfig) -> StreamInfo:
        if self.config is not None:
            if self.config.as_dict() != config.as_dict():
                raise BadRequestError(code=400, err_code=STREAM_NAME_IN_USE,
                                      description="stream name already in use with a different configuration")
            return self.info()
        assert config.max_msgs_per_subject == 1, "the model keeps a subject's last message only"
        self.config = config
        self.first_seq = config.first_seq or 1
        self.last_seq = self.first_seq - 1
        return self.info()

    def info(self) -> StreamInfo:
        if self.config is None:
            raise NotFoundError(code=404, err_code=STREAM_NOT_FOUND, description="stream not found")
        return StreamInfo(config=self.config, state=StreamState(
            messages=len(self._messages), bytes=0, first_seq=self.first_seq, last_seq=self.last_seq, consumer_count=0))

    def append(self, subject: str, data: bytes, headers: dict[str, str] | None) -> PubAck:
        config = self.config
        if config is None or not any(subject_matches(pattern, subject) for pattern in config.subjects or ()):
            raise NoStreamResponseError
        expectations = {key for key in headers or {} if key.startswith("Nats-Expected-")}
        assert expectations <= {EXPECTED_LAST_SUBJECT_SEQUENCE}, f"not modelled: {expectations}"
        last = self._last_of.get(subject, 0)
        expected = (headers or {}).get(EXPECTED_LAST_SUBJECT_SEQUENCE)
        if expected is not None and int(expected) != last:
            self.refused += 1
            raise BadRequestError(code=400, err_code=WRONG_LAST_SEQUENCE, description=f"wrong last sequence: {last}")
        self.last_seq += 1
        stored = Stored(self.last_seq, subject, data, dict(headers) if headers else None,
                        int(self._wall() * NANOSECONDS))
        if last:
            del self._messages[last]  # history 1: the subject's previous message goes
        self._messages[stored.sequence] = stored
        self._last_of[subject] = stored.sequence
        self.first_seq = next(iter(self._messages))
        self.history.append(stored)
        self._written.set()
        self._written = asyncio.Event()
        return PubAck(stream=config.name or "", seq=stored.sequence)

    def last_message(self, subject: str) -> RawStreamMsg:
        """A direct get of the subject's last message, as nats-py lifts it: no payload is None,
        and the server adds the stream, subject, sequence and time to the headers."""
        sequence = self._last_of.get(subject)
        if self.config is None or sequence is None:
            raise NotFoundError
        stored = self._messages[sequence]
        seconds = dt.datetime.fromtimestamp(stored.nanoseconds // NANOSECONDS, dt.UTC)
        stamp = seconds.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stored.nanoseconds % NANOSECONDS:09d}Z"
        headers = {**(stored.headers or {}), "Nats-Stream": self.config.name or "", "Nats-Subject": subject,
                   "Nats-Sequence": str(sequence), "Nats-Time-Stamp": stamp}
        return RawStreamMsg(subject=subject, seq=sequence, data=stored.data or None, headers=headers,
                            time=RawStreamMsg._parse_utc_iso(stamp))

    def purge(self, seq: int | None) -> bool:
        """Remove every message below `seq` (all of them without): a `seq` past the last one moves
        the next write's sequence to it."""
        if self.config is None:
            raise NotFoundError(code=404, err_code=STREAM_NOT_FOUND, description="stream not found")
        upto = seq if seq else self.last_seq + 1
        for sequence in [s for s in self._messages if s < upto]:
            del self._last_of[self._messages.pop(sequence).subject]
        self.last_seq = max(self.last_seq, upto - 1)
        self.first_seq = next(iter(self._messages), self.last_seq + 1)
        return True

    def messages_from(self, sequence: int) -> list[Stored]:
        return [stored for seq, stored in self._messages.items() if seq >= sequence]

    async def written(self) -> None:
        """Until the next write."""
        await self._written.wait()


@dataclass
class ConsumerModel:
    """An ephemeral pull consumer without acknowledgements: it delivers each message once, in order."""

    stream: StreamModel
    name: str
    filter_subject: str
    next_sequence: int
    turn: Turn
    held: bool
    delivered: int = field(default=0)

    async def fetch(self, batch: int = 1, timeout: float | None = 5, heartbeat: float | None = None) -> list[Msg]:
        if batch < 1:
            raise ValueError("nats: invalid batch size")
        if timeout is not None and timeout <= 0:
            raise ValueError("nats: invalid fetch timeout")
        await self.turn("fetch")
        ready = self._ready()
        if not ready and not self.held:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._until_ready(), timeout)
            ready = self._ready()
        if not ready:
            raise nats.errors.TimeoutError
        return [self._deliver(stored) for stored in ready[:batch]]

    async def unsubscribe(self) -> None:
        pass

    def _ready(self) -> list[Stored]:
        start = max(self.next_sequence, self.stream.first_seq)
        return [stored for stored in self.stream.messages_from(start)
                if subject_matches(self.filter_subject, stored.subject)]

    async def _until_ready(self) -> None:
        while not self._ready():
            await self.stream.written()

    def _deliver(self, stored: Stored) -> Msg:
        self.delivered += 1
        self.next_sequence = stored.sequence + 1
        pending = len(self._ready())
        # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<nanoseconds>.<pending>
        reply = (f"$JS.ACK.{self.stream.config.name if self.stream.config else ''}.{self.name}.1."
                 f"{stored.sequence}.{self.delivered}.{stored.nanoseconds}.{pending}")
        return Msg(_client=cast(Any, None), subject=stored.subject, reply=reply, data=stored.data,
                   headers=dict(stored.headers) if stored.headers else None)


class JetStreamModel:
    """What one connection's JetStreamContext answers, over `stream`. With `held`, each request
    waits for `turn` to let it through, and a fetch finding nothing times out at once."""

    def __init__(self, stream: StreamModel, *, turn: Turn = one_pass, held: bool = False) -> None:
        self.stream = stream
        self._turn = turn
        self._held = held
        self._consumers = 0

    def context(self) -> JetStreamContext:
        """This model where the product takes a JetStreamContext."""
        return cast(JetStreamContext, self)

    async def add_stream(self, config: StreamConfig | None = None, **params: Any) -> StreamInfo:
        await self._turn("add_stream")
        return self.stream.create((config or StreamConfig()).evolve(**params))

    async def stream_info(self, name: str, subjects_filter: str | None = None) -> StreamInfo:
        await self._turn("stream_info")
        self._check(name)
        return self.stream.info()

    async def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                      stream: str | None = None, headers: dict[str, Any] | None = None,
                      msg_ttl: float | None = None) -> PubAck:
        assert stream is None and msg_ttl is None, "not modelled"
        await self._turn("publish")
        return self.stream.append(subject, payload, headers)

    async def get_last_msg(self, stream_name: str, subject: str, direct: bool | None = False) -> RawStreamMsg:
        await self._turn("get_last_msg")
        self._check(stream_name)
        return self.stream.last_message(subject)

    async def purge_stream(self, name: str, seq: int | None = None, subject: str | None = None,
                           keep: int | None = None) -> bool:
        assert subject is None and keep is None, "not modelled"
        await self._turn("purge_stream")
        self._check(name)
        return self.stream.purge(seq)

    async def pull_subscribe(self, subject: str, durable: str | None = None, stream: str | None = None,
                             config: ConsumerConfig | None = None, **options: Any) -> ConsumerModel:
        config = config or ConsumerConfig()
        assert durable is None and config.ack_policy == AckPolicy.NONE, "not modelled"
        await self._turn("pull_subscribe")
        self._check(stream or "")
        if config.deliver_policy in (None, DeliverPolicy.ALL):
            start = self.stream.first_seq
        else:
            assert config.deliver_policy == DeliverPolicy.BY_START_SEQUENCE and config.opt_start_seq, "not modelled"
            start = config.opt_start_seq
        self._consumers += 1
        return ConsumerModel(self.stream, f"consumer{self._consumers}", config.filter_subject or subject, start,
                             self._turn, self._held)

    def _check(self, name: str) -> None:
        if self.stream.config is None or name != self.stream.config.name:
            raise NotFoundError(code=404, err_code=STREAM_NOT_FOUND, description="stream not found")


@dataclass
class HeldRequest:
    who: str
    what: str
    answer: asyncio.Future[None]


class HeldRequests:
    """Requests held until the test lets one through (`release`): the test decides the order in
    which the replicas' requests reach the stream."""

    def __init__(self) -> None:
        self.waiting: list[HeldRequest] = []

    def turn_of(self, who: str) -> Turn:
        async def turn(what: str) -> None:
            request = HeldRequest(who, what, asyncio.get_running_loop().create_future())
            self.waiting.append(request)
            try:
                await request.answer
            finally:
                if request in self.waiting:  # cancelled while held
                    self.waiting.remove(request)
        return turn

    def of(self, who: str) -> list[HeldRequest]:
        return [request for request in self.waiting if request.who == who]

    def release(self, request: HeldRequest) -> None:
        self.waiting.remove(request)
        request.answer.set_result(None)
