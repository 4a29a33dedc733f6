"""The `colocation` command line: one console script, a subcommand per daemon."""

from __future__ import annotations

from pathlib import Path

import click

from colocation import __version__
from colocation.clicommon import common_options
from colocation.manager.cli import operator_command
from colocation.sandbox.cli import sandbox_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="colocation")
def main() -> None:
    """colocation: let batch workloads use the CPU and memory that latency-sensitive
    workloads leave idle, without loading the control plane."""


def _not_implemented(what: str, issue: int) -> None:
    raise click.ClickException(f"`colocation {what}` is not implemented yet (tracked in issue {issue})")


@main.command("agent")
@common_options
def agent_command(kubeconfig: Path | None) -> None:
    """Run the node agent: collect usage, report it to the leader, heartbeat with a Lease."""
    _not_implemented("agent", 5)


main.add_command(operator_command)
main.add_command(sandbox_command)
