"""The resource verbs: get, list, watch, create, update, patch, delete, deletecollection."""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.selectors import FieldSelector, LabelSelector
from colocation.apimachinery.tables import include_object, wants_table
from colocation.apimachinery.watch_params import ListOptions, name_selector, query_flag
from colocation.apimachinery.watch_queue import event_line
from colocation.apimachinery.watch_stream import EventEncoder, JsonEvents, TableEvents, WatchServing
from colocation_sandbox.server import patches, request_bodies, server_side_tables
from colocation_sandbox.server.admission import admit
from colocation_sandbox.server.object_store import Store
from colocation_sandbox.server.object_watch_window import QueueItem, Watcher, WatchFilter
from colocation_sandbox.server.request_options import check_delete_options, check_write_options
from colocation_sandbox.server.resource_types import EXTRA_SELECTABLE_FIELDS, ResourceType

JSON = "application/json"


def json_response(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else None
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON, headers=headers)


def _query_filter(rt: ResourceType, namespace: str, label_selector: str, *, field_selector: str) -> WatchFilter:
    labels = LabelSelector.parse(label_selector) if label_selector else None
    allowed = ("metadata.name", "metadata.namespace", *EXTRA_SELECTABLE_FIELDS.get(rt.storage_key, ()))
    fields = FieldSelector.parse(field_selector, allowed) if field_selector else None
    return WatchFilter(namespace, labels, fields)


def _with_version(rt: ResourceType, obj: Obj) -> Obj:
    """Objects are stored once; each version of a custom resource is read with its own apiVersion."""
    return obj if obj.get("apiVersion") == rt.api_version else {**obj, "apiVersion": rt.api_version}


class Verbs:
    """The generic REST semantics for every stored type. Special subresources live elsewhere."""

    def __init__(self, store: Store, *, bookmark_interval: float = 60.0, clock: Callable[[], float] = time.time,
                 watch_queue_size: int = 10_000) -> None:
        self.store = store
        self.serving = WatchServing(bookmark_interval=bookmark_interval)
        self.clock = clock
        self.watch_queue_size = watch_queue_size
        self.watchers: set[Watcher] = set()

    # ---- reads -------------------------------------------------------------------------------

    def get(self, request: web.Request, rt: ResourceType, namespace: str, *, name: str) -> web.Response:
        table_version = wants_table(request.headers.get("Accept", ""))
        obj = _with_version(rt, self.store.get(rt, namespace, name))
        if table_version:
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return json_response(self._table(rt, [obj], meta, version=table_version,
                                             include=include_object(request.query)))
        return json_response(obj)

    def list_collection(self, request: web.Request, rt: ResourceType, namespace: str) -> web.Response:
        table_version = wants_table(request.headers.get("Accept", ""))
        options = ListOptions.from_query(request.query)
        flt = _query_filter(rt, namespace, options.label_selector, field_selector=options.field_selector)
        items, rv, token, remaining = self.store.list(rt, namespace, flt, limit=options.limit,
                                                      continue_token=options.continue_token)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        items = [_with_version(rt, o) for o in items]
        if table_version:
            return json_response(self._table(rt, items, meta, version=table_version,
                                             include=include_object(request.query)))
        return json_response({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                              "items": items})

    def _table(self, rt: ResourceType, items: list[Obj], meta: dict[str, Any], *, version: str, include: str,
               include_headers: bool = True) -> dict[str, Any]:
        return server_side_tables.to_table(rt, items, list_meta=meta, include_object=include, table_version=version,
                                           now=dt.datetime.fromtimestamp(self.clock(), tz=dt.UTC),
                                           include_headers=include_headers)

    async def watch(self, request: web.Request, rt: ResourceType, namespace: str, *, name: str) -> web.StreamResponse:
        """A watch of a collection, or of one object (`name`: /watch/.../NAME, or a get with ?watch)."""
        table_version = wants_table(request.headers.get("Accept", ""))
        options = ListOptions.from_query(request.query, watch=True)
        flt = _query_filter(rt, namespace, options.label_selector, field_selector=options.field_selector)
        if name:
            flt = WatchFilter(namespace, flt.labels, name_selector(flt.fields, name))
        encoder: EventEncoder[QueueItem] = JsonEvents(functools.partial(_event_line, rt))
        if table_version:
            encoder = self._table_events(rt, table_version, include_object(request.query))
        watcher = self.store.watch(rt, namespace, flt, resource_version=options.resource_version,
                                   send_initial_events=options.send_initial_events, queue_size=self.watch_queue_size)
        self.watchers.add(watcher)
        try:
            return await self.serving.serve(request, options, watcher, encoder=encoder)
        finally:
            self.watchers.discard(watcher)

    def _table_events(self, rt: ResourceType, version: str, include: str) -> TableEvents[QueueItem]:
        def decode(item: QueueItem) -> tuple[str, Obj]:
            return item[0], _with_version(rt, item[1])

        def table(objects: list[Obj], headers: bool) -> Obj:
            # A bookmark has only metadata: it prints as a row of empty cells, as upstream's does.
            meta = {"resourceVersion": objects[0]["metadata"]["resourceVersion"]}
            return self._table(rt, objects, meta, version=version, include=include, include_headers=headers)

        return TableEvents(decode, table)

    def drop_watches(self) -> int:
        """Fault injection: end every open watch, as a restarting apiserver would."""
        dropped = list(self.watchers)
        for watcher in dropped:
            watcher.close()
        return len(dropped)

    # ---- writes ------------------------------------------------------------------------------

    def create(self, request: web.Request, rt: ResourceType, namespace: str, *, body: Obj) -> web.Response:
        check_write_options("CreateOptions", request.query)
        obj = _without_status_on_create(rt, self._scoped(rt, namespace, body))
        obj, warnings = admit(rt, obj, _field_validation(request), creating=True)
        created = self.store.create(rt, obj, dry_run=_dry_run(request))
        return json_response(_with_version(rt, created), 201, warnings)

    def update(self, request: web.Request, rt: ResourceType, namespace: str, *, name: str, subresource: str,
               body: Obj) -> web.Response:
        check_write_options("UpdateOptions", request.query)
        obj = self._scoped(rt, namespace, body)
        if not (obj.get("metadata") or {}).get("resourceVersion") and not _allows_unconditional_update(rt):
            raise ApiError.invalid(rt.group, rt.kind, name, causes=[Cause(
                "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")])
        obj, warnings = self._admit_update(request, rt, namespace, name=name, subresource=subresource, obj=obj)
        updated = self.store.update(rt, namespace, name, obj=obj, subresource=subresource, dry_run=_dry_run(request))
        return json_response(_with_version(rt, updated), 200, warnings)

    def _admit_update(self, request: web.Request, rt: ResourceType, namespace: str, *, name: str,
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

    def patch(self, request: web.Request, rt: ResourceType, namespace: str, *, name: str, subresource: str,
              raw: bytes) -> web.Response:
        content_type = request.headers.get("Content-Type", "")
        if request_bodies.media_type(content_type) in request_bodies.PATCH_TYPES:
            check_write_options("PatchOptions", request.query, patch_type=request_bodies.media_type(content_type))
        kind, body = request_bodies.decode_patch(raw, content_type, rt)
        dry_run = _dry_run(request)
        if kind == request_bodies.APPLY_PATCH:
            return self._apply(request, rt, namespace, name=name, subresource=subresource, body=body, dry_run=dry_run)
        current = self.store.get(rt, namespace, name)
        patched = request_bodies.apply_patch(kind, current, body, rt=rt)
        # A resourceVersion in the patch is a precondition; otherwise the patch applies to the latest.
        check_rv = _patch_names_rv(kind, body)
        if not check_rv:
            patched = {**patched, "metadata": {**(patched.get("metadata") or {}),
                                               "resourceVersion": current["metadata"]["resourceVersion"]}}
        patched, warnings = self._admit_update(request, rt, namespace, name=name, subresource=subresource, obj=patched)
        updated = self.store.update(rt, namespace, name, obj=patched, subresource=subresource, dry_run=dry_run)
        return json_response(_with_version(rt, updated), 200, warnings)

    def _apply(self, request: web.Request, rt: ResourceType, namespace: str, *, name: str, subresource: str,
               body: Obj, dry_run: bool) -> web.Response:
        manager = request.query["fieldManager"]  # required, checked with the other PatchOptions
        body = self._scoped(rt, namespace, body)
        if (body.get("metadata") or {}).get("name", name) != name:
            raise ApiError.bad_request("the name of the object does not match the name on the URL")
        force = query_flag(request.query, "force")
        live = self.store.find(rt, namespace, name)
        now = format_time(self.clock())
        # Each endpoint owns its part: the main resource never applies status, /status nothing else.
        ignored = ("status",) if "status" in rt.subresources and subresource != "status" else ()
        applied = patches.server_side_apply(live, body, manager, force=force, group=rt.group, kind=rt.kind, now=now,
                                            ignored_fields=ignored)
        if live is None:
            applied = _without_status_on_create(rt, applied)
            applied.setdefault("metadata", {})["name"] = name
            applied, warnings = admit(rt, applied, _field_validation(request), creating=True)
            applied["metadata"].pop("resourceVersion", None)
            created = self.store.create(rt, applied, dry_run=dry_run)
            return json_response(_with_version(rt, created), 201, warnings)
        applied, warnings = self._admit_update(request, rt, namespace, name=name, subresource=subresource, obj=applied)
        applied["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        updated = self.store.update(rt, namespace, name, obj=applied, subresource=subresource, dry_run=dry_run)
        return json_response(_with_version(rt, updated), 200, warnings)

    def delete(self, request: web.Request, rt: ResourceType, namespace: str, *, name: str, body: Obj) -> web.Response:
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
        query = request.query
        flt = _query_filter(rt, namespace, query.get("labelSelector", ""),
                            field_selector=query.get("fieldSelector", ""))
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


def _event_line(rt: ResourceType, item: QueueItem) -> bytes:
    """A plain event's line, encoded once and shared by every watcher that sees the object as stored."""
    type_, obj, event = item
    obj = _with_version(rt, obj)
    if event is not None and obj is event.new:
        return event.encoded(type_)
    return event_line(type_, obj)


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
