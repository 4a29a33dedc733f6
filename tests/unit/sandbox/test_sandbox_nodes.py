"""How the sandbox spreads its simulated nodes over agent processes."""

from __future__ import annotations

from colocation_sandbox.launcher.sandbox_nodes import SIMULATED_NODES_PER_PROCESS, simulation_groups


def test_each_process_simulates_at_most_its_share_and_every_node_once() -> None:
    nodes = [f"node-{index}" for index in range(2 * SIMULATED_NODES_PER_PROCESS + 1)]
    groups = simulation_groups(nodes)
    assert len(groups) == 3
    assert all(len(group) <= SIMULATED_NODES_PER_PROCESS for group in groups)
    assert max(map(len, groups)) - min(map(len, groups)) <= 1  # dealt evenly
    assert sorted(node for group in groups for node in group) == sorted(nodes)


def test_one_node_per_process_gives_each_simulated_node_its_own_agent() -> None:
    assert simulation_groups(["a", "b", "c"], per_process=1) == [["a"], ["b"], ["c"]]


def test_a_small_sandbox_has_one_process_and_none_without_simulated_nodes() -> None:
    assert simulation_groups(["a", "b"]) == [["a", "b"]]
    assert simulation_groups(SIMULATED_NODES_PER_PROCESS * ["n"]) == [SIMULATED_NODES_PER_PROCESS * ["n"]]
    assert simulation_groups([]) == []
