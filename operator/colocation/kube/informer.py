"""List-then-watch of one collection, as client-go's reflector does it, over any HTTP transport.

It lists in pages, hands the full state to `on_sync`, then watches from the list's
resourceVersion and hands every change to `on_event`. A dropped connection resumes from the last
resourceVersion seen (bookmarks included); a 410 Expired relists. Every request has a timeout,
every retry waits with backoff and jitter, and events are handled inline, so a slow handler slows
the stream instead of growing a queue. The transport is a function: the same informer follows
kube-apiserver and the leader's NodeMetric API. `synced` is set by the first complete list;
`failing` says the last attempt failed and a retry is pending. Each failure is logged with its
type and passed to `on_error` with a short reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, cast

import orjson

from colocation.apimachinery.objects import Obj
from colocation.kube.backoff import Backoff

log = logging.getLogger(__name__)

Kept = TypeVar("Kept")  # what the informer hands on of each object: the object, or its `transform`



class Response(Protocol):
    """What a transport returns: a status, the whole body, or the body line by line."""

    status: int

    async def read(self) -> bytes: ...

    def lines(self) -> AsyncIterator[bytes]: ...


# A transport opens GET `path` with `params`; `stream=True` for watches (no overall timeout).
Transport = Callable[[str, dict[str, str], bool], AbstractAsyncContextManager[Response]]


class Expired(Exception):
    """The resourceVersion is too old: relist."""


class RequestFailed(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300].decode(errors='replace')}")
        self.status = status


@dataclass(frozen=True, kw_only=True)
class InformerOptions:
    page_size: int = 500
    watch_timeout_seconds: int = 300  # the server ends the watch after this; we then resume
    label_selector: str = ""
    field_selector: str = ""


def describe_error(error: BaseException) -> str:
    """The type and the message: asyncio and aiohttp timeouts, among others, have no message."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def failure_reason(error: BaseException) -> str:
    """A short label for a failed list or watch: timeout, http-NNN, decode or connection."""
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, RequestFailed):
        return f"http-{error.status}"
    if isinstance(error, orjson.JSONDecodeError):
        return "decode"
    return "connection"


class Informer(Generic[Kept]):
    def __init__(self, transport: Transport, path: str, *, on_sync: Callable[[list[Kept], str], Awaitable[None]],
                 on_event: Callable[[str, Kept], Awaitable[None]], options: InformerOptions | None = None,
                 backoff: Backoff | None = None, name: str = "",
                 on_error: Callable[[str], None] | None = None,
                 transform: Callable[[Obj], Kept] | None = None) -> None:
        self.transport = transport
        # What to keep of each object, applied as each page and each event arrives (client-go's
        # SetTransform): a list of 300,000 pods is never held whole, only what is kept of them.
        self.transform = transform
        self.path = path
        self.on_sync = on_sync
        self.on_event = on_event
        self.options = options or InformerOptions()
        self.backoff = backoff or Backoff(initial=0.2, maximum=10.0, jitter=0.5)
        self.name = name or path
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.failing = False
        self.failures = 0
        self.relists = 0
        self.on_error = on_error

    def _selectors(self) -> dict[str, str]:
        params = {}
        if self.options.label_selector:
            params["labelSelector"] = self.options.label_selector
        if self.options.field_selector:
            params["fieldSelector"] = self.options.field_selector
        return params

    async def run(self) -> None:
        """Follow the collection until cancelled."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch()
                self.backoff.reset()  # the server ended a healthy watch: resume at once
            except Expired:
                log.info("watch expired, relisting", extra={"informer": self.name})
                need_list = True
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any transport or server failure: wait, then resume
                delay = self.backoff.next_delay()
                self.failing = True
                self.failures += 1
                if self.on_error is not None:
                    self.on_error(failure_reason(error))
                log.warning("list/watch failed, retrying", extra={"informer": self.name,
                                                                  "error": describe_error(error),
                                                                  "retry_in": round(delay, 2)})
                if isinstance(error, RequestFailed) and error.status == 410:
                    need_list = True
                await asyncio.sleep(delay)  # backoff before the retry, not synchronisation

    async def _list(self) -> None:
        items: list[Kept] = []
        token = ""
        while True:
            params = {**self._selectors(), "limit": str(self.options.page_size)}
            if token:
                params["continue"] = token
            async with self.transport(self.path, params, False) as response:
                body = await response.read()
                if response.status == 410:
                    token = ""  # the continue token expired mid-list: start over
                    items = []
                    continue
                if response.status != 200:
                    raise RequestFailed(response.status, body)
            page = orjson.loads(body)
            page_items = page.get("items") or []
            items.extend(self._kept(item) for item in page_items)
            del page_items
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                self.resource_version = meta.get("resourceVersion", "")
                break
        self.relists += 1
        await self.on_sync(items, self.resource_version)
        self.failing = False
        self.synced.set()

    def _kept(self, obj: Obj) -> Kept:
        return cast(Kept, obj) if self.transform is None else self.transform(obj)  # no transform: Kept is Obj

    async def _watch(self) -> None:
        params = {**self._selectors(), "watch": "true", "allowWatchBookmarks": "true",
                  "resourceVersion": self.resource_version,
                  "timeoutSeconds": str(self.options.watch_timeout_seconds)}
        async with self.transport(self.path, params, True) as response:
            if response.status == 410:
                raise Expired()
            if response.status != 200:
                raise RequestFailed(response.status, await response.read())
            self.failing = False  # watching again: the view is current
            async for line in response.lines():
                if line.strip():
                    await self._handle(orjson.loads(line))

    async def _handle(self, event: Obj) -> None:
        type_, obj = event.get("type"), event.get("object") or {}
        if type_ == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise RequestFailed(int(obj.get("code") or 500), orjson.dumps(obj))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if type_ != "BOOKMARK":
            await self.on_event(str(type_), self._kept(obj))
        if rv:
            self.resource_version = rv
        self.backoff.reset()
