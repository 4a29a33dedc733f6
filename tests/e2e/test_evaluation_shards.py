"""With --store nats and --evaluation-shards 4, two operator replicas share the nodes' evaluations (issue 36).

The test's own sandbox: two replicas, eight simulated nodes. Expectations:

- the four shard Leases are held, two by each replica, and each replica's
  `colocation_evaluation_shards_held` says how many it holds;
- every node gets its batch resources;
- each node is evaluated by the replica holding its shard, and by no other: a deleted NodeResource
  comes back, created by that replica (its `colocation_controller_writes_total`);
- a SIGKILLed replica's shards are held again once their Leases expire; restarted (a new process),
  it is given shards, and again each node is evaluated by its shard's holder only.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation.controllers.evaluation_shards import shard_of
from tests.e2e.kube import Kube, scrape_samples
from tests.e2e.nats_sandbox import nats_sandbox
from tests.e2e.test_operator import address, leader
from tests.timing import eventually_async

SHARDS = 4
NS = "colocation-system"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
NODERESOURCES = "/apis/slo.colocation.dev/v1alpha1/noderesources"
BATCH_CPU = "kubernetes.io/batch-cpu"
# A dead replica's shards: its announcement is forgotten (15 s; its Leases expire as soon, 15 s
# after their last renewal), the survivor reads the bucket (5 s) and looks again (2 s), and its
# watcher reads the Lease (1 s). Sooner when the survivor sees the dead replica's pod stopped.
TAKEOVER = 15 + 5 + 2 + 1
ARGS = ["--nodes", "8", "--pods-per-node", "2", "--no-serve-custom-metrics", "--agent-arg=--report-interval=2",
        f"--operator-arg=--evaluation-shards={SHARDS}"]


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    yield from nats_sandbox(request, tmp_path_factory, ARGS)


def _replicas(state: Path) -> list[dict[str, Any]]:
    return list(json.loads((state / "operators.json").read_text()))


def _nodes(state: Path) -> list[str]:
    return sorted(node for agent in json.loads((state / "agents.json").read_text()) for node in agent["nodes"])


async def _holder_processes(kube: Kube) -> dict[int, str]:
    """Shard -> the process holding its Lease, POD_SUFFIX ("" when none does)."""
    holders = {}
    for shard in range(SHARDS):
        status, lease = await kube.request("GET", f"{LEASES}/colocation-operator-shard-{shard}")
        holders[shard] = str((lease.get("spec") or {}).get("holderIdentity") or "") if status == 200 else ""
    return holders


def _balanced(holders: dict[int, str], identities: set[str]) -> bool:
    """Each replica holds its share: the assignment is settled, no shard is about to move."""
    return sorted(Counter(holders.values()).items()) == sorted((identity, SHARDS // len(identities))
                                                                for identity in identities)


async def _holders(kube: Kube) -> dict[int, str]:
    """Shard -> the pod holding its Lease ("" when none does)."""
    return {shard: process.rpartition("_")[0] for shard, process in (await _holder_processes(kube)).items()}


async def _sample(replica: dict[str, Any], name: str, **labels: str) -> float:
    samples = await scrape_samples(f"{address(replica)}/metrics", False)
    return sum(sample.value for sample in samples if sample.name == name and labels.items() <= sample.labels.items())


async def _creates(replica: dict[str, Any]) -> float:
    return await _sample(replica, "colocation_controller_writes_total", resource="noderesources",
                         operation="create", result="ok")


async def _every_node_offers_batch_resources(kube: Kube, nodes: list[str]) -> bool:
    status, listed = await kube.request("GET", "/api/v1/nodes")
    offering = {node["metadata"]["name"] for node in listed.get("items", [])
                if BATCH_CPU in node["status"].get("allocatable", {})} if status == 200 else set()
    return set(nodes) <= offering


async def _recreated_by_holders(kube: Kube, state: Path, nodes: list[str], holders: dict[int, str]) -> None:
    """Delete the NodeResource of every node; each comes back, created by its shard's holder only."""
    replicas = {replica["identity"]: replica for replica in _replicas(state)}
    before = {identity: await _creates(replica) for identity, replica in replicas.items()}
    expected = {identity: sum(1 for node in nodes if holders[shard_of(node, SHARDS)] == identity)
                for identity in replicas}
    for node in nodes:
        status, answer = await kube.request("DELETE", f"{NODERESOURCES}/{node}")
        assert status in (200, 202), answer

    async def recreated() -> bool:
        status, listed = await kube.request("GET", NODERESOURCES)
        return status == 200 and {item["metadata"]["name"] for item in listed["items"]} >= set(nodes)

    await eventually_async(recreated, timeout=20, interval=0.2, message="every NodeResource back")
    created = {identity: await _creates(replica) - before[identity] for identity, replica in replicas.items()}
    assert created == expected, f"NodeResources created by each replica {created}, its shards' nodes {expected}"


async def test_two_replicas_share_the_shards_and_each_evaluates_only_its_own_nodes(
        sandbox: tuple[Path, Path]) -> None:
    kubeconfig, state = sandbox
    nodes = _nodes(state)
    identities = {replica["identity"] for replica in _replicas(state)}
    async with Kube.from_kubeconfig(kubeconfig) as kube:
        async def shared() -> dict[int, str] | None:
            holders = await _holders(kube)
            return holders if _balanced(holders, identities) else None

        holders = await eventually_async(shared, timeout=60, interval=0.5,
                                         message="both replicas holding shards")
        for replica in _replicas(state):
            held = await _sample(replica, "colocation_evaluation_shards_held")
            assert held == sum(1 for holder in holders.values() if holder == replica["identity"])
        await eventually_async(lambda: _every_node_offers_batch_resources(kube, nodes), timeout=60,
                               interval=0.5, message="every node offering batch resources")
        await _recreated_by_holders(kube, state, nodes, holders)


async def test_a_killed_replicas_shards_are_taken_over_and_its_restart_gets_some_back(
        sandbox: tuple[Path, Path]) -> None:
    kubeconfig, state = sandbox
    nodes = _nodes(state)
    identities = {replica["identity"] for replica in _replicas(state)}
    async with Kube.from_kubeconfig(kubeconfig) as kube:
        leading, _, _ = await leader(kube)
        victim = next(r for r in _replicas(state) if r["identity"] != leading)  # shards only, not the Lease
        dead = {holder for holder in (await _holder_processes(kube)).values()
                if holder.rpartition("_")[0] == victim["identity"]}
        assert dead, "the replica to kill holds no shard"
        killed_at = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)

        async def taken_over() -> dict[int, str] | None:
            processes = await _holder_processes(kube)
            if dead & set(processes.values()) or "" in processes.values():
                return None
            return {shard: process.rpartition("_")[0] for shard, process in processes.items()}

        await eventually_async(taken_over, timeout=TAKEOVER, interval=0.5,
                               message="every shard of the killed replica held by a live process")
        print(f"the killed replica's shards held again {time.monotonic() - killed_at:.1f} s after the kill")

        async def shared_again() -> dict[int, str] | None:
            holders = await taken_over()
            return holders if holders is not None and _balanced(holders, identities) else None

        # The sandbox restarts the killed replica (a new process, with an identity of its own):
        # once Ready, it is given the shards it ranks first.
        holders = await eventually_async(shared_again, timeout=60, interval=0.5,
                                         message="the restarted replica holding shards")
        await _recreated_by_holders(kube, state, nodes, holders)
