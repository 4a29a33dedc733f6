"""The real kube-scheduler with the operator's load-aware extender (issue 40), on the real control plane.

The module's own sandbox: two operator replicas, three simulated nodes whose usage is what their
pods' annotations say (`--kwok-resource-metrics`), each with an agent process of its own
(`--simulated-nodes-per-agent 1`), reports every 2 s and a 12 s expiration in colocation-config.
The sandbox restarts kube-scheduler with the extender once the operator serves
(`scheduler_extender`). In order:

- sim-node-1 driven hot (one pod at 90 % of its cpu): new latency-sensitive pods land on the others;
- a standby replica killed (SIGKILL) and restarted by the sandbox's kubelet, while pods keep
  coming: none lands on the hot node, and the restarted replica, once its readiness probe passes,
  answers only from a warm cache (the hot node refused), never 503;
- the hot node's data stale (its agent stopped, the others' reporting): the extender neither
  filters nor favours it (its score the neutral one, between the fresh nodes'), and it receives
  pods again;
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
from colocation.kube.lease_holder import holder_pod_name
from colocation_sandbox.launcher.controlplane.scheduler_extender import EXTENDER_PORT, SERVER_NAME
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
            "--simulated-nodes-per-agent", "1",  # one agent process per node: one node's reports can stop
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
    """The extender as kube-scheduler calls it: through the sandbox's relay (or at one replica's
    `url`), with its client certificate."""

    def __init__(self, state: Path, ca_pem: bytes, url: str | None = None) -> None:
        self.state, self.ca_pem = state, ca_pem
        self.url = url or json.loads((state / "controlplane.json").read_text())["schedulerExtender"]
        self.ssl = ssl.create_default_context(cadata=ca_pem.decode())
        self.ssl.load_cert_chain(state / "pki" / "scheduler-extender-client.crt",
                                 state / "pki" / "scheduler-extender-client.key")

    def at(self, replica: dict[str, Any]) -> Extender:
        """The extender of one replica, not through the Service."""
        return Extender(self.state, self.ca_pem, f"https://{replica['host']}:{EXTENDER_PORT}/scheduler")

    async def filter(self, pod: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any] | None:
        status, answer = await self.call("filter", pod, names)
        return answer if status == 200 else None

    async def scores(self, pod: dict[str, Any], names: tuple[str, ...]) -> dict[str, int] | None:
        status, answer = await self.call("prioritize", pod, names)
        return {entry["Host"]: entry["Score"] for entry in answer} if status == 200 else None

    async def call(self, verb: str, pod: dict[str, Any], names: tuple[str, ...]) -> tuple[int, Any]:
        """The status (0: no answer) and, for a 200, the answer."""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, session.post(
                    f"{self.url}/{verb}", data=orjson.dumps({"Pod": pod, "NodeNames": list(names)}), ssl=self.ssl,
                    server_hostname=SERVER_NAME) as response:
                body = await response.read()
                return response.status, orjson.loads(body) if response.status == 200 else None
        return 0, None


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


async def create_pod(kube: Kube, name: str) -> str:
    status, body = await kube.request("POST", "/api/v1/namespaces/default/pods", ls_pod(name))
    assert status == 201, body
    return name


async def bound(kube: Kube, names: list[str]) -> dict[str, str]:
    """Wait until each of the pods `names` is bound: pod name -> node."""
    async def nodes_of() -> dict[str, str] | None:
        listed = await get(kube, "/api/v1/namespaces/default/pods")
        nodes = {pod["metadata"]["name"]: pod["spec"].get("nodeName") for pod in listed["items"]
                 if pod["metadata"]["name"] in names}
        return nodes if len(nodes) == len(names) and all(nodes.values()) else None

    return await eventually_async(nodes_of, timeout=SCHEDULE_TIMEOUT, interval=0.5,
                                  message=f"{len(names)} pods {names[0]}.. scheduled")


async def schedule(kube: Kube, prefix: str, count: int) -> dict[str, str]:
    """Create `count` pods and wait until each is bound: pod name -> node."""
    return await bound(kube, [await create_pod(kube, f"{prefix}-{index}") for index in range(count)])


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


def simulated_agents(state: Path) -> list[dict[str, Any]]:
    """The simulated nodes' agent processes: pid and nodes."""
    return [agent for agent in json.loads((state / "agents.json").read_text()) if agent.get("simulated")]


def operators(state: Path) -> list[dict[str, Any]]:
    """The operator replicas' running processes, as the sandbox's kubelet lists them."""
    return json.loads((state / "operators.json").read_text())  # type: ignore[no-any-return]


def operator_pids(state: Path) -> list[int]:
    return [replica["pid"] for replica in operators(state)]


async def leader(kube: Kube) -> str:
    """The replica (its pod) the leader Lease names."""
    lease = await get(kube, f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{permissions.LEADER_LEASE_NAME}")
    return holder_pod_name(str(lease["spec"].get("holderIdentity") or ""))


async def hot_refused(kube: Kube, extender: Extender) -> dict[str, Any]:
    """Drive HOT hot and wait until the extender refuses it: its filter answer."""
    await drive_hot(kube)

    async def filtered() -> dict[str, Any] | None:
        answer = await extender.filter(ls_pod("probe"), NODES)
        return answer if answer is not None and HOT in answer["FailedAndUnresolvableNodes"] else None

    return await eventually_async(filtered, timeout=90, interval=1, message=f"the extender refuses {HOT}")


async def test_new_pods_avoid_the_hot_node(cluster: Kube, extender: Extender) -> None:
    answer = await hot_refused(cluster, extender)
    assert answer["NodeNames"] == list(OTHERS) and answer["FailedNodes"] == {}
    placed = await schedule(cluster, "hot", 6)
    assert HOT not in placed.values(), placed


async def test_no_pod_lands_on_the_hot_node_while_a_replica_restarts(cluster: Kube, extender: Extender,
                                                                     kubeconfig: Path) -> None:
    state = kubeconfig.parent
    await hot_refused(cluster, extender)
    await eventually_async(lambda: ready_endpoints(cluster), timeout=120, interval=0.5,
                           message="both replicas Ready behind the Service")
    # The standby: killing the leader would also stop the reports until the other takes over, and
    # HOT's data going stale would rightly let pods through.
    leading = await leader(cluster)
    killed = next(replica for replica in operators(state) if replica["identity"] != leading)
    os.kill(killed["pid"], signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        return next((replica for replica in operators(state) if replica["identity"] == killed["identity"]
                     and replica["pid"] != killed["pid"]), None)

    # From the kill on, each poll creates a pod and asks the restarting replica itself (the
    # scheduler's connection through the Service may never reach it): before its readiness probe
    # passes it may answer 503 (the Service does not send it calls), but once Ready (the Service
    # may), only from a warm cache.
    names: list[str] = []
    answers: list[tuple[bool, int, dict[str, Any] | None]] = []  # (Ready before the call, status, answer)

    async def warm_answers() -> bool:
        names.append(await create_pod(cluster, f"restart-{len(names)}"))
        replica = restarted()
        if replica is None:
            return False
        was_ready = await replica_ready(replica)
        status, answer = await extender.at(replica).call("filter", ls_pod("probe"), NODES)
        answers.append((was_ready, status, answer))
        return sum(ready for ready, _, _ in answers) >= 5

    await eventually_async(warm_answers, timeout=120, interval=0.5,
                           message=f"{killed['identity']} restarted and Ready")
    for was_ready, status, answer in answers:
        assert status in ((200,) if was_ready else (0, 200, 503)), answers
        assert answer is None or HOT in answer["FailedAndUnresolvableNodes"], answers
    placed = await bound(cluster, names)
    assert HOT not in placed.values(), placed


async def test_a_node_whose_data_is_stale_receives_pods_again(cluster: Kube, extender: Extender,
                                                               kubeconfig: Path) -> None:
    await hot_refused(cluster, extender)
    (agent,) = (agent["pid"] for agent in simulated_agents(kubeconfig.parent) if agent["nodes"] == [HOT])
    os.kill(agent, signal.SIGSTOP)  # no report from HOT from now on; the other nodes' go on
    try:
        async def neutral() -> dict[str, Any] | None:
            answer = await extender.filter(ls_pod("probe"), NODES)
            return answer if answer is not None and HOT in answer["NodeNames"] else None

        answer = await eventually_async(neutral, timeout=EXPIRATION_SECONDS + 30, interval=1,
                                        message=f"{HOT} passes once its data is stale")
        assert answer["NodeNames"] == list(NODES), answer
        scores = await extender.scores(ls_pod("probe"), NODES)
        assert scores is not None
        # Neutral: the mean of the fresh others' (with no fresh candidate every score would be 5).
        assert min(scores[name] for name in OTHERS) <= scores[HOT] <= max(scores[name] for name in OTHERS), scores
        assert scores[HOT] > 5, scores
        placed = await schedule(cluster, "stale", 6)
        assert HOT in placed.values(), placed  # the emptiest node again, neither filtered nor scored down
    finally:
        os.kill(agent, signal.SIGCONT)


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


async def replica_ready(replica: dict[str, Any]) -> bool:
    """Whether the replica's readiness probe passes (what puts it in the Service's endpoints)."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session, session.get(
                f"https://{replica['host']}:{replica['port']}/readyz", ssl=False) as response:
            return response.status == 200
    return False


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
