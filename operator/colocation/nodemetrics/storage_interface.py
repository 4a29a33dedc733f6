"""What the storage stage offers the stages around it, as narrow protocols over one stored type.

The NodeMetric store is the only implementation; its readers depend on these instead, so that a
change of its internals (the event window, the resourceVersion clock, the indexes) reaches nobody:
- `NodeMetricReader`: the latest entries, for the controllers, custom metrics and the metric views.
- `NodeMetricServing`: what an API serves from (bodies, lists, watches) and takes reports into.
- `ReplicaTarget`: what a standby's follower applies the leader's feed to.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from colocation.apimachinery.objects import inflated
from colocation.apimachinery.selectors import LabelSelector
from colocation.apimachinery.watch_queue import WatchQueue
from colocation.nodemetrics.report_schema import UsageFigures, ValidatedReport


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One node's stored NodeMetric: its serialized body, deflated (a 6 KB report of 30 pods is kept
    in about 1.3 KB), and what is read without parsing it."""

    name: str
    labels: Mapping[str, str]  # the Node's labels, as the object's metadata.labels
    resource_version: int
    deflated_body: bytes  # the whole object as served by get, list and watch, `objects.deflated`
    figures: UsageFigures
    creation_timestamp: str
    last_seen_monotonic: float  # the last report, even an unchanged one
    # When this replica took in this content (a changed report, or the leader's event), on its
    # own wall clock. What orders reports and ages history, never the agent's updateTime.
    received_at: float
    # The updateTime the agent sent, when it was more than MAX_UPDATE_TIME_AHEAD ahead of
    # `received_at` and the object carries `received_at` instead; None when it carries the agent's
    # (and on a standby, which copies the leader's objects).
    update_time_sent: float | None = None

    @property
    def body(self) -> bytes:
        """The whole object, as served (inflated anew at every read: keep it only for the request)."""
        return inflated(self.deflated_body)


class NodeMetricReader(Protocol):
    @property
    def resource_version(self) -> int:
        """The resourceVersion of the current state."""

    @property
    def node_count(self) -> int: ...

    def get(self, name: str) -> Entry | None: ...

    def list(self, label_selector: LabelSelector | None = None,
             name: str | None = None) -> tuple[builtins.list[Entry], int]:
        """The matching entries in name order, and the resourceVersion of this state."""

    def names_changed_since(self, resource_version: int) -> tuple[set[str], int] | None:
        """The nodes changed or gone after `resource_version` and the current resourceVersion, or
        None when that is too old to tell (as a watch from it would get 410): read everything."""


class NodeMetricServing(NodeMetricReader, Protocol):
    def list_body(self, label_selector: LabelSelector | None = None, name: str | None = None) -> bytes:
        """A NodeMetricList, assembled from the stored bodies."""

    def watch(self, resource_version: str, label_selector: LabelSelector | None = None, name: str | None = None,
              *, send_initial_events: bool | None = None) -> WatchQueue[bytes]:
        """A watch as kube-apiserver starts one for these parameters, its items lines of JSON;
        ApiError for a bad resourceVersion."""

    def put(self, report: ValidatedReport, labels: Mapping[str, str]) -> Entry:
        """Store a node's report, with the Node's labels; an updateTime too far ahead of the receipt
        time is replaced by it (`ValidatedReport.as_received`, `update_time_ahead`)."""


class ReplicaTarget(Protocol):
    @property
    def resource_version(self) -> int: ...

    @property
    def replicated_version(self) -> int:
        """The resourceVersion of the leader's data this copy holds; 0 before the first sync."""

    def apply_event(self, type_: str, body: bytes) -> None:
        """Apply one of the leader's watch events (its body carries the leader's resourceVersion)."""

    def replace_all(self, bodies: builtins.list[bytes], resource_version: int) -> None:
        """Make the contents those of the leader's list at `resource_version`."""


def update_time_ahead(report: ValidatedReport, entry: Entry) -> float:
    """Seconds by which the updateTime `report` was sent with is later than the one `entry`, what
    storing it gave, carries: more than 0 only when the store replaced it by a receipt time."""
    return max(0.0, report.figures.update_time - entry.figures.update_time)
