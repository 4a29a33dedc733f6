"""A real Prometheus (hack/prometheus/build.sh) scrapes a sandbox as the monitoring component declares,
and every panel of its dashboard shows what it scraped.

The scrape jobs are the ServiceMonitor's and the PodMonitor's endpoints (scheme, path, and for the
operator the CA bundle Secret and the server name it verifies), with the replicas and the agent
processes of STATE_DIR/operators.json and agents.json as static targets: no Prometheus Operator
here to discover them. The sandbox has no kube-state-metrics, so a stand-in serves the Nodes'
batch allocatable as kube-state-metrics names it (benchmarks.dashboard_pngs reads them so too).
They are scraped every second, not every 30, so that rates over one minute have samples at once.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from benchmarks import dashboard_pngs, prometheus
from colocation.kube.permissions import OPERATOR_NAMESPACE
from tests.e2e.conftest import sandbox_kind_args
from tests.e2e.kube import Kube, apiservice_available, start_sandbox_process
from tests.timing import NotReached, eventually, eventually_async

MONITORING = Path(__file__).resolve().parents[2] / "manifests" / "components" / "monitoring"
SCRAPE_INTERVAL = "1s"
# Panels (or "panel / refId") that show no series in a healthy sandbox, and why.
NO_DATA_HERE = {
    "Evictions": "no pod is evicted: every node stays healthy and under its thresholds",
    "Ingest rate / B": "rejected reports: a healthy sandbox may have none",
}


@pytest.fixture(scope="module")
def monitored_sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the scrape targets are the sandbox's processes, from its state files")
    state = tmp_path_factory.mktemp("monitored-sandbox")
    # Three nodes: this machine's, with its real agent, and two in a simulated-agents process.
    with start_sandbox_process(state, [*sandbox_kind_args(request.config), "--operators", "2", "--nodes", "3"]) \
            as kubeconfig:
        yield kubeconfig, state


def endpoint(kind: str) -> dict[str, Any]:
    """The one scrape endpoint of the component's ServiceMonitor or PodMonitor."""
    monitor = yaml.safe_load((MONITORING / f"{kind.lower()}.yaml").read_text())
    (declared,) = monitor["spec"]["endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"]
    return dict(declared)


def scrape_job(name: str, declared: dict[str, Any], targets: list[str], ca_file: Path | None = None) -> dict[str, Any]:
    """A Prometheus scrape job for a monitor's endpoint: its scheme, path and TLS verification."""
    job: dict[str, Any] = {"job_name": name, "scheme": declared["scheme"], "metrics_path": declared["path"],
                           "static_configs": [{"targets": targets}]}
    if "tlsConfig" in declared:
        assert ca_file is not None
        job["tls_config"] = {"ca_file": str(ca_file), "server_name": declared["tlsConfig"]["serverName"]}
    return job


class NodeAllocatable(Collector):
    """kube-state-metrics' kube_node_status_allocatable for the Nodes' batch resources."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.samples = dashboard_pngs.allocatable_samples(nodes, 0.0)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("kube_node_status_allocatable", "The allocatable of a node.",
                                   labels=["node", "resource", "unit"])
        for _, labels, value in self.samples:
            family.add_metric([labels["node"], labels["resource"], labels["unit"]], value)
        yield family


@contextlib.contextmanager
def kube_state_metrics_stand_in(nodes: list[dict[str, Any]]) -> Iterator[str]:
    """host:port of a /metrics with the Nodes' batch allocatable; stopped on exit."""
    registry = CollectorRegistry()
    registry.register(NodeAllocatable(nodes))
    server, thread = start_http_server(0, "127.0.0.1", registry)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def batch_nodes(kube: Kube, count: int) -> list[dict[str, Any]] | None:
    """The Nodes, once `count` of them offer batch resources."""
    status, nodes = await kube.request("GET", "/api/v1/nodes")
    assert status == 200, nodes
    items: list[dict[str, Any]] = nodes["items"]
    offering = [n for n in items if "kubernetes.io/batch-cpu" in n.get("status", {}).get("allocatable", {})]
    return items if len(offering) >= count else None


async def ca_bundle(kube: Kube, secret: dict[str, str]) -> bytes | None:
    """The CA bundle the ServiceMonitor verifies the replicas with, once the operator wrote it."""
    status, body = await kube.request("GET", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/{secret['name']}")
    data = (body.get("data") or {}) if status == 200 else {}
    return base64.b64decode(data[secret["key"]]) if secret["key"] in data else None


def state_file(state: Path, name: str) -> list[dict[str, Any]]:
    """The sandbox's list of its operator replicas or agent processes (their addresses)."""
    entries: list[dict[str, Any]] = json.loads((state / name).read_text())
    return entries


def panel_queries() -> dict[str, str]:
    board = json.loads((MONITORING / "dashboard.json").read_text())
    return {f"{panel['title']} / {target['refId']}": target["expr"]
            for panel in board["panels"] for target in panel["targets"]}


def targets_up(url: str, jobs: int) -> list[dict[str, Any]] | None:
    """Every active target once each of the `jobs` has one and all were scraped successfully."""
    active: list[dict[str, Any]] = prometheus.api(url, "targets", {"state": "active"})["activeTargets"]
    up = {target["labels"]["job"] for target in active if target["health"] == "up"}
    return active if len(up) == jobs and all(target["health"] == "up" for target in active) else None


def target_errors(url: str) -> list[tuple[str, str, str]]:
    return [(target["scrapeUrl"], target["health"], target["lastError"])
            for target in prometheus.api(url, "targets", {"state": "active"})["activeTargets"]]


def shown_values(url: str, expr: str) -> list[float] | None:
    """The finite values of an instant query's series (what a panel draws now), or None."""
    result = prometheus.api(url, "query", {"query": expr})["result"]
    values = [float(series["value"][1]) for series in result]
    return [value for value in values if math.isfinite(value)] or None


async def test_prometheus_scrapes_what_the_monitors_declare_and_every_panel_shows_it(
        prometheus_binaries: prometheus.Binaries, monitored_sandbox: tuple[Path, Path], tmp_path: Path) -> None:
    kubeconfig, state = monitored_sandbox
    service_endpoint, pod_endpoint = endpoint("ServiceMonitor"), endpoint("PodMonitor")
    async with Kube.from_kubeconfig(kubeconfig) as kube:
        await eventually_async(lambda: apiservice_available(kube), timeout=60, message="APIService available")
        bundle = await eventually_async(lambda: ca_bundle(kube, service_endpoint["tlsConfig"]["ca"]["secret"]),
                                        timeout=30, message="the operator's CA bundle")
        nodes = await eventually_async(lambda: batch_nodes(kube, 3), timeout=90, message="3 nodes with batch resources")
    ca_file = tmp_path / "ca-bundle.crt"
    ca_file.write_bytes(bundle)
    replicas = [f"{r.get('host', '127.0.0.1')}:{r['port']}" for r in state_file(state, "operators.json")]
    agents = [f"{a.get('host', '127.0.0.1')}:{a['metricsPort']}" for a in state_file(state, "agents.json")]
    assert len(replicas) == 2 and len(agents) == 2, (replicas, agents)

    with kube_state_metrics_stand_in(nodes) as kube_state_metrics:
        config = {"global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
                  "scrape_configs": [scrape_job("colocation-operator", service_endpoint, replicas, ca_file),
                                     scrape_job("colocation-agent", pod_endpoint, agents),
                                     {"job_name": "kube-state-metrics", "static_configs": [
                                         {"targets": [kube_state_metrics]}]}]}
        server_dir = tmp_path / "prometheus"
        server_dir.mkdir()
        with prometheus.serving(prometheus_binaries.prometheus, server_dir, config) as url:
            try:
                active = eventually(lambda: targets_up(url, 3), timeout=30, interval=0.5, message="every target up")
            except NotReached:  # a target that is down says why (a certificate not verified, a refused connection)
                pytest.fail(f"not every target is up: {target_errors(url)}")
            assert sorted(t["scrapeUrl"] for t in active if t["labels"]["job"] == "colocation-operator") == sorted(
                f"https://{replica}/metrics" for replica in replicas)
            for where, expr in panel_queries().items():
                panel = where.split(" / ")[0]
                if where in NO_DATA_HERE or panel in NO_DATA_HERE:
                    prometheus.api(url, "query", {"query": expr})  # it runs, without error
                    continue
                eventually(functools.partial(shown_values, url, expr), timeout=60, interval=0.5, message=where)
