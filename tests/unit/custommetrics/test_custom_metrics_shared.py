"""Samples shared between replicas (--store nats): a standby takes an agent's batch, keeps it, and
passes what it kept to the others, who answer the same queries; a batch the stream refuses is 503
and safe to send again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from colocation.apimachinery.errors import ApiError
from colocation.custommetrics.sample_feed import decode_kept, encode_kept
from colocation.custommetrics.series_store import PODS, SeriesKey, SeriesSamples
from tests.unit.custommetrics import test_custom_metrics_api as api_tests
from tests.unit.custommetrics.test_custom_metrics_api import CUSTOM, VIEWER, WEB_REQUESTS, Harness, get, put_samples


class Shared:
    """The samples' stream between two replicas: what one writes, the other applies."""

    def __init__(self, reader: Harness) -> None:
        self.reader = reader
        self.refuse = False
        self.written: list[tuple[str, list[bytes]]] = []

    async def __call__(self, node: str, chunks: list[bytes]) -> None:
        if self.refuse:
            raise ApiError.service_unavailable("the samples' stream did not take the batch", retry_after=1)
        self.written.append((node, chunks))
        for chunk in chunks:
            self.reader.custom.apply_shared(chunk)


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[Harness, Harness, Shared, TestClient[Any, Any]]]:
    standby, other = Harness(), Harness()
    standby.leader.is_leader = False  # any replica takes a batch with a shared store
    for harness in (standby, other):
        await harness.add_pods(*api_tests.PODS)
    shared = Shared(other)
    standby.custom.shared = shared
    client: TestClient[Any, Any] = TestClient(TestServer(standby.api.application()))
    await client.start_server()
    yield standby, other, shared, client
    await client.close()


async def test_a_standby_takes_a_batch_and_every_replica_answers_the_same(
        replicas: tuple[Harness, Harness, Shared, TestClient[Any, Any]]) -> None:
    _, other, shared, client = replicas
    status, answer = await put_samples(client, "node-1", WEB_REQUESTS)
    assert status == 200, answer
    assert answer["message"] == "stored 8 of 8 samples (6 new series)"
    assert [node for node, _ in shared.written] == ["node-1"]
    async with TestClient(TestServer(other.api.application())) as other_client:
        path = f"{CUSTOM}/namespaces/team-a/pods/*/http_requests"
        mine, theirs = await get(client, path, VIEWER), await get(other_client, path, VIEWER)
    assert mine[0] == theirs[0] == 200
    assert mine[1]["items"] == theirs[1]["items"] and len(theirs[1]["items"]) == 3


async def test_a_batch_the_stream_refuses_is_503_kept_here_and_the_retry_changes_nothing_twice(
        replicas: tuple[Harness, Harness, Shared, TestClient[Any, Any]]) -> None:
    standby, other, shared, client = replicas
    shared.refuse = True
    status, answer = await put_samples(client, "node-1", WEB_REQUESTS)
    assert status == 503 and answer["reason"] == "ServiceUnavailable", answer
    assert len(standby.series) == 6 and len(other.series) == 0
    shared.refuse = False
    status, answer = await put_samples(client, "node-1", WEB_REQUESTS)  # the agent sends it again
    assert status == 200, answer
    assert len(other.series) == 6
    applied = "colocation_custom_metrics_replica_samples_total"
    assert other.server_metrics.registry.get_sample_value(applied) == 8
    for chunk in shared.written[-1][1]:  # the stream delivers it again, say after a reconnect
        other.custom.apply_shared(chunk)
    assert other.server_metrics.registry.get_sample_value(applied) == 8  # each sample once


def test_what_a_batch_kept_travels_in_chunks_under_a_nats_message_and_comes_back_whole() -> None:
    kept = [SeriesSamples(SeriesKey(metric="http_requests", resource=PODS, namespace="team-a",
                                    name=f"web-{index}", labels=(("method", "GET"),)),
                          [1000.0 + step for step in range(50)], [float(step) for step in range(50)])
            for index in range(200)]
    chunks = encode_kept(kept, chunk_bytes=64 * 1024)
    assert len(chunks) > 1 and all(len(chunk) <= 64 * 1024 for chunk in chunks)
    back = [samples for chunk in chunks for samples in decode_kept(chunk)]
    assert [(s.key, list(s.timestamps), list(s.values)) for s in back] \
        == [(s.key, list(s.timestamps), list(s.values)) for s in kept]
    with pytest.raises(ValueError):
        decode_kept(b'{"not": "a chunk"}')


def test_what_another_replica_wrote_that_this_one_cannot_read_is_skipped() -> None:
    harness = Harness()
    harness.custom.apply_shared(b"[{}]")  # a newer version's encoding, say
    assert len(harness.series) == 0
