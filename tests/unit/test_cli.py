"""The command line as a user meets it: help for every subcommand, honest errors for missing parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from colocation.cli import COMMANDS_GROUP, PluginGroup, main

SHARED_FLAGS = ("--kubeconfig", "--log-level", "--log-format")


@pytest.mark.parametrize("command", ["operator", "agent", "sandbox", "cleanup"])
def test_every_subcommand_documents_the_shared_flags_and_their_defaults(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    for flag in SHARED_FLAGS:
        assert flag in result.output
    text = " ".join(result.output.split())  # help is wrapped to the terminal width
    assert "[default: info]" in text and "[default: json]" in text


def test_top_level_help_lists_the_subcommands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("operator", "agent", "sandbox", "cleanup"):
        assert command in result.output


def test_the_agent_without_a_node_name_fails_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    result = subprocess.run([sys.executable, "-m", "colocation", "agent"], capture_output=True, text=True,
                            timeout=60, check=False, env=env)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--node-name" in lines[0], result.stderr


@pytest.mark.parametrize("command", ["operator", "cleanup"])
def test_without_a_usable_kubeconfig_it_fails_with_one_line(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nowhere.kubeconfig"
    result = subprocess.run([sys.executable, "-m", "colocation", command, "--kubeconfig", str(missing)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nowhere.kubeconfig" in lines[0], result.stderr


def test_operator_rejects_inconsistent_lease_timings() -> None:
    result = CliRunner().invoke(main, ["operator", "--lease-duration", "5", "--renew-deadline", "10"])
    assert result.exit_code != 0 and "--lease-duration > --renew-deadline" in result.output


def test_sandbox_refuses_a_non_loopback_address() -> None:
    result = CliRunner().invoke(main, ["sandbox", "--host", "0.0.0.0"])
    assert result.exit_code != 0 and "loopback" in result.output


def test_the_package_does_not_shadow_the_standard_library_operator_module() -> None:
    import operator

    assert Path(operator.__file__).parent.name.startswith("python3"), operator.__file__
    assert operator.itemgetter(1)([0, 7]) == 7


NOT_INSTALLED = "colocation sandbox: not installed; pip install -e ./sandbox (make venv does it)"
# `colocation` as its console script runs it, with importlib.metadata finding no plugin at all.
WITHOUT_PLUGINS = """import importlib.metadata, sys
importlib.metadata.entry_points = lambda **selection: importlib.metadata.EntryPoints(())
from colocation.cli import main
sys.argv[0] = "colocation"
main()
"""


def test_the_sandbox_joins_through_its_entry_point() -> None:
    """colocation-sandbox (sandbox/pyproject.toml) registers `sandbox` in the group the command line reads."""
    from importlib import metadata

    from colocation_sandbox.launcher.sandbox_cli import sandbox_command

    entries = {entry.name: entry for entry in metadata.entry_points(group=COMMANDS_GROUP)}
    assert entries["sandbox"].value == "colocation_sandbox.launcher.sandbox_cli:sandbox_command"
    assert main.get_command(click.Context(main), "sandbox") is sandbox_command
    result = subprocess.run([sys.executable, "-m", "colocation", "sandbox", "--help"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0 and "--state-dir" in result.stdout, result.stderr


@pytest.mark.parametrize("args", [["sandbox"], ["sandbox", "--state-dir", ".sandbox", "--log-format", "text"],
                                  ["sandbox", "--help"]])
def test_without_the_sandbox_installed_it_says_so_in_one_line(args: list[str]) -> None:
    group = PluginGroup("colocation", discover=dict)
    result = CliRunner().invoke(group, args)
    assert result.exit_code == 1
    assert result.output.splitlines() == [NOT_INSTALLED]


def test_without_the_sandbox_installed_the_console_script_says_so_in_one_line() -> None:
    result = subprocess.run([sys.executable, "-c", WITHOUT_PLUGINS, "sandbox", "--state-dir", ".sandbox"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [NOT_INSTALLED] and result.stdout == ""
    listed = subprocess.run([sys.executable, "-c", WITHOUT_PLUGINS, "--help"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert listed.returncode == 0 and "sandbox   Not installed: pip install -e ./sandbox" in listed.stdout
