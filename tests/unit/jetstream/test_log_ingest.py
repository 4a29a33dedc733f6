"""Reports into the NodeMetric stream from any replica: served alike everywhere, and a late retry of an
older report never lands over a newer one, whichever replica it reaches."""

from __future__ import annotations

import time

from colocation.apimachinery.clock import format_time
from colocation.jetstream.log_ingest import RETRY_WINDOW, LogIngest
from colocation_sandbox.launcher.nats_cluster import NatsCluster
from tests.unit.jetstream.test_nodemetric_log import DEADLINE, replicas
from tests.unit.nodemetrics.test_nodemetric_store import report


def at(seconds_ago: float) -> str:
    return format_time(time.time() - seconds_ago)


async def test_a_report_through_any_replica_is_served_by_every_replica_alike(nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster) as three:
        answer = await three[1].ingest.put(report("node-a", "2", at(1)), {"pool": "web"})
        for replica in three:
            assert await replica.follower.wait_for(answer.resource_version, DEADLINE)
            entry = replica.store.get("node-a")
            assert entry is not None and entry.body == answer.body and entry.labels == {"pool": "web"}
        again = await three[2].ingest.put(report("node-a", "2", at(1)), {"pool": "web"})  # the same, sent again
        assert again.resource_version == answer.resource_version  # unchanged: no new version to watch


async def test_a_late_retry_of_an_older_report_does_not_land_over_a_newer_one(nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster) as (one, two, three):
        newer = await one.ingest.put(report("node-a", "3", at(2)), {})
        assert await two.follower.wait_for(newer.resource_version, DEADLINE)
        # two has applied the newer report; three has not (its copy is stopped): both answer with it.
        assert (await two.ingest.put(report("node-a", "1", at(8)), {})).body == newer.body
        await three.stop_following()
        behind = LogIngest(three.log, three.follower, three.store, apply_timeout=0.2)
        late = await behind.put(report("node-a", "1", at(8)), {})
        assert late.resource_version == newer.resource_version and late.figures.cpu_millis == 3000
        entry = one.store.get("node-a")
        assert entry is not None and entry.resource_version == newer.resource_version


async def test_an_agent_whose_clock_stepped_back_further_than_a_retry_is_taken_at_its_word(
        nats_cluster: NatsCluster) -> None:
    async with replicas(nats_cluster) as (one, two, _):
        first = await one.ingest.put(report("node-a", "3", at(0)), {})
        assert await two.follower.wait_for(first.resource_version, DEADLINE)
        stepped = await two.ingest.put(report("node-a", "1", at(RETRY_WINDOW + 30)), {})
        assert stepped.resource_version > first.resource_version and stepped.figures.cpu_millis == 1000
