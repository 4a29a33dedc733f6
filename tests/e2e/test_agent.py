"""The node agent end to end: real agent processes against the sandbox and its operator replicas.

The sandbox runs `--nodes 2`: this machine, measured by a real `colocation agent` process, and
one simulated node. Agents check every half second and read the leader Lease every 0.3 s, so a
failover fits a test; the operators use the lease timings of test_operator (the Deployment's).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from colocation.agent import selfcheck
from tests.e2e.conftest import sandbox_kind_args
from tests.e2e.kube import Kube, scrape_samples, start_agent_process, start_sandbox_process
from tests.e2e.test_operator import LEASE_ARGS, leader, make_node, replicas
from tests.timing import eventually_async

BASE = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
NODESLOS = "/apis/slo.colocation.dev/v1alpha1/nodeslos"
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/colocation-node-lease/leases"
AGENT_ARGS = ["--agent-arg=--report-interval=0.5", "--agent-arg=--leader-poll-interval=0.3"]


@pytest.fixture(scope="module")
def agent_sandbox(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("the agents and replicas are processes the test starts and kills")
    state = tmp_path_factory.mktemp("agent-sandbox")
    # No controllers: the tests set a node's NodeSLO themselves, which the NodeSLO controller
    # would otherwise re-render from the ConfigMap under them.
    args = [*sandbox_kind_args(request.config), "--operators", "2", "--nodes", "2", "--pods-per-node", "4",
            *LEASE_ARGS, *AGENT_ARGS, "--operator-arg=--no-controllers"]
    with start_sandbox_process(state, args) as kubeconfig:
        yield kubeconfig, state


@pytest.fixture
async def admin(agent_sandbox: tuple[Path, Path]) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(agent_sandbox[0]) as kube:
        yield kube


def real_agent(state: Path) -> dict[str, Any]:
    agents = json.loads((state / "agents.json").read_text())
    return next(agent for agent in agents if not agent["simulated"])


async def scrape(agent: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The agent's Prometheus metrics (on loopback on the builtin sandbox, at its pod's address on the real one)."""
    url = f"http://{agent.get('host', '127.0.0.1')}:{agent['metricsPort']}/metrics"
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value for sample in await scrape_samples(url)}


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(value for (sample, sample_labels), value in samples.items()
               if sample == name and set(labels.items()) <= set(sample_labels))


async def node_metric(kube: Kube, node: str) -> dict[str, Any] | None:
    status, body = await kube.request("GET", f"{BASE}/{node}")
    return body if status == 200 else None


def update_time(metric: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(metric["status"]["updateTime"]).timestamp()


# ---- what /proc says -----------------------------------------------------------------------------

def busy_and_total_ticks() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(fields) - fields[3] - fields[4], sum(fields)


def memory_in_use() -> int:
    values = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            key, _, rest = line.partition(":")
            values[key] = int(rest.split()[0]) * 1024
    return values["MemTotal"] - values["MemAvailable"]


def millis(quantity: str) -> int:
    from colocation.apimachinery.quantity import cpu_millis

    return cpu_millis(quantity)


def byte_count(quantity: str) -> int:
    from colocation.apimachinery.quantity import byte_value

    return byte_value(quantity)


async def test_the_real_agent_reports_the_cpu_and_memory_proc_shows(admin: Kube,
                                                                    agent_sandbox: tuple[Path, Path]) -> None:
    node = real_agent(agent_sandbox[1])["nodes"][0]
    # A 5-second window and a report every second: the report then covers a span the test measures too.
    nodeslo = {"apiVersion": "slo.colocation.dev/v1alpha1", "kind": "NodeSLO", "metadata": {"name": node},
               "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 5, "reportIntervalSeconds": 1}}}
    status, body = await admin.request("POST", NODESLOS, nodeslo)
    assert status == 201, body
    # About one core of known load.
    burner = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
    history: list[tuple[float, int, int, int]] = []

    async def record() -> None:
        while True:
            history.append((time.time(), *busy_and_total_ticks(), memory_in_use()))
            await asyncio.sleep(0.2)  # the sampling period of the test's own measurement

    recorder = asyncio.create_task(record())
    try:
        started = time.time()

        async def fresh_report() -> dict[str, Any] | None:
            metric = await node_metric(admin, node)
            return metric if metric is not None and update_time(metric) >= started + 7 else None

        metric = await eventually_async(fresh_report, timeout=30, interval=0.2)
        reported_at = update_time(metric)  # whole seconds: the report was built within [t, t + 1)
        window = [sample for sample in history if reported_at - 5 <= sample[0] <= reported_at + 1]
        (_, busy0, total0, _), (_, busy1, total1, _) = window[0], window[-1]
        # The agent averages memory over its 5-second window: the average lies within what the
        # test itself saw during that window (other processes on a shared machine move it).
        # Its samples are taken every second and, on a loaded machine, late: allow a few seconds.
        spanned = [sample[3] for sample in history if reported_at - 10 <= sample[0] <= reported_at + 2]
        memory_low, memory_high = min(spanned), max(spanned)
        cores = os.cpu_count() or 1
        measured_cpu = 1000 * cores * (busy1 - busy0) / max(total1 - total0, 1)
    finally:
        recorder.cancel()
        burner.kill()
        await burner.wait()
        await admin.request("DELETE", f"{NODESLOS}/{node}")

    usage = metric["status"]["nodeMetric"]["nodeUsage"]["resources"]
    reported_cpu, reported_memory = millis(usage["cpu"]), byte_count(usage["memory"])
    print(f"cpu: reported {reported_cpu}m, /proc {measured_cpu:.0f}m; "
          f"memory: reported {reported_memory >> 20}Mi, /proc {memory_low >> 20}..{memory_high >> 20}Mi")
    assert reported_cpu >= 700  # the burner alone keeps a core busy
    assert abs(reported_cpu - measured_cpu) <= max(350, 0.25 * measured_cpu)
    tolerance = max(64 * 2**20, 0.05 * memory_high)
    assert memory_low - tolerance <= reported_memory <= memory_high + tolerance
    assert metric["metadata"]["labels"]["colocation.dev/simulated"] == "false"


async def test_simulated_nodes_report_their_pods(admin: Kube, agent_sandbox: tuple[Path, Path]) -> None:
    agents = json.loads((agent_sandbox[1] / "agents.json").read_text())
    simulated = next(agent for agent in agents if agent["simulated"])["nodes"][0]
    metric = await eventually_async(lambda: node_metric(admin, simulated), timeout=30, interval=0.2)
    status, pods = await admin.request("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={simulated}"})
    assert status == 200
    on_node = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods["items"]
               if p["metadata"]["namespace"] != "colocation-system"}  # its agent pod has no synthetic load
    reported = {(p["namespace"], p["name"]) for p in metric["status"]["podsMetric"]}
    assert reported == on_node and len(reported) >= 3
    assert metric["metadata"]["labels"]["colocation.dev/simulated"] == "true"


async def test_every_agent_process_says_its_nodes_are_heard_and_its_informers_synced(
        agent_sandbox: tuple[Path, Path]) -> None:
    urls = selfcheck.sandbox_metrics_urls(agent_sandbox[1])
    assert len(urls) == 2  # the real agent and the simulated one

    async def settled() -> dict[str, selfcheck.AgentHealth] | None:
        healths = await selfcheck.read_all(urls)
        done = all(h.renewals >= 1 and h.reports >= 1 and h.heartbeats_overdue == 0
                   and h.informers == h.informers_synced > 0
                   for h in healths.values())
        return healths if done else None

    healths = await eventually_async(settled, timeout=30, interval=0.2)
    for name, health in healths.items():
        assert health.nodes == 1, (name, health)
        assert health.oldest_heartbeat_age < 40, (name, health)  # within the default grace period


async def test_a_leader_failover_makes_the_agent_report_again_at_once(admin: Kube,
                                                                      agent_sandbox: tuple[Path, Path]) -> None:
    state = agent_sandbox[1]
    agent = real_agent(state)
    node = agent["nodes"][0]
    await admin.request("DELETE", f"{NODESLOS}/{node}")  # back to a 60 s maximum report interval
    await eventually_async(lambda: node_metric(admin, node), timeout=30, interval=0.2)
    old, _, _ = await leader(admin)
    before = total(await scrape(agent), "colocation_agent_reports_sent_total",
                   trigger="leader-changed")
    victim = next(r for r in replicas(state) if r["identity"] == old)
    killed_at = time.time()
    os.kill(victim["pid"], signal.SIGKILL)

    async def new_leader() -> str | None:
        identity, endpoint, _ = await leader(admin)
        return identity if identity and identity != old and endpoint else None

    await eventually_async(new_leader, timeout=10, interval=0.05)
    promoted = time.monotonic()

    async def re_sent() -> bool:
        samples = await scrape(agent)
        return total(samples, "colocation_agent_reports_sent_total", trigger="leader-changed") > before

    await eventually_async(re_sent, timeout=10, interval=0.05)
    print(f"agent re-sent its report {time.monotonic() - promoted:.2f}s after the new leader was elected")

    async def fresh() -> dict[str, Any] | None:
        metric = await node_metric(admin, node)
        return metric if metric is not None and update_time(metric) >= int(killed_at) else None

    # Far sooner than the 60 s maximum interval: the re-send, not a periodic report, brought it.
    await eventually_async(fresh, timeout=5, interval=0.05)


async def test_a_stopped_agents_lease_stops_being_renewed_and_expires(admin: Kube, agent_sandbox: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    kubeconfig, _ = agent_sandbox
    node, token = await make_node(admin)
    agent = await start_agent_process(kubeconfig, token, node, tmp_path, "--lease-duration", "3")
    try:
        renewals: set[str] = set()

        async def renewed_twice() -> dict[str, Any] | None:
            status, lease = await admin.request("GET", f"{NODE_LEASES}/{node}")
            if status != 200:
                return None
            renewals.add(lease["spec"]["renewTime"])
            return lease if len(renewals) >= 2 else None

        lease = await eventually_async(renewed_twice, timeout=15, interval=0.1)
    finally:
        agent.kill()
        await agent.wait()
    assert lease["spec"]["leaseDurationSeconds"] == 3 and lease["spec"]["holderIdentity"] == node
    _, node_obj = await admin.request("GET", f"/api/v1/nodes/{node}")
    assert lease["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": node,
                                                     "uid": node_obj["metadata"]["uid"]}]
    _, last = await admin.request("GET", f"{NODE_LEASES}/{node}")
    last_renewal = dt.datetime.fromisoformat(last["spec"]["renewTime"]).timestamp()

    async def expired() -> bool:
        _, lease = await admin.request("GET", f"{NODE_LEASES}/{node}")
        assert lease["spec"]["renewTime"] == last["spec"]["renewTime"], "renewed after the agent stopped"
        return bool(time.time() > last_renewal + lease["spec"]["leaseDurationSeconds"])

    await eventually_async(expired, timeout=10, interval=0.2)
