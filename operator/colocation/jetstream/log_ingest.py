"""An agent's report into the NodeMetric stream, from whichever replica took it.

The replica compares-and-sets on the node's last write as it applied it. When another replica
wrote since (an agent that retried elsewhere), it reads the stream's last write of the node and
tries again. A report whose updateTime is up to RETRY_WINDOW before the node's last one is a
late retry: it is dropped, and the answer is the newer report. So an older report never lands
over a newer one; an agent whose clock stepped back further is taken at its word. A report the
same as the node's last write (its agent sent it again, its answer lost) is not written twice:
every replica then serves the node at one resourceVersion, however far behind its copy was.
A write that lands at or below what the replica's copy applied finds the stream lost (its servers
restarted, memory storage): the replica moves the stream above that (`restart_after_loss`), which
drops the write, and writes it again, so no answer ever carries a lower resourceVersion. The answer
waits for the replica's own copy to apply the write, up to `apply_timeout`; past that it is made
from the write itself.

Why: docs/architecture.md#nodemetrics-on-nats-jetstream
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from colocation.apimachinery.clock import MonotonicClock, WallClock, format_time
from colocation.jetstream.log_follower import LogFollower
from colocation.jetstream.nodemetric_log import Conflict, NodeMetricLog
from colocation.nodemetrics.nodemetric_store import log_value, logged_entry, same_status
from colocation.nodemetrics.report_schema import ValidatedReport
from colocation.nodemetrics.storage_interface import Entry, NodeMetricReader

log = logging.getLogger(__name__)

MAX_TRIES = 5  # compare-and-set rounds; each lost round means another replica wrote the node meanwhile
APPLY_TIMEOUT = 2.0
# An agent retries a report for seconds at most (its request timeout, a few tries): a report this
# much older than the node's last one is such a retry; an older one means the agent's clock stepped back.
RETRY_WINDOW = 60.0


class LogIngest:
    def __init__(self, log: NodeMetricLog, follower: LogFollower, store: NodeMetricReader, *,
                 wall: WallClock = time.time, monotonic: MonotonicClock = time.monotonic,
                 apply_timeout: float = APPLY_TIMEOUT) -> None:
        self._log = log
        self._follower = follower
        self._store = store
        self._wall = wall
        self._monotonic = monotonic
        self._apply_timeout = apply_timeout

    async def put(self, report: ValidatedReport, labels: Mapping[str, str]) -> Entry:
        """Write `report` with the Node's `labels`; the entry as this replica serves it (or the
        newer one the stream had instead). An updateTime too far ahead of the receipt time is
        replaced by it, as the in-memory store does."""
        received_at = self._wall()
        stored = report.as_received(received_at)
        name = report.name
        known = self._store.get(name)
        if known is not None and _late(stored, known):
            return known
        created = known.creation_timestamp if known is not None else format_time(received_at)
        value = log_value(stored, labels, created=created)
        if known is not None and _same(stored, known, labels=labels, value=value):
            return known
        for _ in range(2):
            applied = self._follower.position
            written = await self._append(stored, labels, value, received_at=received_at)
            # The stream's own write of the node may be one the copy applied: only a new write tells.
            if isinstance(written, Entry) or written > applied:
                break
            log.warning("a report was written below what this replica applied: the stream was lost",
                        extra={"node": name, "position": written, "applied": applied})
            await self._log.restart_above(applied, wall=self._wall)
        else:
            raise Conflict(f"{name}: written below what this replica applied, after moving the stream above it")
        if isinstance(written, Entry):
            return written  # the stream had a newer report, or this one already
        return await self._applied(name, written) or logged_entry(
            written, value, received_at=received_at, seen_at=self._monotonic(), figures=stored.figures)[0]

    async def _append(self, stored: ValidatedReport, labels: Mapping[str, str], value: bytes,
                      *, received_at: float) -> int | Entry:
        """Compare-and-set `value` as the node's next write: its position, or the entry to answer
        with instead when the stream's last write of the node is newer or the same."""
        name = stored.name
        last = self._follower.last_written.get(name, 0)
        for _ in range(MAX_TRIES):
            try:
                return await self._log.append(name, value, last=last, figures=stored.figures)
            except Conflict:
                last, current = await self._log.last(name)
                if current is None:
                    continue
                newer = logged_entry(last, current, received_at=received_at, seen_at=self._monotonic())[0]
                if _late(stored, newer) or _same(stored, newer, labels=labels, value=value):
                    return await self._applied(name, last) or newer
        raise Conflict(f"{name}: other replicas kept writing it over {MAX_TRIES} tries")

    async def _applied(self, name: str, position: int) -> Entry | None:
        """The write at `position` as this replica's copy serves it once it applied it (the same
        content at an earlier resourceVersion when it was unchanged); None if not applied in time,
        or if the copy went past it without it: a later write of the node had replaced it in the
        stream by the time the copy read that far, and the copy holds the node's older entry or
        that later one."""
        if await self._follower.wait_for(position, self._apply_timeout) and (
                self._follower.last_written.get(name) == position):
            return self._store.get(name)
        return None


def _same(report: ValidatedReport, last: Entry, *, labels: Mapping[str, str], value: bytes) -> bool:
    """Whether `value` (`report`'s, with the Node's `labels`) is the node's `last` write again."""
    return report.figures == last.figures and last.labels == labels and same_status(last.body, value)


def _late(report: ValidatedReport, last: Entry) -> bool:
    """Whether `report` is a late retry of a report older than the node's `last` one."""
    return 0 < last.figures.update_time - report.figures.update_time <= RETRY_WINDOW
