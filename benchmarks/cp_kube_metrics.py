"""The arithmetic of the real control-plane cost suite: Prometheus text, deltas, per node per minute.

kube-apiserver's /metrics counts requests and bytes by group, resource and verb (and watch event
bytes by kind), not by user: what a path costs is the delta over a window on a cluster running it,
minus the same delta on a cluster running only what every path shares (`subtract`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families
from pydantic.dataclasses import dataclass

from benchmarks.results import CAMEL_CASE

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]

REQUESTS = "apiserver_request_total"
REQUEST_BODY = "apiserver_request_body_size_bytes_sum"
RESPONSE = "apiserver_response_sizes_sum"
WATCH_EVENTS = "apiserver_watch_events_sizes_sum"
WATCH_EVENT_COUNT = "apiserver_watch_events_sizes_count"
APISERVER_WANTED = (REQUESTS, REQUEST_BODY, RESPONSE, WATCH_EVENTS, WATCH_EVENT_COUNT)

ETCD_PUTS = "etcd_mvcc_put_total"
ETCD_PUT_BYTES = "etcd_debugging_mvcc_total_put_size_in_bytes"
ETCD_WAL_BYTES = "etcd_disk_wal_write_bytes_total"
ETCD_DB_SIZE = "etcd_mvcc_db_total_size_in_bytes"
ETCD_DB_IN_USE = "etcd_mvcc_db_total_size_in_use_in_bytes"
ETCD_WANTED = (ETCD_PUTS, ETCD_PUT_BYTES, ETCD_WAL_BYTES, ETCD_DB_SIZE, ETCD_DB_IN_USE)
WATCH_EVENT_VERB = "watch event"


def parse(text: str, wanted: Iterable[str] | None = None) -> Samples:
    """Samples of a Prometheus text exposition: (name, sorted labels) → value; `wanted` names only."""
    names = set(wanted) if wanted is not None else None
    return {(sample.name, tuple(sorted(sample.labels.items()))): float(sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples
            if names is None or sample.name in names}


def delta(before: Samples, after: Samples) -> Samples:
    """after - before for every series (a series new in `after` counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def total(samples: Samples, name: str) -> float:
    return sum(value for (metric, _), value in samples.items() if metric == name)


@dataclass(frozen=True, config=CAMEL_CASE)
class Traffic:
    """Requests and bytes of one (group, resource, verb) over a window (or per node per minute); a
    pydantic dataclass, saved in the suite's JSON (benchmarks/plots/control_plane_kube*.json)."""

    requests: float = 0.0
    request_bytes: float = 0.0
    response_bytes: float = 0.0
    watch_bytes: float = 0.0  # watch events sent (the "watch event" rows, by group and resource)
    watch_events: float = 0.0

    @property
    def bytes(self) -> float:
        return self.request_bytes + self.response_bytes + self.watch_bytes

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.requests + other.requests, self.request_bytes + other.request_bytes,
                       self.response_bytes + other.response_bytes, self.watch_bytes + other.watch_bytes,
                       self.watch_events + other.watch_events)

    def __sub__(self, other: Traffic) -> Traffic:
        return Traffic(self.requests - other.requests, self.request_bytes - other.request_bytes,
                       self.response_bytes - other.response_bytes, self.watch_bytes - other.watch_bytes,
                       self.watch_events - other.watch_events)

    def scaled(self, factor: float) -> Traffic:
        return Traffic(self.requests * factor, self.request_bytes * factor, self.response_bytes * factor,
                       self.watch_bytes * factor, self.watch_events * factor)

    def is_zero(self) -> bool:
        return not any((self.requests, self.request_bytes, self.response_bytes, self.watch_bytes, self.watch_events))


Key = tuple[str, str, str]  # group ("" for core), resource, verb (Kubernetes' lowercase verbs)

# apiserver_request_total and apiserver_response_sizes name HTTP-ish verbs; the body size
# histogram names Kubernetes' verbs, and has no subresource label: rows are keyed by those.
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "APPLY": "patch", "DELETE": "delete",
          "DELETECOLLECTION": "deletecollection", "GET": "get", "LIST": "list", "WATCH": "watch",
          "WATCHLIST": "watch", "CONNECT": "connect"}


def _verb(labels: Mapping[str, str]) -> str:
    verb = labels.get("verb", "")
    return _VERBS.get(verb, verb.lower())


def _key(labels: Mapping[str, str]) -> Key:
    group, resource = labels.get("group", ""), labels.get("resource", "")
    if group and resource.endswith("." + group):
        resource = resource[:-len(group) - 1]
    if not resource:  # non-resource URLs (/readyz, /openapi/v3, …): the path is in `subresource`
        resource = labels.get("subresource", "") or "(non-resource)"
    return group, resource, _verb(labels)


def traffic(window: Samples) -> dict[Key, Traffic]:
    """Requests and bytes of a window's delta by (group, resource, verb); watch events by (group, resource)."""
    rows: dict[Key, Traffic] = {}
    for (name, pairs), value in window.items():
        labels = dict(pairs)
        if name == REQUESTS:
            key, part = _key(labels), Traffic(requests=value)
        elif name == REQUEST_BODY:
            key, part = _key(labels), Traffic(request_bytes=value)
        elif name == RESPONSE:
            key, part = _key(labels), Traffic(response_bytes=value)
        elif name == WATCH_EVENTS:
            key, part = (labels.get("group", ""), labels.get("resource", ""), WATCH_EVENT_VERB), Traffic(
                watch_bytes=value)
        elif name == WATCH_EVENT_COUNT:
            key, part = (labels.get("group", ""), labels.get("resource", ""), WATCH_EVENT_VERB), Traffic(
                watch_events=value)
        else:
            continue
        rows[key] = rows.get(key, Traffic()) + part
    return rows


def subtract(path: Mapping[Key, Traffic], base: Mapping[Key, Traffic]) -> dict[Key, Traffic]:
    """What `path` adds to `base`, row by row (rows that are zero in both left out)."""
    keys = set(path) | set(base)
    out = {key: path.get(key, Traffic()) - base.get(key, Traffic()) for key in keys}
    return {key: value for key, value in out.items() if not value.is_zero()}


def per_node_minute(rows: Mapping[Key, Traffic], nodes: int, seconds: float) -> dict[Key, Traffic]:
    minutes = seconds / 60
    factor = 1 / (nodes * minutes) if nodes and minutes else math.nan
    return {key: value.scaled(factor) for key, value in rows.items()}


def sum_traffic(rows: Iterable[Traffic]) -> Traffic:
    out = Traffic()
    for row in rows:
        out = out + row
    return out


@dataclass(frozen=True, config=CAMEL_CASE)
class EtcdWindow:
    """etcd over a window: puts, bytes put, WAL bytes, database size growth (total and in use); saved as
    Traffic is."""

    puts: float = 0.0
    put_bytes: float = 0.0
    wal_bytes: float = 0.0
    db_growth: float = 0.0
    db_in_use_growth: float = 0.0

    @classmethod
    def of(cls, before: Samples, after: Samples) -> EtcdWindow:
        d = delta(before, after)
        return cls(total(d, ETCD_PUTS), total(d, ETCD_PUT_BYTES), total(d, ETCD_WAL_BYTES), total(d, ETCD_DB_SIZE),
                   total(d, ETCD_DB_IN_USE))

    def __sub__(self, other: EtcdWindow) -> EtcdWindow:
        return EtcdWindow(self.puts - other.puts, self.put_bytes - other.put_bytes, self.wal_bytes - other.wal_bytes,
                          self.db_growth - other.db_growth, self.db_in_use_growth - other.db_in_use_growth)

    def scaled(self, factor: float) -> EtcdWindow:
        return EtcdWindow(self.puts * factor, self.put_bytes * factor, self.wal_bytes * factor,
                          self.db_growth * factor, self.db_in_use_growth * factor)

    def per_node_minute(self, nodes: int, seconds: float) -> EtcdWindow:
        minutes = seconds / 60
        return self.scaled(1 / (nodes * minutes) if nodes and minutes else math.nan)
