"""`colocation operator --store`: the NATS flags go together, and bad ones get one clear line before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from colocation.cli import main


@pytest.mark.parametrize(("args", "message"), [
    (["--store", "nats"], "--store nats needs at least one --nats-server"),
    (["--nats-server", "nats://127.0.0.1:4222"], "--nats-server goes with --store nats"),
    (["--store", "redis"], "'redis' is not one of 'memory', 'nats'"),
    (["--store", "nats", "--nats-server", "nats://x", "--nats-replicas", "7"], "--nats-replicas"),
    (["--evaluation-shards", "4"], "--evaluation-shards above 1 needs --store nats"),
    (["--store", "nats", "--nats-server", "nats://x", "--evaluation-shards", "17"], "--evaluation-shards"),
])
def test_store_flags_that_cannot_work_are_refused(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["operator", *args])
    assert result.exit_code == 2 and message in result.output, result.output

