"""The body of `PUT …/nodemetrics/{node}/samples`: a MetricSampleBatch, validated in pydantic-core.

The wire contract is the agents' (see the README, "Custom and external metrics"): Prometheus
metric and label names, finite values, unix-second timestamps oldest first, at most 20,000 series
of 1..120 samples. A bad batch is refused whole with a Kubernetes Status (400 when it is not a
MetricSampleBatch for this node, 422 with one cause per bad field), so nothing of it is stored.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apiserver.models import DnsLabel, DnsSubdomain

GROUP = "metrics.colocation.dev"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "MetricSampleBatch"
MAX_SERIES = 20_000
MAX_SAMPLES = 120
MAX_LABELS = 32

_METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
_PATTERN_MESSAGES = {
    _METRIC_NAME: "a Prometheus metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*",
    _LABEL_NAME: "a Prometheus label name must match [a-zA-Z_][a-zA-Z0-9_]*",
}

MetricName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=_METRIC_NAME)]
LabelName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=_LABEL_NAME)]
LabelValue = Annotated[str, StringConstraints(max_length=1024)]
# Strict: a string or a boolean is not a number here; NaN and infinities are refused.
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PodReference(_Model):
    namespace: DnsLabel
    name: DnsSubdomain


class Sample(_Model):
    timestamp: Annotated[Finite, Field(gt=0)]
    value: Finite


class SeriesBody(_Model):
    metric: MetricName
    labels: Annotated[dict[LabelName, LabelValue], Field(max_length=MAX_LABELS)] = {}
    pod: PodReference | None = None
    samples: Annotated[list[Sample], Field(min_length=1, max_length=MAX_SAMPLES)]

    @field_validator("samples")
    @classmethod
    def _oldest_first(cls, samples: list[Sample]) -> list[Sample]:
        for before, after in itertools.pairwise(samples):
            if after.timestamp < before.timestamp:
                raise ValueError("samples must be in timestamp order, oldest first")
        return samples


class MetricSampleBatch(BaseModel):
    # Identity fields are checked after parsing, so their errors are 400 as for a report's kind.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    node: str
    series: Annotated[list[SeriesBody], Field(max_length=MAX_SERIES)]


@dataclass(frozen=True, slots=True)
class IncomingSeries:
    """One series of an accepted batch, as the store takes it."""

    metric: str
    labels: tuple[tuple[str, str], ...]  # sorted: the series' identity
    namespace: str  # "" for a node series
    pod: str  # "" for a node series
    timestamps: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ValidatedBatch:
    node: str
    series: tuple[IncomingSeries, ...]

    @property
    def sample_count(self) -> int:
        return sum(len(series.values) for series in self.series)


def validate_batch(raw: bytes, node: str) -> ValidatedBatch:
    """Validate the body of `PUT …/nodemetrics/{node}/samples`; raise ApiError (400/422) if bad."""
    try:
        model = MetricSampleBatch.model_validate_json(raw)
    except ValidationError as exc:
        raise _rejection(raw, node, exc) from None
    _check_identity(model.api_version, model.kind, model.node, node)
    incoming: list[IncomingSeries] = []
    seen: dict[tuple[str, tuple[tuple[str, str], ...], str, str], int] = {}
    duplicates: list[Cause] = []
    for index, body in enumerate(model.series):
        namespace, pod = (body.pod.namespace, body.pod.name) if body.pod is not None else ("", "")
        labels = tuple(sorted(body.labels.items()))
        identity = (body.metric, labels, namespace, pod)
        if identity in seen:
            duplicates.append(Cause(f"series[{index}]", f"Duplicate value: the same metric, labels and pod as "
                                    f"series[{seen[identity]}]", "FieldValueDuplicate"))
            continue
        seen[identity] = index
        incoming.append(IncomingSeries(body.metric, labels, namespace, pod,
                                       tuple(s.timestamp for s in body.samples),
                                       tuple(s.value for s in body.samples)))
    if duplicates:
        raise ApiError.invalid(GROUP, KIND, node, duplicates)
    return ValidatedBatch(node, tuple(incoming))


def _check_identity(api_version: object, kind: object, batch_node: object, node: str) -> None:
    if api_version != API_VERSION or kind != KIND:
        raise ApiError.bad_request(f"the object provided is unrecognized (must be of type {KIND} in "
                                   f"{API_VERSION}): got kind {_show(kind)} in version {_show(api_version)}")
    if batch_node != node:
        raise ApiError.bad_request(f"the node of the batch ({batch_node}) does not match the name on the URL ({node})")


def _rejection(raw: bytes, node: str, exc: ValidationError) -> ApiError:
    """Decoding and identity errors first (400), then every invalid field (422), as reports are judged."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as decode_error:
        return ApiError.bad_request(f"the object provided is unrecognized (must be of type {KIND}): "
                                    f"json parse error: {decode_error}")
    if not isinstance(document, dict):
        return ApiError.bad_request(f"the object provided is unrecognized (must be of type {KIND}): "
                                    "expected a JSON object")
    _check_identity(document.get("apiVersion"), document.get("kind"), document.get("node"), node)
    return ApiError.invalid(GROUP, KIND, node, [_cause(error) for error in exc.errors()])


def _cause(error: Mapping[str, Any]) -> Cause:
    kind, value, context = error["type"], error.get("input"), error.get("ctx") or {}
    path = field_path(error["loc"])
    if kind == "missing":
        return Cause(path, "Required value", "FieldValueRequired")
    if kind == "extra_forbidden":
        return Cause(path, "Forbidden: unknown field", "FieldValueForbidden")
    if kind in ("too_long", "string_too_long"):
        unit = "bytes" if kind == "string_too_long" else "items"
        return Cause(path, f"Too long: may not have more than {context.get('max_length')} {unit}",
                     "FieldValueTooLong")
    if kind == "too_short":
        return Cause(path, f"Required value: at least {context.get('min_length')} item", "FieldValueRequired")
    if kind == "string_pattern_mismatch":
        pattern = str(context.get("pattern"))
        detail = _PATTERN_MESSAGES.get(pattern) or f"must be a lowercase RFC 1123 name (regex used for " \
                                                   f"validation is '{pattern.strip('^$')}')"
        return Cause(path, f"Invalid value: {_show(value)}: {detail}")
    detail = str(error["msg"]).removeprefix("Value error, ")
    return Cause(path, f"Invalid value: {_show(value)}: {detail[:1].lower() + detail[1:]}")


def field_path(location: Sequence[int | str]) -> str:
    """`series[3].labels[method]`: list indexes and label names in brackets, as Kubernetes writes paths."""
    parts: list[str] = []
    for position, step in enumerate(location):
        if step == "[key]":  # the label name itself is wrong: the path already ends with it
            continue
        if isinstance(step, int) or (position and location[position - 1] == "labels"):
            parts.append(f"[{step}]")
        else:
            parts.append(f".{step}" if parts else str(step))
    return "".join(parts)


def _show(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    text = orjson.dumps(value, default=str).decode() if value is not None else "null"
    return text if len(text) <= 100 else text[:97] + "..."
