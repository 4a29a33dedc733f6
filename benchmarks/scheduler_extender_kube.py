"""The scheduler extender on the real control plane (issue 40): kube-scheduler's throughput and placements.

Two sandboxes, one after the other (`colocation sandbox --apiserver kube --kwok-resource-metrics`,
2 operator replicas, reports every 2 s): kube-scheduler alone (`--no-scheduler-extender`), then
with the operators' load-aware extender. In each:

- throughput, `bursts` times: `pods` pods of 10m cpu created (8 requests in flight) with a node
  selector no node matches, then every simulated node labelled to match (`measure_throughput`):
  each pod's seconds from the first label sent to its binding;
- placement: each simulated node's pods' cpu annotations set to a skewed load (the first at 80 % of
  its allocatable, the last at 10 %, linear between), which their agents report; once every
  NodeMetric shows it (and, with the extender, once it refuses the hottest node), `placement_pods`
  pods whose annotated cpu usage equals their request, together `new_load` of the simulated nodes'
  allocatable cpu, created at once. Where they land is read from the API;
- with the extender, the placement again with `tentativeHoldSeconds: 0` in load-aware-config (once
  every replica logged the configuration read): the burst without tentative placements.

Each phase's pods are deleted before the next. The agents' self-check is read before the throughput,
after it and after the last placement: each part's verdict counts only its own problems.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from benchmarks import cp_cluster
from benchmarks.client import Client, Request, say
from benchmarks.polling import eventually_async
from colocation.agent import selfcheck
from colocation.agent.synthetic import CPU_USAGE_ANNOTATION, MEMORY_USAGE_ANNOTATION, SIMULATED_LABEL
from colocation.apimachinery.quantity import cpu_millis, format_millis
from colocation.kube import permissions

SYSTEMS = ("kube-scheduler", "kube-scheduler + extender")
NAMESPACE = "default"
PHASE_LABEL = "bench.colocation.dev/phase"
OPEN_LABEL = "bench.colocation.dev/open"  # the throughput's pods wait for nodes with this label
CONFIG_MAP = f"/api/v1/namespaces/{permissions.OPERATOR_NAMESPACE}/configmaps/colocation-config"
NODEMETRICS = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics"
MERGE_PATCH = "application/merge-patch+json"
CONFIG_READ = b"cluster configuration read"  # what a replica logs on each change of colocation-config
REPORT_SECONDS = 2
HOT_SHARE, COOL_SHARE = 0.80, 0.10  # the skew: the first simulated node's pods, and the last's
THROUGHPUT_POD_CPU = 10  # millis
BOUND_TIMEOUT = 600.0
SEEN_TIMEOUT = 180.0
EVENTS_TIMEOUT = 30.0
START_TIMEOUT = 600.0
EXTENDER_SERVER_NAME = f"colocation-operator.{permissions.OPERATOR_NAMESPACE}.svc"


@dataclass(frozen=True, kw_only=True)
class KubeConfig:
    state_dir: Path = Path("unused")
    nodes: int = 50  # one is this machine's
    pods_per_node: int = 2
    pods: int = 1000  # throughput
    bursts: int = 3  # throughput bursts per system: each system's figure is their median
    placement_pods: int = 500
    new_load: float = 0.15  # of the simulated nodes' allocatable cpu, what the placed pods use


@dataclass
class Throughput:
    pods: int
    opened_at: list[float] = field(default_factory=list)  # seconds from the first node label sent, per node
    bound_at: list[float] = field(default_factory=list)  # seconds from the first node label sent, per pod, sorted
    watch_resumes: int = 0  # times kube-apiserver closed the watch of bound pods (BoundWatch)
    last_listed: bool = False  # the last binding was seen in a list after such a close: its time is late
    # "scheduler events": bound_at from kube-scheduler's Scheduled Events (eventTime, in microseconds);
    # "watch": from when the watch showed each pod bound (some pod had no Event)
    timed_by: str = "watch"

    @property
    def pods_per_second(self) -> float:
        return len(self.bound_at) / self.bound_at[-1] if self.bound_at and self.bound_at[-1] > 0 else float("nan")

    @property
    def opened_in(self) -> float:
        """Seconds the client took to label every node: the pods could go anywhere after that."""
        return max(self.opened_at, default=math.nan)

    @property
    def client_bound(self) -> bool:
        """The scheduler finished less than 10 % after the last node was labelled: it waited for our
        client, whose rate it then measures, not its own."""
        return not self.bound_at or not self.opened_at or self.opened_in >= 0.9 * self.bound_at[-1]


@dataclass
class Placement:
    label: str
    pod_cpu: int  # millis: each placed pod's request and annotated usage
    allocatable: dict[str, int] = field(default_factory=dict)  # simulated node -> cpu millis
    base: dict[str, int] = field(default_factory=dict)  # node -> its pods' annotated cpu before the placement
    placed: dict[str, str] = field(default_factory=dict)  # pod -> node
    seconds: float = 0.0  # from the first create to the last pod bound

    def usage(self) -> dict[str, float]:
        """Each simulated node's annotated cpu after the placement, in % of its allocatable."""
        added = {node: 0 for node in self.allocatable}
        for node in self.placed.values():
            if node in added:
                added[node] += self.pod_cpu
        return {node: 100 * (self.base.get(node, 0) + added[node]) / alloc
                for node, alloc in self.allocatable.items() if alloc > 0}

    def most_on_one_node(self) -> int:
        counts: dict[str, int] = {}
        for node in self.placed.values():
            counts[node] = counts.get(node, 0) + 1
        return max(counts.values(), default=0)


@dataclass
class SystemRun:
    system: str
    bursts: list[Throughput]
    placements: list[Placement] = field(default_factory=list)
    # The agents' self-check over each part: the throughput's bursts, then the placements.
    throughput_problems: list[str] = field(default_factory=list)
    placement_problems: list[str] = field(default_factory=list)


def skew_targets(allocatable: dict[str, int]) -> dict[str, int]:
    """Each node's pods' cpu, millis: HOT_SHARE of the first node's allocatable down to COOL_SHARE of the last's."""
    names = sorted(allocatable, key=_node_order)
    last = max(len(names) - 1, 1)
    return {name: round(allocatable[name] * (HOT_SHARE - (HOT_SHARE - COOL_SHARE) * index / last))
            for index, name in enumerate(names)}


def _node_order(name: str) -> tuple[int, str]:
    number = name.rpartition("-")[2]
    return (int(number), name) if number.isdigit() else (0, name)


def placement_pod_cpu(allocatable: dict[str, int], pods: int, new_load: float) -> int:
    """Each placed pod's cpu, millis: together `new_load` of the nodes' allocatable (1m at least)."""
    return max(1, round(new_load * sum(allocatable.values()) / max(pods, 1)))


def pod(name: str, phase: str, cpu: int, *, annotated: bool) -> dict[str, Any]:
    annotations = {CPU_USAGE_ANNOTATION: format_millis(cpu), MEMORY_USAGE_ANNOTATION: str(64 * 2**20)} \
        if annotated else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {PHASE_LABEL: phase},
                         "annotations": annotations},
            "spec": {"nodeSelector": {SIMULATED_LABEL: "true"}, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "busybox", "resources": {
                         "requests": {"cpu": format_millis(cpu), "memory": "64Mi"}}}]}}


class BoundWatch:
    """The pods of a phase the API shows bound, with the time each was first seen so (loop time).

    kube-apiserver closes a watch whose client it finds slow to take events ("Forcing watcher close
    due to unresponsiveness"), which a burst of 1,000 pods on a 2-core machine can cause: the watch
    then lists what it missed (seen bound at the list's time, later than they were: the throughput
    is only undercounted) and watches again from the list, as an informer does.
    """

    def __init__(self, client: Client, phase: str) -> None:
        self.client = client
        self.phase = phase
        self.seen: dict[str, tuple[float, str]] = {}  # pod -> (loop time, node)
        self.connected = asyncio.Event()
        self.resumed = 0  # watches kube-apiserver ended before the last pod was seen bound
        self.listed: set[str] = set()  # pods first seen bound in a list after a watch ended

    async def run(self) -> None:
        selectors = f"labelSelector={PHASE_LABEL}%3D{self.phase}&fieldSelector=spec.nodeName%21%3D"
        resource_version = await self._list(selectors)
        self.connected.set()
        while True:
            await self._watch(selectors, resource_version)
            self.resumed += 1
            resource_version = await self._list(selectors)

    async def _list(self, selectors: str) -> str:
        listed = await self.client.json(Request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?{selectors}"))
        now = asyncio.get_running_loop().time()
        for obj in listed["items"]:
            if self._saw(obj, now) and self.connected.is_set():
                self.listed.add(obj["metadata"]["name"])
        return str(listed["metadata"]["resourceVersion"])

    async def _watch(self, selectors: str, resource_version: str) -> None:
        loop = asyncio.get_running_loop()
        path = (f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&{selectors}&resourceVersion={resource_version}"
                f"&allowWatchBookmarks=false&timeoutSeconds={int(BOUND_TIMEOUT)}")
        async with self.client.session.get(path, headers={"Accept": "application/json"},
                                           timeout=aiohttp.ClientTimeout(total=BOUND_TIMEOUT + 30,
                                                                         sock_connect=30)) as response:
            if response.status != 200:
                raise RuntimeError(f"watch {path}: {response.status} {(await response.read())[:300]!r}")
            async for line in response.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                if event.get("type") == "ERROR":  # 410 Expired: the list that follows catches up
                    return
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._saw(event.get("object") or {}, loop.time())

    def _saw(self, obj: dict[str, Any], at: float) -> bool:
        """Record a pod seen bound for the first time; whether it was."""
        name = (obj.get("metadata") or {}).get("name")
        node = (obj.get("spec") or {}).get("nodeName")
        if name and node and name not in self.seen:
            self.seen[name] = (at, node)
            return True
        return False


Bound = dict[str, tuple[float, str]]  # pod -> (seconds from the first create to its binding seen, node)


async def place(cluster: cp_cluster.Cluster, phase: str, pods: list[dict[str, Any]], *,
                release: Callable[[float], Awaitable[None]] | None = None) -> tuple[Bound, BoundWatch]:
    """Create `pods` (8 in flight) with a watch of the bound ones; (pod -> (seconds from the start it
    was seen bound, node), the watch). The start is the first create; with `release`, the pods
    cannot be placed yet: once all are created, the start is now, and `release(start)` lets the
    scheduler place them."""
    loop = asyncio.get_running_loop()
    watcher_client = Client(cluster.endpoint, concurrency=1, timeout=BOUND_TIMEOUT + 60)
    watch = BoundWatch(watcher_client, phase)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(watch.connected.wait(), 30)
        started = loop.time()
        result = await cluster.client.load(f"{phase} creates", len(pods),
                                           lambda i: Request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods",
                                                             orjson.dumps(pods[i])), progress=say)
        if result.errors:
            raise RuntimeError(f"{phase}: {result.errors} creates failed, the first: {result.first_error}")
        if release is not None:
            started = loop.time()
            await release(started)
        await eventually_async(lambda: len(watch.seen) >= len(pods) or task.done(), BOUND_TIMEOUT, interval=0.2,
                               message=f"{phase}: {len(pods)} pods bound")
        if len(watch.seen) < len(pods):
            task.result()  # the watch failed: say why
            raise RuntimeError(f"{phase}: the watch stopped with {len(watch.seen)} of {len(pods)} pods bound")
        return {name: (at - started, node) for name, (at, node) in watch.seen.items()}, watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await watcher_client.close()


async def delete_phase(cluster: cp_cluster.Cluster, phase: str) -> None:
    selector = f"labelSelector={PHASE_LABEL}%3D{phase}"
    await cluster.client.json(Request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods?{selector}",
                                      orjson.dumps({"gracePeriodSeconds": 0})))

    async def gone() -> bool:
        listed = await cluster.client.json(Request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?{selector}"))
        return not listed["items"]

    await eventually_async(gone, 120, interval=0.5, message=f"{phase}: pods deleted")


async def simulated_allocatable(cluster: cp_cluster.Cluster) -> dict[str, int]:
    nodes = await cluster.client.json(Request("GET", f"/api/v1/nodes?labelSelector={SIMULATED_LABEL}%3Dtrue"))
    return {n["metadata"]["name"]: cpu_millis(n["status"]["allocatable"]["cpu"]) for n in nodes["items"]}


async def annotated_pods(cluster: cp_cluster.Cluster) -> dict[str, list[dict[str, Any]]]:
    """node -> its pods with a cpu usage annotation (metadata only)."""
    pods = await cluster.client.json(Request("GET", "/api/v1/pods?fieldSelector=spec.nodeName%21%3D"))
    found: dict[str, list[dict[str, Any]]] = {}
    for item in pods["items"]:
        if CPU_USAGE_ANNOTATION in (item["metadata"].get("annotations") or {}):
            found.setdefault(item["spec"]["nodeName"], []).append(item["metadata"])
    return found


async def set_skew(cluster: cp_cluster.Cluster, targets: dict[str, int]) -> dict[str, int]:
    """Each node's annotated pods share its target equally; node -> its pods' cpu as annotated."""
    on_node = await annotated_pods(cluster)
    base: dict[str, int] = {}
    for node, target in targets.items():
        pods = on_node.get(node) or []
        if not pods:
            raise RuntimeError(f"{node} has no pod with a usage annotation to skew")
        share = target // len(pods)
        for meta in pods:
            body = orjson.dumps({"metadata": {"annotations": {CPU_USAGE_ANNOTATION: format_millis(share)}}})
            await cluster.client.json(Request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                              body, content_type=MERGE_PATCH))
        base[node] = share * len(pods)
    return base


def reported_cpu(item: dict[str, Any]) -> int | None:
    node = (item.get("status") or {}).get("nodeMetric") or {}
    usage = (node.get("recentUsage") or node.get("nodeUsage") or {}).get("resources") or {}
    return cpu_millis(usage["cpu"]) if "cpu" in usage else None


async def skew_reported(cluster: cp_cluster.Cluster, base: dict[str, int], allocatable: dict[str, int]) -> bool:
    """Every node's NodeMetric shows its pods' new cpu, plus at most its system's (200m + 5 % of allocatable)."""
    status, body = await cluster.client.send(Request("GET", NODEMETRICS))
    if status != 200:
        return False
    reported = {item["metadata"]["name"]: reported_cpu(item) for item in orjson.loads(body)["items"]}
    return all((cpu := reported.get(node)) is not None and pods <= cpu <= pods + 200 + allocatable[node] // 20
               for node, pods in base.items())


class ExtenderProbe:
    """The extender as kube-scheduler calls it: through the sandbox's relay, with its client certificate."""

    def __init__(self, state: Path, ca_pem: bytes) -> None:
        self.url = json.loads((state / "controlplane.json").read_text())["schedulerExtender"]
        self.ssl = ssl.create_default_context(cadata=ca_pem.decode())
        self.ssl.load_cert_chain(state / "pki" / "scheduler-extender-client.crt",
                                 state / "pki" / "scheduler-extender-client.key")

    async def refused(self, node: str, candidates: list[str], pod_cpu: int) -> bool:
        """Whether the filter refuses `node` for a placement pod (no UID: nothing is placed)."""
        probe = pod("probe", "probe", pod_cpu, annotated=False)
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, session.post(
                    f"{self.url}/filter", data=orjson.dumps({"Pod": probe, "NodeNames": candidates}), ssl=self.ssl,
                    server_hostname=EXTENDER_SERVER_NAME) as response:
                if response.status == 200:
                    return node in orjson.loads(await response.read())["FailedAndUnresolvableNodes"]
        return False


async def extender_probe(cluster: cp_cluster.Cluster) -> ExtenderProbe:
    secret = await cluster.client.json(Request(
        "GET", f"/api/v1/namespaces/{permissions.OPERATOR_NAMESPACE}/secrets/{permissions.CA_SECRET_NAME}"))
    return ExtenderProbe(cluster.state_dir, base64.b64decode(secret["data"]["ca.crt"]))


def config_reads(state_dir: Path) -> dict[str, int]:
    """Each running replica's log lines saying it read colocation-config, by its log file."""
    counts: dict[str, int] = {}
    for entry in json.loads((state_dir / "operators.json").read_text()):
        log = Path(entry["log"])
        counts[str(log)] = log.read_bytes().count(CONFIG_READ) if log.exists() else 0
    return counts


async def patch_config(cluster: cp_cluster.Cluster, load_aware: dict[str, Any]) -> None:
    """Reports every REPORT_SECONDS and these load-aware settings; returns once every replica read them."""
    before = config_reads(cluster.state_dir)
    config_map = await cluster.client.json(Request("GET", CONFIG_MAP))
    colocation = json.loads(config_map["data"]["colocation-config"])
    colocation.setdefault("clusterStrategy", {})["metricReportIntervalSeconds"] = REPORT_SECONDS
    body = {"data": {"colocation-config": json.dumps(colocation), "load-aware-config": json.dumps(load_aware)}}
    await cluster.client.json(Request("PATCH", CONFIG_MAP, orjson.dumps(body), content_type=MERGE_PATCH))
    await eventually_async(lambda: all(count > before.get(log, 0)
                                       for log, count in config_reads(cluster.state_dir).items()),
                           60, interval=0.2, message="every replica read colocation-config")


async def measure_throughput(cluster: cp_cluster.Cluster, system_index: int, pods: int) -> Throughput:
    phase = f"throughput-{system_index}"
    """`pods` pods created while no node may take them (their node selector names a label no node has
    yet), then every simulated node given that label, 8 at a time: from then on the scheduler places
    them as fast as it can, and the client's create rate no longer paces it."""
    phase = f"throughput-{system_index}"
    nodes = sorted(await simulated_allocatable(cluster), key=_node_order)
    specs = [pod(f"tp-{system_index}-{i}", phase, THROUGHPUT_POD_CPU, annotated=False) for i in range(pods)]
    for spec in specs:
        spec["spec"]["nodeSelector"][OPEN_LABEL] = phase
    opened: list[float] = []

    wall_start = 0.0

    async def open_nodes(started: float) -> None:
        nonlocal wall_start
        wall_start = time.time() - (asyncio.get_running_loop().time() - started)

        def on_response(index: int, status: int, body: bytes, finished: float) -> None:
            if status == 200:
                opened.append(finished - started)

        await label_nodes(cluster, nodes, phase, on_response=on_response)

    bound, watch = await place(cluster, phase, specs, release=open_nodes)

    async def every_pod_scheduled() -> dict[str, float] | None:
        times = await scheduled_times(cluster, set(bound))
        return times if len(times) == len(bound) else None

    scheduled = None
    with contextlib.suppress(TimeoutError):  # kube-scheduler sends its Events after the bindings
        scheduled = await eventually_async(every_pod_scheduled, EVENTS_TIMEOUT, interval=0.5,
                                           message=f"{phase}: a Scheduled Event for every pod")
    await label_nodes(cluster, nodes, None)
    await delete_phase(cluster, phase)
    if scheduled is not None:
        return Throughput(pods=pods, opened_at=sorted(opened),
                          bound_at=sorted(at - wall_start for at in scheduled.values()),
                          watch_resumes=watch.resumed, timed_by="scheduler events")
    last = max(bound, key=lambda name: bound[name][0], default=None)
    return Throughput(pods=pods, opened_at=sorted(opened), bound_at=sorted(at for at, _ in bound.values()),
                      watch_resumes=watch.resumed, last_listed=last in watch.listed)


async def scheduled_times(cluster: cp_cluster.Cluster, pods: set[str]) -> dict[str, float]:
    """pod -> when kube-scheduler bound it (its Scheduled Event's eventTime, seconds since the epoch), for
    the pods in `pods` that have one: a watch's times are late when kube-apiserver is busy, these are not."""
    listed = await cluster.client.json(Request(
        "GET", f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events?fieldSelector=reason%3DScheduled"))
    times: dict[str, float] = {}
    for event in listed["items"]:
        name = (event.get("regarding") or {}).get("name")
        stamp = event.get("eventTime")
        if name in pods and stamp:
            times[name] = datetime.fromisoformat(stamp).timestamp()
    return times


async def label_nodes(cluster: cp_cluster.Cluster, nodes: list[str], value: str | None, *,
                      on_response: Callable[[int, int, bytes, float], None] | None = None) -> None:
    """Set OPEN_LABEL to `value` on every node in `nodes` (None: remove it)."""
    body = orjson.dumps({"metadata": {"labels": {OPEN_LABEL: value}}})
    result = await cluster.client.load(f"{OPEN_LABEL}={value}", len(nodes),
                                       lambda i: Request("PATCH", f"/api/v1/nodes/{nodes[i]}", body,
                                                         content_type=MERGE_PATCH), on_response=on_response)
    if result.errors:
        raise RuntimeError(f"labelling nodes: {result.errors} failed, the first: {result.first_error}")


async def measure_placement(cluster: cp_cluster.Cluster, label: str, phase: str, config: KubeConfig,
                            allocatable: dict[str, int], base: dict[str, int]) -> Placement:
    cpu = placement_pod_cpu(allocatable, config.placement_pods, config.new_load)
    result = Placement(label=label, pod_cpu=cpu, allocatable=dict(allocatable), base=dict(base))
    bound, _ = await place(cluster, phase, [pod(f"{phase}-{i}", phase, cpu, annotated=True)
                                            for i in range(config.placement_pods)])
    result.placed = {name: node for name, (_, node) in bound.items()}
    result.seconds = max((at for at, _ in bound.values()), default=0.0)
    await delete_phase(cluster, phase)
    return result


async def run_system(config: KubeConfig, index: int) -> SystemRun:
    system = SYSTEMS[index]
    with_extender = index == 1
    extra = ("--apiserver", "kube", "--kwok-resource-metrics", f"--agent-arg=--report-interval={REPORT_SECONDS}",
             *(() if with_extender else ("--no-scheduler-extender",)))
    say(f"scheduler-extender: {system}: starting a sandbox of {config.nodes} nodes")
    cluster = await cp_cluster.start(config.state_dir / f"system-{index}", nodes=config.nodes,
                                     pods_per_node=config.pods_per_node, extra=extra, start_timeout=START_TIMEOUT)
    try:
        await patch_config(cluster, {})
        checks_before = await selfcheck.read_sandbox(cluster.state_dir)
        run = SystemRun(system=system, bursts=[])
        for burst in range(config.bursts):
            say(f"scheduler-extender: {system}: {config.pods} pods for the throughput ({burst + 1} of {config.bursts})")
            run.bursts.append(await measure_throughput(cluster, index * config.bursts + burst, config.pods))
            say(f"scheduler-extender: {system}: {run.bursts[-1].pods_per_second:,.1f} pods/s")
        checks_between = await selfcheck.read_sandbox(cluster.state_dir)
        _, run.throughput_problems = selfcheck.sandbox_verdict(checks_before, checks_between)
        allocatable = await simulated_allocatable(cluster)
        base = await set_skew(cluster, skew_targets(allocatable))
        await eventually_async(lambda: skew_reported(cluster, base, allocatable), SEEN_TIMEOUT, interval=1.0,
                               message="every NodeMetric showing the skewed load")
        if with_extender:
            probe = await extender_probe(cluster)
            hottest = min(allocatable, key=_node_order)
            cpu = placement_pod_cpu(allocatable, config.placement_pods, config.new_load)
            await eventually_async(lambda: probe.refused(hottest, sorted(allocatable), cpu), SEEN_TIMEOUT,
                                   interval=1.0, message=f"the extender refusing {hottest}")
        run.placements.append(await measure_placement(cluster, system, f"place-{index}", config, allocatable, base))
        if with_extender:
            await patch_config(cluster, {"tentativeHoldSeconds": 0})
            run.placements.append(await measure_placement(cluster, f"{system}, tentativeHoldSeconds 0",
                                                          f"place-{index}-hold0", config, allocatable, base))
        _, run.placement_problems = selfcheck.sandbox_verdict(checks_between,
                                                              await selfcheck.read_sandbox(cluster.state_dir))
        return run
    finally:
        await cluster.close()


async def run(config: KubeConfig) -> list[SystemRun]:
    started = time.monotonic()
    runs = [await run_system(config, index) for index in range(len(SYSTEMS))]
    say(f"scheduler-extender: both sandboxes done in {(time.monotonic() - started) / 60:.1f} min")
    return runs
