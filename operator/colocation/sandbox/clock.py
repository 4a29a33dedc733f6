"""Time as the API writes it: RFC 3339 seconds for timestamps, microseconds for MicroTime."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

Clock = Callable[[], float]  # seconds since the epoch; injected so tests can move time


def rfc3339(at: float) -> str:
    return dt.datetime.fromtimestamp(int(at), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(at: float) -> str:
    return dt.datetime.fromtimestamp(at, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def now() -> float:
    return time.time()
