"""Custom metrics end to end: an annotated pod's endpoint, the real agent, the leader's metrics APIs.

The sandbox runs one operator replica and `--nodes 2`: this machine with a real `colocation agent`
process, and one simulated node. The test serves a Prometheus endpoint on 127.0.0.1 and creates a
Pod on the real agent's node that points at it (scrape annotations, status.podIP 127.0.0.1: the
sandbox keeps the status a Pod is created with). What the agent scrapes must show in
custom.metrics.k8s.io and external.metrics.k8s.io as `kubectl get --raw` reads them, and follow
when the served value changes. Agents scrape every half second so a change shows within seconds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from colocation.apimachinery.quantity import parse_quantity
from tests.e2e.conftest import Kubectl, sandbox_kind_args
from tests.e2e.kube import Kube, start_sandbox_process
from tests.e2e.test_agent import real_agent, scrape, total
from tests.timing import eventually_async

AGENT_ARGS = ["--agent-arg=--scrape-interval=0.5", "--agent-arg=--report-interval=0.5",
              "--agent-arg=--leader-poll-interval=0.3"]
METRIC = "orders_processed_per_second"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def metrics_sandbox(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the agents and replicas are processes the test starts")
    state = tmp_path_factory.mktemp("custom-metrics-sandbox")
    args = [*sandbox_kind_args(request.config), "--operators", "1", "--nodes", "2", "--pods-per-node", "4", *AGENT_ARGS,
            "--operator-arg=--no-controllers"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture(scope="module")
def kubeconfig(metrics_sandbox: tuple[Path, Path]) -> Path:
    """conftest's `kube`, `namespace` and `kubectl` fixtures, on this module's sandbox."""
    return metrics_sandbox[0]


class Exposition:
    """A pod's /metrics, served by the test; `value` is what it says now."""

    def __init__(self) -> None:
        self.value = 3.5
        self.scrapes = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        text = (f"# TYPE {METRIC} gauge\n{METRIC}{{queue=\"high\"}} {self.value}\n"
                "# TYPE process_open_fds gauge\nprocess_open_fds NaN\n")
        return web.Response(text=text, content_type="text/plain")


@pytest.fixture
async def exposition() -> AsyncIterator[tuple[Exposition, int]]:
    served = Exposition()
    app = web.Application()
    app.router.add_get("/custom/metrics", served.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield served, runner.addresses[0][1]
    await runner.cleanup()


async def create_pod(kube: Kube, namespace: str, name: str, node: str, annotations: dict[str, str]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": {"app": "orders"}, "annotations": annotations},
           "spec": {"nodeName": node, "containers": [{"name": "orders", "image": "orders:1.0"}]},
           "status": {"phase": "Running", "podIP": "127.0.0.1"}}
    status, body = await kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert status == 201, body


def get_raw(kubectl: Kubectl, path: str) -> dict[str, Any] | None:
    result = kubectl.run("get", "--raw", path, check=False, timeout=20)
    return json.loads(result.stdout) if result.returncode == 0 else None


async def agent_counters(agent: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The agent's /metrics; empty while the agent is still starting."""
    try:
        return await scrape(agent)
    except aiohttp.ClientConnectionError:
        return {}


def log_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of an agent's log (the sandbox runs agents with the default --log-format json)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def values(answer: dict[str, Any] | None) -> list[Decimal]:
    return [parse_quantity(item["value"]) for item in (answer or {}).get("items", [])]


# The test serves the pod's endpoint itself, at the status.podIP it creates the pod with: on a real
# cluster the node's kubelet owns a pod's status and address.
@pytest.mark.sandbox_only(reason="the test writes the pod's status.podIP, which a kubelet owns")
async def test_an_annotated_pods_metrics_flow_through_the_agent_into_the_metrics_apis(
        kube: Kube, kubectl: Kubectl, namespace: str, exposition: tuple[Exposition, int],
        metrics_sandbox: tuple[Path, Path]) -> None:
    served, port = exposition
    agent = real_agent(metrics_sandbox[1])
    await create_pod(kube, namespace, "orders-0", agent["nodes"][0], {
        "colocation.dev/scrape": "true", "colocation.dev/port": str(port), "colocation.dev/path": "/custom/metrics"})
    by_name = f"{CUSTOM}/namespaces/{namespace}/pods/orders-0/{METRIC}"

    async def shows(value: Decimal) -> dict[str, Any] | None:
        answer = get_raw(kubectl, by_name)
        return answer if values(answer) == [value] else None

    answer = await eventually_async(lambda: shows(Decimal("3.5")), timeout=60, interval=0.5)
    [item] = answer["items"]
    assert item["describedObject"] == {"kind": "Pod", "namespace": namespace, "name": "orders-0", "apiVersion": "/v1"}
    assert item["metric"]["name"] == METRIC
    # The series keeps the exposition's labels: the external API shows them as metricLabels.
    external = get_raw(kubectl, f"{EXTERNAL}/namespaces/{namespace}/{METRIC}")
    assert external is not None and {"queue": "high"} in [i["metricLabels"] for i in external["items"]]

    served.value = 7.25
    await eventually_async(lambda: shows(Decimal("7.25")), timeout=30, interval=0.5)
    counters = await scrape(agent)
    assert total(counters, "colocation_agent_scrapes_total", result="ok") >= 2
    assert total(counters, "colocation_agent_custom_metric_samples_dropped_total", reason="non-finite") >= 1


async def test_a_pod_annotated_without_a_port_is_logged_and_counted_not_scraped(
        kube: Kube, namespace: str, metrics_sandbox: tuple[Path, Path]) -> None:
    agent = real_agent(metrics_sandbox[1])
    await create_pod(kube, namespace, "no-port", agent["nodes"][0], {"colocation.dev/scrape": "true"})

    async def counted() -> bool:
        counters = await agent_counters(agent)
        return total(counters, "colocation_agent_scrapes_total", result="invalid-annotation") >= 2

    await eventually_async(counted, timeout=30, interval=0.3)
    problems = [line for line in log_lines(Path(agent["log"])) if line.get("msg") == "cannot scrape pod" and
                line.get("pod") == f"{namespace}/no-port"]
    assert len(problems) == 1 and "colocation.dev/port is missing" in problems[0]["error"]
    counters = await scrape(agent)
    assert total(counters, "colocation_agent_samples_total") > 0  # the agent carries on


async def test_simulated_pods_expose_custom_metrics(kube: Kube, kubectl: Kubectl) -> None:
    status, pods = await kube.request("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=sim-node-1"})
    assert status == 200
    serving = [p["metadata"] for p in pods["items"]
               if p["metadata"].get("annotations", {}).get("colocation.dev/scrape") == "true"
               and p["metadata"]["labels"].get("koordinator.sh/priority-class") in ("koord-prod", "koord-mid")]
    assert serving, "the simulated node has no serving pod to expose request rates"
    pod = serving[0]
    path = f"{CUSTOM}/namespaces/{pod['namespace']}/pods/{pod['name']}/http_requests_per_second"

    async def rate() -> list[Decimal]:
        return values(get_raw(kubectl, path))

    [first] = await eventually_async(rate, timeout=60, interval=0.5)
    assert first > 0
