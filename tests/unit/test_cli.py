"""The command line as a user meets it: help for every subcommand, honest errors for missing parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from colocation.cli import main

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
