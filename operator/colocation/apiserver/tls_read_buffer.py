"""The read buffer of every TLS connection asyncio serves: 16 KiB instead of asyncio's 256 KiB.

asyncio (3.11 on) gives each TLS connection its own receive buffer of `SSLProtocol.max_size` bytes,
256 KiB, zero-filled when the connection opens, so resident for as long as it lives. Every agent
keeps one connection to the leader for its reports: measured on this project's machines, an idle
kept-alive TLS connection to an aiohttp server costs about 300 KiB of RSS with that buffer and about
60 KiB with a 16 KiB one, the size of one TLS record (BENCHMARKS.md, "Leader memory per agent
connection"). The buffer only bounds one read from the socket: a larger body takes more reads, the
same bytes. asyncio has no per-server setting for it, so the class attribute is set, once, before
the server starts; a Python whose asyncio has no such attribute is left as it is.
"""

from __future__ import annotations

import asyncio.sslproto

TLS_READ_BUFFER = 16 * 1024  # one TLS record's plaintext at most


def bound_tls_read_buffers(size: int = TLS_READ_BUFFER) -> bool:
    """Make every TLS connection opened from now on read through a `size`-byte buffer; False if
    this Python's asyncio has no such buffer."""
    protocol = getattr(asyncio.sslproto, "SSLProtocol", None)
    if protocol is None or not isinstance(getattr(protocol, "max_size", None), int):
        return False
    protocol.max_size = size
    return True
