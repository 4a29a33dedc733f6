"""The NodeMetric object an agent reports: its schema, and the validation of a report's body.

The shape is Koordinator's NodeMetric (slo.koordinator.sh), served as metrics.colocation.dev.
Unknown fields are accepted and dropped, so what is stored is canonical: only the fields below,
in this order. Validation runs in pydantic-core; Python runs only for a quantity that is not a
plain number with a suffix, and once per object with optional fields (to drop nulls).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired

import orjson
from pydantic import (
    AfterValidator,
    AwareDatetime,
    ConfigDict,
    GetCoreSchemaHandler,
    GetPydanticSchema,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    with_config,
)
from pydantic_core import PydanticCustomError, core_schema
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict on 3.11

from colocation.apimachinery.clock import format_time
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.fielderrors import FieldErrorStyle, decoded_object, go_quote
from colocation.apimachinery.quantity import byte_value, cpu_millis, parse_quantity
from colocation.koordinator.classes import PriorityClass, QoSClass

GROUP = "metrics.colocation.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeMetric"
LIST_KIND = "NodeMetricList"
RESOURCE = "nodemetrics"

AggregationType = Literal["avg", "p50", "p90", "p95", "p99"]

# ---------------------------------------------------------------------------------------------
# Field types. Patterns run in pydantic-core; their error messages are replaced by upstream's
# (see PATTERN_MESSAGES) only when a report is rejected.

_DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_RESOURCE_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_GO_DURATION = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"

PATTERN_MESSAGES = {
    _DNS1123_LABEL: "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                    f"regex used for validation is '{_DNS1123_LABEL[1:-1]}')",
    _DNS1123_SUBDOMAIN: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                        "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                        f"regex used for validation is '{_DNS1123_SUBDOMAIN[1:-1]}')",
    _RESOURCE_NAME: "a resource name must be a qualified name: alphanumeric characters, '-', '_' or '.', "
                    "starting and ending with an alphanumeric character, with an optional DNS subdomain "
                    "prefix and '/' (e.g. 'cpu', 'kubernetes.io/batch-cpu')",
    _GO_DURATION: "must be a duration such as '5m0s' or '30s'",
}

DnsLabel = Annotated[str, StringConstraints(max_length=63, pattern=_DNS1123_LABEL)]
DnsSubdomain = Annotated[str, StringConstraints(max_length=253, pattern=_DNS1123_SUBDOMAIN)]
ResourceName = Annotated[str, StringConstraints(max_length=316, pattern=_RESOURCE_NAME)]
GoDuration = Annotated[str, StringConstraints(max_length=64, pattern=_GO_DURATION)]

# The common case, a plain non-negative quantity, is matched in pydantic-core; anything else
# (numbers, spaces, "-0", errors) goes through the exact parser in Python.
_PLAIN_QUANTITY = r"^\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,9})?$"


def quantity_problem(value: object) -> str | None:
    """Why `value` is not a usable usage quantity, or None when it is."""
    try:
        _normalize_quantity(value)
    except ValueError as exc:
        return str(exc)
    return None


def _normalize_quantity(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("must be a quantity, e.g. \"2500m\" or \"1Gi\"")
    # Upstream's UnmarshalJSON trims spaces and takes JSON numbers; store the canonical text.
    text = value.strip() if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    try:
        quantity = parse_quantity(text)
    except ValueError as exc:
        message = str(exc)
        # parse_quantity says "invalid quantity 'x': why"; the cause shows the value already.
        raise ValueError(message.split(": ", 1)[1] if message.startswith("invalid quantity ") else message) from None
    if quantity < 0:
        raise ValueError("must be greater than or equal to 0")
    return "0" if not quantity else text


def _quantity_schema(source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    # One error type for both branches; _cause asks quantity_problem() for the reason.
    return core_schema.union_schema(
        [core_schema.str_schema(pattern=_PLAIN_QUANTITY),
         core_schema.no_info_plain_validator_function(_normalize_quantity)],
        mode="left_to_right", custom_error_type="quantity", custom_error_message="invalid quantity")


Quantity = Annotated[str, GetPydanticSchema(_quantity_schema)]


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


def _pods_are_unique(pods: list[PodMetricInfo] | None) -> list[PodMetricInfo] | None:
    # A pod listed twice would be counted twice by the batch formula.
    if not pods or len({(pod["namespace"], pod["name"]) for pod in pods}) == len(pods):
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
    resources: NotRequired[dict[ResourceName, Quantity]]


@with_config(_SCHEMA_CONFIG)
class AggregatedUsage(TypedDict):
    usage: NotRequired[dict[AggregationType, ResourceMap]]
    duration: NotRequired[GoDuration | None]


@with_config(_SCHEMA_CONFIG)
class NodeMetricInfo(TypedDict):
    nodeUsage: ResourceMap
    systemUsage: NotRequired[ResourceMap | None]
    aggregatedNodeUsages: NotRequired[list[Annotated[AggregatedUsage, AfterValidator(_without_nulls)]] | None]


@with_config(_SCHEMA_CONFIG)
class PodMetricInfo(TypedDict):
    namespace: DnsLabel
    name: DnsSubdomain
    podUsage: ResourceMap
    priority: NotRequired[PriorityClass | None]
    qos: NotRequired[QoSClass | None]


@with_config(_SCHEMA_CONFIG)
class HostApplicationMetricInfo(TypedDict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    usage: ResourceMap
    priority: NotRequired[PriorityClass | None]
    qos: NotRequired[QoSClass | None]


_Pods = Annotated[list[Annotated[PodMetricInfo, AfterValidator(_without_nulls)]] | None,
                  AfterValidator(_pods_are_unique)]


@with_config(_SCHEMA_CONFIG)
class NodeMetricStatus(TypedDict):
    updateTime: AwareDatetime
    nodeMetric: Annotated[NodeMetricInfo, AfterValidator(_without_nulls)]
    podsMetric: NotRequired[_Pods]
    hostApplicationMetric: NotRequired[
        list[Annotated[HostApplicationMetricInfo, AfterValidator(_without_nulls)]] | None]


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


# ---------------------------------------------------------------------------------------------
# A validated report.


@dataclass(frozen=True, slots=True)
class UsageFigures:
    """The few numbers the API and the controllers read without parsing the object again."""

    cpu_millis: int  # status.nodeMetric.nodeUsage cpu
    memory_bytes: int  # status.nodeMetric.nodeUsage memory
    pod_count: int
    update_time: float  # status.updateTime, seconds since the epoch


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


def validate_report(raw: bytes, node: str) -> ValidatedReport:
    """Validate the body of `PUT …/nodemetrics/{node}/status`; raise ApiError (400/422) if bad."""
    try:
        report = NODE_METRIC.validate_json(raw)
    except ValidationError as exc:
        raise _rejection(raw, node, exc) from None
    _check_identity(report.get("apiVersion", API_VERSION), report.get("kind", KIND), report["metadata"]["name"], node)
    status: dict[str, Any] = report["status"]  # type: ignore[assignment]
    usage = status["nodeMetric"]["nodeUsage"].get("resources") or {}
    update_time = float(int(status["updateTime"].timestamp()))
    status["updateTime"] = format_time(update_time)
    figures = UsageFigures(
        cpu_millis=cpu_millis(usage.get("cpu", "0")),
        memory_bytes=byte_value(usage.get("memory", "0")),
        pod_count=len(status.get("podsMetric") or ()),
        update_time=update_time,
    )
    return ValidatedReport(node, orjson.dumps(status), figures)


def figures_of(obj: Mapping[str, Any]) -> UsageFigures:
    """The figures of an object already validated (by us, or by the leader we replicate)."""
    status = obj.get("status") or {}
    usage = ((status.get("nodeMetric") or {}).get("nodeUsage") or {}).get("resources") or {}
    update_time = status.get("updateTime")
    return UsageFigures(
        cpu_millis=cpu_millis(usage.get("cpu", "0")),
        memory_bytes=byte_value(usage.get("memory", "0")),
        pod_count=len(status.get("podsMetric") or ()),
        update_time=dt.datetime.fromisoformat(update_time).timestamp() if update_time else 0.0,
    )


def _check_identity(api_version: Any, kind: Any, name: Any, node: str) -> None:
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
    document = decoded_object(raw, KIND)
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    _check_identity(document.get("apiVersion", API_VERSION), document.get("kind", KIND), name or "", node)
    return ApiError.invalid(GROUP, KIND, node, FIELD_ERRORS.causes(exc))


FIELD_ERRORS = FieldErrorStyle(
    map_fields=(("resources",), ("aggregatedNodeUsages", int, "usage")),
    pattern_messages=PATTERN_MESSAGES,
    custom_problems={"quantity": lambda value: quantity_problem(value) or "invalid quantity"})
