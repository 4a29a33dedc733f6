"""What reaches the API server: requests and bytes per (user, verb, group, resource).

For measuring control-plane cost (benchmarks/control_plane.py): how many requests, and how many
bytes each way, every client puts on the API server. Bytes are HTTP/1.1 as written before TLS:
request line, headers and body of a request; status line, headers and body of a response. A
watch's bytes are counted as they are written, not when the watch ends, so a window that a
long-lived watch spans gets the events sent within it. A request counts in the window it started
in. The sandbox's own controls (/sandbox/...) are not counted.

An admin control: GET /sandbox/stats returns the counters since the last reset, DELETE
/sandbox/stats resets them (and returns what they held).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.watch_params import query_flag
from colocation_sandbox.server.request_paths import parse_target, verb_for
from colocation_sandbox.server.verbs import json_response

USER_KEY = web.RequestKey("colocation_sandbox.user", str)  # the authenticated user, set by the server
ADMIN_PREFIX = "/sandbox/"

Key = tuple[str, str, str, str]  # user, verb, group, resource (with "/subresource")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Counts:
    requests: int = 0
    request_bytes: int = 0
    response_bytes: int = 0


def request_key(request: web.BaseRequest) -> tuple[str, str, str]:
    """(verb, group, resource) as RBAC names them; non-resource requests: (method, "", the path)."""
    target = parse_target(request.path)
    if target is None:
        return request.method.lower(), "", request.path
    resource = f"{target.resource}/{target.subresource}" if target.subresource else target.resource
    return verb_for(request.method, target, query_flag(request.query, "watch")), target.group, resource


def request_size(request: web.BaseRequest) -> int:
    """Bytes of the request on the wire (before TLS): request line, headers, body."""
    line = len(request.method) + len(request.raw_path) + len(" HTTP/1.1\r\n") + 1
    headers = sum(len(name) + len(value) + 4 for name, value in request.raw_headers) + 2
    return line + headers + (request.content_length or 0)


@dataclass(eq=False)
class _InFlight:
    request: web.Request
    counted: bool = False  # the request itself is in the counters
    written: int = 0  # response bytes already in the counters


class RequestStats:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.counts: dict[Key, Counts] = {}
        self.since = clock()
        self._in_flight: set[_InFlight] = set()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(ADMIN_PREFIX):
            return await handler(request)
        entry = _InFlight(request)
        self._in_flight.add(entry)
        try:
            response = await handler(request)
            # Write it here rather than after the middlewares, so its size is known; aiohttp's own
            # prepare and write_eof that follow see a finished response and do nothing. A client gone
            # meanwhile is aiohttp's to handle (quietly), as it does when it writes the response itself.
            with contextlib.suppress(ConnectionError):
                await response.prepare(request)
                await response.write_eof()
            return response
        finally:
            self._in_flight.discard(entry)
            self._fold(entry)

    def _fold(self, entry: _InFlight) -> None:
        """Move what this request has added since it was last counted into the counters."""
        user = entry.request.get(USER_KEY, "")
        verb, group, resource = request_key(entry.request)
        counts = self.counts.setdefault((user, verb, group, resource), Counts())
        if not entry.counted:
            entry.counted = True
            counts.requests += 1
            counts.request_bytes += request_size(entry.request)
        written = entry.request.writer.output_size
        counts.response_bytes += written - entry.written
        entry.written = written

    def snapshot(self) -> dict[str, Any]:
        for entry in list(self._in_flight):
            self._fold(entry)
        items = [{"user": user, "verb": verb, "group": group, "resource": resource, "requests": c.requests,
                  "requestBytes": c.request_bytes, "responseBytes": c.response_bytes}
                 for (user, verb, group, resource), c in sorted(self.counts.items())]
        now = self.clock()
        return {"since": self.since, "now": now, "seconds": now - self.since, "items": items}

    def reset(self) -> dict[str, Any]:
        """The counters so far; from now on, only requests started later and bytes written later count."""
        before = self.snapshot()
        self.counts = {}
        self.since = before["now"]
        return before

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return json_response(self.snapshot())
        if request.method == "DELETE":
            return json_response(self.reset())
        raise ApiError.method_not_allowed(f"{request.method} is not supported on /sandbox/stats")
