"""One connection to a NATS cluster, with the options every replica passes the same way.

nats-py reconnects on its own, to the servers in random order, every `reconnect_wait`; each
JetStream request has `timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.aio.client import Client

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class NatsOptions:
    servers: tuple[str, ...]
    ca_file: str = ""  # verify the servers against this CA (tls:// URLs)
    user: str = ""
    password_file: str = ""  # read at connect time: a mounted Secret may be rotated
    timeout: float = 2.0  # every request, JetStream's included
    reconnect_wait: float = 0.5
    # A server that stops answering (a partition that keeps the TCP connection up) is found within
    # ping_interval x (max_outstanding_pings + 1): nats-py's default is 2 minutes x 3.
    ping_interval: float = 5.0
    max_outstanding_pings: int = 2


def _read_secret(path: str) -> str | None:
    return Path(path).read_text().strip() if path else None


async def connect(options: NatsOptions, *, name: str) -> Client:
    """A connection that reconnects forever. nats-py keeps trying the servers at first too (no
    answer, a refused password): each failure is logged here, and the call returns once one took it."""
    context = ssl.create_default_context(cafile=options.ca_file) if options.ca_file else None
    password = _read_secret(options.password_file)

    async def error(problem: Exception) -> None:
        log.warning("NATS connection error", extra={"error": repr(problem)})

    return await nats.connect(
        servers=list(options.servers), name=name, tls=context, user=options.user or None, password=password,
        connect_timeout=options.timeout, reconnect_time_wait=options.reconnect_wait, max_reconnect_attempts=-1,
        allow_reconnect=True, error_cb=error, ping_interval=options.ping_interval,
        max_outstanding_pings=options.max_outstanding_pings)


def raise_if_cancelled(error: Exception) -> None:
    """nats-py turns a request or fetch cancelled in flight into a timeout: raise the cancellation
    again, or a task that was asked to stop would go on (call it wherever such errors are caught)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from error
