"""The leader cut off from NATS alone, on the real control plane with --store nats (issue 36).

The test's own sandbox: two operator replicas, four simulated nodes whose agents report every
second (a heartbeat at least), a node grace period of 8 s. The NATS servers listen on the pod network's second address
(`PodNetwork.beside_address`); the test routes that address to nowhere inside the leader pod's
network namespace (`ip route add blackhole`), for three grace periods, then removes the route.
The leader still reaches kube-apiserver and keeps its Lease; the agents' reports still reach the
other replica. Expectations:

- the leader judges no node unhealthy, during the cut or after it: its NodeMetric copy is not
  confirmed current, so its node health stands still (`colocation_node_health_held_seconds`
  grows) instead of taking every agent for silent, and runs on once the copy caught up; every
  node keeps its batch resources;
- the cut replica serves reads from its copy with a Warning header that it may be stale;
- once the route is back, its copy catches up: reads without the warning, at a resourceVersion at
  least the other replica's at the heal, never lower than before the cut.

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation_sandbox.launcher.nats_cluster import load_cluster
from tests.e2e.conftest import apiserver_kind
from tests.e2e.kube import Kube, bound_token, scrape_samples
from tests.e2e.nats_sandbox import nats_sandbox
from tests.e2e.test_evaluation_shards import BATCH_CPU
from tests.e2e.test_nats_store_failures import get_with_warning
from tests.e2e.test_operator import BASE, NS, address, leader, replicas
from tests.timing import TIME_FACTOR, eventually_async

# --node-grace-period: above what a caught-up copy shows between two reports of a node, the copy's
# clock tolerance (3 s) and an evaluation interval (1 s) past its last report before the cut.
GRACE = 8.0
CUT_SECONDS = 3 * GRACE
ARGS = ["--nodes", "4", "--pods-per-node", "2", "--no-serve-custom-metrics", "--agent-arg=--report-interval=1",
        "--agent-arg=--heartbeat-interval=1", f"--operator-arg=--node-grace-period={GRACE:g}",
        "--operator-arg=--evaluation-interval=1"]
PACE = 0.5  # between two looks at the nodes (the test's pace, not synchronisation)
STALE = "may be stale"  # in the Warning of a read served from a copy that NATS did not confirm


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if apiserver_kind(request.config) != "kube":
        pytest.skip("the cut routes inside a pod's network namespace: only with --apiserver kube")
    yield from nats_sandbox(request, tmp_path_factory, ARGS)


def _pod_netns(state: Path, pod: str) -> str:
    pods = json.loads((state / "pods.json").read_text())
    return str(next(p["netns"] for p in pods if p["pod"] == f"{NS}/{pod}"))


def _route(netns: str, verb: str, address: str) -> None:
    subprocess.run(["ip", "-n", netns, "route", verb, "blackhole", f"{address}/32"], check=True,
                   capture_output=True, text=True, timeout=10)


def _nodes(state: Path) -> set[str]:
    return {node for agent in json.loads((state / "agents.json").read_text()) for node in agent["nodes"]}


async def _sample(replica: dict[str, Any], name: str, **labels: str) -> float:
    samples = await scrape_samples(f"{address(replica)}/metrics", False)
    return sum(sample.value for sample in samples if sample.name == name and labels.items() <= sample.labels.items())


async def _unhealthy_judgements(replica: dict[str, Any]) -> float:
    return await _sample(replica, "colocation_node_health_transitions_total", type="Healthy", status="False")


async def _without_batch_resources(kube: Kube, nodes: set[str]) -> set[str]:
    status, listed = await kube.request("GET", "/api/v1/nodes")
    assert status == 200, listed
    offering = {node["metadata"]["name"] for node in listed["items"]
                if BATCH_CPU in node["status"].get("allocatable", {})}
    return nodes - offering


async def _list(replica: dict[str, Any], token: str) -> tuple[int, str | None]:
    """(resourceVersion, Warning) of a list straight from `replica`."""
    status, listed, warning = await get_with_warning(replica, BASE, token)
    assert status == 200, listed
    return int(listed["metadata"]["resourceVersion"]), warning


@pytest.mark.timeout(int(300 * TIME_FACTOR))  # the sandbox's start, a cut of 20 s, the checks after it
async def test_a_leader_cut_off_from_nats_judges_no_node_silent_and_catches_up_after(
        sandbox: tuple[Path, Path]) -> None:
    kubeconfig, state = sandbox
    nodes = _nodes(state)
    nats_address = load_cluster(state / "nats").servers[0].client_host
    async with Kube.from_kubeconfig(kubeconfig) as kube:
        token = await bound_token(kube, "e2e-partition-reader", [{
            "apiGroups": ["metrics.colocation.dev"], "resources": ["nodemetrics"], "verbs": ["get", "list"]}])
        pod, _, _ = await eventually_async(lambda: _leading(kube), timeout=60, message="a leader")
        cut = next(r for r in replicas(state) if r["identity"] == pod)
        other = next(r for r in replicas(state) if r["identity"] != pod)

        async def settled() -> bool:  # past the startup grace, every node offering batch resources
            return await _sample(cut, "colocation_evictions_allowed") == 1 \
                and not await _without_batch_resources(kube, nodes)

        await eventually_async(settled, timeout=60, interval=0.5, message="every node offering batch resources")
        judged_before = await _unhealthy_judgements(cut)
        version_before, _ = await _list(cut, token)
        netns = _pod_netns(state, pod)
        _route(netns, "add", nats_address)
        healed = False
        try:
            started, lost, held = time.monotonic(), set[str](), []
            warned = False
            while time.monotonic() - started < CUT_SECONDS:
                lost |= await _without_batch_resources(kube, nodes)
                held.append(await _sample(cut, "colocation_node_health_held_seconds"))
                warned = warned or STALE in ((await get_with_warning(cut, BASE, token))[2] or "")
                await asyncio.sleep(PACE)
            version_at_heal, _ = await _list(other, token)
            _route(netns, "del", nats_address)
            healed = True
        finally:
            if not healed:
                _route(netns, "del", nats_address)
        assert max(held) >= 2 * GRACE, f"the cut leader's node health held {max(held)} s: was it cut off?"
        assert warned, "no read from the cut replica said its copy may be stale"

        async def caught_up() -> bool:
            # Until its follower has subscribed again (its backoff), a consistent read on the cut
            # replica waits for its copy and gets 503: not caught up yet (architecture.md, "Reads").
            status, listed, warning = await get_with_warning(cut, BASE, token)
            if status == 503:
                return False
            assert status == 200, listed
            return int(listed["metadata"]["resourceVersion"]) >= version_at_heal and STALE not in (warning or "")

        await eventually_async(caught_up, timeout=20, interval=0.5, message="the cut replica's copy caught up")
        version_after, _ = await _list(cut, token)
        # A grace period after the heal: a node the caught-up leader took for silent would show.
        await eventually_async(lambda: _running(cut), timeout=10, interval=0.5, message="node health running")
        end = time.monotonic() + GRACE * TIME_FACTOR
        while time.monotonic() < end:
            lost |= await _without_batch_resources(kube, nodes)
            await asyncio.sleep(PACE)
        assert lost == set(), f"nodes that lost their batch resources: {sorted(lost)}"
        assert await _unhealthy_judgements(cut) == judged_before
        assert version_after >= version_before
        assert (await leader(kube))[0] == pod  # it led throughout: kube-apiserver stayed reachable
    print(f"nats partition: leader cut off {CUT_SECONDS:g} s, node health held up to {max(held):.1f} s, "
          f"no node judged unhealthy, copy at {version_after} >= {version_at_heal} after the heal")


async def _leading(kube: Kube) -> tuple[str, str, Any] | None:
    found = await leader(kube)
    return found if found[0] else None


async def _running(replica: dict[str, Any]) -> bool:
    return await _sample(replica, "colocation_node_health_held_seconds") == 0
