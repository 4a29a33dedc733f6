"""A NATS JetStream cluster of 3 servers on loopback for each test that asks for one.

The tests skip, saying so in one line, where nats-server is not built (`make nats`; `make test`
builds it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from colocation_sandbox.launcher.nats_cluster import NatsCluster, start_cluster


@pytest.fixture
async def nats_cluster(nats_server: str, tmp_path: Path) -> AsyncIterator[NatsCluster]:
    cluster = await start_cluster(tmp_path / "nats", binary=nats_server)
    yield cluster
    await cluster.stop()
