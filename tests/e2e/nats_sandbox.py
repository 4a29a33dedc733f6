"""A sandbox with `--store nats` that a test module starts, and a handle on its NATS servers.

The fixtures `nats` and `admin` over a module's `sandbox` are in conftest.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from colocation_sandbox.launcher.nats_cluster import NatsCluster, load_cluster
from tests.e2e.conftest import sandbox_kind_args, store_kind
from tests.e2e.kube import start_sandbox_process


def nats_sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 extra: list[str]) -> Iterator[tuple[Path, Path]]:
    """(kubeconfig, state dir) of a sandbox with `--store nats` this module starts; skipped otherwise."""
    if store_kind(request.config) != "nats":
        pytest.skip("--store nats only (pytest --store nats)")
    if request.config.getoption("--kubeconfig"):
        pytest.skip("kills processes of a sandbox the test starts")
    state = tmp_path_factory.mktemp("nats-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "2", "--nodes", "0", "--probe-interval=0.1", *extra]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


def servers_of(state: Path) -> Iterator[NatsCluster]:
    """The sandbox's NATS servers; those a test started again are stopped after the module."""
    cluster = load_cluster(state / "nats")
    sandbox_pids = {server.pid for server in cluster.servers}
    yield cluster
    for server in cluster.servers:
        if server.pid and server.pid not in sandbox_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.pid, signal.SIGTERM)
