"""manifests/components/monitoring: Prometheus scrapes what the operator and agents really serve, and
every alert and dashboard query parses (Prometheus's own parser) and names metrics the code really
exports. test_monitoring_promtool.py runs the alerts; tests/e2e/test_prometheus_scrape.py, the panels."""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from benchmarks import prometheus
from colocation.agent.agent_command import DEFAULT_METRICS_PORT
from colocation.agent.agent_metrics import AgentMetrics
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.controllers.controller_metrics import ControllerMetrics
from colocation.kube import permissions
from colocation.manager.operator_process import SERVICE_NAME, LeadershipMetrics
from colocation.manager.serving_ca import BUNDLE_KEY
from colocation.nodemetrics.storage_metrics import StorageMetrics
from colocation_sandbox.launcher.project_install import render_manifests
from tests.unit.manifests.test_manifests import KUBECTL, KUBERNETES_VERSIONS, REPO, find

COMPONENT = REPO / "manifests" / "components" / "monitoring"
PACKAGE = REPO / "operator" / "colocation"
NAMESPACE = permissions.OPERATOR_NAMESPACE
# Metrics other programs export, that the alerts and panels use on purpose.
EXTERNAL_METRICS = {
    "aggregator_unavailable_apiservice": "kube-apiserver: 1 while an APIService is unavailable",
    "kube_node_status_allocatable": "kube-state-metrics: each Node's allocatable, by resource",
}
REQUIRED_ALERTS = {"ColocationNoLeader", "ColocationReportsRejected", "ColocationNodesStale",
                   "ColocationEvictionsRunning", "ColocationAPIServiceUnavailable"}
REQUIRED_PANELS = {"Nodes reporting", "Ingest rate", "Report age p99", "Batch CPU per node", "Batch memory per node",
                   "Evictions", "Leader"}
# The sample names each metric type puts on /metrics (prometheus_client's text format).
_SUFFIXES = {"Counter": ("_total", "_created"), "Gauge": ("",), "Histogram": ("_bucket", "_sum", "_count", "_created"),
             "Summary": ("", "_sum", "_count", "_created")}


def declared_metrics() -> dict[str, str]:
    """{metric name: type} of every Counter/Gauge/Histogram/Summary the package constructs with a literal name."""
    found: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SUFFIXES
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found[node.args[0].value.removesuffix("_total")] = node.func.id
    return found


@functools.cache  # a scan of every source file: once, not once per expression
def exported_samples() -> frozenset[str]:
    return frozenset(name + suffix for name, kind in declared_metrics().items() for suffix in _SUFFIXES[kind])


def rule_exprs() -> dict[str, str]:
    rule = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text())
    return {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((COMPONENT / "dashboard.json").read_text())
    return loaded


def panel_exprs() -> dict[str, str]:
    return {f'{panel["title"]} / {target["refId"]}': target["expr"]
            for panel in dashboard()["panels"] for target in panel["targets"]}


def test_the_source_scan_finds_every_metric_the_registries_hold() -> None:
    """The scan below is what the expressions are checked against: it must miss nothing a registry holds."""
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    StorageMetrics(registry)
    LeadershipMetrics(registry)
    registries = (registry, ServerMetrics().registry, AgentMetrics().registry)
    held = {family.name: family.type for r in registries for family in r.collect()}
    declared = declared_metrics()
    assert "colocation_leader" in held
    for name, kind in held.items():
        assert declared.get(name, "").lower() == kind, name


@pytest.fixture(scope="module")
def parser(prometheus_binaries: prometheus.Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus that scrapes nothing, for its parser (/api/v1/parse_query): its URL."""
    with prometheus.serving(prometheus_binaries.prometheus, tmp_path_factory.mktemp("prometheus"), {}) as url:
        yield url


@pytest.mark.parametrize(("where", "expr"), sorted({**rule_exprs(), **panel_exprs()}.items()))
def test_every_expression_parses_and_names_exported_metrics(parser: str, where: str, expr: str) -> None:
    names = prometheus.metric_names(parser, expr)
    assert names, where
    unknown = names - exported_samples() - EXTERNAL_METRICS.keys()
    assert not unknown, f"{where}: {sorted(unknown)} exported by nothing we know"


def test_the_required_alerts_and_panels_exist() -> None:
    rule = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text())
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert {r["alert"] for r in rules} >= REQUIRED_ALERTS
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning", "info") and r["annotations"]["summary"], r["alert"]
    assert {panel["title"] for panel in dashboard()["panels"]} >= REQUIRED_PANELS


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed, so manifests/ cannot be rendered with kustomize")
    return render_manifests(REPO, components=("monitoring",))


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_the_servicemonitor_scrapes_the_operators_https_port_and_verifies_its_ca(
    rendered: list[dict[str, Any]],
) -> None:
    monitor = find(rendered, "ServiceMonitor", "colocation-operator", NAMESPACE)
    service = find(rendered, "Service", SERVICE_NAME, NAMESPACE)
    assert _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    deployment = find(rendered, "Deployment", "colocation-operator", NAMESPACE)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}[port["targetPort"]] == 8443
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    tls = endpoint["tlsConfig"]
    assert tls["ca"]["secret"] == {"name": permissions.CA_SECRET_NAME, "key": BUNDLE_KEY}
    assert tls["serverName"] == f"{SERVICE_NAME}.{NAMESPACE}.svc" and "insecureSkipVerify" not in tls


def test_the_podmonitor_scrapes_the_agents_metrics_port(rendered: list[dict[str, Any]]) -> None:
    monitor = find(rendered, "PodMonitor", "colocation-agent", NAMESPACE)
    template = find(rendered, "DaemonSet", "colocation-agent", NAMESPACE)["spec"]["template"]
    assert _selects(monitor["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = template["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}[endpoint["port"]] == DEFAULT_METRICS_PORT
    assert "--metrics-port" not in container["args"]  # the agent serves on its default port
    assert (endpoint["scheme"], endpoint["path"]) == ("http", "/metrics")


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_patched_kubernetes_objects_stay_valid(rendered: list[dict[str, Any]], version: str) -> None:
    for obj in rendered:
        if not obj["apiVersion"].startswith("monitoring.coreos.com/"):  # no schemas here for the Prometheus Operator's
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_dashboard_configmap_carries_the_dashboard(rendered: list[dict[str, Any]]) -> None:
    config_map = find(rendered, "ConfigMap", "colocation-dashboard", NAMESPACE)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["colocation.json"]) == dashboard()


def test_histogram_panels_read_the_bucket_series(parser: str) -> None:
    """histogram_quantile over anything but _bucket series is NaN in Prometheus; catch it here."""
    for where, expr in panel_exprs().items():
        if "histogram_quantile" in expr:
            assert all(name.endswith("_bucket") for name in prometheus.metric_names(parser, expr)), where


def test_the_dashboard_is_a_grafana_dashboard_on_a_prometheus_datasource() -> None:
    board = dashboard()
    (variable,) = board["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${" + variable["name"] + "}"
        assert panel["targets"] and panel["type"] == "timeseries"

