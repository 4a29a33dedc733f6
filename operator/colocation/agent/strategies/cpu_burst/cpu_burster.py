"""CPU burst, the loop's step: the node's LS pods' cfs burst and CFS quotas written to their cgroups.

Each round (`CpuBurster.step`) reads each bursting container's throttling (and usage, for the
token bucket), asks `cpu_burst.plan_pod` what to write, and writes only what differs, in an
order the kernel accepts. Quotas and bursts are read from the files every `reread_interval`;
between reads a round takes them as last read or written. A pod whose burst turns off, every
pod at exit with `--restore-on-exit`, and a pod first seen with burst off get the kubelet's
quotas and no burst back. Changes are logged; an Event on the Node says when a pod starts
bursting.

The write order, the timings and the Events: docs/agent.md#cpu-burst
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation.agent import cgroups
from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.cgroup_writer import CfsQuota, CgroupWriter, WriteOutcome
from colocation.agent.classify import PodInfo
from colocation.agent.collector import Sample
from colocation.agent.node_events import NodeEvent, NodeEvents
from colocation.agent.node_pods import PodView
from colocation.agent.strategies.batch_cgroups.batch_cgroup_reconciler import (
    container_directory,
    pod_directory,
    quota_loosens,
)
from colocation.agent.strategies.batch_cgroups.batch_cgroups import UNLIMITED
from colocation.agent.strategies.cpu_burst.cpu_burst import (
    BurstConfig,
    BurstLimiter,
    BurstPod,
    BurstStrategy,
    ContainerReading,
    NodeState,
    PodPlan,
    PoolPod,
    burst_pod,
    burst_strategy,
    plan_pod,
    share_pool_state,
)
from colocation.agent.strategies.strategy import NodeStrategy, Round
from colocation.apimachinery.pods import KubeQoSClass

log = logging.getLogger(__name__)

EVENT_INTERVAL = 300.0  # seconds between two Events of one kind about one pod
REREAD_INTERVAL = 5.0  # seconds between two reads of the quotas and bursts from the files


@dataclass(frozen=True)
class _Counters:
    at: float  # monotonic
    nr_throttled: int | None
    usage_usec: int | None


@dataclass(frozen=True, kw_only=True)
class _Cgroup:
    """One cgroup of a pod, its values now and as planned."""

    path: Path
    quota: int
    period: int
    target_quota: int | None  # None: left alone (a pod the kubelet gave no quota)
    burst: int | None  # None: the kernel has no cfs burst
    target_burst: int


class CpuBurster:
    def __init__(self, writer: CgroupWriter, metrics: AgentMetrics, *, node: str, cpus: Callable[[], int],
                 usage_root: Path | None = None, clock: Callable[[], float] = time.monotonic,
                 fill: Callable[[], float] = lambda: random.random() / 2, events: NodeEvents | None = None,
                 reread_interval: float = REREAD_INTERVAL) -> None:
        self.writer = writer
        self.metrics = metrics
        self.node = node
        self.cpus = cpus
        self.usage_root = usage_root  # v1: the cpuacct hierarchy (usage); v2: the unified root
        self.clock = clock
        self.fill = fill
        self.events = events
        self.managed: dict[str, BurstPod] = {}  # pods burst is on for, by UID, as last seen
        self.in_force: dict[str, PodPlan] = {}  # what was last logged for each
        self._known: set[str] = set()  # pods seen before (a pod seen the first time is undone once)
        self._counters: dict[Path, _Counters] = {}
        self._limiters: dict[Path, BurstLimiter] = {}
        self._events_at: dict[tuple[str, str], float] = {}
        self._failing: set[str] = set()
        self.reread_interval = reread_interval
        self._read_at: float | None = None  # when the files were last all read
        self._pod_dirs: dict[tuple[str, str], Path] = {}  # by (kube QoS, UID)
        self._container_dirs: dict[tuple[Path, str], Path] = {}  # by (pod directory, container id)
        self._quotas: dict[Path, CfsQuota] = {}  # as last read or written
        self._bursts: dict[Path, int | None] = {}

    def step(self, strategy: BurstStrategy, pods: Mapping[str, BurstPod], sample: Sample | None,
             *, infos: Mapping[str, PodInfo]) -> None:
        """One round: `pods` are the node's pods that may burst, `infos` all its pods, by UID."""
        state = self.node_state(strategy, sample, infos)
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.reread_interval:
            self._forget()
            self._read_at = now
        seen: set[Path] = set()
        for uid, pod in pods.items():
            config = pod.config(strategy.config)
            if config.policy == "none":
                if uid in self.managed or uid not in self._known:
                    self.managed[uid] = pod
                    self.undo(uid)
                continue
            self.managed[uid] = pod
            plan = self._apply(pod, config, state, seen=seen)
            if plan is not None:
                self._note(pod, plan, state)
        for uid in [uid for uid in self.managed if uid not in pods]:
            self.undo(uid)
        self._known = set(pods)
        self._counters = {path: counters for path, counters in self._counters.items() if path in seen}
        self._limiters = {path: limiter for path, limiter in self._limiters.items()
                          if path in seen and not limiter.expired(now)}
        self._count()

    def node_state(self, strategy: BurstStrategy, sample: Sample | None, infos: Mapping[str, PodInfo]) -> NodeState:
        if sample is None or not sample.node_cpu_measured:
            return "unknown"
        usage = {pod.uid: pod.cpu_millis for pod in sample.pods if pod.cpu_measured}
        return share_pool_state(strategy.share_pool_threshold_percent, self.cpus() * 1000, sample.node_cpu_millis,
                                pods=(PoolPod(info.qos, info.cpu_request_millis, usage.get(uid))
                                      for uid, info in infos.items()))

    def restore(self) -> None:
        """Undo every pod burst is on for (at exit, with --restore-on-exit)."""
        for uid in list(self.managed):
            self.undo(uid)
        self._count()

    def undo(self, uid: str) -> None:
        pod = self.managed.pop(uid)
        self._failing.discard(pod.resources.uid)
        was = self.in_force.pop(uid, None)
        self._forget()  # rare (a pod's burst turned off, or exit): what is undone is read afresh
        plan = self._apply(pod, BurstConfig(), "unknown", seen=set())
        if was is not None and plan is not None:
            log.info("cpu burst undone", extra={"node": self.node, "pod": _name(pod), "uid": uid,
                                                "dry_run": self.writer.dry_run})

    # ---- reading and writing one pod -------------------------------------------------------------------

    def _apply(self, pod: BurstPod, config: BurstConfig, state: NodeState, *, seen: set[Path]) -> PodPlan | None:
        """Read, plan and write one pod; the plan, or None when its cgroups are not there."""
        resources = pod.resources
        pod_dir = self._pod_dir(resources.kube_qos, resources.uid)
        pod_quota = None if pod_dir is None else self._quota(pod_dir)
        if pod_dir is None or pod_quota is None:
            return None  # not started yet, or gone: the kubelet owns its creation and removal
        readings, containers = [], []
        for container in resources.containers:
            path = self._container_dir(pod_dir, container.container_id)
            quota = None if path is None else self._quota(path)
            if container.init or not container.cpu_limit or container.cpu_limit <= 0 or path is None or quota is None:
                continue
            seen.add(path)
            throttled, usage_percent = self._counters_of(path, container.cpu_limit, config) \
                if config.quota_burst else (None, 100)  # only quota burst reads the counters
            readings.append(ContainerReading(name=container.name, limit_millis=container.cpu_limit,
                                             quota_us=quota.quota_us, period_us=quota.period_us, throttled=throttled,
                                             allowed=self._allowed(path, config, usage_percent)))
            containers.append((path, quota))
        plan = plan_pod(config, state, readings, kubelet_pod_quota_us=pod.kubelet_quota_us(pod_quota.period_us))
        cgroup_list = [_Cgroup(path=pod_dir, quota=pod_quota.quota_us, period=pod_quota.period_us,
                               target_quota=None if plan.quota_us == UNLIMITED else plan.quota_us,
                               burst=self._burst(pod_dir), target_burst=plan.burst_us)]
        cgroup_list += [_Cgroup(path=path, quota=quota.quota_us, period=quota.period_us, target_quota=values.quota_us,
                                burst=self._burst(path), target_burst=values.burst_us)
                        for (path, quota), values in zip(containers, plan.containers, strict=True)]
        self._write(pod, cgroup_list)
        return plan

    # ---- the files, as last read or written ----------------------------------------------------------

    def _forget(self) -> None:
        self._pod_dirs.clear()
        self._container_dirs.clear()
        self._quotas.clear()
        self._bursts.clear()

    def _pod_dir(self, kube_qos: KubeQoSClass, uid: str) -> Path | None:
        found = self._pod_dirs.get((kube_qos, uid))
        if found is None:
            found = pod_directory(self.writer.cpu_root(), kube_qos, uid)
            if found is not None:  # one not there yet is looked for again next round
                self._pod_dirs[kube_qos, uid] = found
        return found

    def _container_dir(self, pod_dir: Path, container_id: str | None) -> Path | None:
        found = self._container_dirs.get((pod_dir, container_id or ""))
        if found is None:
            found = container_directory(pod_dir, container_id)
            if found is not None and container_id:
                self._container_dirs[pod_dir, container_id] = found
        return found

    def _quota(self, path: Path) -> CfsQuota | None:
        found = self._quotas.get(path)
        if found is None:
            found = self.writer.read_cfs_quota(path)
            if found is not None:
                self._quotas[path] = found
        return found

    def _burst(self, path: Path) -> int | None:
        if path not in self._bursts:
            self._bursts[path] = self.writer.read_cfs_burst(path)
        return self._bursts[path]

    def _remember(self, outcome: WriteOutcome | None, cache: dict[Path, Any], path: Path, *, value: object) -> None:
        """After a write: the file now says `value` (written, or found so); else read it again next round."""
        if outcome is None or outcome.result == "ok":
            cache[path] = value
        else:
            cache.pop(path, None)

    def _counters_of(self, path: Path, limit_millis: int, config: BurstConfig) -> tuple[bool | None, int]:
        """Whether the container was throttled since the previous round, and the percentage of its
        limit it used (100 when not known: neither spends nor saves tokens; only read for a token bucket)."""
        stat = self.writer.read_cpu_stat(path)
        usage = None
        if config.cfs_quota_burst_period_seconds >= 0:
            usage = stat.get("usage_usec") if self.writer.unified else \
                _cpuacct_usec(self.usage_root, self.writer.cpu_root(), path)
        counters = _Counters(self.clock(), stat.get("nr_throttled"), usage)
        before = self._counters.get(path)
        self._counters[path] = counters
        if before is None:
            return None, 100
        throttled = None if counters.nr_throttled is None or before.nr_throttled is None \
            else counters.nr_throttled > before.nr_throttled
        elapsed = counters.at - before.at
        if counters.usage_usec is None or before.usage_usec is None or elapsed <= 0 \
                or counters.usage_usec < before.usage_usec:
            return throttled, 100
        return throttled, int((counters.usage_usec - before.usage_usec) / elapsed / 1e6 / (limit_millis / 1000) * 100)

    def _allowed(self, path: Path, config: BurstConfig, usage_percent: int) -> bool:
        if not config.quota_burst or config.cfs_quota_burst_period_seconds < 0:
            return True
        now = self.clock()
        limiter = self._limiters.get(path)
        if limiter is None or (limiter.period_seconds, limiter.percent) != (config.cfs_quota_burst_period_seconds,
                                                                          config.cfs_quota_burst_percent):
            limiter = self._limiters[path] = BurstLimiter.start(config.cfs_quota_burst_period_seconds,
                                                                config.cfs_quota_burst_percent, now, fill=self.fill())
        return limiter.allow(now, usage_percent)

    def _write(self, pod: BurstPod, cgroup_list: list[_Cgroup]) -> None:
        """The pod's cgroup first in `cgroup_list`, then its containers'."""
        pod_first, containers_first = cgroup_list, cgroup_list[::-1]
        outcomes: list[WriteOutcome | None] = []
        outcomes += [self._set_burst(c) for c in containers_first if c.burst is not None and c.target_burst < c.burst]
        quotas = [(c, c.target_quota) for c in pod_first if c.target_quota is not None and c.target_quota != c.quota]
        outcomes += [self._set_quota(c, quota) for c, quota in quotas if quota_loosens(quota, c.quota)]
        outcomes += [self._set_quota(c, quota) for c, quota in reversed(quotas) if not quota_loosens(quota, c.quota)]
        outcomes += [self._set_burst(c) for c in pod_first if c.burst is not None and c.target_burst > c.burst]
        self._settled(pod, [outcome for outcome in outcomes if outcome is not None])

    def _set_burst(self, c: _Cgroup) -> WriteOutcome | None:
        outcome = self.writer.write_cfs_burst(c.path, c.target_burst)
        self._remember(outcome, self._bursts, c.path, value=c.target_burst)
        return outcome

    def _set_quota(self, c: _Cgroup, quota: int) -> WriteOutcome | None:
        outcome = self.writer.write_cfs_quota(c.path, quota, c.period)
        self._remember(outcome, self._quotas, c.path, value=CfsQuota(quota, c.period))
        return outcome

    def _settled(self, pod: BurstPod, outcomes: list[WriteOutcome]) -> None:
        failed = [outcome for outcome in outcomes if outcome.result == "failed"]
        if not failed:
            self._failing.discard(pod.resources.uid)
        elif pod.resources.uid not in self._failing:  # once per run of failures, not every round
            log.warning("cannot write cpu burst", extra={
                "node": self.node, "pod": _name(pod), "path": str(failed[0].path), "value": failed[0].value,
                "error": failed[0].error, "failed_writes": len(failed)})
            self._failing.add(pod.resources.uid)

    # ---- telling ---------------------------------------------------------------------------------------

    def _note(self, pod: BurstPod, plan: PodPlan, state: NodeState) -> None:
        uid = pod.resources.uid
        was = self.in_force.get(uid)
        if was == plan:
            return
        self.in_force[uid] = plan
        log.info("cpu burst applied", extra={
            "node": self.node, "pod": _name(pod), "uid": uid, "node_state": state, "pod_quota_us": plan.quota_us,
            "pod_burst_us": plan.burst_us, "containers": {c.name: {"quota_us": c.quota_us, "base_quota_us":
                                                                   c.base_quota_us, "burst_us": c.burst_us,
                                                                   "operation": c.operation}
                                                          for c in plan.containers},
            "dry_run": self.writer.dry_run})
        if plan.cfs_bursting and not (was is not None and was.cfs_bursting):
            self._event(pod, "CPUBurstApplied", f"pod {_name(pod)} may burst: cfs burst {plan.burst_us} µs "
                                                f"(cpu burst, NodeSLO cpuBurstStrategy)")
        if plan.quota_bursting and not (was is not None and was.quota_bursting):
            raised = ", ".join(f"{c.name} {c.quota_us} µs (limit {c.base_quota_us} µs)"
                               for c in plan.containers if c.quota_us > c.base_quota_us)
            self._event(pod, "CFSQuotaBurstStarted", f"pod {_name(pod)} throttled: CFS quota raised: {raised}")

    def _event(self, pod: BurstPod, reason: str, message: str) -> None:
        if self.events is None or self.writer.dry_run:  # an Event says a write happened
            return
        key, now = (pod.resources.uid, reason), self.clock()
        if now - self._events_at.get(key, -EVENT_INTERVAL) < EVENT_INTERVAL:
            return
        self._events_at[key] = now
        self.events.post(NodeEvent("Normal", reason, message))

    def _count(self) -> None:
        self.metrics.cpu_burst_pods.labels("cfs-burst").set(sum(p.cfs_bursting for p in self.in_force.values()))
        self.metrics.cpu_burst_pods.labels("quota-burst").set(sum(p.quota_bursting for p in self.in_force.values()))
        self._events_at = {key: at for key, at in self._events_at.items() if key[0] in self.managed}
        self._failing &= set(self.managed)


def _name(pod: BurstPod) -> str:
    return f"{pod.resources.namespace}/{pod.resources.name}"


def _cpuacct_usec(usage_root: Path | None, cpu_root: Path | None, path: Path) -> int | None:
    """v1: the container's cpuacct.usage (ns) in µs, from the cpuacct hierarchy."""
    if usage_root is None or cpu_root is None:
        return None
    try:
        text = (usage_root / path.relative_to(cpu_root) / "cpuacct.usage").read_text().strip()
    except (OSError, ValueError):
        return None
    return int(text) // 1000 if text.isdigit() else None


class CpuBurstEnforcer(NodeStrategy):
    """CPU burst on a node: the NodeSLO's cpuBurstStrategy, a round on the pods the watch last saw that
    may burst and the latest sample; every pod undone at exit."""

    name = "cpu-burst"
    failure = "cpu burst failed"

    def __init__(self, burster: CpuBurster, *, interval: float) -> None:
        self.burster = burster
        self.interval = interval
        self.strategy = BurstStrategy()
        self.pods = PodView(self.name, burst_pod)

    def nodeslo_changed(self, nodeslo: Mapping[str, Any] | None) -> None:
        strategy = burst_strategy(nodeslo)
        if strategy != self.strategy:
            log.info("cpu burst strategy changed", extra={"node": self.burster.node, "strategy": str(strategy)})
        self.strategy = strategy

    def run_once(self, round: Round) -> None:
        self.burster.step(self.strategy, self.pods.by_uid, round.sample, infos=round.pods)

    def pod_views(self) -> Sequence[PodView[Any]]:
        return (self.pods,)

    def background(self, ready: Callable[[], bool]) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        events = self.burster.events
        return [] if events is None else [("cpu-burst-events", events.run())]

    async def restore(self, timeout: float) -> None:
        self.burster.restore()
        if self.burster.events is not None:
            await self.burster.events.drain(timeout)


def node_burster(node: str, cgroup_root: Path, *, dry_run: bool, metrics: AgentMetrics,
                 events: NodeEvents | None, cpus: Callable[[], int]) -> CpuBurster:
    """The burster of a real node: its cgroups, its writes counted by resource and result."""
    writer = CgroupWriter(cgroup_root, dry_run=dry_run, on_write=lambda resource, result:
                          metrics.cpu_burst_writes.labels(resource, result).inc())
    layout = cgroups.detect_layout(cgroup_root)
    return CpuBurster(writer, metrics, node=node, cpus=cpus, events=events,
                      usage_root=None if layout is None else layout.cpu_root)
