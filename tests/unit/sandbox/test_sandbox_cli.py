"""`colocation sandbox`'s flags: combinations it cannot run get one clear line before anything starts."""

from __future__ import annotations

from click.testing import CliRunner

from colocation.cli import main


def test_the_sandbox_runs_the_nats_store_on_its_builtin_api_server_only() -> None:
    result = CliRunner().invoke(main, ["sandbox", "--apiserver", "kube", "--store", "nats"])
    assert result.exit_code == 2 and "--store nats runs on the builtin API server only" in result.output
