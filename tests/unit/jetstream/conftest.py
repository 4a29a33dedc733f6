"""A NATS JetStream cluster of 3 servers on loopback for each test that asks for one.

The tests skip, saying so in one line, where nats-server is not built (`make nats`; `make test`
builds it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from colocation_sandbox.launcher.nats_cluster import NatsCluster, NatsServerMissing, locate_nats_server, start_cluster


@pytest.fixture(scope="session")
def nats_server() -> str:
    try:
        return locate_nats_server(build=False)
    except NatsServerMissing as missing:
        pytest.skip(f"nats-server is not built (make nats): {missing}")


@pytest.fixture
async def nats_cluster(nats_server: str, tmp_path: Path) -> AsyncIterator[NatsCluster]:
    cluster = await start_cluster(tmp_path / "nats", binary=nats_server)
    yield cluster
    await cluster.stop()
