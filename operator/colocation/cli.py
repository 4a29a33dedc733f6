"""The `colocation` command line: one console script, a subcommand per daemon."""

from __future__ import annotations

import click

from colocation import __version__
from colocation.agent.agent_command import agent_command
from colocation.manager.cleanup_command import cleanup_command
from colocation.manager.operator_command import operator_command
from colocation.sandbox.launcher.sandbox_cli import sandbox_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="colocation")
def main() -> None:
    """colocation: let batch workloads use the CPU and memory that latency-sensitive
    workloads leave idle, without loading the control plane."""


main.add_command(agent_command)
main.add_command(cleanup_command)
main.add_command(operator_command)
main.add_command(sandbox_command)
