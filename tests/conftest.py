"""Settings shared by every test."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from benchmarks import prometheus
from colocation_sandbox.launcher.nats_cluster import NatsServerMissing, locate_nats_server

# Our machines are shared and noisy: generation speed is not what these properties test.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# CI explores the same examples on every run, so a red run can be reproduced.
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A timed pipeline never shares the cores with another test process unawares: under xdist it
    is skipped with a line that says so (`make unit` runs these alone, after the parallel run)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    skip = pytest.mark.skip(reason="a timed pipeline runs alone: `make unit` runs it after the parallel run")
    for item in items:
        if item.get_closest_marker("timed_pipeline") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nats_server() -> str:
    """The nats-server binary; tests that need one skip, saying so in one line, where it is not built."""
    try:
        return locate_nats_server(build=False)
    except NatsServerMissing as missing:
        pytest.skip(f"nats-server is not built (make nats): {missing}")


@pytest.fixture(scope="session")
def prometheus_binaries() -> prometheus.Binaries:
    """prometheus and promtool; tests that need them skip, saying so in one line, where they are not built."""
    try:
        return prometheus.locate(build=False)
    except prometheus.PrometheusMissing as missing:
        pytest.skip(f"prometheus is not built (make prometheus): {missing}")
