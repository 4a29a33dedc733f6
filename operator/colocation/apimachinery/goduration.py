"""Go's time.Duration as text: metav1.Duration fields are written with Duration.String()."""

from __future__ import annotations

import re
from decimal import Decimal

_DURATION_TERM = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")
_NANOS_PER_UNIT = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
                   "h": 3600 * 10**9}


def parse_go_duration(text: str) -> int | None:
    """Nanoseconds in a Go duration ("5m0s", "1.5h", "300ms"), or None if it is not one."""
    if text == "0":
        return 0
    position, total = 0, Decimal(0)
    while position < len(text):
        match = _DURATION_TERM.match(text, position)
        if match is None or match.group(1) in ("", "."):
            return None
        total += Decimal(match.group(1)) * _NANOS_PER_UNIT[match.group(2)]
        position = match.end()
    return int(total) if position else None


def format_go_duration(nanos: int) -> str:
    """Go's time.Duration.String(): "10s", "5m0s", "1h0m0s", "1m30.5s", "250ms", "0s"."""
    if nanos == 0:
        return "0s"
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    if nanos < 10**9:
        unit, size = ("ns", 1) if nanos < 10**3 else ("µs", 10**3) if nanos < 10**6 else ("ms", 10**6)
        return sign + _decimal(nanos, size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _decimal(rest, 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    return f"{sign}{minutes}m{seconds}" if minutes else sign + seconds


def _decimal(value: int, size: int) -> str:
    whole, fraction = divmod(value, size)
    if not fraction:
        return str(whole)
    digits = str(fraction).rjust(len(str(size)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"
