"""The `colocation` command line: one console script, a subcommand per daemon.

Subcommands of other distributions join through the entry-point group `colocation.commands`:
`colocation sandbox` is colocation-sandbox's (sandbox/, never in the wheel or the image). They are
looked up only when a name is not one of ours, or for the list in --help, so `colocation agent` and
`colocation operator` neither scan the installed distributions nor import a plugin. Our own
subcommands are imported only when named, too: a restarted operator frees its dead predecessor's
Lease before anything else (manager.predecessor_release), and the agent's command would cost it
aiohttp's import first (over a second on a loaded 2-core machine).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

import click

from colocation import __version__

COMMANDS_GROUP = "colocation.commands"
# Our own subcommands, imported when named: "module:attribute".
BUILTIN_COMMANDS = {"agent": "colocation.agent.agent_command:agent_command",
                    "cleanup": "colocation.manager.cleanup_command:cleanup_command",
                    "operator": "colocation.manager.operator_command:operator_command"}
# Subcommands another distribution of this repository provides, and how to get each.
OPTIONAL_COMMANDS = {"sandbox": "pip install -e ./sandbox (make venv does it)"}


def discover_commands() -> dict[str, click.Command]:
    """The subcommands registered in the entry-point group, by name."""
    found: dict[str, click.Command] = {}
    for entry in metadata.entry_points(group=COMMANDS_GROUP):
        command = entry.load()
        if not isinstance(command, click.Command):
            raise TypeError(f"{COMMANDS_GROUP} entry point {entry.name} = {entry.value} is not a click command")
        found[entry.name] = command
    return found


def not_installed(name: str, hint: str) -> click.Command:
    """A stand-in for an optional subcommand whose distribution is missing: one line, exit status 1."""

    def refuse(args: tuple[str, ...]) -> None:
        click.echo(f"colocation {name}: not installed; {hint}", err=True)
        click.get_current_context().exit(1)

    # Whatever follows the name (--help included) is taken, so every invocation gets the same line.
    return click.Command(name, callback=refuse, help=f"Not installed: {hint}.", add_help_option=False,
                         params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
                         context_settings={"ignore_unknown_options": True})


class PluginGroup(click.Group):
    """A group whose own commands come first, then those of the entry-point group."""

    def __init__(self, *args: Any, discover: Callable[[], Mapping[str, click.Command]] = discover_commands,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._discover = discover
        self._plugins: dict[str, click.Command] | None = None

    def plugins(self) -> dict[str, click.Command]:
        if self._plugins is None:
            found = dict(self._discover())
            for name, hint in OPTIONAL_COMMANDS.items():
                found.setdefault(name, not_installed(name, hint))
            self._plugins = found
        return self._plugins

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *BUILTIN_COMMANDS, *self.plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in BUILTIN_COMMANDS:
            module, _, attribute = BUILTIN_COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command), BUILTIN_COMMANDS[cmd_name]
            self.add_command(command, cmd_name)
        return command or self.plugins().get(cmd_name)


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="colocation")
def main() -> None:
    """colocation: let batch workloads use the CPU and memory that latency-sensitive
    workloads leave idle, without loading the control plane."""

