"""The NodeMetric API group (metrics.colocation.dev/v1alpha1): get, list and watch, and the agents' writes.

Reads are served by every replica from its copy (a standby's copy follows the leader), so the
informers of other components keep working through a failover. Writes (agent reports) are
accepted by the leader only; a standby answers 503 with a Status naming the leader and a
Retry-After of 1 s (client-go then sends it again, and the Service may reach the leader). A report
whose updateTime the store replaced by the receipt time (more than `MAX_UPDATE_TIME_AHEAD` ahead)
is answered with a `Warning` header saying so, as kube-apiserver sends warnings (client-go logs
them). Other stages may take agent writes to further subresources of nodemetrics (custom metric
samples) through an `AgentUpload`: the same checks apply, and the API server does not learn what
they hold.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson
from aiohttp import web

from colocation.apimachinery import discovery_documents as legacy
from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.selectors import FieldSelector, LabelSelector
from colocation.apimachinery.served_apigroups import (
    VERB,
    Authenticate,
    Authorizer,
    Caller,
    Document,
    Leadership,
    OpenApiDocuments,
    json_response,
)
from colocation.apimachinery.tables import TABLE_GROUP, include_object, wants_metadata_only, wants_table
from colocation.apimachinery.userinfo import Extra
from colocation.apimachinery.watch_params import (
    MIN_REQUEST_TIMEOUT,
    ListOptions,
    parse_resource_version,
    query_flag,
)
from colocation.apimachinery.watch_stream import EventEncoder, TableEvents, WatchServing, pre_encoded
from colocation.apiserver import nodemetric_openapi, nodemetric_table
from colocation.apiserver.apiserver_metrics import ServerMetrics
from colocation.apiserver.delegated_authorization import check_node_rule
from colocation.apiserver.generic_apiserver import MAX_REPORT_BYTES
from colocation.apiserver.replica_followers import ReplicaFollowers
from colocation.kube.lease_record import (
    LEADER_CAUSE,
    REPLICA_HEADER,
    REPLICAS_HEADER,
    REPLICAS_SEEN_HEADER,
    AdvertisedReplicas,
)
from colocation.nodemetrics.consistent_reads import reach_by_clock
from colocation.nodemetrics.report_schema import (
    BASE_PATH,
    COLLECTION_PATH,
    GROUP,
    KIND,
    MAX_UPDATE_TIME_AHEAD,
    RESOURCE,
    VERSION,
    ValidatedReport,
    validate_report,
)
from colocation.nodemetrics.storage_interface import Entry, NodeMetricServing, update_time_ahead

GROUP_VERSION = f"{GROUP}/{VERSION}"
# A report into a store every replica writes: the entry as this replica serves it (ApiError 503
# when the store does not take it).
SharedWrites = Callable[[ValidatedReport, Mapping[str, str]], Awaitable[Entry]]
# Agents' writes a leader waiting to renew its Lease holds at once; more are refused at once.
MAX_HELD_WRITES = 20_000
# How long a read waits for a resourceVersion ahead of this replica: the watch cache's blockTimeout.
TOO_LARGE_WAIT = 3.0
# Before a read: with 0 (no resourceVersion), wait for the most recent data; with a resourceVersion,
# wait until this replica has reached it (504 "Too large resource version" if it does not in time).
ReadBarrier = Callable[[int], Awaitable[None]]
_Validated = TypeVar("_Validated")
_NO_EXTRA = Extra()  # shared: an Extra is immutable, and making one per report costs
# Only operator replicas may follow the leader's sample feed: that grant tells a replica's feed apart.
FOLLOWED_FEED = "samplebatches"


class AgentUpload(Protocol[_Validated]):
    """An agent's write to nodemetrics/{node}/SUBRESOURCE that another stage stores."""

    @property
    def subresource(self) -> str: ...

    @property
    def any_replica(self) -> bool:
        """Whether any replica takes it (else the leader only)."""

    @property
    def rejected(self) -> Any:
        """Refusals by reason: a prometheus_client Counter with one label."""

    def validate(self, raw: bytes, node: str) -> _Validated:
        """The body, validated; ApiError (400/422) if bad."""

    def accept(self, validated: _Validated) -> Any:
        """Store it (or act on it); the JSON to answer with, or an awaitable of it."""


@dataclass
class ApiOptions:
    bookmark_interval: float = 60.0
    # kube-apiserver's --min-request-timeout: a watch without timeoutSeconds lasts between it and twice it.
    min_request_timeout: float = MIN_REQUEST_TIMEOUT


def api_resource_list() -> dict[str, Any]:
    return legacy.api_resource_list(GROUP, VERSION, [
        legacy.api_resource(RESOURCE, KIND, ("get", "list", "watch"), namespaced=False, singular_name="nodemetric",
                            short_names=("nm",)),
        legacy.api_resource(f"{RESOURCE}/status", KIND, ("get", "update"), namespaced=False),
    ])


class NodeMetricGroup:
    def __init__(self, store: NodeMetricServing, authorizer: Authorizer, leadership: Leadership,
                 *, known_node: Callable[[str], bool], node_labels: Callable[[str], Mapping[str, str] | None],
                 metrics: ServerMetrics, options: ApiOptions | None = None, wall: Callable[[], float] = time.time,
                 uploads: Sequence[AgentUpload[Any]] = (),
                 read_barrier: ReadBarrier | None = None, followers: ReplicaFollowers | None = None,
                 shared_writes: SharedWrites | None = None,
                 advertised_replicas: Callable[[], AdvertisedReplicas | None] | None = None,
                 stale_warning: Callable[[], str | None] | None = None) -> None:
        self.store = store
        # With a store every replica writes (--store nats): any replica takes an agent's report,
        # and tells an agent that knows other replicas than those advertised which ones take them now.
        self.shared_writes = shared_writes
        self.advertised_replicas = advertised_replicas
        # Why a read may be stale (a replica cut off from the shared store): served, with a Warning.
        self.stale_warning = stale_warning
        self.followers = followers
        self.read_barrier = read_barrier
        self.authorizer = authorizer
        self.leadership = leadership
        self.known_node = known_node
        self.node_labels = node_labels
        self.metrics = metrics
        self.options = options or ApiOptions()
        self.serving = WatchServing(bookmark_interval=self.options.bookmark_interval,
                                    min_request_timeout=self.options.min_request_timeout)
        self.wall = wall
        self.uploads = tuple(uploads)
        # Awaited before a leader takes an agent's write in or serves a standby's feed (set by the
        # manager): a new leader's first evaluation runs before the agents' reports, which all come
        # at once after a failover, and the copy a restarted standby lists would stretch it
        # (`Controllers.first_evaluation_done`).
        self.first_evaluation_hold: Callable[[], Awaitable[None]] | None = None
        # Awaited before a replica that does not lead refuses an agent's write (set by the manager):
        # a leader that lost its Lease to an API outage holds the write until it leads again, or a
        # few seconds (True: it leads again; None: it is not such a leader, and refuses at once).
        self.rejoin_hold: Callable[[], Awaitable[bool | None]] | None = None
        self._held = 0  # agents' writes waiting in rejoin_hold
        self._authenticate: Authenticate | None = None

    # ---- what the API server serves for the group ----------------------------------------------

    def discovery_groups(self) -> dict[str, tuple[str, ...]]:
        return {GROUP: (VERSION,)}

    def resource_lists(self) -> dict[str, Document]:
        return {GROUP_VERSION: api_resource_list}

    def openapi(self) -> OpenApiDocuments:
        return OpenApiDocuments(v2=nodemetric_openapi.openapi_v2,
                                v3={BASE_PATH.removeprefix("/"): nodemetric_openapi.openapi_v3_group_version})

    def add_routes(self, router: web.UrlDispatcher, authenticate: Authenticate) -> None:
        self._authenticate = authenticate
        router.add_get(COLLECTION_PATH, self._list_or_watch)
        router.add_get(COLLECTION_PATH + "/{name}", self._get)
        router.add_get(COLLECTION_PATH + "/{name}/status", self._get)
        router.add_put(COLLECTION_PATH + "/{name}/status", self._report)
        for upload in self.uploads:
            router.add_put(f"{COLLECTION_PATH}/{{name}}/{upload.subresource}", self._upload_handler(upload))

    async def _caller(self, request: web.Request) -> Caller:
        assert self._authenticate is not None, "add_routes() first"
        return await self._authenticate(request)

    # ---- reads ---------------------------------------------------------------------------------

    async def _authorize_read(self, request: web.Request, verb: str, name: str = "") -> Caller:
        request[VERB] = verb
        caller = await self._caller(request)
        await self.authorizer.authorize(caller, verb, RESOURCE, name=name)
        return caller

    async def _get(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        await self._authorize_read(request, "get", name)
        await self._reach(request.query.get("resourceVersion", ""))
        table_version = wants_table(request.headers.get("Accept", ""))
        entry = self.store.get(name)
        if entry is None:
            raise ApiError.not_found(GROUP, RESOURCE, name)
        if table_version:
            row = nodemetric_table.entry_row(entry, self.wall(), include_object(request.query), version=table_version)
            return self._warned(json_response(nodemetric_table.table([row], entry.resource_version, table_version)))
        return self._warned(web.Response(body=entry.body, content_type="application/json"))

    def _warned(self, response: web.Response) -> web.Response:
        """`response`, with a Warning header when this replica's copy may be stale."""
        if self.stale_warning is not None and (text := self.stale_warning()) is not None:
            response.headers["Warning"] = warning_header(text)
        return response

    async def _reach(self, resource_version: str) -> int:
        """Wait until this replica may serve a read at `resource_version` and return it as a number.

        None ("") wants the most recent data (on a standby: what the leader had when the read
        arrived); "0" any; a version ahead of the store waits until the store has reached it or
        gets 504 (`consistent_reads`). Nothing here changes the store: a read never moves its
        resourceVersion.
        """
        since = parse_resource_version(resource_version)
        if not resource_version:
            if self.read_barrier is not None:
                await self.read_barrier(0)
        elif since > self.store.resource_version:
            if self.read_barrier is not None:
                await self.read_barrier(since)
            else:
                await reach_by_clock(since, lambda: self.store.resource_version, self.wall, timeout=TOO_LARGE_WAIT)
        return since

    @staticmethod
    def _selection(options: ListOptions) -> tuple[LabelSelector | None, str | None]:
        labels = LabelSelector.parse(options.label_selector) if options.label_selector else None
        name = None
        if options.field_selector:
            fields = FieldSelector.parse(options.field_selector, ("metadata.name",))
            name = fields.exact_name()
            if name is None and not fields.empty:
                raise ApiError.bad_request("only metadata.name=NAME field selectors are supported for nodemetrics")
        return labels, name

    async def _list_or_watch(self, request: web.Request) -> web.StreamResponse:
        if REPLICA_HEADER in request.headers and self.first_evaluation_hold is not None and self.leadership.is_leader:
            await self.first_evaluation_hold()  # a standby's feed: after a new leader's first evaluation
        if query_flag(request.query, "watch"):
            return await self._watch(request)
        await self._authorize_read(request, "list")
        table_version = wants_table(request.headers.get("Accept", ""))
        options = ListOptions.from_query(request.query)
        options.check_unpaged()
        labels, name = self._selection(options)
        await self._reach(options.resource_version)
        if table_version:
            entries, rv = self.store.list(labels, name)
            include, now = include_object(request.query), self.wall()
            rows = [nodemetric_table.entry_row(entry, now, include, version=table_version) for entry in entries]
            return self._warned(json_response(nodemetric_table.table(rows, rv, table_version)))
        return self._warned(web.Response(body=self.store.list_body(labels, name), content_type="application/json"))

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        caller = await self._authorize_read(request, "watch")
        table_version = wants_table(request.headers.get("Accept", ""))
        options = ListOptions.from_query(request.query, watch=True)
        labels, name = self._selection(options)
        encoder: EventEncoder[bytes] = pre_encoded()
        if table_version:
            encoder = self._table_events(table_version, include_object(request.query))
        resume_after = options.resource_version
        if options.resource_version and await self._reach(options.resource_version) > self.store.resource_version:
            # Reached by the clock (a client of a previous leader): nothing happened here between the
            # store's version and it, and every later change takes a version above it.
            resume_after = str(self.store.resource_version)
        watcher = self.store.watch(resume_after, labels, name, send_initial_events=options.send_initial_events)
        with await self._follower(request, caller):
            return await self.serving.serve(request, options, watcher, encoder=encoder)

    async def _follower(self, request: web.Request, caller: Caller) -> contextlib.AbstractContextManager[None]:
        """A standby's feed counts it among the replicas the leader publishes while it is open
        (`replica_followers`); a replica is a caller allowed to follow the leader's sample feed."""
        announced = request.headers.get(REPLICA_HEADER)
        if announced is None or self.followers is None or not self.leadership.is_leader:
            return contextlib.nullcontext()
        try:
            await self.authorizer.authorize(caller, "watch", FOLLOWED_FEED, api_group=GROUP)
        except ApiError:
            return contextlib.nullcontext()
        return self.followers.following(announced)

    def _table_events(self, version: str, include: str) -> TableEvents[bytes]:
        def table(objects: list[Obj], headers: bool) -> Obj:
            now = self.wall()
            rows = [nodemetric_table.object_row(obj, now, include, version=version) for obj in objects]
            return nodemetric_table.table(rows, objects[0]["metadata"]["resourceVersion"], version,
                                          include_headers=headers)

        return TableEvents(_decoded, table)

    # ---- writes --------------------------------------------------------------------------------

    async def _report(self, request: web.Request) -> web.Response:
        node, report = await self._from_agent(request, "status", validate_report,
                                              rejected=self.metrics.reports_rejected,
                                              any_replica=self.shared_writes is not None)
        metadata_version = wants_metadata_only(request.headers.get("Accept", ""))  # a 406 stores nothing
        labels = self.node_labels(node) or {}
        entry = await self.shared_writes(report, labels) if self.shared_writes is not None \
            else self.store.put(report, labels)
        self.metrics.reports_accepted.inc()
        ahead = update_time_ahead(report, entry)
        headers = {"Warning": update_time_warning(ahead, entry.figures.update_time)} if ahead else {}
        if self.advertised_replicas is not None and (replicas := self.advertised_replicas()) is not None \
                and request.headers.get(REPLICAS_SEEN_HEADER) != replicas.digest:
            headers[REPLICAS_HEADER] = replicas.text
        if metadata_version is not None:
            # The agents ask for this: the object they sent back is half a report's bytes to encrypt.
            return web.Response(body=_partial_metadata(entry, metadata_version), content_type="application/json",
                                headers=headers)
        return web.Response(body=entry.body, content_type="application/json", headers=headers)

    def _upload_handler(self, upload: AgentUpload[Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            _, validated = await self._from_agent(request, upload.subresource, upload.validate,
                                                  rejected=upload.rejected, any_replica=upload.any_replica)
            answer = upload.accept(validated)
            return json_response(await answer if inspect.isawaitable(answer) else answer)

        return handler

    async def _from_agent(self, request: web.Request, subresource: str, validate: Callable[[bytes, str], _Validated],
                          *, rejected: Any, any_replica: bool = False) -> tuple[str, _Validated]:
        """An agent's write to nodemetrics/{node}/SUBRESOURCE: authorized, from that node, valid; on the
        leader only, unless `any_replica`.

        `rejected` counts refusals by reason (a prometheus_client Counter with one label).
        """
        request[VERB] = "update"
        node = request.match_info["name"]
        if not any_replica:
            await self._refuse_unless_leader(rejected)
            if self.first_evaluation_hold is not None:
                await self.first_evaluation_hold()
                await self._refuse_unless_leader(rejected)  # the Lease may have been lost meanwhile
        try:
            caller = await self._caller(request)
            # One review per ServiceAccount, not one per node: the write is authorized for the
            # collection and without the token's per-pod extras (RBAC reads neither), and the node
            # rule then holds each token to its own node.
            agent = Caller(username=caller.username, uid=caller.uid, groups=caller.groups, extra=_NO_EXTRA)
            await self.authorizer.authorize(agent, "update", RESOURCE, subresource=subresource)
            check_node_rule(caller, node)
            raw = await self._read_body(request)
            validated = validate(raw, node)
            if not self.known_node(node):
                raise ApiError.not_found("", "nodes", node)
        except ApiError as error:
            rejected.labels(error.reason or str(error.code)).inc()
            raise
        return node, validated

    async def _refuse_unless_leader(self, rejected: Any) -> None:
        """Refuse an agent's write unless this replica leads. A leader waiting to renew its Lease
        holds the write first (`rejoin_hold`), then asks for it again at once: the agent's next
        write is taken the moment the API is back, and carries figures from after it."""
        if self.leadership.is_leader:
            return
        held = None
        if self.rejoin_hold is not None and self._held < MAX_HELD_WRITES:
            self._held += 1
            try:
                held = await self.rejoin_hold()
            finally:
                self._held -= 1
        rejected.labels("not-leader").inc()
        raise standby_refusal(self.leadership, retry_after=1 if held is None else 0,
                              leads_again=bool(held) and self.leadership.is_leader)

    async def _read_body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > MAX_REPORT_BYTES:
            raise ApiError.too_large(MAX_REPORT_BYTES)
        content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if content_type not in ("application/json", ""):
            raise ApiError.unsupported_media_type(content_type)
        return await request.read()  # client_max_size turns a longer body into 413


def standby_refusal(leadership: Leadership, *, retry_after: int = 1, leads_again: bool = False) -> ApiError:
    """A standby's answer to an agent's write: 503, naming the leader and where it serves.

    Through kube-apiserver a write may reach any ready replica: Retry-After makes client-go send
    it again, and the Service spreads the retries until one reaches the leader. An agent that
    dialed the standby itself goes straight to the endpoint the Status names (`LEADER_CAUSE`).
    A leader waiting to renew its Lease names itself; after holding the write, with Retry-After 0.
    """
    holder = f"the leader Lease names {leadership.leader_identity}" if leadership.leader_identity \
        else "nobody holds the leader Lease"
    message = "this replica leads again: send the write again, with current figures" if leads_again \
        else f"this replica does not lead now; {holder}"
    error = ApiError.service_unavailable(message, retry_after=retry_after)
    if leadership.leader_identity and leadership.leader_endpoint:
        error.details["causes"] = [{"reason": LEADER_CAUSE, "field": leadership.leader_identity,
                                    "message": leadership.leader_endpoint}]
    return error


def update_time_warning(ahead: float, stored: float) -> str:
    """The Warning header for a report whose updateTime, `ahead` seconds after `stored`, was stored as `stored`."""
    return warning_header(f"status.updateTime was {ahead:.0f} s ahead of the server's clock (more than "
                          f"{MAX_UPDATE_TIME_AHEAD:.0f} s): stored as the time the report was received, "
                          f"{format_time(stored)}")


def warning_header(text: str) -> str:
    """A `Warning` header value as kube-apiserver writes one: code 299, no agent, the text quoted."""
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _partial_metadata(entry: Entry, version: str) -> bytes:
    metadata: Obj = {"name": entry.name, "resourceVersion": str(entry.resource_version),
                     "creationTimestamp": entry.creation_timestamp}
    if entry.labels:
        metadata["labels"] = entry.labels
    return orjson.dumps({"kind": "PartialObjectMetadata", "apiVersion": f"{TABLE_GROUP}/{version}",
                         "metadata": metadata})


def _decoded(line: bytes) -> tuple[str, Obj]:
    event = orjson.loads(line)
    return event["type"], event["object"]
