"""The resource verbs: get, list, watch, create, update, patch, delete, deletecollection."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.selectors import FieldSelector, LabelSelector
from colocation.apimachinery.tables import wants_table
from colocation.sandbox.server import patches, request_bodies, server_side_tables
from colocation.sandbox.server.admission import admit
from colocation.sandbox.server.object_store import Store
from colocation.sandbox.server.request_options import check_delete_options, check_list_options, check_write_options
from colocation.sandbox.server.resource_types import EXTRA_SELECTABLE_FIELDS, ResourceType
from colocation.sandbox.server.watch_events import Event, Watcher, WatchFilter

JSON = "application/json"


def json_response(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else None
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON, headers=headers)


def _query_filter(rt: ResourceType, namespace: str, query: Any) -> WatchFilter:
    labels = LabelSelector.parse(query["labelSelector"]) if query.get("labelSelector") else None
    allowed = ("metadata.name", "metadata.namespace", *EXTRA_SELECTABLE_FIELDS.get(rt.storage_key, ()))
    fields = FieldSelector.parse(query["fieldSelector"], allowed) if query.get("fieldSelector") else None
    return WatchFilter(namespace, labels, fields)


def flag_param(query: Any, name: str) -> bool:
    """A boolean query parameter as kube-apiserver reads one: absent, "0" or "false" (any case) is
    false, anything else is true (kubernetes-asyncio sends Python's "True")."""
    raw = query.get(name)
    return raw is not None and raw != "0" and raw.lower() != "false"


def _int_param(query: Any, name: str, default: int = 0) -> int:
    raw = query.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError.bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None


def _with_version(rt: ResourceType, obj: Obj) -> Obj:
    """Objects are stored once; each version of a custom resource is read with its own apiVersion."""
    return obj if obj.get("apiVersion") == rt.api_version else {**obj, "apiVersion": rt.api_version}


class Verbs:
    """The generic REST semantics for every stored type. Special subresources live elsewhere."""

    def __init__(self, store: Store, *, bookmark_interval: float = 60.0, clock: Callable[[], float] = time.time,
                 watch_queue_size: int = 10_000) -> None:
        self.store = store
        self.bookmark_interval = bookmark_interval
        self.clock = clock
        self.watch_queue_size = watch_queue_size
        self.watchers: set[Watcher] = set()

    # ---- reads -------------------------------------------------------------------------------

    def get(self, request: web.Request, rt: ResourceType, namespace: str, name: str) -> web.Response:
        obj = _with_version(rt, self.store.get(rt, namespace, name))
        table_version = wants_table(request.headers.get("Accept", ""))
        if table_version:
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return json_response(self._table(request, rt, [obj], meta, table_version))
        return json_response(obj)

    def list_collection(self, request: web.Request, rt: ResourceType, namespace: str) -> web.Response:
        query = request.query
        check_list_options(query, watch=False)
        flt = _query_filter(rt, namespace, query)
        items, rv, token, remaining = self.store.list(rt, namespace, flt, limit=_int_param(query, "limit"),
                                                      continue_token=query.get("continue", ""))
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        items = [_with_version(rt, o) for o in items]
        table_version = wants_table(request.headers.get("Accept", ""))
        if table_version:
            return json_response(self._table(request, rt, items, meta, table_version))
        return json_response({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                              "items": items})

    def _table(self, request: web.Request, rt: ResourceType, items: list[Obj], meta: dict[str, Any],
               version: str, include_headers: bool = True) -> dict[str, Any]:
        return server_side_tables.to_table(rt, items, list_meta=meta,
                               include_object=request.query.get("includeObject", "Metadata"),
                               table_version=version, now=dt.datetime.fromtimestamp(self.clock(), tz=dt.UTC),
                               include_headers=include_headers)

    async def watch(self, request: web.Request, rt: ResourceType, namespace: str, name: str) -> web.StreamResponse:
        query = request.query
        flt = _query_filter(rt, namespace, query)
        if name:  # /watch/namespaces/ns/pods/name: a watch of one object
            flt = WatchFilter(namespace, flt.labels,
                              FieldSelector.parse(f"metadata.name={name}", ("metadata.name",)))
        check_list_options(query, watch=True)
        send_initial = flag_param(query, "sendInitialEvents")
        bookmarks = flag_param(query, "allowWatchBookmarks")
        timeout = _int_param(query, "timeoutSeconds", 1800)
        table_version = wants_table(request.headers.get("Accept", ""))
        watcher = self.store.watch(rt, namespace, flt, resource_version=query.get("resourceVersion", ""),
                                   send_initial_events=send_initial, queue_size=self.watch_queue_size)
        if send_initial and bookmarks:  # without bookmarks the end of the initial events goes unmarked
            watcher.offer("BOOKMARK", self._bookmark(rt, initial_end=True))
        response = web.StreamResponse(headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self.watchers.add(watcher)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            await self._stream(request, response, rt, watcher, deadline, bookmarks, table_version)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watcher.stop()
            self.watchers.discard(watcher)
        return response

    async def _stream(self, request: web.Request, response: web.StreamResponse, rt: ResourceType,
                      watcher: Watcher, deadline: float, bookmarks: bool, table_version: str | None) -> None:
        """Write events as they come; whatever queued up meanwhile goes out in one write."""
        loop = asyncio.get_running_loop()
        next_bookmark = loop.time() + self.bookmark_interval
        encoder = _EventEncoder(self, request, rt, table_version)
        while True:
            now = loop.time()
            if now >= deadline:
                return
            if watcher.queue.empty():
                wait = min(deadline, next_bookmark) - now if bookmarks else deadline - now
                try:
                    async with asyncio.timeout(max(wait, 0.001)):
                        first = await watcher.queue.get()
                except TimeoutError:
                    if bookmarks and loop.time() >= next_bookmark and watcher.queue.empty():
                        await response.write(encoder.line("BOOKMARK", self._bookmark(rt), None))
                        next_bookmark = loop.time() + self.bookmark_interval
                    continue
                batch = [first]
            else:
                batch = []
            while len(batch) < _WATCH_BATCH and not watcher.queue.empty():
                batch.append(watcher.queue.get_nowait())
            lines: list[bytes] = []
            ended = False
            for type_, obj, event in batch:
                if type_ == "CLOSE":
                    ended = True
                    break
                lines.append(encoder.line(type_, obj, event))
                if type_ == "ERROR":
                    ended = True
                    break
            if lines:
                await response.write(b"".join(lines))
            if ended:
                return

    def _bookmark(self, rt: ResourceType, initial_end: bool = False) -> Obj:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}

    def drop_watches(self) -> int:
        """Fault injection: end every open watch, as a restarting apiserver would."""
        dropped = list(self.watchers)
        for watcher in dropped:
            watcher.close()
        return len(dropped)

    # ---- writes ------------------------------------------------------------------------------

    def create(self, request: web.Request, rt: ResourceType, namespace: str, body: Obj) -> web.Response:
        check_write_options("CreateOptions", request.query)
        obj = _without_status_on_create(rt, self._scoped(rt, namespace, body))
        obj, warnings = admit(rt, obj, _field_validation(request), creating=True)
        created = self.store.create(rt, obj, dry_run=_dry_run(request))
        return json_response(_with_version(rt, created), 201, warnings)

    def update(self, request: web.Request, rt: ResourceType, namespace: str, name: str, subresource: str,
               body: Obj) -> web.Response:
        check_write_options("UpdateOptions", request.query)
        obj = self._scoped(rt, namespace, body)
        if not (obj.get("metadata") or {}).get("resourceVersion") and not _allows_unconditional_update(rt):
            raise ApiError.invalid(rt.group, rt.kind, name, [Cause(
                "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")])
        obj, warnings = self._admit_update(request, rt, namespace, name, subresource, obj)
        updated = self.store.update(rt, namespace, name, obj, subresource=subresource, dry_run=_dry_run(request))
        return json_response(_with_version(rt, updated), 200, warnings)

    def _admit_update(self, request: web.Request, rt: ResourceType, namespace: str, name: str,
                      subresource: str, obj: Obj) -> tuple[Obj, list[str]]:
        current = self.store.get(rt, namespace, name)
        if subresource == "status":
            # Validate the object as it will be stored: old main resource, new status.
            merged = {**current, "status": obj.get("status")} if "status" in obj else current
            admitted, warnings = admit(rt, merged, _field_validation(request), status_write=True, old=current)
            return {**obj, "status": admitted.get("status")} if "status" in obj else obj, warnings
        if "status" in rt.subresources:
            # The main resource keeps the stored status (PrepareForUpdate), and is validated with it.
            obj = {k: v for k, v in obj.items() if k != "status"}
            if "status" in current:
                obj["status"] = current["status"]
        return admit(rt, obj, _field_validation(request), old=current)

    def patch(self, request: web.Request, rt: ResourceType, namespace: str, name: str, subresource: str,
              raw: bytes) -> web.Response:
        content_type = request.headers.get("Content-Type", "")
        if request_bodies.media_type(content_type) in request_bodies.PATCH_TYPES:
            check_write_options("PatchOptions", request.query, patch_type=request_bodies.media_type(content_type))
        kind, body = request_bodies.decode_patch(raw, content_type, rt)
        dry_run = _dry_run(request)
        if kind == request_bodies.APPLY_PATCH:
            return self._apply(request, rt, namespace, name, subresource, body, dry_run)
        current = self.store.get(rt, namespace, name)
        patched = request_bodies.apply_patch(kind, current, body, rt)
        # A resourceVersion in the patch is a precondition; otherwise the patch applies to the latest.
        check_rv = _patch_names_rv(kind, body)
        if not check_rv:
            patched = {**patched, "metadata": {**(patched.get("metadata") or {}),
                                               "resourceVersion": current["metadata"]["resourceVersion"]}}
        patched, warnings = self._admit_update(request, rt, namespace, name, subresource, patched)
        updated = self.store.update(rt, namespace, name, patched, subresource=subresource, dry_run=dry_run)
        return json_response(_with_version(rt, updated), 200, warnings)

    def _apply(self, request: web.Request, rt: ResourceType, namespace: str, name: str, subresource: str,
               body: Obj, dry_run: bool) -> web.Response:
        manager = request.query["fieldManager"]  # required, checked with the other PatchOptions
        body = self._scoped(rt, namespace, body)
        if (body.get("metadata") or {}).get("name", name) != name:
            raise ApiError.bad_request("the name of the object does not match the name on the URL")
        force = flag_param(request.query, "force")
        live = self.store.find(rt, namespace, name)
        now = format_time(self.clock())
        # Each endpoint owns its part: the main resource never applies status, /status nothing else.
        ignored = ("status",) if "status" in rt.subresources and subresource != "status" else ()
        applied = patches.server_side_apply(live, body, manager, force, rt.group, rt.kind, now,
                                            ignored_fields=ignored)
        if live is None:
            applied = _without_status_on_create(rt, applied)
            applied.setdefault("metadata", {})["name"] = name
            applied, warnings = admit(rt, applied, _field_validation(request), creating=True)
            applied["metadata"].pop("resourceVersion", None)
            created = self.store.create(rt, applied, dry_run=dry_run)
            return json_response(_with_version(rt, created), 201, warnings)
        applied, warnings = self._admit_update(request, rt, namespace, name, subresource, applied)
        applied["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        updated = self.store.update(rt, namespace, name, applied, subresource=subresource, dry_run=dry_run)
        return json_response(_with_version(rt, updated), 200, warnings)

    def delete(self, request: web.Request, rt: ResourceType, namespace: str, name: str, body: Obj) -> web.Response:
        options = {**body, **{k: v for k, v in request.query.items()
                              if k in ("propagationPolicy", "gracePeriodSeconds")}}
        check_delete_options(options, [*request.query.getall("dryRun", []), *(body.get("dryRun") or ())])
        obj, gone = self.store.delete(rt, namespace, name, preconditions=options.get("preconditions"),
                                      dry_run=_dry_run(request) or bool(options.get("dryRun")),
                                      orphan=options.get("propagationPolicy") == "Orphan")
        # kube-apiserver answers 200 even when finalizers keep the object; 202 only for the legacy
        # orphanDependents=false (changing that would break clients, says its source).
        deferred = not gone and options.get("orphanDependents") is False
        return json_response(_with_version(rt, obj), 202 if deferred else 200)

    def delete_collection(self, request: web.Request, rt: ResourceType, namespace: str) -> web.Response:
        check_delete_options({k: v for k, v in request.query.items() if k == "propagationPolicy"},
                             request.query.getall("dryRun", []))
        flt = _query_filter(rt, namespace, request.query)
        items = self.store.list(rt, namespace, flt)[0]
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            result, _ = self.store.delete(rt, meta.get("namespace", ""), meta["name"], dry_run=_dry_run(request))
            deleted.append(_with_version(rt, result))
        return json_response({"kind": rt.list_kind, "apiVersion": rt.api_version,
                              "metadata": {"resourceVersion": str(self.store.resource_version)},
                              "items": deleted})

    @staticmethod
    def _scoped(rt: ResourceType, namespace: str, body: Obj) -> Obj:
        """Check the object's namespace against the URL's, filling it in when absent."""
        meta = dict(body.get("metadata") or {})
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError.bad_request("the namespace of the provided object does not match the namespace "
                                           "sent on the request")
            meta["namespace"] = namespace
        elif meta.get("namespace"):
            meta.pop("namespace")
        return {**body, "metadata": meta}


# At most this many queued events go out in one write, so one busy watch cannot hog the loop.
_WATCH_BATCH = 500


class _EventEncoder:
    """Watch event lines; a plain event's line is encoded once and shared by every watcher."""

    def __init__(self, verbs: Verbs, request: web.Request, rt: ResourceType, table_version: str | None) -> None:
        self.verbs = verbs
        self.request = request
        self.rt = rt
        self.table_version = table_version
        self.first_row = True  # only the first Table event of a watch carries the column definitions

    def line(self, type_: str, obj: Any, event: Event | None) -> bytes:
        if type_ in ("ERROR", "BOOKMARK"):
            return orjson.dumps({"type": type_, "object": obj}) + b"\n"
        obj = _with_version(self.rt, obj)
        if self.table_version:
            table = self.verbs._table(self.request, self.rt, [obj], {
                "resourceVersion": obj["metadata"]["resourceVersion"]}, self.table_version,
                include_headers=self.first_row)
            self.first_row = False
            return orjson.dumps({"type": type_, "object": table}) + b"\n"
        if event is not None and obj is event.new:
            encoded: bytes = event.encoded(type_)
            return encoded
        return orjson.dumps({"type": type_, "object": obj}) + b"\n"


def _dry_run(request: web.Request) -> bool:
    return "All" in request.query.getall("dryRun", [])


def _field_validation(request: web.Request) -> str:
    """Ignore, Warn (the default) or Strict: other values were refused with the request's options."""
    return request.query.get("fieldValidation", "") or "Warn"


def _patch_names_rv(kind: str, body: Any) -> bool:
    if kind == request_bodies.JSON_PATCH:
        return any(isinstance(op, dict) and op.get("path") == "/metadata/resourceVersion" for op in body)
    return isinstance(body, dict) and bool((body.get("metadata") or {}).get("resourceVersion"))


def _without_status_on_create(rt: ResourceType, obj: Obj) -> Obj:
    """A custom resource with a status subresource cannot be created with a status (apiextensions drops it)."""
    if rt.schema is not None and "status" in rt.subresources and "status" in obj:
        return {k: v for k, v in obj.items() if k != "status"}
    return obj


def _allows_unconditional_update(rt: ResourceType) -> bool:
    """Most built-in types accept a PUT without resourceVersion (last write wins); custom resources do not."""
    return rt.schema is None
