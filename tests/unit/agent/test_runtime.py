"""NodeAgent's CPU suppress wiring: the NodeSLO from its watch drives the suppressor, on the latest sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CgroupWriter
from colocation.agent.collector import Sample
from colocation.agent.cpu_suppressor import CpuSuppressor
from colocation.agent.leader_locator import LeaderLocator
from colocation.agent.runtime import NodeAgent
from tests.unit.agent.test_cpu_suppressor import TREES, build, sample

TREE = TREES["v1-cgroupfs"]
NODESLO = {"metadata": {"name": "node-a"},
           "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}}


class NoKube:
    """The agent's API client, never called by these tests (no stage runs)."""

    def transport(self) -> Any:
        return None

    def bearer_token(self) -> str:
        return ""

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError(f"unexpected {method} {path}")


class FixedCollector:
    def sample(self, now: float) -> Sample:
        return sample()


def agent_on(root: Path) -> NodeAgent:
    metrics = AgentMetrics()
    suppressor = CpuSuppressor(CgroupWriter(root), metrics, node="node-a", cpus=lambda: 8)

    async def no_put(*args: Any) -> tuple[int, Any]:
        raise AssertionError("no report expected")

    return NodeAgent("node-a", NoKube(), FixedCollector(), locator=LeaderLocator(NoKube()), direct=no_put,
                     metrics=metrics, suppressor=suppressor)


async def test_suppression_waits_for_the_nodeslo_then_follows_it(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    build(root, TREE)
    agent = agent_on(root)
    agent.collect_once()
    agent.suppress_once()
    assert TREE.quota(root) == "-1"  # NodeSLO not listed yet: a restarting agent must not undo anything

    await agent._nodeslo_sync([NODESLO], "1")
    agent.suppress_once()
    assert TREE.quota(root) == "220000"

    await agent._nodeslo_event("DELETED", NODESLO)
    agent.suppress_once()
    assert TREE.quota(root) == "-1"


async def test_a_stale_sample_neither_tightens_nor_loosens(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    build(root, TREE)
    agent = agent_on(root)
    await agent._nodeslo_sync([NODESLO], "1")
    agent.suppress_once()  # no sample yet
    assert TREE.quota(root) == "-1"
    agent.collect_once()
    assert agent.last_sample_at is not None
    agent.last_sample_at -= 60  # collection stalled a minute ago
    agent.suppress_once()
    assert TREE.quota(root) == "-1"
