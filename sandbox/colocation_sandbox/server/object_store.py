"""Objects in memory under one global, increasing resourceVersion, with a window of recent events.

The store follows the Kubernetes registry semantics that clients rely on: uid, creationTimestamp,
generation (bumped when anything but metadata and status changes), generateName, namespaces that
must exist, optimistic concurrency on resourceVersion, no-op updates that change nothing, status
isolated from the main resource, finalizers and deletionTimestamp, and garbage collection of
dependents through ownerReferences. Everything runs on one event loop, so no locks are needed.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import secrets
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from colocation.apimachinery.clock import WallClock, format_time, now
from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.selectors import field_value
from colocation.apimachinery.watch_params import parse_resource_version
from colocation.apimachinery.watch_queue import Bookmark, bookmark_object
from colocation_sandbox.server.object_watch_window import (
    EventWindow,
    QueueItem,
    Watcher,
    WatchFilter,
    initial_events,
    replayed_events,
)
from colocation_sandbox.server.resource_types import Registry, ResourceType

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
StorageKey = tuple[str, str]  # (group, resource)

# Fields with an index, for selectors clients use at scale: every node agent lists its own pods.
_INDEXED_FIELDS: dict[tuple[str, str], str] = {("", "pods"): "spec.nodeName"}
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")
_GENERATE_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # upstream's: no vowels, no confusables


@dataclass(frozen=True, kw_only=True)
class Change:
    """One committed change, handed to listeners (the sandbox's built-in controllers)."""

    rt: ResourceType
    type: str  # ADDED | MODIFIED | DELETED
    old: Obj | None
    new: Obj  # for DELETED: the last state


Listener = Callable[[Change], None]


def validate_name(rt: ResourceType, name: str) -> None:
    if not name:
        raise ApiError.invalid(rt.group, rt.kind, name,
                               causes=[Cause("metadata.name", "Required value", "FieldValueRequired")])
    if rt.group == "rbac.authorization.k8s.io":
        # RBAC objects only need to be valid path segments ("system:auth-delegator" is fine).
        if name in (".", "..") or "/" in name or "%" in name:
            raise ApiError.invalid(rt.group, rt.kind, name, causes=[Cause(
                "metadata.name", f'Invalid value: "{name}": may not contain \'/\' or \'%\'')])
        return
    if len(name) > 253 or not set(name) <= _NAME_CHARS or not name[0].isalnum() or not name[-1].isalnum():
        raise ApiError.invalid(rt.group, rt.kind, name, causes=[Cause(
            "metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
            "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")])


def _spec_part(obj: Obj) -> Obj:
    """What counts towards generation: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


# Metadata that a status write cannot change, by type (PrepareForUpdate of the status strategies in
# k8s.io/kubernetes pkg/registry): the others take labels, annotations, finalizers and owners from it.
_STATUS_WRITES_KEEP_STORED: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("ownerReferences",),  # old kubelets corrupted them
    ("apps", "deployments"): ("labels",),
    ("apiregistration.k8s.io", "apiservices"): ("labels", "annotations", "finalizers", "ownerReferences"),
}


def _keep_stored(meta: dict[str, Any], old_meta: dict[str, Any], field: str) -> None:
    if field in old_meta:
        meta[field] = old_meta[field]
    else:
        meta.pop(field, None)


def _with_stored_status(new: Obj, old: Obj) -> Obj:
    new = {k: v for k, v in new.items() if k != "status"}
    if "status" in old:
        new["status"] = old["status"]
    return new


def pending_finalizers(rt: ResourceType, obj: Obj) -> list[str]:
    """Finalizers that hold an object back from removal (namespaces also have spec.finalizers)."""
    pending = list(obj["metadata"].get("finalizers") or ())
    if rt.storage_key == ("", "namespaces"):
        pending += (obj.get("spec") or {}).get("finalizers") or ()
    return pending


def _without_rv(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": meta}


class Bucket:
    """The objects of one resource: by (namespace, name), by namespace, in key order, and by an
    optional indexed field (pods by spec.nodeName: the query every node agent makes)."""

    def __init__(self, index_field: str | None = None) -> None:
        self._all: dict[Key, Obj] = {}
        self._by_namespace: dict[str, dict[str, Obj]] = {}
        self._sorted: list[Key] | None = []  # rebuilt lazily after keys come or go, not on updates
        self.index_field = index_field
        self._by_field: dict[str, set[Key]] = {}

    def get(self, key: Key) -> Obj | None:
        return self._all.get(key)

    def __contains__(self, key: Key) -> bool:
        return key in self._all

    def __len__(self) -> int:
        return len(self._all)

    def __setitem__(self, key: Key, obj: Obj) -> None:
        old = self._all.get(key)
        if old is None:
            self._sorted = None
        elif self.index_field is not None:
            self._unindex(key, old)
        self._all[key] = obj
        self._by_namespace.setdefault(key[0], {})[key[1]] = obj
        if self.index_field is not None:
            self._by_field.setdefault(field_value(obj, self.index_field), set()).add(key)

    def __delitem__(self, key: Key) -> None:
        old = self._all.pop(key)
        names = self._by_namespace[key[0]]
        del names[key[1]]
        if not names:
            del self._by_namespace[key[0]]
        self._sorted = None
        if self.index_field is not None:
            self._unindex(key, old)

    def _unindex(self, key: Key, obj: Obj) -> None:
        assert self.index_field is not None
        value = field_value(obj, self.index_field)
        keys = self._by_field.get(value)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_field[value]

    def __getitem__(self, key: Key) -> Obj:
        return self._all[key]

    def keys(self, namespace: str = "") -> list[Key]:
        if not namespace:
            return list(self._all)
        return [(namespace, name) for name in self._by_namespace.get(namespace, ())]

    def values(self, namespace: str = "") -> list[Obj]:
        if not namespace:
            return list(self._all.values())
        return list(self._by_namespace.get(namespace, {}).values())

    def sorted_keys(self) -> list[Key]:
        """Every key in (namespace, name) order; shared, never to be modified by the caller."""
        if self._sorted is None:
            self._sorted = sorted(self._all)
        return self._sorted

    def keys_with(self, value: str) -> list[Key]:
        """Keys of the objects whose indexed field has `value`, in key order."""
        return sorted(self._by_field.get(value, ()))


class Store:
    def __init__(self, registry: Registry, *, clock: WallClock = now, window: int = 5000) -> None:
        self.registry = registry
        self.clock = clock
        self.window_size = window
        # Seeded from the clock (microseconds) so a restarted sandbox never reuses a resourceVersion.
        self._rv = int(clock() * 1_000_000)
        self._first_rv = self._rv
        self._objects: dict[StorageKey, Bucket] = {}
        self._windows: dict[StorageKey, EventWindow] = {}
        self._listeners: list[Listener] = []
        self._dependents: dict[str, set[tuple[StorageKey, Key]]] = {}  # owner uid -> dependents

    # ---- bookkeeping -------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _bucket(self, rt: ResourceType) -> Bucket:
        bucket = self._objects.get(rt.storage_key)
        if bucket is None:
            bucket = self._objects[rt.storage_key] = Bucket(_INDEXED_FIELDS.get(rt.storage_key))
        return bucket

    def window(self, rt: ResourceType) -> EventWindow:
        window = self._windows.get(rt.storage_key)
        if window is None:
            # A resource without a window has had no events since the store began: a watch may
            # resume from any version since then (an informer's list may predate the window).
            window = self._windows[rt.storage_key] = EventWindow(self.window_size, self._first_rv)
        return window

    def _commit(self, rt: ResourceType, type_: str, old: Obj | None, *, new: Obj, rv: int) -> None:
        self._index_owners(rt, old, new if type_ != "DELETED" else None)
        self.window(rt).append(rv, type_, old, new=new)
        change = Change(rt=rt, type=type_, old=old, new=new)
        for listener in self._listeners:
            listener(change)

    def _index_owners(self, rt: ResourceType, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            meta = obj["metadata"]
            key = (rt.storage_key, (meta.get("namespace", ""), meta["name"]))
            for ref in meta.get("ownerReferences") or ():
                uid = ref.get("uid", "")
                if add:
                    self._dependents.setdefault(uid, set()).add(key)
                elif uid in self._dependents:
                    self._dependents[uid].discard(key)
                    if not self._dependents[uid]:
                        del self._dependents[uid]

    def _check_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not rt.namespaced:
            return
        if not namespace:
            raise ApiError.bad_request("the namespace of the provided object does not match the namespace "
                                       "sent on the request")
        namespaces = self._objects.get(("", "namespaces"))
        ns = namespaces.get(("", namespace)) if namespaces is not None else None
        if ns is None:
            raise ApiError.not_found("", "namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f'{rt.resource} "{name}" is forbidden: unable to create new '
                           f"content in namespace {namespace} because it is being terminated")

    # ---- reads -------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self._bucket(rt).get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise ApiError.not_found(rt.group, rt.resource, name)
        return obj

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._bucket(rt).get((namespace if rt.namespaced else "", name))

    def objects(self, rt: ResourceType, namespace: str = "") -> Iterator[Obj]:
        """Current objects of a type, in one namespace or all (""); unordered."""
        return iter(self._bucket(rt).values(namespace if rt.namespaced else ""))

    def count(self, rt: ResourceType) -> int:
        return len(self._bucket(rt))

    def list(self, rt: ResourceType, namespace: str, flt: WatchFilter, *, limit: int = 0,
             continue_token: str = "") -> tuple[list[Obj], int, str, int | None]:
        """Objects sorted by namespace and name: (items, resourceVersion, continue, remaining).

        `remaining` (remainingItemCount) is only known, as upstream, when no selector filters.
        """
        bucket = self._bucket(rt)
        list_rv = self._rv
        start_after: Key | None = None
        if continue_token:
            start_after, list_rv = _decode_continue(continue_token)
        namespace = namespace if rt.namespaced else ""
        keys, low, high = _candidate_keys(bucket, namespace, flt)
        position = bisect.bisect_right(keys, start_after, low, high) if start_after is not None else low
        items: list[Obj] = []
        next_key: Key | None = None
        remaining: int | None = None
        for index in range(position, high):
            obj = bucket.get(keys[index])
            if obj is None or not flt.matches(obj):
                continue
            if limit and len(items) == limit:
                next_key = items_key(items[-1])
                if flt.labels is None and (flt.fields is None or flt.fields.empty):
                    remaining = high - index
                break
            items.append(obj)
        token = _encode_continue(next_key, list_rv) if next_key is not None else ""
        return items, list_rv, token, remaining

    # ---- writes ------------------------------------------------------------------------------

    def create(self, rt: ResourceType, obj: Obj, *, dry_run: bool = False) -> Obj:
        meta = dict(obj.get("metadata") or {})
        namespace = meta.get("namespace", "") if rt.namespaced else ""
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(
                secrets.choice(_GENERATE_SUFFIX_ALPHABET) for _ in range(5))
        name = meta.get("name", "")
        validate_name(rt, name)
        self._check_namespace(rt, namespace, name)
        bucket = self._bucket(rt)
        if (namespace, name) in bucket:
            raise ApiError.already_exists(rt.group, rt.resource, name)
        if meta.get("resourceVersion"):
            raise ApiError.bad_request("resourceVersion should not be set on objects to be created")
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=format_time(self.clock()))
        if rt.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        new = {**obj, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta}
        if dry_run:
            return {**new, "metadata": {**meta, "resourceVersion": str(self._rv)}}
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        bucket[(namespace, name)] = new
        self._commit(rt, "ADDED", None, new=new, rv=rv)
        return new

    def update(self, rt: ResourceType, namespace: str, name: str, *, obj: Obj, subresource: str = "",
               check_rv: bool = True, dry_run: bool = False) -> Obj:
        """Replace an object (PUT semantics). The caller has already applied any patch to `obj`."""
        old = self.get(rt, namespace, name)
        old_meta = old["metadata"]
        meta = dict(obj.get("metadata") or {})
        if meta.get("name", name) != name:
            raise ApiError.bad_request(f'the name of the object ({meta.get("name")}) does not match the name '
                                       f"on the URL ({name})")
        wanted_rv = meta.get("resourceVersion")
        if check_rv and wanted_rv and wanted_rv != old_meta["resourceVersion"]:
            raise ApiError.conflict(rt.group, rt.resource, name, why="the object has been modified; please apply "
                                    "your changes to the latest version and try again")
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise ApiError.conflict(rt.group, rt.resource, name, why=f'Precondition failed: UID in precondition: '
                                    f'{meta["uid"]}, UID in object meta: {old_meta["uid"]}')
        new = self._merge_update(rt, old, obj, meta=meta, subresource=subresource)
        if _without_rv(new) == _without_rv(old):
            return old  # a no-op write changes nothing, not even the resourceVersion
        if dry_run:
            return new
        if new["metadata"].get("deletionTimestamp") and not pending_finalizers(rt, new):
            # The update that removes the last finalizer is not stored: the object is deleted as it
            # was (watchers see it with its finalizers), and the caller gets what it asked for.
            new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
            rv = self._next_rv()
            del self._bucket(rt)[(namespace if rt.namespaced else "", name)]
            gone = {**old, "metadata": {**old_meta, "resourceVersion": str(rv)}}
            self._commit(rt, "DELETED", old, new=gone, rv=rv)
            self._collect_dependents(gone)
            return new
        rv = self._next_rv()
        new["metadata"]["resourceVersion"] = str(rv)
        self._bucket(rt)[(namespace if rt.namespaced else "", name)] = new
        self._commit(rt, "MODIFIED", old, new=new, rv=rv)
        return new

    def _merge_update(self, rt: ResourceType, old: Obj, obj: Obj, *, meta: dict[str, Any],
                      subresource: str) -> Obj:
        old_meta = old["metadata"]
        # Fields the server owns are never taken from the request.
        for field in ("uid", "creationTimestamp", "namespace", "generation", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "resourceVersion"):
            _keep_stored(meta, old_meta, field)
        meta["name"] = old_meta["name"]
        if old_meta.get("deletionTimestamp"):
            # Once deleting, finalizers may only be removed, never added.
            old_finalizers = set(old_meta.get("finalizers") or ())
            if set(meta.get("finalizers") or ()) - old_finalizers:
                raise ApiError.invalid(rt.group, rt.kind, old_meta["name"], causes=[Cause(
                    "metadata.finalizers", "Forbidden: no new finalizers can be added if the object is being "
                    "deleted", "FieldValueForbidden")])
        has_status = "status" in rt.subresources
        if subresource == "status":
            # The status subresource never changes the spec; what of the metadata it takes from the
            # request is each type's status strategy's choice (all of it, for most built-in types).
            new = {k: v for k, v in old.items() if k != "status"}
            if "status" in obj:
                new["status"] = obj["status"]
            if rt.schema is not None:  # custom resources: status only
                new["metadata"] = dict(old_meta)
                return new
            for field in _STATUS_WRITES_KEEP_STORED.get(rt.storage_key, ()):
                _keep_stored(meta, old_meta, field)
            new["metadata"] = meta
            return new
        if subresource == "finalize" and rt.storage_key == ("", "namespaces"):
            new = {**obj, "apiVersion": old["apiVersion"], "kind": old["kind"], "metadata": meta}
            return _with_stored_status(new, old)
        if subresource == "binding" and rt.storage_key == ("", "pods"):
            # Binding writes the stored pod directly, past the strategy: no generation bump.
            return {**obj, "apiVersion": old["apiVersion"], "kind": old["kind"], "metadata": meta}
        if subresource:
            raise ApiError.method_not_allowed(f"subresource {subresource} does not support update here")
        new = {**obj, "apiVersion": old["apiVersion"], "kind": old["kind"], "metadata": meta}
        if has_status:
            # The main resource never changes status when a status subresource exists.
            new = _with_stored_status(new, old)
        if rt.storage_key == ("", "namespaces"):
            # spec.finalizers change through /finalize only.
            spec = {k: v for k, v in (new.get("spec") or {}).items() if k != "finalizers"}
            if "finalizers" in (old.get("spec") or {}):
                spec["finalizers"] = old["spec"]["finalizers"]
            new["spec"] = spec
        counted = _spec_part(new) if has_status or rt.schema is None else {
            k: v for k, v in new.items() if k not in ("metadata", "apiVersion", "kind")}
        before = _spec_part(old) if has_status or rt.schema is None else {
            k: v for k, v in old.items() if k not in ("metadata", "apiVersion", "kind")}
        if rt.storage_key == ("apps", "deployments"):
            # Annotations are copied to the ReplicaSets, so they bump the generation too.
            counted["annotations"], before["annotations"] = meta.get("annotations"), old_meta.get("annotations")
        if counted != before and rt.tracks_generation:
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        return new

    def delete(self, rt: ResourceType, namespace: str, name: str, *, preconditions: dict[str, Any] | None = None,
               dry_run: bool = False, orphan: bool = False) -> tuple[Obj, bool]:
        """Delete, or mark deleting while finalizers remain. Returns (object, gone_now)."""
        old = self.get(rt, namespace, name)
        meta = old["metadata"]
        pre = preconditions or {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise ApiError.conflict(rt.group, rt.resource, name, why=f"Precondition failed: ResourceVersion in "
                                    f"precondition: {pre['resourceVersion']}, ResourceVersion in object meta: "
                                    f"{meta['resourceVersion']}")
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise ApiError.conflict(rt.group, rt.resource, name, why=f"Precondition failed: UID in precondition: "
                                    f"{pre['uid']}, UID in object meta: {meta['uid']}")
        if dry_run:
            return old, not pending_finalizers(rt, old)
        key = (namespace if rt.namespaced else "", name)
        if pending_finalizers(rt, old):
            if meta.get("deletionTimestamp"):
                return old, False
            rv = self._next_rv()
            new = {**old, "metadata": {**meta, "deletionTimestamp": format_time(self.clock()),
                                        "deletionGracePeriodSeconds": 0, "resourceVersion": str(rv)}}
            self._bucket(rt)[key] = new
            self._commit(rt, "MODIFIED", old, new=new, rv=rv)
            return new, False
        rv = self._next_rv()
        del self._bucket(rt)[key]
        gone = {**old, "metadata": {**meta, "resourceVersion": str(rv)}}
        self._commit(rt, "DELETED", old, new=gone, rv=rv)
        if orphan:
            self._orphan_dependents(gone)
        else:
            self._collect_dependents(gone)
        return gone, True

    def _orphan_dependents(self, owner: Obj) -> None:
        """Orphaning deletion: the garbage collector removes the owner's reference from each dependent."""
        uid = owner["metadata"]["uid"]
        for storage_key, (namespace, name) in sorted(self._dependents.pop(uid, set())):
            rt = next((r for r in self.registry if r.storage_key == storage_key), None)
            obj = self.find(rt, namespace, name) if rt is not None else None
            if rt is None or obj is None:
                continue
            meta = {k: v for k, v in obj["metadata"].items() if k != "ownerReferences"}
            refs = [ref for ref in obj["metadata"].get("ownerReferences") or () if ref.get("uid") != uid]
            if refs:
                meta["ownerReferences"] = refs
            self.update(rt, namespace, name, obj={**obj, "metadata": meta}, check_rv=False)

    def _collect_dependents(self, owner: Obj) -> None:
        """Background cascading deletion, as the garbage collector does it."""
        for storage_key, (namespace, name) in sorted(self._dependents.pop(owner["metadata"]["uid"], set())):
            rt = next((r for r in self.registry if r.storage_key == storage_key), None)
            if rt is not None and self.find(rt, namespace, name) is not None:
                self.delete(rt, namespace, name)

    def drop_type(self, rt: ResourceType) -> None:
        """Forget every object of a type (its CRD was deleted); watchers see them deleted."""
        for (namespace, name) in self._bucket(rt).keys(""):
            obj = self._bucket(rt)[(namespace, name)]
            if obj["metadata"].get("finalizers"):
                obj = {**obj, "metadata": {**obj["metadata"], "finalizers": []}}
                self._bucket(rt)[(namespace, name)] = obj
            self.delete(rt, namespace, name)
        self._objects.pop(rt.storage_key, None)

    # ---- watch -------------------------------------------------------------------------------

    def watch(self, rt: ResourceType, namespace: str, flt: WatchFilter, *, resource_version: str,
              send_initial_events: bool | None, queue_size: int = 10_000) -> Watcher:
        """Start a watch as the watch cache starts one.

        `send_initial_events` is None when the client did not set it: then "" and "0" start with
        the current objects as ADDED, and any other version resumes after it. True sends the
        current objects whatever the version, then the BOOKMARK that ends them; False starts
        from now, or after the given version. A version older than the window is 410 Expired,
        in the stream; a malformed one is 400.
        """
        window = self.window(rt)
        since = parse_resource_version(resource_version)
        if flt.namespace != namespace:
            flt = WatchFilter(namespace, flt.labels, flt.fields)
        backlog: Iterable[QueueItem | Bookmark] = ()
        if send_initial_events or (since == 0 and send_initial_events is None):
            backlog = initial_events(flt, sorted(self.objects(rt, namespace), key=items_key))
            if send_initial_events:
                end = bookmark_object(rt.kind, rt.api_version, self._rv, initial_events_end=True)
                backlog = itertools.chain(backlog, (Bookmark(end),))
        elif since and since < window.oldest_resumable:
            expired = Watcher(flt, queue_size)
            expired.expire(ApiError.gone(f"too old resource version: {since} ({window.oldest_resumable})").status())
            return expired
        elif since:
            backlog = replayed_events(flt, window.since(since))
        watcher = Watcher(flt, queue_size, backlog=backlog,
                          bookmark=lambda: bookmark_object(rt.kind, rt.api_version, self._rv))
        window.attach(watcher)
        return watcher

    def serialize(self, obj: Obj) -> bytes:
        return orjson.dumps(obj)


def _candidate_keys(bucket: Bucket, namespace: str, flt: WatchFilter) -> tuple[list[Key], int, int]:
    """Sorted keys that may match, and the slice [low, high) of them to scan."""
    fields = flt.fields
    name = fields.exact("metadata.name") if fields is not None else None
    indexed = fields.exact(bucket.index_field) if fields is not None and bucket.index_field else None
    if name is not None:
        keys = [(namespace, name)] if namespace else sorted(k for k in bucket.keys("") if k[1] == name)
    elif indexed is not None:
        keys = [k for k in bucket.keys_with(indexed) if not namespace or k[0] == namespace]
    else:
        keys = bucket.sorted_keys()
        if namespace:
            # ("ns",) sorts before every ("ns", name) and ("ns\0",) after them all.
            return keys, bisect.bisect_left(keys, (namespace,)), bisect.bisect_left(keys, (namespace + "\0",))
    return keys, 0, len(keys)


def items_key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _encode_continue(key: Key, rv: int) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{key[0]}/{key[1]}"})
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[Key, int]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, _, name = str(data["start"]).partition("/")
        return (namespace, name), int(data["rv"])
    except (ValueError, KeyError, TypeError):
        raise ApiError.bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                                   "(version meta.k8s.io/v1)") from None
