"""`colocation sandbox` with the builtin API server: the server, its operator replicas and nodes, until stopped."""

from __future__ import annotations

import asyncio

from colocation_sandbox.launcher.builtin_sandbox import Sandbox
from colocation_sandbox.launcher.operator_replicas import OperatorReplicas
from colocation_sandbox.launcher.sandbox_nodes import SIMULATED_NODES_PER_PROCESS, SandboxNodes


async def serve_forever(sandbox: Sandbox, stop: asyncio.Event, operators: int = 0,
                        *, operator_args: tuple[str, ...] = (), nodes: int = 0, agent_args: tuple[str, ...] = (),
                        pods_per_node: int = 10, scraped_share: float = 1.0, run_agents: bool = True,
                        nodes_per_agent: int = SIMULATED_NODES_PER_PROCESS) -> None:
    """Serve until `stop`; with `operators`, run that many operator replicas against the sandbox;
    with `nodes`, create that many Nodes and run their agents (see sandbox_nodes)."""
    await sandbox.start()
    replicas = OperatorReplicas(sandbox, operators, operator_args) if operators else None
    agents = SandboxNodes(sandbox, nodes, agent_args, pods_per_node=pods_per_node, scraped_share=scraped_share,
                          run_agents=run_agents, nodes_per_agent=nodes_per_agent) if nodes else None
    try:
        if replicas is not None:
            await replicas.start()
        if agents is not None:
            await agents.start()
        print(f"ready: kubeconfig={sandbox.kubeconfig_path}", flush=True)
        await stop.wait()
    finally:
        if agents is not None:
            await agents.stop()
        if replicas is not None:
            await replicas.stop()
        await sandbox.stop()
