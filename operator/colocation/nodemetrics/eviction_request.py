"""The body of `PUT …/nodemetrics/{node}/evictions`: an agent asks the leader to evict pods of its node.

    {"apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "EvictionRequest", "node": NODE,
     "reason": "MemoryPressure" | "CPUSatisfaction", "message": "why, for the pods' Events",
     "pods": [{"namespace": NS, "name": NAME, "uid": UID}, ...]}

At most `MAX_PODS` pods, each once, each with its UID. A bad body is refused whole with a
Status: 400 when it is not an EvictionRequest for this node, 422 with one cause per bad field.
The answer is an EvictionResult with one entry per pod (`PodOutcome`).

Why the leader evicts: docs/architecture.md#memory-eviction-the-agent-asks-the-leader-evicts
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.fielderrors import FieldErrorStyle, decoded_object, show
from colocation.apimachinery.fieldtypes import PATTERN_MESSAGES, DnsLabel, DnsSubdomain
from colocation.nodemetrics.report_schema import API_VERSION, GROUP

KIND: Final = "EvictionRequest"
RESULT_KIND: Final = "EvictionResult"
SUBRESOURCE: Final = "evictions"
MAX_PODS: Final = 110  # a node's default pod capacity: more than any one round can ask for
MAX_MESSAGE: Final = 1024

# Why the agent asks, as the reason of the pods' Events (Koordinator's koordlet uses the same words).
EvictionReason = Literal["MemoryPressure", "CPUSatisfaction"]
EVENT_REASONS: Final[dict[str, str]] = {"MemoryPressure": "EvictPodByMemoryPressure",
                                        "CPUSatisfaction": "EvictPodByBECPUSatisfaction"}
# What became of one pod: evicted now; deferred (a PodDisruptionBudget or a transient error: ask
# again later); gone (no such pod, or another with that name); terminating already; failed.
Outcome = Literal["evicted", "deferred", "gone", "terminating", "failed"]

Uid = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PodRef(_Model):
    namespace: DnsLabel
    name: DnsSubdomain
    uid: Uid


class EvictionRequestBody(BaseModel):
    # Identity fields are checked after parsing, so their errors are 400 as for a report's kind.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    node: str
    reason: EvictionReason
    message: Annotated[str, StringConstraints(max_length=MAX_MESSAGE)] = ""
    pods: Annotated[list[PodRef], Field(min_length=1, max_length=MAX_PODS)]


@dataclass(frozen=True, slots=True)
class PodToEvict:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictionRequest:
    node: str
    reason: EvictionReason
    message: str
    pods: tuple[PodToEvict, ...]

    def body(self) -> dict[str, Any]:
        """The request as the agent sends it."""
        return {"apiVersion": API_VERSION, "kind": KIND, "node": self.node, "reason": self.reason,
                "message": self.message[:MAX_MESSAGE],
                "pods": [{"namespace": p.namespace, "name": p.name, "uid": p.uid} for p in self.pods]}


@dataclass(frozen=True, slots=True, kw_only=True)
class PodOutcome:
    pod: PodToEvict
    outcome: Outcome
    message: str = ""
    retry_after: float | None = None  # deferred: seconds the leader suggests waiting

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"namespace": self.pod.namespace, "name": self.pod.name, "uid": self.pod.uid,
                                 "outcome": self.outcome}
        if self.message:
            entry["message"] = self.message
        if self.retry_after is not None:
            entry["retryAfterSeconds"] = self.retry_after
        return entry


def result_body(node: str, outcomes: list[PodOutcome]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": RESULT_KIND, "node": node,
            "pods": [outcome.as_json() for outcome in outcomes]}


def parse_result(body: Any) -> dict[tuple[str, str], tuple[Outcome, float | None]]:
    """The leader's answer as the agent reads it: (namespace, name) → (outcome, retry after).
    Entries that are not understood are left out (the agent treats their pods as not evicted)."""
    outcomes: dict[tuple[str, str], tuple[Outcome, float | None]] = {}
    pods = body.get("pods") if isinstance(body, dict) else None
    for entry in pods if isinstance(pods, list) else []:
        if not isinstance(entry, dict):
            continue
        outcome, retry = entry.get("outcome"), entry.get("retryAfterSeconds")
        if outcome in ("evicted", "deferred", "gone", "terminating", "failed"):
            retry_after = float(retry) if isinstance(retry, int | float) and not isinstance(retry, bool) else None
            outcomes[(str(entry.get("namespace")), str(entry.get("name")))] = (outcome, retry_after)
    return outcomes


def validate_eviction_request(raw: bytes, node: str) -> EvictionRequest:
    """Validate the body of `PUT …/nodemetrics/{node}/evictions`; raise ApiError (400/422) if bad."""
    try:
        model = EvictionRequestBody.model_validate_json(raw)
    except ValidationError as exc:
        document = decoded_object(raw, KIND, exc)
        _check_identity(document.get("apiVersion"), document.get("kind"), document.get("node"), node=node)
        raise ApiError.invalid(GROUP, KIND, node, causes=_FIELD_ERRORS.causes(exc)) from None
    _check_identity(model.api_version, model.kind, model.node, node=node)
    seen: dict[tuple[str, str], int] = {}
    duplicates: list[Cause] = []
    for index, pod in enumerate(model.pods):
        key = (pod.namespace, pod.name)
        if key in seen:
            duplicates.append(Cause(f"pods[{index}]", f"Duplicate value: the same pod as pods[{seen[key]}]",
                                    "FieldValueDuplicate"))
        seen.setdefault(key, index)
    if duplicates:
        raise ApiError.invalid(GROUP, KIND, node, causes=duplicates)
    return EvictionRequest(node=node, reason=model.reason, message=model.message,
                           pods=tuple(PodToEvict(p.namespace, p.name, p.uid) for p in model.pods))


def _check_identity(api_version: object, kind: object, request_node: object, *, node: str) -> None:
    if api_version != API_VERSION or kind != KIND:
        raise ApiError.bad_request(f"the object provided is unrecognized (must be of type {KIND} in "
                                   f"{API_VERSION}): got kind {show(kind)} in version {show(api_version)}")
    if request_node != node:
        raise ApiError.bad_request(f"the node of the request ({request_node}) does not match the name on the "
                                   f"URL ({node})")


_FIELD_ERRORS = FieldErrorStyle(pattern_messages=PATTERN_MESSAGES)
