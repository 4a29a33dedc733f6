"""NodeMetric reports as simulated agents send them, cheap enough to send thousands a second.

Reports are built by the agent's own code (`SyntheticCollector` for the pods and their usage,
`build_node_metric` for the object) and kept as templates split around the node's name,
`updateTime` and the node's cpu usage. Building one takes about 2 ms, so a few hundred shapes
are built and node N uses shape N % shapes: 20,000 nodes start in a second, not in a minute.

Every report differs from the node's previous one (the cpu figure moves by a millicore per
report, the time follows the clock), as an agent's do when it reports because usage changed; an
unchanged report would take the store's cheap path and flatter the figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import orjson

from colocation.agent.aggregate import AggregatedUsage, Usage
from colocation.agent.classify import PodInfo
from colocation.agent.nodemetric import PodUsage, build_node_metric
from colocation.agent.synthetic import PROFILES, SyntheticCollector
from colocation.koordinator.classes import PRIORITY_LABEL, QOS_LABEL
from colocation.koordinator.collect_policy import DEFAULT_DURATIONS

_NAME_MARK = "@@node-name@@"
_TIME_MARK = "@@update-time@@"
_CPU_MARK = "@@node-cpu@@"
_EPOCH = 1_795_341_600  # 2026-11-22T10:00:00Z: samples are a pure function of time, so runs agree


def _scaled(usage: Usage, factor: float) -> Usage:
    return Usage(round(usage.cpu_millis * factor), round(usage.memory_bytes * factor))


def report_object(node: str, index: int, pods: int) -> dict[str, object]:
    """Node `index`'s report at a fixed moment, as `colocation agent` builds it (3 aggregation windows)."""
    collector = SyntheticCollector(node, pods, PROFILES[index % len(PROFILES)], seed=index)
    sample = collector.sample(now=_EPOCH)
    classes = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["labels"]
               for p in collector.pods()}
    pod_usages = []
    for pod in sample.pods:
        key = (pod.namespace or "", pod.name or "")
        labels = classes[key]
        info = PodInfo(uid=pod.uid, namespace=key[0], name=key[1], priority=labels[PRIORITY_LABEL],
                       qos=labels[QOS_LABEL], cpu_request_millis=0, memory_request_bytes=0)
        pod_usages.append(PodUsage(info, Usage(pod.cpu_millis, pod.memory_bytes)))
    node_usage = Usage(sample.node_cpu_millis, sample.node_memory_bytes)
    pods_cpu = sum(p.cpu_millis for p in sample.pods)
    pods_memory = sum(p.memory_bytes for p in sample.pods)
    system = Usage(max(node_usage.cpu_millis - pods_cpu, 0), max(node_usage.memory_bytes - pods_memory, 0))
    aggregated = [AggregatedUsage(duration_seconds=duration, avg=node_usage, p50=node_usage,
                                  p90=_scaled(node_usage, 1.1), p95=_scaled(node_usage, 1.15),
                                  p99=_scaled(node_usage, 1.3))
                  for duration in DEFAULT_DURATIONS]
    return build_node_metric(node, update_time=_EPOCH, node_usage=node_usage, system_usage=system,
                             aggregated=aggregated, pods=pod_usages)


@dataclass(frozen=True)
class ReportTemplate:
    """A report with holes for the node's name, `updateTime` and the node's cpu usage."""

    parts: tuple[bytes, bytes, bytes, bytes]  # before the name, before the time, before the cpu, the rest
    cpu_millis: int

    @classmethod
    def of(cls, index: int, pods: int) -> ReportTemplate:
        obj = report_object(_NAME_MARK, index, pods)
        status = obj["status"]
        assert isinstance(status, dict)
        status["updateTime"] = _TIME_MARK
        resources = status["nodeMetric"]["nodeUsage"]["resources"]
        cpu = resources["cpu"]
        resources["cpu"] = _CPU_MARK
        raw = orjson.dumps(obj)
        parts: list[bytes] = []
        for mark in (_NAME_MARK, _TIME_MARK, _CPU_MARK):
            before, found, raw = raw.partition(f'"{mark}"'.encode())
            if not found:
                raise AssertionError(f"{mark} must come after the previous field in a report")
            parts.append(before)
        return cls((parts[0], parts[1], parts[2], raw),
                   int(cpu.removesuffix("m")) if cpu.endswith("m") else int(cpu) * 1000)

    def body(self, node: bytes, sequence: int, update_time: bytes) -> bytes:
        """Report number `sequence` of `node` (quoted JSON string); `update_time` is a quoted RFC 3339 time."""
        cpu = self.cpu_millis + sequence % 1000  # never the node's previous figure
        return b"".join((self.parts[0], node, self.parts[1], update_time, self.parts[2], b'"%dm"' % cpu,
                         self.parts[3]))


class Reports:
    """Every node's reports: `shapes` distinct templates shared round-robin, a counter per node."""

    def __init__(self, nodes: list[str], pods: int, shapes: int = 200) -> None:
        self.nodes = nodes
        self.quoted = [orjson.dumps(node) for node in nodes]
        self.templates = [ReportTemplate.of(index, pods) for index in range(max(1, min(shapes, len(nodes))))]
        self.sent = [0] * len(nodes)
        self.clock = Clock()

    def next_body(self, node_index: int) -> bytes:
        sequence = self.sent[node_index] = self.sent[node_index] + 1
        template = self.templates[node_index % len(self.templates)]
        return template.body(self.quoted[node_index], sequence, self.clock.now())

    def mean_size(self) -> float:
        sizes = [len(t.body(b'"node-00000"', 0, self.clock.now())) for t in self.templates]
        return sum(sizes) / len(sizes)


class Clock:
    """`"2026-11-22T10:00:00Z"` for now, formatted once a second rather than once a report."""

    def __init__(self) -> None:
        self._second = -1
        self._text = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._text = time.strftime('"%Y-%m-%dT%H:%M:%SZ"', time.gmtime(second)).encode()
        return self._text
