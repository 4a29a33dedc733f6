"""One list/watch, several consumers: each gets its own transform's values, on every list and event, in order."""

from __future__ import annotations

from typing import Any

import pytest

from colocation.kube.backoff import Backoff
from colocation.kube.informer import InformerOptions
from colocation.kube.shared_informer import (
    BOUND_UNFINISHED_PODS,
    PODS_PATH,
    InformerConsumer,
    bound_pods_informer,
    shared_informer,
)
from tests.unit.kube.test_informer import FakeResponse, FakeServer, event, page, run_informer_until

Obj = dict[str, Any]


class Reader:
    """A consumer that keeps `prefix + name` of each object and records what it was handed."""

    def __init__(self, prefix: str, log: list[str]) -> None:
        self.prefix = prefix
        self.log = log  # shared between readers: the order in which consumers were called
        self.syncs: list[tuple[list[str], str]] = []
        self.events: list[tuple[str, str]] = []

    def keep(self, obj: Obj) -> str:
        return f"{self.prefix}{obj['metadata']['name']}"

    async def on_sync(self, items: list[str], resource_version: str) -> None:
        self.log.append(f"{self.prefix}sync")
        self.syncs.append((items, resource_version))

    async def on_event(self, type_: str, kept: str) -> None:
        self.log.append(f"{self.prefix}{type_}")
        self.events.append((type_, kept))

    def consumer(self) -> InformerConsumer[str]:
        return InformerConsumer(name=self.prefix.strip(":"), transform=self.keep, on_sync=self.on_sync,
                                on_event=self.on_event)


def readers(*prefixes: str) -> tuple[list[str], list[Reader]]:
    log: list[str] = []
    return log, [Reader(prefix, log) for prefix in prefixes]


async def test_each_consumer_gets_its_own_kept_values_on_the_list_and_every_event_in_order() -> None:
    server = FakeServer([page(["a", "b"], "10", token="t1"), page(["c"], "10"),
                         FakeResponse(200, lines=[event("ADDED", "d", "11"), event("BOOKMARK", "", "12"),
                                                  event("DELETED", "a", "13")])])
    log, (first, second) = readers("x:", "y:")
    informer = shared_informer(server, "/api/v1/pods", [first.consumer(), second.consumer()],
                               options=InformerOptions(page_size=2), name="pods")
    await run_informer_until(informer, server.exhausted)
    assert first.syncs == [(["x:a", "x:b", "x:c"], "10")]
    assert second.syncs == [(["y:a", "y:b", "y:c"], "10")]
    assert first.events == [("ADDED", "x:d"), ("DELETED", "x:a")]
    assert second.events == [("ADDED", "y:d"), ("DELETED", "y:a")]
    # Every consumer has each list and each event before the next one is read.
    assert log == ["x:sync", "y:sync", "x:ADDED", "y:ADDED", "x:DELETED", "y:DELETED"]
    # One list (two pages) and one watch, resumed once the server ended it: not one per consumer.
    assert [request[2] for request in server.requests] == [False, False, True, True]
    assert informer.synced.is_set() and informer.resource_version == "13"
    assert informer.name == "pods (x, y)"


async def test_a_relist_reaches_every_consumer() -> None:
    server = FakeServer([page(["a"], "10"), FakeResponse(410), page(["b", "c"], "20"),
                         FakeResponse(200, lines=[event("MODIFIED", "b", "21")])])
    _, (first, second, third) = readers("x:", "y:", "z:")
    informer = shared_informer(server, "/api/v1/pods", [first.consumer(), second.consumer(), third.consumer()],
                               backoff=Backoff(initial=0.001, maximum=0.002))
    await run_informer_until(informer, server.exhausted)
    for reader in (first, second, third):
        assert reader.syncs == [([f"{reader.prefix}a"], "10"), ([f"{reader.prefix}b", f"{reader.prefix}c"], "20")]
        assert reader.events == [("MODIFIED", f"{reader.prefix}b")]
    assert informer.relists == 2


async def test_a_consumer_that_fails_its_list_fails_it_for_all_and_the_retry_reaches_every_one() -> None:
    server = FakeServer([page(["a"], "10"), page(["a"], "11")])
    _, (first, second) = readers("x:", "y:")
    failures = iter([True])

    async def first_list_fails(items: list[str], resource_version: str) -> None:
        if next(failures, False):
            raise RuntimeError("consumer failed")
        await first.on_sync(items, resource_version)

    flaky = InformerConsumer(name="x", transform=first.keep, on_sync=first_list_fails, on_event=first.on_event)
    errors: list[str] = []
    informer = shared_informer(server, "/api/v1/pods", [flaky, second.consumer()],
                               backoff=Backoff(initial=0.001, maximum=0.002), on_error=errors.append)
    await run_informer_until(informer, server.exhausted)
    assert len(errors) == 1  # one failed list: the informer lists again, as after any failure
    assert first.syncs == [(["x:a"], "11")]
    assert second.syncs == [(["y:a"], "11")]  # the second consumer waited for the retry


def test_a_shared_informer_needs_a_consumer() -> None:
    with pytest.raises(ValueError, match="at least one consumer"):
        shared_informer(FakeServer([]), "/api/v1/pods", [])


async def test_the_bound_pods_informer_lists_and_watches_bound_unfinished_pods_once() -> None:
    server = FakeServer([page(["a"], "10")])
    _, (first, second) = readers("x:", "y:")
    await run_informer_until(bound_pods_informer(server, [first.consumer(), second.consumer()]), server.exhausted)
    assert [(path, params.get("fieldSelector"), stream) for path, params, stream in server.requests] == [
        (PODS_PATH, BOUND_UNFINISHED_PODS, False), (PODS_PATH, BOUND_UNFINISHED_PODS, True)]
