"""The one interface of the agent's NodeSLO strategies: what each declares, and what the agent calls on a node.

A strategy is a folder under colocation.agent.strategies (its pure policy, its loop on the host and
its `AgentStrategy`), listed once in colocation.agent.strategies.registry. The agent's command line
takes every strategy's flags from there (`with_flags`: each field of its options declared with
`flag`); on a real node NodeEnforcement (colocation.agent.enforcement) sets up those their options
turn on and drives what `setup` returns, a `NodeStrategy`: the NodeSLO as it changes, a round every
`interval` seconds once the NodeSLO has been listed, its background tasks, and `restore` at exit
(--restore-on-exit). A NodeSLO that turns a strategy off is its rounds' business: they put back
what they wrote, as koordlet's do. This module loads nothing heavy: every `colocation` subcommand
imports the registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import click

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from colocation.agent.classify import PodInfo
    from colocation.agent.collector import Sample
    from colocation.agent.node_pods import PodView
    from colocation.agent.strategies.pressure_evictor import Exchange
    from colocation.agent.strategies.strategy_host import StrategyHost

T = TypeVar("T")
OptionsT = TypeVar("OptionsT", bound="DataclassInstance")
F = TypeVar("F", bound=Callable[..., Any])

_FLAG = "colocation.agent.strategies.flag"


def flag(default: T, *decls: str, **click_kwargs: Any) -> T:
    """An options field that a command-line flag sets: `decls` and `click_kwargs` as click.option
    takes them; the field's default is the flag's."""
    return field(default=default, metadata={_FLAG: (decls, click_kwargs)})


@dataclass(frozen=True)
class Round:
    """What one round acts on."""

    sample: Sample | None  # the latest; None when none is fresh (older than two collections)
    pods: Mapping[str, PodInfo]  # the node's pods as the watch last saw them, classified, by UID


class NodeStrategy(ABC):
    """One strategy set up on one node."""

    name: str  # its AgentStrategy's; its rounds run as the task `<name>@<node>`
    interval: float | None  # seconds between two rounds; None: none, it runs its own loop (background)
    failure: str  # logged, with the traceback, when a round raises (the next round runs)

    @abstractmethod
    def run_once(self, round: Round) -> None:
        """One round on the latest sample and the node's pods."""

    @abstractmethod
    async def restore(self, timeout: float) -> None:
        """Put back what the strategy changed on the host (at exit); the Events saying so posted
        within `timeout` seconds."""

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:  # noqa: B027 (most follow it)
        """The NodeSLO as the watch now has it (None: there is none)."""

    def background(self, ready: Callable[[], bool]) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """What runs beside the rounds, by task name; `ready()` once the NodeSLO has been listed."""
        return []

    def pod_views(self) -> Sequence[PodView[Any]]:
        """The pods it keeps from the pod watch beyond the classified ones (colocation.agent.node_pods)."""
        return ()

    def reads_node(self) -> bool:
        """Whether it needs the Node's reservation and capacities now (colocation.agent.strategies.node_reservation)."""
        return False

    def connect(self, exchange: Exchange) -> None:  # noqa: B027 (few ask the leader)
        """The way to the leader, for a strategy that asks it for something (the NodeAgent's delivery)."""


@dataclass(frozen=True, kw_only=True)
class AgentStrategy(Generic[OptionsT]):
    """A strategy as the agent knows it before it runs anywhere (koordlet's QOSStrategy registration)."""

    name: str  # its folder's name, dashed: "cpu-suppress"
    options: type[OptionsT]  # a frozen dataclass; each field declared with `flag` is a command-line flag
    enabled: Callable[[OptionsT], bool]  # whether its options turn it on (else it is not set up)
    setup: Callable[[StrategyHost, OptionsT], NodeStrategy]  # the strategy on a real node

    def flags(self) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
        """Its flags, as click.option's arguments."""
        return [(decls, {"default": option.default, **kwargs})
                for option in fields(self.options) if _FLAG in option.metadata
                for decls, kwargs in [option.metadata[_FLAG]]]

    def options_from(self, values: Mapping[str, Any]) -> OptionsT:
        """Its options from the command line's values, by parameter name."""
        named = {option.name: click.Option(list(option.metadata[_FLAG][0]), **option.metadata[_FLAG][1]).name
                 for option in fields(self.options) if _FLAG in option.metadata}
        return replace(self.options(), **{name: values[param] for name, param in named.items()})


def with_flags(strategies: Sequence[AgentStrategy[Any]]) -> Callable[[F], F]:
    """A click command's decorator: every strategy's flags, in the strategies' order."""

    def decorate(command: F) -> F:
        for strategy in reversed(strategies):
            for decls, kwargs in reversed(strategy.flags()):
                command = click.option(*decls, **kwargs)(command)
        return command

    return decorate
