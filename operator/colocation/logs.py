"""Structured logging for every daemon: one JSON object per line, or readable text for humans."""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Any, Literal

import orjson

LogFormat = Literal["json", "text"]

# Attributes every LogRecord has; anything else was passed with `extra=` and belongs in the output.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    return dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_extras(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure(level: str = "info", fmt: LogFormat = "json") -> None:
    """Send every logger's records to stderr in the chosen format, replacing earlier handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log duplicates our own request metrics; keep it for debug runs only.
    logging.getLogger("aiohttp.access").setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
