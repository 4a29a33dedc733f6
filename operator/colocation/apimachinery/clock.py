"""Time as Kubernetes writes and reads it, and the clocks that code takes as a parameter.

metav1.Time is RFC 3339 in UTC with whole seconds; MicroTime (Leases, Events) has exactly six
fractional digits. Code that decides by time takes a clock argument so tests can move time:
a `WallClock` for what is written into objects, a `MonotonicClock` for intervals and deadlines.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

WallClock = Callable[[], float]  # seconds since the epoch (time.time)
MonotonicClock = Callable[[], float]  # seconds from an arbitrary origin (time.monotonic)

# The times a report may carry (`fieldtypes.Rfc3339Time`): from the epoch to the last second
# that RFC 3339's four-digit year writes, 9999-12-31T23:59:59Z.
EARLIEST_TIME = 0.0
LATEST_TIME = 253_402_300_799.0
# RFC 3339 as Go's time.Parse(time.RFC3339, …) takes it: seconds and a zone are required.
RFC3339_PATTERN = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
                   r"(?:Z|[+-][0-9]{2}:[0-9]{2})$")


def now() -> float:
    return time.time()


def format_time(at: float) -> str:
    """metav1.Time as it is written: RFC 3339 in UTC, whole seconds (fractions are truncated).

    Years 1 to 9999 (ValueError outside), always with four digits.
    """
    return _format_second(int(at))


@functools.lru_cache(maxsize=64)
def _format_second(second: int) -> str:
    # Reports arriving together carry the same few seconds; formatting each costs more than the lookup.
    # Not strftime: glibc writes year 1 as "1", which is not RFC 3339.
    return datetime.fromtimestamp(second, tz=UTC).isoformat()[:19] + "Z"


def parse_time(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time with a zone (ValueError when it is not one)."""
    return _aware(text).timestamp()


def parse_whole_seconds(text: str) -> int:
    """The second of an RFC 3339 time with a zone, fractions dropped (exact: no float rounding
    carries 9999-12-31T23:59:59.9999999Z into the next year)."""
    return (_aware(text) - _EPOCH) // timedelta(seconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _aware(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no zone")
    return moment


def format_micro_time(moment: datetime | float) -> str:
    """MicroTime as Kubernetes writes it: UTC, exactly six fractional digits, `Z`."""
    if not isinstance(moment, datetime):
        moment = wall_time(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?\s*(?:([Zz])|([+-])(\d{2}):?(\d{2}))?")


def parse_micro_time(value: object) -> datetime | None:
    """A Time or MicroTime as any API server or client may have written it; None if unreadable.

    Accepts 0-9 fractional digits (nanoseconds are truncated), `Z`, a numeric offset, or no zone
    (taken as UTC). The times in a Lease are informational, so a bad one must not stop anything.
    """
    if not isinstance(value, str):
        return None
    match = _TIMESTAMP.fullmatch(value.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, _, sign, off_hours, off_minutes = match.groups()
    zone: timezone = UTC
    if sign:
        offset = timedelta(hours=int(off_hours), minutes=int(off_minutes))
        zone = timezone(offset if sign == "+" else -offset)
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                          int((fraction or "0")[:6].ljust(6, "0")), tzinfo=zone)
    except ValueError:
        return None
    return moment.astimezone(UTC)


def wall_time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
