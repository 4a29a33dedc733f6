"""The real kube-scheduler with the operator's load-aware extender (issue 40), on the real control plane.

The module's own sandbox: two operator replicas, three simulated nodes whose usage is what their
pods' annotations say (`--kwok-resource-metrics`), reports every 2 s and a 12 s expiration in
colocation-config. The sandbox restarts kube-scheduler with the extender once the operator serves
(`scheduler_extender`). In order:

- sim-node-1 driven hot (one pod at 90 % of its cpu): new latency-sensitive pods land on the others;
- its data stale (every simulated agent stopped): the extender neither filters nor favours it, and
  it receives pods again;
- every operator replica gone: pods still schedule (the extender is ignorable);
- one replica frozen (SIGSTOP): pods still schedule (a call that reaches it times out after 1 s
  and is skipped), and once its readiness probe fails the other replica answers every call.

Only with `--apiserver kube`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from colocation.agent.synthetic import CPU_USAGE_ANNOTATION, SIMULATED_LABEL
from colocation.apimachinery.quantity import cpu_millis, format_millis
from colocation.kube import permissions
from colocation_sandbox.launcher.controlplane.scheduler_extender import SERVER_NAME
from tests.e2e.conftest import apiserver_kind, sandbox_kind_args
from tests.e2e.kube import Kube, get, scrape_samples, start_sandbox_process
from tests.timing import eventually, eventually_async

NS = permissions.OPERATOR_NAMESPACE
HOT, OTHERS = "sim-node-1", ("sim-node-2", "sim-node-3")
NODES = (HOT, *OTHERS)
EXPIRATION_SECONDS = 12
LOAD_AWARE = {"nodeMetricExpirationSeconds": EXPIRATION_SECONDS, "tentativeHoldSeconds": 5}
DEPLOYMENT = f"/apis/apps/v1/namespaces/{NS}/deployments/colocation-operator"
CONFIG_MAP = f"/api/v1/namespaces/{NS}/configmaps/colocation-config"
SCHEDULE_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def kubeconfig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if request.config.getoption("--kubeconfig") or apiserver_kind(request.config) != "kube":
        pytest.skip("the real kube-scheduler runs in the sandbox of --apiserver kube only")
    state = tmp_path_factory.mktemp("extender-sandbox")
    args = [*sandbox_kind_args(request.config), "--nodes", str(len(NODES) + 1), "--pods-per-node", "1",
            "--operators", "2", "--kwok-resource-metrics", "--no-serve-custom-metrics",
            "--agent-arg=--report-interval=1", "--probe-interval=0.2"]
    with start_sandbox_process(state, args) as path:
        yield path


@pytest.fixture
async def admin(kubeconfig: Path) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(kubeconfig) as kube:
        yield kube


@pytest.fixture(scope="module")
def configured() -> dict[str, bool]:
    return {}


@pytest.fixture
async def cluster(admin: Kube, configured: dict[str, bool]) -> Kube:
    """Reports every 2 s and the test's load-aware settings, once per module."""
    if not configured:
        config_map = await get(admin, CONFIG_MAP)
        colocation = json.loads(config_map["data"]["colocation-config"])
        colocation["clusterStrategy"]["metricReportIntervalSeconds"] = 2
        status, body = await admin.request("PATCH", CONFIG_MAP, {"data": {
            "colocation-config": json.dumps(colocation), "load-aware-config": json.dumps(LOAD_AWARE)}},
            content_type="application/merge-patch+json")
        assert status == 200, body
        configured["done"] = True
    return admin


class Extender:
    """The extender as kube-scheduler calls it: through the sandbox's relay, with its client certificate."""

    def __init__(self, state: Path, ca_pem: bytes) -> None:
        self.url = json.loads((state / "controlplane.json").read_text())["schedulerExtender"]
        self.ssl = ssl.create_default_context(cadata=ca_pem.decode())
        self.ssl.load_cert_chain(state / "pki" / "scheduler-extender-client.crt",
                                 state / "pki" / "scheduler-extender-client.key")

    async def filter(self, pod: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any] | None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, session.post(
                    f"{self.url}/filter", data=orjson.dumps({"Pod": pod, "NodeNames": list(names)}), ssl=self.ssl,
                    server_hostname=SERVER_NAME) as response:
                if response.status == 200:
                    return orjson.loads(await response.read())  # type: ignore[no-any-return]
        return None


@pytest.fixture
async def extender(cluster: Kube, kubeconfig: Path) -> Extender:
    secret = await get(cluster, f"/api/v1/namespaces/{NS}/secrets/{permissions.CA_SECRET_NAME}")
    return Extender(kubeconfig.parent, base64.b64decode(secret["data"]["ca.crt"]))


def ls_pod(name: str) -> dict[str, Any]:
    """A latency-sensitive pod for the simulated nodes (kwok runs it)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeSelector": {SIMULATED_LABEL: "true"}, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


async def schedule(kube: Kube, prefix: str, count: int) -> dict[str, str]:
    """Create `count` pods and wait until each is bound: pod name -> node."""
    names = [f"{prefix}-{index}" for index in range(count)]
    for name in names:
        status, body = await kube.request("POST", "/api/v1/namespaces/default/pods", ls_pod(name))
        assert status == 201, body

    async def bound() -> dict[str, str] | None:
        listed = await get(kube, "/api/v1/namespaces/default/pods")
        nodes = {pod["metadata"]["name"]: pod["spec"].get("nodeName") for pod in listed["items"]
                 if pod["metadata"]["name"] in names}
        return nodes if len(nodes) == count and all(nodes.values()) else None

    return await eventually_async(bound, timeout=SCHEDULE_TIMEOUT, interval=0.5,
                                  message=f"{count} pods {prefix}-* scheduled")


async def drive_hot(kube: Kube) -> None:
    """One pod of HOT uses 90 % of the node's allocatable cpu."""
    allocatable = cpu_millis((await get(kube, f"/api/v1/nodes/{HOT}"))["status"]["allocatable"]["cpu"])
    pods = await get(kube, f"/api/v1/pods?fieldSelector=spec.nodeName={HOT}")
    pod = next(pod["metadata"] for pod in pods["items"]
               if CPU_USAGE_ANNOTATION in (pod["metadata"].get("annotations") or {}))
    status, body = await kube.request(
        "PATCH", f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}",
        {"metadata": {"annotations": {CPU_USAGE_ANNOTATION: format_millis(allocatable * 9 // 10)}}},
        content_type="application/merge-patch+json")
    assert status == 200, body


def simulated_agents(state: Path) -> list[int]:
    return [agent["pid"] for agent in json.loads((state / "agents.json").read_text()) if agent.get("simulated")]


def operator_pids(state: Path) -> list[int]:
    return [replica["pid"] for replica in json.loads((state / "operators.json").read_text())]


async def test_new_pods_avoid_the_hot_node(cluster: Kube, extender: Extender) -> None:
    await drive_hot(cluster)

    async def filtered() -> dict[str, Any] | None:
        answer = await extender.filter(ls_pod("probe"), NODES)
        return answer if answer is not None and HOT in answer["FailedAndUnresolvableNodes"] else None

    answer = await eventually_async(filtered, timeout=90, interval=1, message=f"the extender refuses {HOT}")
    assert answer["NodeNames"] == list(OTHERS) and answer["FailedNodes"] == {}
    placed = await schedule(cluster, "hot", 6)
    assert HOT not in placed.values(), placed


async def test_a_node_whose_data_is_stale_receives_pods_again(cluster: Kube, extender: Extender,
                                                               kubeconfig: Path) -> None:
    agents = simulated_agents(kubeconfig.parent)
    for pid in agents:
        os.kill(pid, signal.SIGSTOP)  # no report from any simulated node from now on
    try:
        async def neutral() -> dict[str, Any] | None:
            answer = await extender.filter(ls_pod("probe"), NODES)
            return answer if answer is not None and HOT in answer["NodeNames"] else None

        await eventually_async(neutral, timeout=EXPIRATION_SECONDS + 30, interval=1,
                               message=f"{HOT} passes once its data is stale")
        placed = await schedule(cluster, "stale", 6)
        assert HOT in placed.values(), placed  # the emptiest node again, neither filtered nor scored down
    finally:
        for pid in agents:
            os.kill(pid, signal.SIGCONT)


async def test_with_every_replica_down_pods_still_schedule(cluster: Kube, kubeconfig: Path) -> None:
    replicas = (await get(cluster, DEPLOYMENT))["spec"]["replicas"]
    await scale(cluster, 0)
    try:
        eventually(lambda: not operator_pids(kubeconfig.parent), timeout=60, interval=0.5,
                   message="no operator replica running")
        placed = await schedule(cluster, "down", 3)
        assert set(placed.values()) <= set(NODES)
    finally:
        await scale(cluster, replicas)
    eventually(lambda: len(operator_pids(kubeconfig.parent)) == replicas, timeout=120, interval=0.5,
               message=f"{replicas} operator replicas running again")


async def test_a_frozen_replica_costs_at_most_the_timeout(cluster: Kube, kubeconfig: Path) -> None:
    state = kubeconfig.parent
    await eventually_async(lambda: ready_endpoints(cluster), timeout=120, interval=0.5,
                           message="both replicas Ready behind the Service")
    frozen, serving = json.loads((state / "operators.json").read_text())
    before = await filter_calls(serving)
    os.kill(frozen["pid"], signal.SIGSTOP)
    try:
        # Calls that reach the frozen replica time out (1 s) and are skipped: scheduling goes on.
        placed = await schedule(cluster, "frozen", 6)
        assert set(placed.values()) <= set(NODES)
        # Once its readiness probe fails, the Service (the relay) sends every call to the other one.
        await eventually_async(lambda: ready_endpoints(cluster, count=1), timeout=60, interval=0.5,
                               message="the frozen replica out of the Service's endpoints")
        placed = await schedule(cluster, "frozen-out", 3)
        assert set(placed.values()) <= set(NODES)
        assert await filter_calls(serving) > before
    finally:
        os.kill(frozen["pid"], signal.SIGCONT)


async def ready_endpoints(kube: Kube, *, count: int = 2) -> bool:
    slices = await get(kube, f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
                             "?labelSelector=kubernetes.io/service-name=colocation-operator")
    ready = [endpoint for item in slices["items"] for endpoint in item.get("endpoints") or ()
             if (endpoint.get("conditions") or {}).get("ready")]
    return len(ready) == count


async def filter_calls(replica: dict[str, Any]) -> float:
    """Filter requests `replica` answered 200 (its /metrics, which every caller may read)."""
    samples = await scrape_samples(f"https://{replica['host']}:{replica['port']}/metrics", context=False)
    return sum(sample.value for sample in samples
               if sample.name == "colocation_scheduler_extender_request_duration_seconds_count"
               and sample.labels == {"verb": "filter", "code": "200"})


async def scale(kube: Kube, replicas: int) -> None:
    status, body = await kube.request("PATCH", DEPLOYMENT, {"spec": {"replicas": replicas}},
                                      content_type="application/merge-patch+json")
    assert status == 200, body
