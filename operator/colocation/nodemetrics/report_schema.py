"""The NodeMetric object an agent reports: its schema, and the validation of a report's body.

The shape is Koordinator's NodeMetric, served as metrics.colocation.dev, plus our `recentUsage`
(the agent's short window; Koordinator's clients ignore it). Unknown fields are dropped, so what
is stored is canonical: only the fields below, in this order. Every field is bounded. A fast
validator takes the common shape; a body it refuses goes through the whole schema, which stores
the same bytes and words the errors. An `updateTime` more than `MAX_UPDATE_TIME_AHEAD` ahead of
the leader's clock is stored as the receipt time (`ValidatedReport.as_received`).

The bounds, and why: docs/operator.md#the-nodemetric-api, docs/architecture.md#the-nodemetric-store
"""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Annotated, Any, Literal, NotRequired

import orjson
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    with_config,
)
from pydantic_core import PydanticCustomError, SchemaValidator
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict on 3.11

from colocation.apimachinery.clock import format_time, parse_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.fielderrors import FieldErrorStyle, decoded_object, go_quote
from colocation.apimachinery.fieldtypes import (
    PATTERN_MESSAGES,
    QUANTITY_ERROR,
    DnsLabel,
    DnsSubdomain,
    GoDuration,
    Quantity,
    ResourceName,
    Rfc3339Time,
    quantity_problem,
)
from colocation.apimachinery.quantity import byte_value, cpu_millis
from colocation.koordinator.classes import PriorityClass, QoSClass
from colocation.koordinator.slo_strategies import MAX_HOST_APPLICATIONS as MAX_HOST_APPLICATIONS  # a NodeSLO's most

GROUP = "metrics.colocation.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeMetric"
LIST_KIND = "NodeMetricList"
RESOURCE = "nodemetrics"
BASE_PATH = f"/apis/{GROUP}/{VERSION}"
COLLECTION_PATH = f"{BASE_PATH}/{RESOURCE}"

AggregationType = Literal["avg", "p50", "p90", "p95", "p99"]

# Counts a report may carry. Pods: far above Kubernetes' default max-pods (110) and the largest
# kubelet setting seen in practice (a few hundred), still finite.
MAX_PODS = 1_000
MAX_AGGREGATIONS = 16  # aggregatedNodeUsages: one per duration
MAX_RESOURCES = 64  # names in one resource map
MAX_RECENT_WINDOW_SECONDS = 60  # agents use 10 s; metrics-server's scrape interval is at most a minute
# How far ahead of the leader's clock a report's updateTime may be and still be stored as sent:
# five minutes, the skew hosts are commonly allowed (Kerberos); NTP keeps nodes within milliseconds.
MAX_UPDATE_TIME_AHEAD = 300.0

# The schema is TypedDicts validated by one pydantic-core validator: the result is plain dicts in
# schema order with unknown keys dropped, which orjson writes as the canonical body. BaseModel
# instances cost 2-3x the time to validate (an object per pod and per resource map) plus a
# pydantic re-serialization; on the ingest path that was the leader's largest cost.
_SCHEMA_CONFIG = ConfigDict(extra="ignore")


def _without_nulls(value: dict[str, Any]) -> dict[str, Any]:
    # Optional fields may be sent as null (kube-apiserver reads that as unset); store them unset.
    if None in value.values():
        return {key: item for key, item in value.items() if item is not None}
    return value


_POD_KEY = itemgetter("namespace", "name")  # (namespace, name), built in C
_POD_NAME = itemgetter("name")


def _pods_are_unique(pods: list[PodMetricInfo] | None) -> list[PodMetricInfo] | None:
    # A pod listed twice would be counted twice by the batch formula.
    # Distinct names make distinct (namespace, name) pairs: a set of strings costs less than of tuples.
    if not pods or len(set(map(_POD_NAME, pods))) == len(pods) or len(set(map(_POD_KEY, pods))) == len(pods):
        return pods
    seen: set[tuple[str, str]] = set()
    for index, pod in enumerate(pods):
        if (pod["namespace"], pod["name"]) in seen:
            raise PydanticCustomError("duplicate", "Duplicate value",
                                      {"index": index, "value": f"{pod['namespace']}/{pod['name']}"})
        seen.add((pod["namespace"], pod["name"]))
    raise AssertionError("unreachable: the set was smaller than the list")


@with_config(_SCHEMA_CONFIG)
class ResourceMap(TypedDict):
    resources: NotRequired[Annotated[dict[ResourceName, Quantity], Field(max_length=MAX_RESOURCES)]]


@with_config(_SCHEMA_CONFIG)
class RecentUsage(TypedDict):
    """Usage over the agent's short window (our extension), and the seconds that window spans."""

    resources: NotRequired[Annotated[dict[ResourceName, Quantity], Field(max_length=MAX_RESOURCES)]]
    windowSeconds: Annotated[int, Field(strict=True, ge=1, le=MAX_RECENT_WINDOW_SECONDS)]


@with_config(_SCHEMA_CONFIG)
class AggregatedUsage(TypedDict):
    usage: NotRequired[dict[AggregationType, ResourceMap]]
    duration: NotRequired[GoDuration | None]


@with_config(_SCHEMA_CONFIG)
class NodeMetricInfo(TypedDict):
    nodeUsage: ResourceMap
    recentUsage: NotRequired[RecentUsage | None]
    systemUsage: NotRequired[ResourceMap | None]
    aggregatedNodeUsages: NotRequired[Annotated[list[Annotated[AggregatedUsage, AfterValidator(_without_nulls)]],
                                                Field(max_length=MAX_AGGREGATIONS)] | None]


@with_config(_SCHEMA_CONFIG)
class PodMetricInfo(TypedDict):
    namespace: DnsLabel
    name: DnsSubdomain
    podUsage: ResourceMap
    recentUsage: NotRequired[ResourceMap | None]  # over the node's recentUsage window
    priority: NotRequired[PriorityClass | None]
    qos: NotRequired[QoSClass | None]


@with_config(_SCHEMA_CONFIG)
class HostApplicationMetricInfo(TypedDict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    usage: ResourceMap
    priority: NotRequired[PriorityClass | None]
    qos: NotRequired[QoSClass | None]


@with_config(_SCHEMA_CONFIG)
class ReclaimableMetric(TypedDict):
    """What prod pods requested but are predicted not to use (Koordinator's ReclaimableMetric)."""

    resource: NotRequired[ResourceMap]


_Pods = Annotated[Annotated[list[Annotated[PodMetricInfo, AfterValidator(_without_nulls)]],
                            Field(max_length=MAX_PODS)] | None,
                  AfterValidator(_pods_are_unique)]


@with_config(_SCHEMA_CONFIG)
class NodeMetricStatus(TypedDict):
    updateTime: Rfc3339Time
    nodeMetric: Annotated[NodeMetricInfo, AfterValidator(_without_nulls)]
    podsMetric: NotRequired[_Pods]
    hostApplicationMetric: NotRequired[
        Annotated[list[Annotated[HostApplicationMetricInfo, AfterValidator(_without_nulls)]],
                  Field(max_length=MAX_HOST_APPLICATIONS)] | None]
    prodReclaimableMetric: NotRequired[Annotated[ReclaimableMetric, AfterValidator(_without_nulls)] | None]


@with_config(_SCHEMA_CONFIG)
class ObjectMeta(TypedDict):
    name: DnsSubdomain


@with_config(_SCHEMA_CONFIG)
class NodeMetric(TypedDict):
    apiVersion: NotRequired[str]
    kind: NotRequired[str]
    metadata: ObjectMeta
    status: Annotated[NodeMetricStatus, AfterValidator(_without_nulls)]


NODE_METRIC = TypeAdapter(NodeMetric)


def _common_shape(schema: Any) -> Any:
    """`schema` without its Python slow paths: what agents send, validated in pydantic-core alone.

    No null for an optional field, and every quantity in the plain form; the rest is the same
    schema, with the same checks and the same output. A body it refuses is validated again by
    the whole schema (nulls dropped, any quantity form), which words the errors.
    """
    if isinstance(schema, list):
        return [_common_shape(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind == "nullable":
        return _common_shape(schema["schema"])
    if kind == "function-after" and schema["function"]["function"] is _without_nulls:
        return _common_shape(schema["schema"])
    if kind == "union" and schema.get("custom_error_type") == QUANTITY_ERROR:
        return _common_shape(schema["choices"][0])
    return {key: _common_shape(value) for key, value in schema.items()}


# Over 30 Python calls fewer per report than the whole schema (one per object with optional
# fields), for the same result: the half of a report's validation that was not parsing.
_COMMON_SHAPE = SchemaValidator(_common_shape(NODE_METRIC.core_schema))


def _parsed(raw: bytes) -> dict[str, Any]:
    """The report validated: by the common shape's validator, else by the whole schema (which raises)."""
    # A report's few hundred containers are freed as soon as it is stored; collecting while they
    # are built only moves them to older generations, whose collections walk the whole heap.
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            return _COMMON_SHAPE.validate_json(raw)  # type: ignore[no-any-return]
        except ValidationError:
            return NODE_METRIC.validate_json(raw)  # type: ignore[return-value]
    finally:
        if collecting:
            gc.enable()


# ---------------------------------------------------------------------------------------------
# A validated report.


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageFigures:
    """The few numbers the API and the controllers read without parsing the object again."""

    cpu_millis: int  # status.nodeMetric.nodeUsage cpu
    memory_bytes: int  # status.nodeMetric.nodeUsage memory
    pod_count: int
    update_time: float  # status.updateTime, seconds since the epoch: the agent's clock or a receipt time, for display


@dataclass(frozen=True, slots=True)
class ValidatedReport:
    """A report that passed validation, reduced to what the store keeps.

    `status_json` is the canonical `status` (known fields only, in schema order, no nulls),
    written by orjson from the validator's output; the store splices it into the object's body.
    """

    name: str
    status_json: bytes
    figures: UsageFigures

    def obj(self) -> dict[str, Any]:
        """The canonical object as a dict (parses `status_json`: not for the ingest path)."""
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": self.name},
                "status": orjson.loads(self.status_json)}

    def as_received(self, received_at: float) -> ValidatedReport:
        """The report to store when it arrives at `received_at` (the leader's wall clock): itself,
        or, when its updateTime is more than MAX_UPDATE_TIME_AHEAD ahead of `received_at`, itself
        with `received_at` as its updateTime. Nothing stored then claims a later time than that."""
        if self.figures.update_time - received_at <= MAX_UPDATE_TIME_AHEAD:
            return self
        return self.with_update_time(received_at)

    def with_update_time(self, at: float) -> ValidatedReport:
        """The report with `at` (seconds since the epoch) as its updateTime, in whole seconds as stored."""
        text = format_time(at)
        status = orjson.loads(self.status_json)
        status["updateTime"] = text  # in place: the keys keep their order
        return ValidatedReport(self.name, orjson.dumps(status),
                               dataclasses.replace(self.figures, update_time=_seconds(text)))


def validate_report(raw: bytes, node: str) -> ValidatedReport:
    """Validate the body of `PUT …/nodemetrics/{node}/status`; raise ApiError (400/422) if bad."""
    try:
        report = _parsed(raw)
    except ValidationError as exc:
        raise _rejection(raw, node, exc) from None
    _check_identity(report.get("apiVersion", API_VERSION), report.get("kind", KIND), report["metadata"]["name"],
                    node=node)
    status: dict[str, Any] = report["status"]
    usage = status["nodeMetric"]["nodeUsage"].get("resources") or {}
    update_time = _seconds(status["updateTime"])
    figures = UsageFigures(
        cpu_millis=cpu_millis(usage.get("cpu", "0")),
        memory_bytes=byte_value(usage.get("memory", "0")),
        pod_count=len(status.get("podsMetric") or ()),
        update_time=update_time,
    )
    return ValidatedReport(node, orjson.dumps(status), figures)


@functools.lru_cache(maxsize=256)  # reports arriving together carry the same few seconds
def _seconds(update_time: str) -> float:
    return parse_time(update_time)  # already in the canonical form (UTC, whole seconds)


def figures_of(obj: Mapping[str, Any]) -> UsageFigures:
    """The figures of an object already validated (by us, or by the leader we replicate).

    Never raises: a standby must go on replicating whatever a leader (maybe of an older
    version, with other bounds) stored. A figure that cannot be read is 0.
    """
    status = _mapping(obj.get("status"))
    usage = _mapping(_mapping(_mapping(status.get("nodeMetric")).get("nodeUsage")).get("resources"))
    pods = status.get("podsMetric")
    return UsageFigures(
        cpu_millis=_amount_or_zero(cpu_millis, usage.get("cpu", "0")),
        memory_bytes=_amount_or_zero(byte_value, usage.get("memory", "0")),
        pod_count=len(pods) if isinstance(pods, list) else 0,
        update_time=_time_or_zero(status.get("updateTime")),
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _amount_or_zero(read: Callable[[Any], int], value: Any) -> int:
    try:
        return read(value)
    except (ValueError, TypeError, ArithmeticError):
        return 0


def _time_or_zero(value: Any) -> float:
    try:
        return parse_time(value) if isinstance(value, str) else 0.0
    except ValueError:
        return 0.0


def _check_identity(api_version: Any, kind: Any, name: Any, *, node: str) -> None:
    if api_version != API_VERSION or kind != KIND:
        version = api_version.rpartition("/")[2] if isinstance(api_version, str) else api_version
        raise ApiError.bad_request(
            f"{kind} in version {go_quote(version)} cannot be handled as a {KIND}: "
            f"no kind {go_quote(kind)} is registered for version {go_quote(api_version)}")
    if name != node:
        raise ApiError.bad_request(
            f"the name of the object ({name}) does not match the name on the URL ({node})")


def _rejection(raw: bytes, node: str, exc: ValidationError) -> ApiError:
    """The error to answer with, the way kube-apiserver orders them: decoding, identity, fields."""
    document = decoded_object(raw, KIND, exc)
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    _check_identity(document.get("apiVersion", API_VERSION), document.get("kind", KIND), name or "", node=node)
    return ApiError.invalid(GROUP, KIND, node, causes=FIELD_ERRORS.causes(exc))


FIELD_ERRORS = FieldErrorStyle(
    map_fields=(("resources",), ("aggregatedNodeUsages", int, "usage")),
    pattern_messages=PATTERN_MESSAGES,
    custom_problems={QUANTITY_ERROR: lambda value: quantity_problem(value) or "invalid quantity"})
