"""MicroTime, the timestamp of Leases (and Events): Kubernetes' convention for writing and reading it.

Written in UTC with exactly six fractional digits, as the API server writes it; read however any
API server or client may have written it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone


def format_micro_time(moment: datetime) -> str:
    """MicroTime as Kubernetes writes it: UTC, exactly six fractional digits, `Z`."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
