"""A replica on a stream nobody has written to yet: it is current, and serves consistent reads at once."""

from __future__ import annotations

import asyncio

from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.unit.jetstream.test_jetstream_store import replica
from tests.unit.jetstream.test_nodemetric_log import DEADLINE


async def test_a_consistent_read_of_a_new_empty_stream_is_served_at_once(nats_cluster: NatsCluster) -> None:
    async with replica(nats_cluster.urls[0], "one") as one:
        await asyncio.wait_for(one.read_barrier(0), DEADLINE)  # nothing to wait for: no 503
        assert one.store.list()[0] == []
