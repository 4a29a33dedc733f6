"""Plausible load for simulated nodes: pods with realistic names and priorities, and their usage.

A `SyntheticCollector` stands in for `RealCollector` on a node that does not exist. It is
deterministic: the same seed, node and time give the same pods and samples. Each pod's usage
follows a profile (steady, diurnal, spiky), and so do its custom metrics. `adopt()` takes the
pods as the API server created them, so samples carry the cluster's UIDs. `scraped_share` of the
pods, spread evenly over the node's, carry the Prometheus scrape annotations; the others none.

The pods, the profiles and the metrics: docs/agent.md#simulated-agents
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal

from colocation.agent.collector import PodSample, Pressure, PressureStat, Sample
from colocation.agent.samples import MetricSample, SeriesKey
from colocation.agent.scrape import PATH_ANNOTATION, PORT_ANNOTATION, SCRAPE_ANNOTATION
from colocation.apimachinery.quantity import byte_value, cpu_millis, format_bytes, format_millis
from colocation.koordinator.classes import (
    PRIORITY_BANDS,
    PRIORITY_LABEL,
    QOS_LABEL,
    PriorityClass,
    QoSClass,
    is_high_priority,
)

Profile = Literal["steady", "diurnal", "spiky"]
PROFILES: tuple[Profile, ...] = ("steady", "diurnal", "spiky")
SIMULATED_LABEL = "colocation.dev/simulated"
# Usage given on the objects instead of drawn from the profile: one source for the simulated agents
# and for kwok's kubelet-style resource metrics (what metrics-server scrapes), so both say the same.
# On a pod: its cpu (a quantity, e.g. "237m") and memory (bytes) right now. On a node: what its
# system (everything but the pods) uses, in cores and bytes, plain decimal numbers.
CPU_USAGE_ANNOTATION = "colocation.dev/simulated-cpu-usage"
MEMORY_USAGE_ANNOTATION = "colocation.dev/simulated-memory-usage"
SYSTEM_CPU_ANNOTATION = "colocation.dev/simulated-system-cpu-cores"
SYSTEM_MEMORY_ANNOTATION = "colocation.dev/simulated-system-memory-bytes"

_MI = 2**20
_GI = 2**30
# Kubernetes' name-suffix alphabet (no vowels, no confusable characters).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_PRIORITY_VALUES: dict[PriorityClass, int] = {name: low for low, _, name in PRIORITY_BANDS}
_MASK64 = 2**64 - 1
_SCRAPE_ANNOTATIONS = {SCRAPE_ANNOTATION: "true", PORT_ANNOTATION: "8080", PATH_ANNOTATION: "/metrics"}
_GET_SHARE = 0.8  # of a serving pod's requests
# Products like 0.29 * 100 come out a hair under the whole number they stand for: round first.
_SHARE_DIGITS = 9


@dataclass(frozen=True, kw_only=True)
class _Workload:
    app: str
    namespace: str
    kind: Literal["Deployment", "DaemonSet", "StatefulSet", "SparkExecutor", "CronJob"]
    priority: PriorityClass
    qos: QoSClass
    cpu_millis: int  # request (batch pods: kubernetes.io/batch-cpu)
    memory_bytes: int
    image: str


_DAEMONSETS = (
    _Workload(app="kube-proxy", namespace="kube-system", kind="DaemonSet", priority="koord-prod", qos="SYSTEM",
              cpu_millis=100, memory_bytes=128 * _MI, image="registry.k8s.io/kube-proxy:v1.32.0"),
    _Workload(app="node-exporter", namespace="monitoring", kind="DaemonSet", priority="koord-prod", qos="LS",
              cpu_millis=100, memory_bytes=64 * _MI, image="quay.io/prometheus/node-exporter:v1.8.2"),
    _Workload(app="fluent-bit", namespace="logging", kind="DaemonSet", priority="koord-prod", qos="LS", cpu_millis=100,
              memory_bytes=128 * _MI, image="cr.fluentbit.io/fluent/fluent-bit:3.1"),
)
_WORKLOADS: dict[PriorityClass, tuple[_Workload, ...]] = {
    "koord-prod": (
        _Workload(app="frontend", namespace="shop", kind="Deployment", priority="koord-prod", qos="LS", cpu_millis=500,
                  memory_bytes=512 * _MI, image="shop/frontend:2.14.1"),
        _Workload(app="checkout", namespace="shop", kind="Deployment", priority="koord-prod", qos="LS", cpu_millis=1000,
                  memory_bytes=1 * _GI, image="shop/checkout:2.14.1"),
        _Workload(app="cart", namespace="shop", kind="Deployment", priority="koord-prod", qos="LS", cpu_millis=250,
                  memory_bytes=256 * _MI, image="shop/cart:2.14.1"),
        _Workload(app="catalog", namespace="shop", kind="Deployment", priority="koord-prod", qos="LS", cpu_millis=500,
                  memory_bytes=768 * _MI, image="shop/catalog:2.14.1"),
        _Workload(app="search-api", namespace="search", kind="Deployment", priority="koord-prod", qos="LSR",
                  cpu_millis=2000, memory_bytes=4 * _GI, image="search/api:5.3.0"),
        _Workload(app="payments", namespace="payments", kind="Deployment", priority="koord-prod", qos="LSR",
                  cpu_millis=1000, memory_bytes=2 * _GI, image="payments/core:9.0.2"),
        _Workload(app="auth", namespace="identity", kind="Deployment", priority="koord-prod", qos="LS", cpu_millis=250,
                  memory_bytes=256 * _MI, image="identity/auth:1.22.0"),
        _Workload(app="redis", namespace="shop", kind="StatefulSet", priority="koord-prod", qos="LSR", cpu_millis=1000,
                  memory_bytes=4 * _GI, image="redis:7.4"),
        _Workload(app="ingress-nginx-controller", namespace="ingress-nginx", kind="Deployment", priority="koord-prod",
                  qos="LS", cpu_millis=500, memory_bytes=512 * _MI,
                  image="registry.k8s.io/ingress-nginx/controller:v1.11.2"),
    ),
    "koord-mid": (
        _Workload(app="log-aggregator", namespace="observability", kind="Deployment", priority="koord-mid", qos="LS",
                  cpu_millis=500, memory_bytes=1 * _GI, image="grafana/loki:3.2.0"),
        _Workload(app="metrics-ingester", namespace="observability", kind="StatefulSet", priority="koord-mid", qos="LS",
                  cpu_millis=1000, memory_bytes=2 * _GI, image="victoriametrics/vminsert:v1.104.0"),
    ),
    "koord-batch": (
        _Workload(app="spark-etl", namespace="analytics", kind="SparkExecutor", priority="koord-batch", qos="BE",
                  cpu_millis=2000, memory_bytes=4 * _GI, image="apache/spark:3.5.3"),
        _Workload(app="nightly-report", namespace="analytics", kind="CronJob", priority="koord-batch", qos="BE",
                  cpu_millis=1000, memory_bytes=2 * _GI, image="analytics/reports:2024.11"),
        _Workload(app="train-resnet", namespace="ml", kind="SparkExecutor", priority="koord-batch", qos="BE",
                  cpu_millis=4000, memory_bytes=8 * _GI, image="ml/trainer:0.9.4"),
    ),
    "koord-free": (
        _Workload(app="backfill", namespace="analytics", kind="CronJob", priority="koord-free", qos="BE",
                  cpu_millis=1000, memory_bytes=1 * _GI, image="analytics/backfill:1.0.3"),
        _Workload(app="fuzzer", namespace="security", kind="Deployment", priority="koord-free", qos="BE",
                  cpu_millis=1000, memory_bytes=512 * _MI, image="security/fuzzer:0.4.0"),
    ),
}
_MIX: tuple[tuple[PriorityClass, int], ...] = (
    ("koord-prod", 45), ("koord-mid", 10), ("koord-batch", 35), ("koord-free", 10))


@dataclass(frozen=True, kw_only=True)
class _SimulatedPod:
    index: int
    uid: str
    namespace: str
    name: str
    workload: _Workload
    cpu_base: int  # usage around which the profile moves, millis
    memory_base: int
    phase: float  # diurnal offset, as a share of the period (up to an hour of a day)


def _mix64(value: int) -> int:
    """splitmix64's finalizer: a cheap, well-spread hash of a 64-bit integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def annotated_usage(pod: Mapping[str, Any]) -> tuple[str, str, int, int] | None:
    """A pod's (namespace, name, cpu millis, memory bytes) from its usage annotations; None without both."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if CPU_USAGE_ANNOTATION not in annotations or MEMORY_USAGE_ANNOTATION not in annotations:
        return None
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""),
            cpu_millis(annotations[CPU_USAGE_ANNOTATION]), byte_value(annotations[MEMORY_USAGE_ANNOTATION]))


def is_scraped(index: int, share: float) -> bool:
    """Whether the pod at `index` carries the scrape annotations when `share` of the pods do: the
    first n pods hold floor(n * share) scraped ones for every n, so they are spread evenly."""
    return math.floor(round((index + 1) * share, _SHARE_DIGITS)) > math.floor(round(index * share, _SHARE_DIGITS))


def scraped_pod_count(pods: int, share: float) -> int:
    """How many of a node's `pods` carry the scrape annotations: floor(pods * share)."""
    return math.floor(round(pods * share, _SHARE_DIGITS))


def _cgroup_path(pod: _SimulatedPod) -> str:
    """Where kubelet's systemd driver would have put the pod (see cgroups.py)."""
    uid = pod.uid.replace("-", "_")
    if pod.workload.qos in ("LSR", "SYSTEM"):
        return f"kubepods.slice/kubepods-pod{uid}.slice"
    tier = "burstable" if pod.workload.qos == "LS" else "besteffort"
    return f"kubepods.slice/kubepods-{tier}.slice/kubepods-{tier}-pod{uid}.slice"


class SyntheticCollector:
    """A `Collector` for a simulated node; also the source of that node's Node and Pod objects."""

    def __init__(
        self,
        node_name: str,
        pods_per_node: int = 30,
        profile: Profile = "steady",
        *,
        seed: int = 0,
        capacity_cpu_millis: int = 16_000,
        capacity_memory_bytes: int = 64 * _GI,
        period_seconds: float = 86_400.0,
        burst_seconds: float = 30.0,
        scraped_share: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}: expected one of {', '.join(PROFILES)}")
        if not 0.0 <= scraped_share <= 1.0:
            raise ValueError(f"scraped_share must be between 0 and 1, not {scraped_share}")
        if pods_per_node < 0 or capacity_cpu_millis <= 0 or capacity_memory_bytes <= 0 or period_seconds <= 0:
            raise ValueError("pods_per_node must be >= 0; capacities and period_seconds must be positive")
        self.node_name = node_name
        self.profile: Profile = profile
        self.capacity_cpu_millis = capacity_cpu_millis
        self.capacity_memory_bytes = capacity_memory_bytes
        self.period_seconds = period_seconds
        self.burst_seconds = burst_seconds
        self.scraped_share = scraped_share
        self.samples_total = 0
        self.read_errors_total = 0  # nothing to fail here; kept for the same metrics as RealCollector
        self._clock = clock
        # (namespace, name) -> (cpu millis, memory bytes) of the pods annotated with their usage, as
        # the node's pod watch shows them (`follow_annotations`); None: every pod follows the profile.
        self._annotated: Callable[[], Mapping[tuple[str, str], tuple[int, int]]] | None = None
        rng = random.Random(f"{seed}/{node_name}")  # str seeds hash with SHA-512: stable across runs
        self._key = rng.getrandbits(64)
        self._pods = self._generate(rng, pods_per_node)

    # -- pods -------------------------------------------------------------------------------------

    def _generate(self, rng: random.Random, count: int) -> list[_SimulatedPod]:
        workloads = list(_DAEMONSETS[:count])
        classes = [name for name, _ in _MIX]
        weights = [weight for _, weight in _MIX]
        while len(workloads) < count:
            workloads.append(rng.choice(_WORKLOADS[rng.choices(classes, weights)[0]]))
        # Keep requests schedulable: high-priority requests within 70 % of capacity, batch within
        # 60 % (batch resources are what is left over), by scaling every request of a group.
        scales: dict[bool, float] = {}
        for high, share in ((True, 0.7), (False, 0.6)):
            cpu = sum(w.cpu_millis for w in workloads if self._is_hp(w) == high)
            memory = sum(w.memory_bytes for w in workloads if self._is_hp(w) == high)
            scales[high] = min(1.0, share * self.capacity_cpu_millis / cpu if cpu else 1.0,
                               share * self.capacity_memory_bytes / memory if memory else 1.0)
        pods: list[_SimulatedPod] = []
        names: set[str] = set()
        families: dict[str, str] = {}
        for index, workload in enumerate(workloads):
            scale = scales[self._is_hp(workload)]
            workload = replace(workload, cpu_millis=max(10, round(workload.cpu_millis * scale / 10) * 10),
                               memory_bytes=max(16 * _MI, round(workload.memory_bytes * scale / _MI) * _MI))
            name = self._pod_name(rng, workload, families, taken=names)
            names.add(name)
            hp = self._is_hp(workload)
            pods.append(_SimulatedPod(
                index=index, uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)), namespace=workload.namespace,
                name=name, workload=workload,
                cpu_base=round(workload.cpu_millis * rng.uniform(0.15, 0.55 if hp else 0.9)),
                memory_base=round(workload.memory_bytes * rng.uniform(0.35, 0.8)),
                phase=rng.uniform(0, 1 / 24)))
        return pods

    @staticmethod
    def _is_hp(workload: _Workload) -> bool:
        return is_high_priority(workload.priority)

    @staticmethod
    def _pod_name(rng: random.Random, workload: _Workload, families: dict[str, str], *, taken: set[str]) -> str:
        """A name as the workload's controller would make it; pods of one Deployment share their
        ReplicaSet's template hash, executors of one Spark application its id."""
        def suffix(length: int) -> str:
            return "".join(rng.choice(_ALPHABET) for _ in range(length))

        while True:
            if workload.kind == "StatefulSet":
                ordinal = int(families.get(workload.app, "-1")) + 1
                families[workload.app] = str(ordinal)
                name = f"{workload.app}-{ordinal}"
            elif workload.kind == "DaemonSet":
                name = f"{workload.app}-{suffix(5)}"
            elif workload.kind == "Deployment":
                template_hash = families.setdefault(workload.app, suffix(10))
                name = f"{workload.app}-{template_hash}-{suffix(5)}"
            elif workload.kind == "SparkExecutor":
                application = families.setdefault(workload.app, f"{rng.getrandbits(64):016x}")
                name = f"{workload.app}-{application}-exec-{rng.randint(1, 40)}"
            else:  # a CronJob's Job is named after its scheduled minute, its pod gets a suffix
                name = f"{workload.app}-{rng.randint(28_800_000, 29_000_000)}-{suffix(5)}"
            if name not in taken:
                return name

    def pods(self) -> list[dict[str, Any]]:
        """Pod objects (Kubernetes JSON, spec.nodeName set, status Running) of this node."""
        return [self._pod_object(pod) for pod in self._pods]

    def _pod_object(self, pod: _SimulatedPod) -> dict[str, Any]:
        workload = pod.workload
        labels = {"app.kubernetes.io/name": workload.app, PRIORITY_LABEL: workload.priority,
                  QOS_LABEL: workload.qos}
        if workload.kind == "Deployment":
            labels["pod-template-hash"] = pod.name.rsplit("-", 2)[1]
        if self._is_hp(workload):
            requests = {"cpu": format_millis(workload.cpu_millis), "memory": format_bytes(workload.memory_bytes)}
            # LSR and SYSTEM pods are Guaranteed (limits = requests); LS pods Burstable (2x).
            factor = 1 if workload.qos in ("LSR", "SYSTEM") else 2
            limits = {"cpu": format_millis(workload.cpu_millis * factor),
                      "memory": format_bytes(workload.memory_bytes * factor)}
        else:
            requests = {"kubernetes.io/batch-cpu": str(workload.cpu_millis),
                        "kubernetes.io/batch-memory": str(workload.memory_bytes)}
            limits = dict(requests)
        kube_qos = {"LSR": "Guaranteed", "SYSTEM": "Guaranteed", "LS": "Burstable"}.get(workload.qos, "BestEffort")
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "labels": labels,
                         "annotations": dict(_SCRAPE_ANNOTATIONS) if is_scraped(pod.index, self.scraped_share)
                         else {}},
            "spec": {
                "nodeName": self.node_name,
                "priorityClassName": workload.priority,
                "priority": _PRIORITY_VALUES[workload.priority],
                "containers": [{"name": workload.app, "image": workload.image,
                                "resources": {"requests": requests, "limits": limits}}],
            },
            "status": {"phase": "Running", "qosClass": kube_qos},
        }

    def usage_annotations(self) -> dict[tuple[str, str], dict[str, str]]:
        """Each pod's usage annotations, by (namespace, name): its profile's mean usage (its base)."""
        return {(pod.namespace, pod.name): {CPU_USAGE_ANNOTATION: format_millis(pod.cpu_base),
                                            MEMORY_USAGE_ANNOTATION: str(pod.memory_base)} for pod in self._pods}

    def system_usage(self) -> tuple[int, int]:
        """What the node's system uses besides the pods, in milli-cpus and bytes, without noise."""
        return 200 + round(self.capacity_cpu_millis * 0.02), round(512 * _MI + self.capacity_memory_bytes * 0.03)

    def system_annotations(self) -> dict[str, str]:
        cpu, memory = self.system_usage()
        return {SYSTEM_CPU_ANNOTATION: f"{cpu / 1000:g}", SYSTEM_MEMORY_ANNOTATION: str(memory)}

    def follow_annotations(self, annotated: Callable[[], Mapping[tuple[str, str], tuple[int, int]]]) -> None:
        """From now on each pod uses exactly what `annotated()` says of it (nothing if it is not listed),
        and the system `system_usage()`."""
        self._annotated = annotated

    def adopt(self, created: Iterable[Mapping[str, Any]]) -> int:
        """Take the UIDs the API server gave our pods (matched by namespace and name); returns
        how many pods were matched. Samples from then on carry those UIDs."""
        uids: dict[tuple[str, str], str] = {}
        for obj in created:
            metadata = obj.get("metadata") or {}
            if metadata.get("uid"):
                uids[(metadata.get("namespace", "default"), metadata.get("name", ""))] = metadata["uid"]
        matched = 0
        for position, pod in enumerate(self._pods):
            uid = uids.get((pod.namespace, pod.name))
            if uid is not None:
                self._pods[position] = replace(pod, uid=uid)
                matched += 1
        return matched

    def node(self, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A Node object for this node: capacity, and allocatable minus kubelet-style reservations."""
        reserved_cpu = min(self.capacity_cpu_millis // 10, 100 + self.capacity_cpu_millis // 50)
        reserved_memory = min(self.capacity_memory_bytes // 10, 256 * _MI + self.capacity_memory_bytes // 50)
        capacity = {"cpu": format_millis(self.capacity_cpu_millis),
                    "memory": format_bytes(self.capacity_memory_bytes), "pods": "110"}
        allocatable = {"cpu": format_millis(self.capacity_cpu_millis - reserved_cpu),
                       "memory": format_bytes(self.capacity_memory_bytes - reserved_memory), "pods": "110"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": {
                "kubernetes.io/hostname": self.node_name, "kubernetes.io/os": "linux",
                SIMULATED_LABEL: "true", **(labels or {})}},
            "status": {"capacity": capacity, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }

    # -- usage ------------------------------------------------------------------------------------

    def _noise(self, *parts: int) -> float:
        """A uniform number in [0, 1) that depends only on the seed, node and `parts`."""
        value = self._key
        for part in parts:
            value = _mix64(value ^ (part & _MASK64))
        return value / 2**64

    def _level(self, pod: _SimulatedPod, now: float) -> tuple[float, float]:
        """Multipliers of the pod's cpu and memory bases at `now`."""
        second = math.floor(now)
        jitter = self._noise(pod.index, 1, second) * 2 - 1  # in [-1, 1)
        cpu, memory = 1 + 0.05 * jitter, 1 + 0.01 * jitter
        if self.profile == "diurnal":
            wave = 0.55 + 0.45 * math.sin(2 * math.pi * (now / self.period_seconds + pod.phase))
            cpu *= wave / 0.55  # the base is the daily mean
            memory *= 0.8 + 0.2 * wave / 0.55
        elif self.profile == "spiky":
            window = math.floor(now / self.burst_seconds)
            if self._noise(pod.index, 2, window) < 0.05:
                cpu *= 3 + 2 * self._noise(pod.index, 3, window)
        return cpu, memory

    def sample(self, now: float | None = None) -> Sample:
        at = self._clock() if now is None else now
        levels = [self._level(pod, at) for pod in self._pods]
        cpu = [pod.cpu_base * level[0] for pod, level in zip(self._pods, levels, strict=True)]
        memory = [pod.memory_base * level[1] for pod, level in zip(self._pods, levels, strict=True)]
        system_cpu = 200 + self.capacity_cpu_millis * 0.02 * (1 + 0.1 * self._noise(-1, math.floor(at)))
        system_memory = 512 * _MI + self.capacity_memory_bytes * 0.03
        if self._annotated is not None:
            annotated = self._annotated()  # a pod the watch does not show (yet) uses nothing
            for position, pod in enumerate(self._pods):
                cpu[position], memory[position] = annotated.get((pod.namespace, pod.name), (0, 0))
            system_cpu, system_memory = self.system_usage()
        # The machine is finite: when pods would need more, they share what there is.
        cpu_scale = min(1.0, (self.capacity_cpu_millis - system_cpu) / sum(cpu)) if sum(cpu) else 1.0
        memory_scale = min(1.0, (self.capacity_memory_bytes * 0.95 - system_memory) / sum(memory)) \
            if sum(memory) else 1.0
        pods = tuple(
            PodSample(uid=pod.uid, cpu_millis=round(pod_cpu * cpu_scale), memory_bytes=round(pod_memory * memory_scale),
                      cgroup_path=_cgroup_path(pod), namespace=pod.namespace, name=pod.name)
            for pod, pod_cpu, pod_memory in zip(self._pods, cpu, memory, strict=True))
        node_cpu = min(self.capacity_cpu_millis, round(system_cpu) + sum(p.cpu_millis for p in pods))
        node_memory = min(self.capacity_memory_bytes, round(system_memory) + sum(p.memory_bytes for p in pods))
        self.samples_total += 1
        return Sample(timestamp=at, node_cpu_millis=node_cpu, node_memory_bytes=node_memory, pods=pods,
                      psi=self._pressure(node_cpu / self.capacity_cpu_millis))

    def custom_samples(self, now: float | None = None,
                       pods: Container[tuple[str, str]] | None = None) -> list[MetricSample]:
        """The custom metrics the pods (those in `pods`, if given) expose at `now`: about one
        request per second per 10 millicores a serving pod uses, one queued task per 100 for batch."""
        at = self._clock() if now is None else now
        samples: list[MetricSample] = []
        for pod in self._pods:
            key = (pod.namespace, pod.name)
            if pods is not None and key not in pods:
                continue
            cpu = pod.cpu_base * self._level(pod, at)[0]
            if self._is_hp(pod.workload):
                rate = round(cpu / 10, 2)
                for method, share in (("GET", _GET_SHARE), ("POST", 1 - _GET_SHARE)):
                    samples.append(MetricSample(SeriesKey("http_requests_per_second", (("method", method),), key),
                                                at, round(rate * share, 2)))
            else:
                samples.append(MetricSample(SeriesKey("work_queue_depth", (), key), at, float(round(cpu / 100))))
        return samples

    @staticmethod
    def _pressure(utilization: float) -> Mapping[str, Pressure]:
        """cpu stalls start when a node is busy: 0 below 70 % use, rising to 40 % at saturation."""
        stall = round(max(0.0, utilization - 0.7) / 0.3 * 40, 2)
        cpu = PressureStat(avg10=stall, avg60=stall, avg300=stall, total_usec=0)
        idle = PressureStat(avg10=0.0, avg60=0.0, avg300=0.0, total_usec=0)
        return MappingProxyType({"cpu": Pressure(some=cpu, full=idle), "memory": Pressure(some=idle, full=idle),
                                 "io": Pressure(some=idle, full=idle)})
