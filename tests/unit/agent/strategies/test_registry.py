"""The registry is the one place that lists the agent's NodeSLO strategies: every folder is in it, the
agent's flags and its enforcement come from it, and a strategy registered nowhere else is run."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from colocation.agent import strategies
from colocation.agent.agent_command import agent_command
from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.enforcement import EnforcementOptions, node_enforcement
from colocation.agent.leader_locator import LeaderLocator
from colocation.agent.node_pods import PodView
from colocation.agent.runtime import NodeAgent
from colocation.agent.strategies.registry import STRATEGIES
from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, Round, flag, with_flags
from colocation.agent.strategies.strategy_host import StrategyHost
from colocation.agent.strategies.system_settings.system_settings_strategy import SystemSettingsOptions
from tests.unit.agent.test_runtime import FixedCollector, NoKube

PACKAGE = Path(strategies.__file__).parent
AGENT = PACKAGE.parent
# The agent's wiring: it reaches the strategies through the registry only.
WIRING = ("runtime.py", "enforcement.py", "agent_command.py", "node_pods.py", "simulated.py")


def folders() -> set[str]:
    return {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}


def test_every_strategy_folder_is_registered_and_every_registration_is_a_folders() -> None:
    assert folders() == {strategy.name.replace("-", "_") for strategy in STRATEGIES}
    for strategy in STRATEGIES:
        # Its setup is declared in its folder (the registration module, named after it).
        assert strategy.setup.__module__ == \
            f"colocation.agent.strategies.{strategy.name.replace('-', '_')}.{strategy.name.replace('-', '_')}_strategy"
    assert len({strategy.options for strategy in STRATEGIES}) == len(STRATEGIES)


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_only_the_registry_imports_the_registrations_and_the_wiring_no_strategy() -> None:
    for path in AGENT.rglob("*.py"):
        if path == PACKAGE / "registry.py":
            continue
        folder = path.relative_to(PACKAGE).parts[0] if path.is_relative_to(PACKAGE) else None
        for name in imports(path):
            parts = name.split(".")
            if parts[:3] == ["colocation", "agent", "strategies"] and len(parts) > 4 and parts[4].endswith("_strategy"):
                assert parts[3] == folder, f"{path} imports {name}: only the registry lists the strategies"
    for wiring in WIRING:
        assert not {name for name in imports(AGENT / wiring)
                    if name.split(".")[:3] == ["colocation", "agent", "strategies"]
                    and len(name.split(".")) > 3 and name.split(".")[3] in folders()}, wiring


def test_every_strategys_flags_are_the_agents() -> None:
    params = {opt: param for param in agent_command.params for opt in param.opts}
    declared = [(decls, kwargs) for strategy in STRATEGIES for decls, kwargs in strategy.flags()]
    assert declared
    for decls, kwargs in declared:
        param = params[decls[0]]
        assert isinstance(param, click.Option)
        assert (list(decls), param.help) == (param.opts, kwargs["help"])
        assert param.default == kwargs["default"] or (param.is_flag and not kwargs["default"])
    names = [click.Option(list(decls), **kwargs).name for decls, kwargs in declared]
    assert len(set(names)) == len(names)  # each strategy's options are its own


def test_every_registered_strategy_sets_up_under_its_name(tmp_path: Path) -> None:
    options = EnforcementOptions(strategies=(SystemSettingsOptions(enabled=True),))  # the one off by default
    enforcement = node_enforcement("node-a", tmp_path, tmp_path, options=options, kube=NoKube(), metrics=AgentMetrics(),
                                   cpus=lambda: 4,
                                   timeout=1.0)
    assert [strategy.name for strategy in enforcement.strategies] == \
        [strategy.name for strategy in STRATEGIES if strategy.enabled(options.of(strategy))]
    assert enforcement.find("system-settings") is not None
    assert enforcement.reservation is not None  # CPU suppress and the evictions share one reader of the Node


# ---- a strategy registered in this test only --------------------------------------------------------

@dataclass(frozen=True)
class FakeOptions:
    interval: float = flag(1.0, "--fake-interval", type=click.FloatRange(min=0), show_default=True,
                           help="Seconds between two rounds of the fake; 0 turns it off.")


class FakeEnforcer(NodeStrategy):
    name = "fake"
    failure = "fake failed"

    def __init__(self, host: StrategyHost, options: FakeOptions) -> None:
        self.host, self.interval = host, options.interval
        self.nodeslos: list[Mapping[str, Any] | None] = []
        self.rounds: list[Round] = []
        self.restored: list[float] = []
        self.started = asyncio.Event()
        self.pods = PodView(self.name, lambda pod: (pod.get("metadata") or {}).get("name"))

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:
        self.nodeslos.append(nodeslo)

    def run_once(self, round: Round) -> None:
        self.rounds.append(round)

    def pod_views(self) -> Sequence[PodView[Any]]:
        return (self.pods,)

    def background(self, ready: Callable[[], bool]) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        async def loop() -> None:
            self.started.set()
            await asyncio.Event().wait()

        return [("fake-loop", loop())]

    async def restore(self, timeout: float) -> None:
        self.restored.append(timeout)


set_up: list[FakeEnforcer] = []


def setup_fake(host: StrategyHost, options: FakeOptions) -> NodeStrategy:
    set_up.append(FakeEnforcer(host, options))
    return set_up[-1]


FAKE = AgentStrategy(name="fake", options=FakeOptions, enabled=lambda options: options.interval > 0, setup=setup_fake)
POD = {"metadata": {"uid": "u-1", "namespace": "ns", "name": "one"}, "spec": {"containers": []},
       "status": {"phase": "Running"}}


def test_a_registered_strategys_flags_make_its_options() -> None:
    parsed: list[FakeOptions] = []

    @click.command()
    @with_flags((FAKE,))
    def command(**values: Any) -> None:
        parsed.append(FAKE.options_from(values))

    assert CliRunner().invoke(command, ["--fake-interval", "2.5"]).exit_code == 0
    assert CliRunner().invoke(command, []).exit_code == 0
    assert parsed == [FakeOptions(interval=2.5), FakeOptions()]
    assert "--fake-interval" in CliRunner().invoke(command, ["--help"]).output


async def test_a_registered_strategy_is_set_up_run_and_restored(tmp_path: Path) -> None:
    set_up.clear()
    off = node_enforcement("node-a", tmp_path, tmp_path,
                           options=EnforcementOptions(strategies=(FakeOptions(interval=0), )), kube=NoKube(),
                           metrics=AgentMetrics(), cpus=lambda: 4, timeout=1.0, strategies=(FAKE,))
    assert (off.strategies, set_up) == ((), [])
    enforcement = node_enforcement("node-a", tmp_path, tmp_path, options=EnforcementOptions(dry_run=True),
                                   kube=NoKube(), metrics=AgentMetrics(), cpus=lambda: 4, timeout=1.0,
                                   strategies=(FAKE,))
    [fake] = set_up
    assert enforcement.strategies == (fake,) and fake.interval == 1.0
    assert (fake.host.node, fake.host.dry_run, fake.host.cgroup_root) == ("node-a", True, tmp_path)

    async def no_put(*args: Any, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError("no report expected")

    agent = NodeAgent("node-a", NoKube(), FixedCollector(), locator=LeaderLocator(NoKube()), direct=no_put,
                      metrics=AgentMetrics(), enforcement=enforcement)
    await agent.pods.on_sync([POD], "1")
    assert agent.pods.kept("fake") == {"u-1": "one"}  # its view of the pod watch
    agent.collect_once()
    agent.run_once(fake)
    assert fake.rounds == []  # the NodeSLO has not been listed yet
    await agent._nodeslo_sync([{"metadata": {"name": "node-a"}}], "1")
    agent.run_once(fake)
    assert fake.nodeslos == [{"metadata": {"name": "node-a"}}]
    [round] = fake.rounds
    assert round.sample is agent.last_sample and set(round.pods) == {"u-1"}

    tasks = {name: asyncio.create_task(coroutine) for name, coroutine in enforcement.background()}
    try:
        assert list(tasks) == ["fake-loop"]
        await asyncio.wait_for(fake.started.wait(), timeout=10)
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    await enforcement.restore(2.0)
    assert fake.restored == [2.0]


async def test_the_agent_runs_a_registered_strategys_rounds_every_its_interval(tmp_path: Path) -> None:
    set_up.clear()
    enforcement = node_enforcement("node-a", tmp_path, tmp_path, options=EnforcementOptions(strategies=(
        FakeOptions(interval=0.01),)), kube=NoKube(), metrics=AgentMetrics(), cpus=lambda: 4, timeout=1.0,
        strategies=(FAKE,))
    [fake] = set_up

    async def no_put(*args: Any, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError("no report expected")

    async def idle() -> None:
        await asyncio.Event().wait()

    agent = NodeAgent("node-a", NoKube(), FixedCollector(), locator=LeaderLocator(NoKube()), direct=no_put,
                      metrics=AgentMetrics(), enforcement=enforcement, watch_pods=False, follow_nodeslo=False)
    agent.reporter.run = idle  # type: ignore[method-assign]  # no leader, no Lease here
    agent.heartbeat.run = idle  # type: ignore[method-assign]
    enforcement.nodeslo_changed(None, listed=True)
    running = asyncio.create_task(agent.run())
    try:
        for _ in range(1000):
            if len(fake.rounds) >= 3:
                break
            await asyncio.sleep(0.01)  # polling the rounds, bounded
        assert len(fake.rounds) >= 3
        assert {"fake@node-a", "fake-loop@node-a"} <= {task.get_name() for task in asyncio.all_tasks()}
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
