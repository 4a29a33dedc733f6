"""`colocation cleanup`'s calls against a small fake API on loopback: pages, retries, refusal, the end.

The fake serves only what cleanup calls: Nodes (list, merge patch of status), Leases (list, get,
delete) and NodeSLOs/NodeResources (list, delete), each list in pages of `limit`, and fails the
first calls it is told to with 503. The real API servers are exercised by tests/e2e/test_cleanup.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client

from colocation.apimachinery.clock import format_micro_time, wall_time
from colocation.manager.cleanup import Cleanup, CleanupCounts, CleanupError, CleanupOptions
from tests.clock import FakeClock
from tests.unit.loopback import serve_on_loopback

BATCH = {"kubernetes.io/batch-cpu": "3500", "kubernetes.io/batch-memory": "1073741824",
         "kubernetes.io/mid-cpu": "500", "kubernetes.io/mid-memory": "536870912"}
WALL = 1_800_000_000.0


class FakeApi:
    def __init__(self, nodes: int, batch_nodes: int, leases: int) -> None:
        self.nodes: dict[str, dict[str, Any]] = {f"n{i:03}": {"metadata": {"name": f"n{i:03}"}, "status": {
            "capacity": {"cpu": "8", **(BATCH if i < batch_nodes else {})},
            "allocatable": {"cpu": "8", **(BATCH if i < batch_nodes else {})}}} for i in range(nodes)}
        self.leases: dict[tuple[str, str], dict[str, Any]] = {
            ("colocation-node-lease", f"n{i:03}"): {"metadata": {"name": f"n{i:03}"}} for i in range(leases)}
        self.custom: dict[str, dict[str, Any]] = {"nodeslos": {}, "noderesources": {}}
        self.fail_next = 0  # answer this many of the next calls with 503
        self.requests: list[tuple[str, str]] = []
        self.on_patch: Callable[[], None] = lambda: None
        self.on_list_nodes: Callable[[], None] = lambda: None

    def leader(self, holder: str, renewed_ago: float) -> None:
        name = "colocation-operator"
        self.leases[("colocation-system", name)] = {"metadata": {"name": name}, "spec": {
            "holderIdentity": holder, "leaseDurationSeconds": 15,
            "renewTime": format_micro_time(wall_time(WALL) - timedelta(seconds=renewed_ago))}}

    def batch_nodes(self) -> list[str]:
        return [name for name, node in self.nodes.items()
                if set(BATCH) & (set(node["status"]["capacity"]) | set(node["status"]["allocatable"]))]

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._failing])
        app.router.add_get("/api/v1/nodes", self._list_nodes)
        app.router.add_patch("/api/v1/nodes/{name}/status", self._patch_node)
        leases = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        app.router.add_get(leases, self._list_leases)
        app.router.add_get(leases + "/{name}", self._get_lease)
        app.router.add_delete(leases + "/{name}", self._delete_lease)
        custom = "/apis/slo.colocation.dev/v1alpha1/{plural}"
        app.router.add_get(custom, self._list_custom)
        app.router.add_delete(custom + "/{name}", self._delete_custom)
        return app

    @web.middleware
    async def _failing(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if self.fail_next > 0:
            self.fail_next -= 1
            return web.json_response({"kind": "Status", "message": "try later", "code": 503}, status=503)
        response: web.StreamResponse = await handler(request)
        return response

    async def _list_nodes(self, request: web.Request) -> web.Response:
        response = self._list(request, self.nodes)
        self.on_list_nodes()  # after the answer: what it does shows only in the next listing
        return response

    async def _list_leases(self, request: web.Request) -> web.Response:
        return self._list(request, {n: o for (ns, n), o in self.leases.items() if ns == request.match_info["ns"]})

    async def _list_custom(self, request: web.Request) -> web.Response:
        return self._list(request, self.custom[request.match_info["plural"]])

    def _list(self, request: web.Request, objects: dict[str, Any]) -> web.Response:
        names = sorted(objects)
        start = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or len(names) or 1)
        following = str(start + limit) if start + limit < len(names) else ""
        return web.json_response({"items": [objects[n] for n in names[start:start + limit]],
                                  "metadata": {"continue": following}})

    async def _patch_node(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/merge-patch+json"
        node = self.nodes[request.match_info["name"]]
        patch = orjson.loads(await request.read())["status"]
        for field in ("capacity", "allocatable"):
            for key, value in patch[field].items():
                assert value is None, "cleanup only removes"
                node["status"][field].pop(key, None)
        self.on_patch()
        return web.json_response(node)

    async def _get_lease(self, request: web.Request) -> web.Response:
        found = self.leases.get((request.match_info["ns"], request.match_info["name"]))
        return web.json_response(found, status=200) if found else _not_found()

    async def _delete_lease(self, request: web.Request) -> web.Response:
        found = self.leases.pop((request.match_info["ns"], request.match_info["name"]), None)
        return web.json_response({"kind": "Status", "status": "Success"}) if found else _not_found()

    async def _delete_custom(self, request: web.Request) -> web.Response:
        found = self.custom[request.match_info["plural"]].pop(request.match_info["name"], None)
        return web.json_response(found) if found else _not_found()


def _not_found() -> web.Response:
    return web.json_response({"kind": "Status", "message": "not found", "code": 404}, status=404)


async def clean(fake: FakeApi, options: CleanupOptions,
                lines: list[str] | None = None) -> tuple[CleanupCounts, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)  # no real waiting: the clock below moves instead
        clock.advance(seconds)

    clock = FakeClock(0.0, wall=WALL)
    async with serve_on_loopback(fake.app()) as url:
        configuration = client.Configuration()
        configuration.host = url
        async with client.ApiClient(configuration) as api:
            cleanup = Cleanup(api, options, say=(lines if lines is not None else []).append,
                              wall=clock.wall, monotonic=clock, sleep=sleep,
                              rng=random.Random(1))
            return await cleanup.run(), slept


async def test_every_node_in_every_page_loses_its_resources_and_every_lease_goes() -> None:
    fake = FakeApi(nodes=23, batch_nodes=17, leases=23)
    fake.leader("", 100)  # released by the stopped operator
    lines: list[str] = []
    done, _ = await clean(fake, CleanupOptions(page_size=5, concurrency=3), lines)
    assert fake.batch_nodes() == [] and fake.leases == {}
    assert all(node["status"]["capacity"] == {"cpu": "8"} for node in fake.nodes.values())
    assert (done.nodes, done.leases) == (17, 24)
    # A progress line per page: 5 pages of Nodes, then 5 of Leases.
    assert lines[:5] == [f"nodes: {n} checked, {min(n, 17)} stripped of batch and mid resources"
                         for n in (5, 10, 15, 20, 23)]
    # The second pass found nothing: the Nodes were listed twice, no Node was patched twice.
    patches = [path for method, path in fake.requests if method == "PATCH"]
    assert len(patches) == len(set(patches)) == 17


async def test_a_leading_operator_makes_it_refuse_and_touch_nothing() -> None:
    fake = FakeApi(nodes=3, batch_nodes=3, leases=3)
    fake.leader("operator-0_abc", renewed_ago=2)
    with pytest.raises(CleanupError, match=r"^operator operator-0_abc leads .*stop the operator first"):
        await clean(fake, CleanupOptions())
    assert len(fake.batch_nodes()) == 3 and len(fake.leases) == 4
    assert [method for method, _ in fake.requests] == ["GET"]


async def test_it_waits_for_the_leaders_lease_to_lapse_when_asked() -> None:
    fake = FakeApi(nodes=2, batch_nodes=2, leases=2)
    fake.leader("operator-0_abc", renewed_ago=2)
    lines: list[str] = []
    _, slept = await clean(fake, CleanupOptions(wait_for_leader=60), lines)
    assert fake.batch_nodes() == [] and fake.leases == {}
    # It went on only once the Lease had not been renewed for its duration and the skew allowance.
    assert 2 + sum(slept[:len([line for line in lines if line.startswith("waiting")])]) > 15 + 5
    assert lines[0].startswith("waiting for the operator to stop: operator operator-0_abc leads")


async def test_force_goes_on_while_an_operator_leads() -> None:
    fake = FakeApi(nodes=2, batch_nodes=2, leases=0)
    fake.leader("operator-0_abc", renewed_ago=2)
    lines: list[str] = []
    await clean(fake, CleanupOptions(force=True), lines)
    assert fake.batch_nodes() == [] and lines[0].startswith("warning: operator operator-0_abc leads")


async def test_unavailable_answers_are_retried_with_growing_jittered_delays() -> None:
    fake = FakeApi(nodes=4, batch_nodes=4, leases=1)
    fake.fail_next = 3
    _, slept = await clean(fake, CleanupOptions(attempts=6))
    assert fake.batch_nodes() == [] and fake.leases == {}
    retries = slept[:3]
    assert retries == sorted(retries) and all(0.25 <= d <= 4.0 for d in retries)
    assert len(set(retries)) == 3


async def test_it_gives_up_with_one_line_when_the_api_keeps_failing() -> None:
    fake = FakeApi(nodes=1, batch_nodes=1, leases=0)
    fake.fail_next = 100
    with pytest.raises(CleanupError) as failure:
        await clean(fake, CleanupOptions(attempts=4))
    assert str(failure.value) == "cannot read Lease colocation-operator after 4 attempts: 503 try later"


async def test_what_keeps_coming_back_ends_in_an_error_at_the_deadline() -> None:
    fake = FakeApi(nodes=1, batch_nodes=1, leases=0)

    def rewrite() -> None:  # an operator nobody stopped, which holds no Lease
        fake.nodes["n000"]["status"]["capacity"].update(BATCH)

    fake.on_patch = rewrite
    with pytest.raises(CleanupError, match=r"^not clean after 30s: the last pass still found 1 Nodes"):
        await clean(fake, CleanupOptions(timeout=30))


async def test_custom_resources_go_only_when_asked() -> None:
    fake = FakeApi(nodes=1, batch_nodes=0, leases=0)
    fake.custom["nodeslos"] = {f"s{i}": {"metadata": {"name": f"s{i}"}} for i in range(7)}
    fake.custom["noderesources"] = {"r0": {"metadata": {"name": "r0"}}}
    await clean(fake, CleanupOptions())
    assert len(fake.custom["nodeslos"]) == 7
    done, _ = await clean(fake, CleanupOptions(delete_custom_resources=True, page_size=3))
    assert fake.custom == {"nodeslos": {}, "noderesources": {}} and done.custom_resources == 8


@pytest.mark.parametrize("settle", [0.0, 15.0])
async def test_settle_catches_a_last_write_of_an_operator_stopping_without_its_lease(settle: float) -> None:
    fake = FakeApi(nodes=2, batch_nodes=2, leases=0)
    listings = [0]

    def late_write() -> None:  # right after the first clean pass, the stopping leader's last write
        listings[0] += 1
        if listings[0] == 2:
            fake.nodes["n001"]["status"]["allocatable"].update(BATCH)

    fake.on_list_nodes = late_write
    lines: list[str] = []
    done, slept = await clean(fake, CleanupOptions(settle=settle), lines)
    if not settle:
        assert fake.batch_nodes() == ["n001"], "without --settle the run ends at the first clean pass"
        return
    assert fake.batch_nodes() == [] and done.nodes == 3
    assert "clean; checking again in 15s (--settle)" in lines and 15.0 in slept


async def test_settle_needs_time_within_the_deadline() -> None:
    with pytest.raises(CleanupError, match=r"^clean, but no time left within 10s to check it stays clean for 30s"):
        await clean(FakeApi(nodes=1, batch_nodes=1, leases=0), CleanupOptions(settle=30, timeout=10))
