"""Prometheus metrics of an agent process (one set per process, shared by simulated agents).

The self-check (colocation.agent.selfcheck) reads a few of them to tell whether the process did
what N real agents would: every heartbeat (an accepted report, or a Lease renewal) within its
interval (`heartbeats_late`, `heartbeats_overdue`), every informer synced (`informers`,
`informers_synced`) and no failures (`errors`: every warning or error the agent logged).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Lease renewals are one small PUT: milliseconds when healthy, seconds when the API server struggles.
_RENEW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Scrapes and sample batches: milliseconds on a healthy node, up to their timeouts otherwise.
_REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class HeartbeatState(Protocol):
    """What the metrics read of a node heartbeat (colocation.agent.heartbeat.NodeHeartbeat)."""

    def age(self) -> float: ...

    def overdue(self) -> bool: ...


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.samples = Counter("colocation_agent_samples_total", "Samples collected (all nodes of the process).",
                               registry=r)
        self.reports_sent = Counter("colocation_agent_reports_sent_total",
                                    "NodeMetric reports accepted, by route (leader, replica, apiserver) and trigger "
                                    "(initial, pods-changed, usage-changed, max-interval, heartbeat, leader-changed).",
                                    ["route", "trigger"], registry=r)
        self.reports_failed = Counter("colocation_agent_reports_failed_total",
                                      "NodeMetric report attempts that failed, by reason: replica-timeout, "
                                      "replica-unreachable, replica-unauthorized, replica-unavailable (a 503 where "
                                      "every replica takes reports) and standby at an operator replica; "
                                      "timeout and unreachable through kube-apiserver; unavailable (a 503, or no "
                                      "route to try yet); http-CODE.", ["reason"], registry=r)
        self.last_report_age = Gauge("colocation_agent_last_report_age_seconds",
                                     "Seconds since the last accepted report (the oldest node of the process; "
                                     "+Inf before the first).", registry=r)
        self.lease_renew = Histogram("colocation_agent_lease_renew_duration_seconds",
                                     "Time to renew the node Lease, conflicts and retries included.",
                                     buckets=_RENEW_BUCKETS, registry=r)
        self.lease_renewals = Counter("colocation_agent_lease_renewals_total",
                                      "Node Lease renewals, by reason: registration (at start, then every "
                                      "registration interval), fallback (no report accepted lately), heartbeat "
                                      "(no reporter).", ["reason"], registry=r)
        self.lease_renew_failures = Counter("colocation_agent_lease_renew_failures_total",
                                            "Node Lease requests that failed, by reason.", ["reason"], registry=r)
        self.scrapes = Counter("colocation_agent_scrapes_total",
                               "Scrapes of annotated pods by result (ok, timeout, unreachable, http-error, "
                               "too-large, bad-exposition, no-address, invalid-annotation).", ["result"], registry=r)
        self.scrape_duration = Histogram("colocation_agent_scrape_duration_seconds",
                                         "Time to fetch and parse one pod's metrics.", buckets=_REQUEST_BUCKETS,
                                         registry=r)
        self.custom_samples_scraped = Counter("colocation_agent_custom_metric_samples_scraped_total",
                                              "Custom metric samples taken (scraped or simulated) and kept.",
                                              registry=r)
        self.custom_samples_sent = Counter("colocation_agent_custom_metric_samples_sent_total",
                                           "Custom metric samples the leader accepted.", registry=r)
        self.custom_samples_dropped = Counter("colocation_agent_custom_metric_samples_dropped_total",
                                              "Custom metric samples dropped, by reason (non-finite, invalid, "
                                              "series-limit, node-series-limit, buffer-full, refused, "
                                              "repeated).", ["reason"], registry=r)
        self.sample_batches_sent = Counter("colocation_agent_sample_batches_sent_total",
                                           "Sample batches accepted, by route (leader, replica, apiserver).",
                                           ["route"], registry=r)
        self.sample_batches_failed = Counter("colocation_agent_sample_batches_failed_total",
                                             "Sample batch attempts that failed, by reason (as reports').", ["reason"],
                                             registry=r)
        self.sample_batch_duration = Histogram("colocation_agent_sample_batch_duration_seconds",
                                               "Time to deliver one accepted sample batch, fallbacks included.",
                                               buckets=_REQUEST_BUCKETS, registry=r)
        self.leader_changes = Counter("colocation_agent_leader_changes_total",
                                      "Changes of the leader seen on the leader Lease.", registry=r)
        # ---- the self-check ----
        self.nodes = Gauge("colocation_agent_nodes", "Nodes the process runs an agent for (1, or the simulated ones).",
                           registry=r)
        self.heartbeats_late = Counter("colocation_agent_heartbeats_late_total",
                                       "Heartbeats (accepted reports, Lease renewals) that landed more than the "
                                       "heartbeat interval plus a tenth of it after the one before (the first: "
                                       "after the heartbeat started).", registry=r)
        self.heartbeats_overdue = Gauge("colocation_agent_heartbeats_overdue",
                                        "Nodes whose heartbeat is late now: the last accepted report or Lease "
                                        "renewal is older than the heartbeat interval plus a tenth of it (nodes "
                                        "never heard included).", registry=r)
        self.heartbeat_oldest_age = Gauge("colocation_agent_heartbeat_oldest_age_seconds",
                                          "Age of the oldest last heartbeat among the process's nodes (since its "
                                          "heartbeat started, before the first).", registry=r)
        self.informers = Gauge("colocation_agent_informers", "Informers (list, then watch) the process runs.",
                               registry=r)
        self.informers_synced = Gauge("colocation_agent_informers_synced",
                                      "Informers that have listed and whose last list or watch did not fail.",
                                      registry=r)
        self.informer_failures = Counter("colocation_agent_informer_failures_total",
                                         "List or watch attempts that failed, by resource and reason (timeout, "
                                         "http-NNN, decode, connection).", ["resource", "reason"], registry=r)
        self.errors = Counter("colocation_agent_errors_total",
                              "Warnings and errors the agent logged, by logger and level: each is a failure it "
                              "retries or works around (a renewal, a report, a list or watch, a sample batch).",
                              ["logger", "level"], registry=r)
        self.cpu_suppress = Gauge("colocation_agent_cpu_suppress_millicores",
                                  "Milli-cpus best-effort pods may use together under CPU suppress, as applied "
                                  "(computed only, with --dry-run-enforcement); -1 while not suppressing.",
                                  registry=r)
        self.cpu_suppress.set(-1)
        self.cgroup_writes = Counter("colocation_agent_cgroup_writes_total",
                                     "cgroup files written by enforcement, by resource (cfs_quota, cpuset) and "
                                     "result (ok, failed, dry-run: computed but not written).",
                                     ["resource", "result"], registry=r)
        self.batch_cgroup_writes = Counter("colocation_agent_batch_cgroup_writes_total",
                                           "cgroup files of batch pods and their containers written from their "
                                           "batch resources, by resource (cfs_quota, cpu_shares, memory_limit) "
                                           "and result (ok, failed, dry-run: computed but not written).",
                                           ["resource", "result"], registry=r)
        self.batch_pods = Gauge("colocation_agent_batch_pods_managed",
                                "Pods whose cgroups the agent sets from their batch resources.", registry=r)
        self.cpu_burst_writes = Counter("colocation_agent_cpu_burst_writes_total",
                                        "cgroup files of LS pods and their containers written by CPU burst, by "
                                        "resource (cfs_quota, cfs_burst) and result (ok, failed, dry-run: computed "
                                        "but not written).", ["resource", "result"], registry=r)
        self.cpu_burst_pods = Gauge("colocation_agent_cpu_burst_pods",
                                    "Pods bursting, by kind: cfs-burst (a cfs burst set), quota-burst (a CFS quota "
                                    "raised above the limit).", ["kind"], registry=r)
        self.sysctl_writes = Counter("colocation_agent_sysctl_writes_total",
                                     "Kernel settings under /proc/sys written by system settings (--system-settings), "
                                     "by key (vm.min_free_kbytes, vm.watermark_scale_factor) and result (ok, failed, "
                                     "dry-run: computed but not written).", ["key", "result"], registry=r)
        self.node_events = Counter("colocation_agent_node_events_total",
                                   "Events posted on the node, by result (ok, failed, dropped).", ["result"],
                                   registry=r)
        self.prod_reclaimable = Gauge("colocation_agent_prod_reclaimable",
                                      "What prod pods request beyond their predicted peak (prodReclaimableMetric), "
                                      "as the latest reports say, summed over the process's nodes: cpu in cores, "
                                      "memory in bytes.", ["resource"], registry=r)
        self.loop_lag = Gauge("colocation_agent_event_loop_lag_seconds",
                              "The longest the event loop was late to wake a timer in the last 10 s: near 0 "
                              "unless the process is short of CPU.", registry=r)

    def track_report_age(self, ages: Callable[[], list[float]]) -> None:
        """Read the reporters' ages at scrape time; the gauge shows the largest."""
        self.last_report_age.set_function(lambda: max(ages(), default=math.inf))

    def track_heartbeats(self, heartbeats: Callable[[], Sequence[HeartbeatState]]) -> None:
        """Read the heartbeats' states at scrape time."""
        self.heartbeats_overdue.set_function(lambda: sum(1 for beat in heartbeats() if beat.overdue()))
        self.heartbeat_oldest_age.set_function(lambda: max((beat.age() for beat in heartbeats()), default=0.0))

    def track_informers(self, states: Callable[[], list[bool]]) -> None:
        """Read the informers' states (True: synced and not failing) at scrape time."""
        self.informers.set_function(lambda: len(states()))
        self.informers_synced.set_function(lambda: sum(states()))

    @contextlib.contextmanager
    def counting_logged_errors(self, logger: str = "colocation") -> Iterator[None]:
        """Count every warning or error logged under `logger` while inside."""
        handler = _ErrorCounter(self.errors)
        target = logging.getLogger(logger)
        target.addHandler(handler)
        try:
            yield
        finally:
            target.removeHandler(handler)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _ErrorCounter(logging.Handler):
    def __init__(self, counter: Counter) -> None:
        super().__init__(logging.WARNING)
        self.counter = counter

    def emit(self, record: logging.LogRecord) -> None:
        self.counter.labels(record.name, record.levelname.lower()).inc()
