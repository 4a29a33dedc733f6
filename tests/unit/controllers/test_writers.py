"""The controllers' writes are fenced by the leader election's write budget."""

from __future__ import annotations

import time
from typing import Any

from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from colocation.controllers.controller_metrics import ControllerMetrics
from colocation.controllers.events import EventRecorder
from colocation.controllers.writers import KubeWriter, fenced_by


class FakeResponse:
    status = 200

    async def read(self) -> bytes:
        return b"{}"

    def release(self) -> None:
        pass


async def fenced_writer(budget: list[float]) -> tuple[KubeWriter, list[float], ControllerMetrics]:
    metrics = ControllerMetrics(CollectorRegistry())
    writer = KubeWriter(client.ApiClient(), metrics, EventRecorder(time.time, "op"), timeout=10.0,
                        write_budget=lambda: budget[0])
    timeouts: list[float] = []

    async def patch_node_status(name: str, body: Any, **kwargs: Any) -> FakeResponse:
        timeouts.append(kwargs["_request_timeout"])
        return FakeResponse()

    writer.core.patch_node_status = patch_node_status  # type: ignore[method-assign,assignment]
    return writer, timeouts, metrics


async def test_a_write_never_outlives_the_leadership_that_sent_it() -> None:
    budget = [15.0]
    writer, timeouts, metrics = await fenced_writer(budget)
    assert (await writer.patch_node_status("n1", {"status": {}}))[0] == 200
    budget[0] = 3.5  # the renew deadline is near: the next write must land within what is left
    assert (await writer.patch_node_status("n1", {"status": {}}))[0] == 200
    assert timeouts == [10.0, 3.5]
    assert metrics.fenced_calls._value.get() == 0


async def test_no_write_is_sent_once_leadership_has_ended() -> None:
    budget = [0.0]
    writer, timeouts, metrics = await fenced_writer(budget)
    assert await writer.patch_node_status("n1", {"status": {}}) == (0, None)
    assert timeouts == []
    assert metrics.fenced_calls._value.get() == 1


async def test_a_nodes_writes_are_fenced_by_its_shards_lease_within_fenced_by() -> None:
    """With evaluation shards, what is written for a node is bounded by the node's shard's Lease,
    not by the leader's: a replica that leads but lost the shard sends nothing for that node."""
    leader = [15.0]
    writer, timeouts, metrics = await fenced_writer(leader)
    with fenced_by(lambda: 0.0):  # a shard this replica no longer holds
        assert await writer.patch_node_status("n1", {"status": {}}) == (0, None)
    with fenced_by(lambda: 2.5):  # a shard held, its deadline near
        assert (await writer.patch_node_status("n2", {"status": {}}))[0] == 200
    assert (await writer.patch_node_status("n3", {"status": {}}))[0] == 200  # outside: the leader's
    assert timeouts == [2.5, 10.0]
    assert metrics.fenced_calls._value.get() == 1
