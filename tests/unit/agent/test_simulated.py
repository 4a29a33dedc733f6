"""Many simulated agents in one process: each is heard on time, whatever the watches hold.

Issue 13: the simulated agents shared one bounded connection pool, every node's pod watch parked
a connection in it for good, and once there were more watches than slots the Lease renewals
waited for a connection until they timed out. Here a small API server on 127.0.0.1 holds every
watch open for as long as the client keeps it, and the simulation runs far more nodes than
`concurrency`: every node must still be heard again and again (its reports, which are its
heartbeat, and its Lease registration), every informer synced.
"""

from __future__ import annotations

import asyncio
import gc
import resource
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from colocation.agent import selfcheck
from colocation.agent.report import ReportOptions
from colocation.agent.runtime import NodeAgentOptions, StartupError
from colocation.agent.simulated import (
    SimulatedNode,
    SimulationConfig,
    ensure_open_files,
    run_simulation,
    socket_budget,
    start_delays,
)
from colocation_sandbox.launcher.port_claims import free_port
from tests.timing import TIME_FACTOR

LEASES = "/apis/coordination.k8s.io/v1/namespaces/colocation-node-lease/leases"


class FakeApiServer:
    """Just what simulated agents ask: Leases, Nodes (none), pods (none; watches held open), reports."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.heartbeats: dict[str, int] = {}
        self.open_watches = 0
        self.most_watches = 0
        self.changed = asyncio.Condition()
        self.rv = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self.pods)
        app.router.add_get("/api/v1/nodes/{name}", self.not_found)
        app.router.add_get("/apis/coordination.k8s.io/v1/namespaces/colocation-system/leases/{name}",
                           self.not_found)  # nobody leads: reports go through this server
        app.router.add_get(LEASES + "/{name}", self.get_lease)
        app.router.add_post(LEASES, self.create_lease)
        app.router.add_put(LEASES + "/{name}", self.renew_lease)
        app.router.add_put("/apis/metrics.colocation.dev/v1alpha1/nodemetrics/{name}/status", self.report)
        return app

    async def _note(self, name: str) -> None:
        async with self.changed:
            self.heartbeats[name] = self.heartbeats.get(name, 0) + 1
            self.changed.notify_all()

    def _commit(self, lease: dict[str, Any]) -> web.Response:
        self.rv += 1
        lease["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[lease["metadata"]["name"]] = lease
        return web.json_response(lease)

    async def not_found(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    async def get_lease(self, request: web.Request) -> web.Response:
        lease = self.leases.get(request.match_info["name"])
        return web.json_response(lease) if lease else await self.not_found(request)

    async def create_lease(self, request: web.Request) -> web.Response:
        lease = await request.json()
        response = self._commit(lease)
        await self._note(lease["metadata"]["name"])
        return response

    async def renew_lease(self, request: web.Request) -> web.Response:
        lease = await request.json()
        response = self._commit(lease)
        await self._note(request.match_info["name"])
        return response

    async def report(self, request: web.Request) -> web.Response:
        response = web.json_response(await request.json())
        await self._note(request.match_info["name"])
        return response

    async def pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        async with self.changed:
            self.open_watches += 1
            self.most_watches = max(self.most_watches, self.open_watches)
            self.changed.notify_all()
        try:
            await asyncio.Event().wait()  # a watch with nothing to say, held until the client goes
        finally:
            self.open_watches -= 1
        return response

    async def until(self, condition: Any, timeout: float) -> None:
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(condition)


@pytest.fixture
async def api_server() -> AsyncIterator[tuple[FakeApiServer, str]]:
    server = FakeApiServer()
    runner = web.AppRunner(server.app(), handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "current-context": "sim", "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}],
        "clusters": [{"name": "sim", "cluster": {"server": server}}], "users": [{"name": "sim", "user": {}}]}))
    return path


async def metrics_of(port: int) -> selfcheck.AgentHealth:
    async with aiohttp.ClientSession() as session:
        return await selfcheck.read_health(session, f"http://127.0.0.1:{port}/metrics")


@pytest.mark.timed_pipeline
async def test_nodes_are_heard_and_informers_synced_with_far_more_watches_than_request_slots(
        api_server: tuple[FakeApiServer, str], tmp_path: Path) -> None:
    server, url = api_server
    nodes = tuple(SimulatedNode(node=f"sim-{i}", token=f"token-{i}", pods=2) for i in range(40))
    port = free_port()
    # A heartbeat every 0.5 s (x TIME_FACTOR: a heartbeat is late a tenth of an interval after it was
    # due, which a loaded machine's scheduling must not reach); two renewals and two reports in flight
    # at most, against 40 watches held open.
    lease_duration = max(2, round(2 * TIME_FACTOR))  # seconds, a whole number as the flag's
    interval = lease_duration / 4
    config = SimulationConfig(nodes=nodes, kubeconfig=kubeconfig(tmp_path, url), metrics_bind_address="127.0.0.1",
                              metrics_port=port,
                              node=NodeAgentOptions(lease_duration=lease_duration,
                                                    report=ReportOptions(report_interval=interval)),
                              concurrency=2, custom_metrics=False)
    stop = asyncio.Event()
    simulation = asyncio.create_task(run_simulation(config, stop))
    try:
        await server.until(lambda: server.open_watches == len(nodes), timeout=20)
        before = await metrics_of(port)
        # Every node is heard three more times while every watch stays open.
        floor = {node.node: server.heartbeats.get(node.node, 0) for node in nodes}
        await server.until(lambda: all(server.heartbeats.get(name, 0) >= count + 3 for name, count in floor.items()),
                           timeout=30 * TIME_FACTOR)
        after = await metrics_of(port)
        assert server.open_watches == server.most_watches == len(nodes)  # one connection each, none dropped
    finally:
        stop.set()
        assert await asyncio.wait_for(simulation, timeout=10) == 0
        gc.unfreeze()  # the simulation froze what it built (and all else this process had): give it back
    assert after.nodes == len(nodes) and after.informers == after.informers_synced == len(nodes)
    assert after.renewals + after.reports - before.renewals - before.reports >= 3 * len(nodes)
    assert after.late_heartbeats == 0
    assert after.error_count == 0 and after.informer_failures == 0


def test_the_socket_budget_is_a_watch_per_node_and_the_two_request_pools() -> None:
    # Lease renewals, then requests: to the replicas and through kube-apiserver, one more for the Lease reads.
    assert socket_budget(1000, 32) == 1000 + 32 + (32 + 32 + 1)


def test_the_open_files_limit_is_raised_as_far_as_the_hard_limit_and_no_further() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        assert ensure_open_files(64) >= 64
        if hard != resource.RLIM_INFINITY:
            with pytest.raises(StartupError, match=f"the limit is {hard}"):
                ensure_open_files(hard + 1)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_nodes_start_evenly_spread_over_one_renew_interval() -> None:
    assert start_delays(1, 10.0) == [0.0]
    assert start_delays(4, 10.0) == [0.0, 2.5, 5.0, 7.5]
    assert max(start_delays(5000, 10.0)) < 10.0


def test_the_nodes_file_keeps_the_scraped_share_and_reads_every_pod_scraped_without_it() -> None:
    node = SimulatedNode(node="sim-node-1", token="t", pods=30, scraped_share=0.2)
    assert node.to_json()["scrapedShare"] == 0.2
    assert SimulatedNode.from_json(node.to_json()) == node
    assert node.collector().scraped_share == 0.2
    assert SimulatedNode.from_json({"node": "sim-node-1", "token": "t"}).scraped_share == 1.0
