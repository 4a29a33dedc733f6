"""Replicas announce themselves on a real NATS cluster: each sees the Ready others, and one that
stops being Ready, or stops, drops out of every list without waiting for the bucket to forget it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from nats.aio.client import Client

from colocation.jetstream.nats_connection import NatsOptions, connect
from colocation.jetstream.replica_presence import ReplicaPresence
from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.timing import eventually_async
from tests.unit.jetstream.test_nodemetric_log import DEADLINE

INTERVAL = 0.2


@contextlib.asynccontextmanager
async def announcing(url: str, presence: ReplicaPresence) -> AsyncIterator[ReplicaPresence]:
    client: Client = await connect(NatsOptions(servers=(url,), timeout=1.0), name=presence.identity)
    task = asyncio.create_task(presence.run(client.jetstream(timeout=1.0)))
    try:
        yield presence
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await presence.withdraw()
        await client.close()


def presence(identity: str, port: int, ready: list[bool]) -> ReplicaPresence:
    return ReplicaPresence(identity=identity, endpoint=f"https://10.0.0.{port}:8443", ready=lambda: ready[0],
                           replicas=3, interval=INTERVAL)


async def test_each_replica_sees_the_ready_ones_and_one_that_stops_drops_out_at_once(nats_cluster: NatsCluster) -> None:
    a_ready, b_ready = [True], [False]
    both = {"op-a": "https://10.0.0.1:8443", "op-b": "https://10.0.0.2:8443"}
    async with announcing(nats_cluster.urls[0], presence("op-a", 1, a_ready)) as a:
        async with announcing(nats_cluster.urls[1], presence("op-b", 2, b_ready)) as b:
            await eventually_async(lambda: b.endpoints() == {"op-a": both["op-a"]}, DEADLINE,
                                   message="a replica not Ready yet is in no list, its own neither")
            assert a.endpoints() == {"op-a": both["op-a"]}
            b_ready[0] = True
            await eventually_async(lambda: a.endpoints() == both and b.endpoints() == both, DEADLINE,
                                   message="both see both once Ready")
            advertised = a.advertised()
            assert advertised is not None and advertised == b.advertised()  # the same digest on every replica
            b_ready[0] = False  # draining
            await eventually_async(lambda: a.endpoints() == {"op-a": both["op-a"]}, DEADLINE,
                                   message="a replica that is no longer Ready withdraws")
            b_ready[0] = True
            await eventually_async(lambda: a.endpoints() == both, DEADLINE, message="and comes back")
        # op-b stopped: it withdrew, well before the bucket would forget it.
        await eventually_async(lambda: a.endpoints() == {"op-a": both["op-a"]}, DEADLINE,
                               message="a replica that stops withdraws")
