"""Fault injection for tests: fail matching requests, delay responses, drop open watches.

Driven over HTTP by the admin at /sandbox/faults (see FaultRule for the fields), so tests of the
real operator and agent processes can break the API server under them.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from colocation.apimachinery.errors import ApiError


@dataclass(kw_only=True)
class FaultRule:
    path: re.Pattern[str]  # matched (search) against the request path
    methods: frozenset[str] = frozenset()  # empty: every method
    code: int = 0  # answer with this status code; 0: no error, only the delay
    count: int = 1  # how many matching requests to affect; -1 for all until cleared
    delay: float = 0.0  # seconds to hold the request before answering or proceeding
    hits: int = field(default=0)

    @classmethod
    def from_json(cls, body: Any) -> FaultRule:
        if not isinstance(body, dict) or not isinstance(body.get("path"), str):
            raise ApiError.bad_request('a fault needs "path", a regular expression matched against request paths')
        try:
            pattern = re.compile(body["path"])
        except re.error as exc:
            raise ApiError.bad_request(f"fault path is not a valid regular expression: {exc}") from None
        code = int(body.get("code", 0))
        if code and not 400 <= code <= 599:
            raise ApiError.bad_request("fault code must be an HTTP error status (400-599)")
        return cls(path=pattern, methods=frozenset(m.upper() for m in body.get("methods") or ()), code=code,
                   count=int(body.get("count", 1)), delay=float(body.get("delay", 0.0)))

    def matches(self, method: str, path: str) -> bool:
        return (not self.methods or method in self.methods) and bool(self.path.search(path))


class Faults:
    def __init__(self) -> None:
        self.rules: list[FaultRule] = []

    async def before(self, request: web.Request) -> web.StreamResponse | None:
        """Apply the first matching rule: wait, then answer with its error, or let the request through."""
        if request.path.startswith("/sandbox/"):
            return None
        for rule in self.rules:
            if rule.matches(request.method, request.path) and rule.count != 0:
                rule.hits += 1
                if rule.count > 0:
                    rule.count -= 1
                if rule.delay:
                    await asyncio.sleep(rule.delay)  # the injected latency itself, not synchronisation
                if rule.code:
                    error = ApiError(rule.code, "InjectedFault", f"fault injected by the sandbox for "
                                     f"{request.method} {request.path}")
                    return web.Response(body=orjson.dumps(error.status()), status=rule.code,
                                        content_type="application/json")
                return None
        return None

    def add(self, rule: FaultRule) -> None:
        self.rules.append(rule)

    def clear(self) -> None:
        self.rules.clear()
