"""The body of `PUT …/nodemetrics/{node}/samples`: a MetricSampleBatch, validated in pydantic-core.

The wire contract is the agents' (docs/metrics-apis.md): Prometheus
metric and label names, finite values, unix-second timestamps oldest first, at most 20,000 series
of 1..120 samples, and optionally `sentTime`, the agent's clock when it sent the batch: the
leader then moves the samples onto its own clock by the difference (`series_store`), so an agent
whose clock is off is neither refused nor able to hold a series back. A bad batch is refused
whole with a Kubernetes Status (400 when it is not a MetricSampleBatch for this node, 422 with
one cause per bad field), so nothing of it is stored.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.fielderrors import FieldErrorStyle, decoded_object, show
from colocation.apimachinery.fieldtypes import PATTERN_MESSAGES, DnsLabel, DnsSubdomain

GROUP = "metrics.colocation.dev"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "MetricSampleBatch"
MAX_SERIES = 20_000
MAX_SAMPLES = 120
MAX_LABELS = 32

_METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
_PATTERN_MESSAGES = {
    **PATTERN_MESSAGES,  # pod namespaces and names
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
    sent_time: Annotated[Finite, Field(gt=0)] | None = Field(default=None, alias="sentTime")
    series: Annotated[list[SeriesBody], Field(max_length=MAX_SERIES)]


@dataclass(frozen=True, slots=True, kw_only=True)
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
    sent_at: float | None = None  # the agent's clock when it sent the batch (sentTime)

    @property
    def sample_count(self) -> int:
        return sum(len(series.values) for series in self.series)


def validate_batch(raw: bytes, node: str) -> ValidatedBatch:
    """Validate the body of `PUT …/nodemetrics/{node}/samples`; raise ApiError (400/422) if bad."""
    try:
        model = MetricSampleBatch.model_validate_json(raw)
    except ValidationError as exc:
        raise _rejection(raw, node, exc) from None
    _check_identity(model.api_version, model.kind, model.node, node=node)
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
        incoming.append(IncomingSeries(metric=body.metric, labels=labels, namespace=namespace, pod=pod,
                                       timestamps=tuple(s.timestamp for s in body.samples),
                                       values=tuple(s.value for s in body.samples)))
    if duplicates:
        raise ApiError.invalid(GROUP, KIND, node, causes=duplicates)
    return ValidatedBatch(node, tuple(incoming), model.sent_time)


def _check_identity(api_version: object, kind: object, batch_node: object, *, node: str) -> None:
    if api_version != API_VERSION or kind != KIND:
        raise ApiError.bad_request(f"the object provided is unrecognized (must be of type {KIND} in "
                                   f"{API_VERSION}): got kind {show(kind)} in version {show(api_version)}")
    if batch_node != node:
        raise ApiError.bad_request(f"the node of the batch ({batch_node}) does not match the name on the URL ({node})")


def _rejection(raw: bytes, node: str, exc: ValidationError) -> ApiError:
    """Decoding and identity errors first (400), then every invalid field (422), as reports are judged."""
    document = decoded_object(raw, KIND, exc)
    _check_identity(document.get("apiVersion"), document.get("kind"), document.get("node"), node=node)
    return ApiError.invalid(GROUP, KIND, node, causes=FIELD_ERRORS.causes(exc))


FIELD_ERRORS = FieldErrorStyle(map_fields=(("labels",),), pattern_messages=_PATTERN_MESSAGES)
