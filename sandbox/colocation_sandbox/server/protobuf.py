"""Decoding the Kubernetes protobuf bodies that client-go's typed clients send.

A body (the magic ``k8s\\x00``, then a ``runtime.Unknown`` envelope holding the typed message)
becomes exactly the JSON the same client would have sent: JSON field names, Go's ``omitempty``
rules, times as RFC 3339, quantities as strings, ``[]byte`` as base64. ``MESSAGES`` holds the
field numbers of the ``generated.proto`` files kubectl 1.32 was built with. A field a message
has outside the table is accepted only with Go's zero value; any other value is refused, never
dropped.

Why: docs/development.md#inside-the-builtin-api-server
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from colocation.apimachinery.errors import ApiError

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5

# Value kinds that are not messages of the table below.
STRING, BYTES, INT, BOOL = "string", "bytes", "int", "bool"
TIME, QUANTITY, INT_OR_STRING, FIELDS_V1, EXTRA_VALUE = "time", "quantity", "int-or-string", "fields-v1", \
    "extra-value"

# Go's marshallers write every non-pointer field, set or not, so the wire says nothing of
# presence; each field records what its JSON tag does instead. OPT: `omitempty`, dropped when
# zero. PTR: a pointer, emitted only when set, even to zero. REQ: no `omitempty`, always emitted
# (null for an unset list, map or pointer). Nested structs are emitted whenever present, as
# encoding/json does ("status": {}).
OPT, PTR, REQ = "omitempty", "pointer", "required"


@dataclass(frozen=True, kw_only=True)
class Field:
    json: str
    kind: str = STRING  # a scalar kind above, or the name of a message in MESSAGES
    presence: str = OPT
    repeated: bool = False
    map_of: str | None = None  # for map<string, X>: the kind of X
    inline: bool = False  # Go's `json:",inline"`: the message's fields join the parent's


def opt(json: str, kind: str = STRING) -> Field:
    return Field(json=json, kind=kind)


def ptr(json: str, kind: str = STRING) -> Field:
    return Field(json=json, kind=kind, presence=PTR)


def req(json: str, kind: str = STRING) -> Field:
    return Field(json=json, kind=kind, presence=REQ)


def many(json: str, kind: str = STRING, presence: str = OPT) -> Field:
    return Field(json=json, kind=kind, presence=presence, repeated=True)


def mapping(json: str, value_kind: str = STRING) -> Field:
    return Field(json=json, map_of=value_kind)


def inline(message: str) -> Field:
    return Field(json="", kind=message, inline=True)


META = "meta.ObjectMeta"
LABEL_SELECTOR_REQUIREMENT = {1: req("key"), 2: req("operator"), 3: many("values")}

MESSAGES: dict[str, dict[int, Field]] = {
    # k8s.io/apimachinery/pkg/apis/meta/v1
    META: {
        1: opt("name"), 2: opt("generateName"), 3: opt("namespace"), 4: opt("selfLink"), 5: opt("uid"),
        6: opt("resourceVersion"), 7: opt("generation", INT), 8: opt("creationTimestamp", TIME),
        9: ptr("deletionTimestamp", TIME), 10: ptr("deletionGracePeriodSeconds", INT),
        11: mapping("labels"), 12: mapping("annotations"),
        13: many("ownerReferences", "meta.OwnerReference"), 14: many("finalizers"),
        17: many("managedFields", "meta.ManagedFieldsEntry"),
    },
    "meta.OwnerReference": {
        5: req("apiVersion"), 1: req("kind"), 3: req("name"), 4: req("uid"),
        6: ptr("controller", BOOL), 7: ptr("blockOwnerDeletion", BOOL),
    },
    "meta.ManagedFieldsEntry": {
        1: opt("manager"), 2: opt("operation"), 3: opt("apiVersion"), 4: ptr("time", TIME),
        6: opt("fieldsType"), 7: ptr("fieldsV1", FIELDS_V1), 8: opt("subresource"),
    },
    "meta.LabelSelector": {
        1: mapping("matchLabels"), 2: many("matchExpressions", "meta.LabelSelectorRequirement"),
    },
    "meta.LabelSelectorRequirement": LABEL_SELECTOR_REQUIREMENT,
    "meta.FieldSelectorRequirement": LABEL_SELECTOR_REQUIREMENT,
    "meta.DeleteOptions": {
        1: ptr("gracePeriodSeconds", INT), 2: ptr("preconditions", "meta.Preconditions"),
        3: ptr("orphanDependents", BOOL), 4: ptr("propagationPolicy"), 5: many("dryRun"),
        6: ptr("ignoreStoreReadErrorWithClusterBreakingPotential", BOOL),
    },
    "meta.Preconditions": {1: ptr("uid"), 2: ptr("resourceVersion")},
    # k8s.io/api/core/v1
    "core.Namespace": {1: opt("metadata", META), 2: opt("spec", "core.NamespaceSpec"),
                       3: opt("status", "core.NamespaceStatus")},
    "core.NamespaceSpec": {1: many("finalizers")},
    "core.NamespaceStatus": {1: opt("phase"), 2: many("conditions", "core.NamespaceCondition")},
    "core.NamespaceCondition": {1: req("type"), 2: req("status"), 4: opt("lastTransitionTime", TIME),
                                5: opt("reason"), 6: opt("message")},
    "core.ConfigMap": {1: opt("metadata", META), 4: ptr("immutable", BOOL), 2: mapping("data"),
                       3: mapping("binaryData", BYTES)},
    "core.Secret": {1: opt("metadata", META), 5: ptr("immutable", BOOL), 2: mapping("data", BYTES),
                    4: mapping("stringData"), 3: opt("type")},
    "core.ServiceAccount": {1: opt("metadata", META), 2: many("secrets", "core.ObjectReference"),
                            3: many("imagePullSecrets", "core.LocalObjectReference"),
                            4: ptr("automountServiceAccountToken", BOOL)},
    "core.ObjectReference": {1: opt("kind"), 2: opt("namespace"), 3: opt("name"), 4: opt("uid"),
                             5: opt("apiVersion"), 6: opt("resourceVersion"), 7: opt("fieldPath")},
    "core.LocalObjectReference": {1: opt("name")},
    "core.PodTemplateSpec": {1: opt("metadata", META), 2: opt("spec", "core.PodSpec")},
    "core.PodSpec": {
        20: many("initContainers", "core.Container"), 2: many("containers", "core.Container", REQ),
        3: opt("restartPolicy"), 4: ptr("terminationGracePeriodSeconds", INT),
        5: ptr("activeDeadlineSeconds", INT), 6: opt("dnsPolicy"), 7: mapping("nodeSelector"),
        8: opt("serviceAccountName"), 9: opt("serviceAccount"), 21: ptr("automountServiceAccountToken", BOOL),
        10: opt("nodeName"), 11: opt("hostNetwork", BOOL), 12: opt("hostPID", BOOL), 13: opt("hostIPC", BOOL),
        27: ptr("shareProcessNamespace", BOOL), 15: many("imagePullSecrets", "core.LocalObjectReference"),
        16: opt("hostname"), 17: opt("subdomain"), 19: opt("schedulerName"), 24: opt("priorityClassName"),
        25: ptr("priority", INT), 29: ptr("runtimeClassName"), 30: ptr("enableServiceLinks", BOOL),
        31: ptr("preemptionPolicy"), 35: ptr("setHostnameAsFQDN", BOOL), 37: ptr("hostUsers", BOOL),
    },
    "core.Container": {
        1: req("name"), 2: opt("image"), 3: many("command"), 4: many("args"), 5: opt("workingDir"),
        6: many("ports", "core.ContainerPort"), 19: many("envFrom", "core.EnvFromSource"),
        7: many("env", "core.EnvVar"), 8: opt("resources", "core.ResourceRequirements"),
        24: ptr("restartPolicy"), 13: opt("terminationMessagePath"), 20: opt("terminationMessagePolicy"),
        14: opt("imagePullPolicy"), 16: opt("stdin", BOOL), 17: opt("stdinOnce", BOOL), 18: opt("tty", BOOL),
    },
    "core.ContainerPort": {1: opt("name"), 2: opt("hostPort", INT), 3: req("containerPort", INT),
                           4: opt("protocol"), 5: opt("hostIP")},
    "core.EnvVar": {1: req("name"), 2: opt("value"), 3: ptr("valueFrom", "core.EnvVarSource")},
    "core.EnvVarSource": {1: ptr("fieldRef", "core.ObjectFieldSelector"),
                          2: ptr("resourceFieldRef", "core.ResourceFieldSelector"),
                          3: ptr("configMapKeyRef", "core.ConfigMapKeySelector"),
                          4: ptr("secretKeyRef", "core.SecretKeySelector")},
    "core.ObjectFieldSelector": {1: opt("apiVersion"), 2: req("fieldPath")},
    "core.ResourceFieldSelector": {1: opt("containerName"), 2: req("resource"), 3: opt("divisor", QUANTITY)},
    "core.ConfigMapKeySelector": {1: inline("core.LocalObjectReference"), 2: req("key"),
                                  3: ptr("optional", BOOL)},
    "core.SecretKeySelector": {1: inline("core.LocalObjectReference"), 2: req("key"), 3: ptr("optional", BOOL)},
    "core.EnvFromSource": {1: opt("prefix"), 2: ptr("configMapRef", "core.ConfigMapEnvSource"),
                           3: ptr("secretRef", "core.SecretEnvSource")},
    "core.ConfigMapEnvSource": {1: inline("core.LocalObjectReference"), 2: ptr("optional", BOOL)},
    "core.SecretEnvSource": {1: inline("core.LocalObjectReference"), 2: ptr("optional", BOOL)},
    "core.ResourceRequirements": {1: mapping("limits", QUANTITY), 2: mapping("requests", QUANTITY),
                                  3: many("claims", "core.ResourceClaim")},
    "core.ResourceClaim": {1: req("name"), 2: opt("request")},
    # k8s.io/api/apps/v1
    "apps.Deployment": {1: opt("metadata", META), 2: opt("spec", "apps.DeploymentSpec"),
                        3: opt("status", "apps.DeploymentStatus")},
    "apps.DeploymentSpec": {
        1: ptr("replicas", INT), 2: req("selector", "meta.LabelSelector"), 3: req("template", "core.PodTemplateSpec"),
        4: opt("strategy", "apps.DeploymentStrategy"), 5: opt("minReadySeconds", INT),
        6: ptr("revisionHistoryLimit", INT), 7: opt("paused", BOOL), 9: ptr("progressDeadlineSeconds", INT),
    },
    "apps.DeploymentStrategy": {1: opt("type"), 2: ptr("rollingUpdate", "apps.RollingUpdateDeployment")},
    "apps.RollingUpdateDeployment": {1: ptr("maxUnavailable", INT_OR_STRING), 2: ptr("maxSurge", INT_OR_STRING)},
    "apps.DeploymentStatus": {
        1: opt("observedGeneration", INT), 2: opt("replicas", INT), 3: opt("updatedReplicas", INT),
        7: opt("readyReplicas", INT), 4: opt("availableReplicas", INT), 5: opt("unavailableReplicas", INT),
        6: many("conditions", "apps.DeploymentCondition"), 8: ptr("collisionCount", INT),
    },
    "apps.DeploymentCondition": {1: req("type"), 2: req("status"), 6: opt("lastUpdateTime", TIME),
                                 7: opt("lastTransitionTime", TIME), 4: opt("reason"), 5: opt("message")},
    # k8s.io/api/authentication/v1
    "authentication.TokenRequest": {1: opt("metadata", META), 2: req("spec", "authentication.TokenRequestSpec"),
                                    3: opt("status", "authentication.TokenRequestStatus")},
    "authentication.TokenRequestSpec": {1: many("audiences", STRING, REQ), 4: ptr("expirationSeconds", INT),
                                        3: ptr("boundObjectRef", "authentication.BoundObjectReference")},
    "authentication.BoundObjectReference": {1: opt("kind"), 2: opt("apiVersion"), 3: opt("name"), 4: opt("uid")},
    "authentication.TokenRequestStatus": {1: req("token"), 2: req("expirationTimestamp", TIME)},
    "authentication.SelfSubjectReview": {1: opt("metadata", META),
                                         2: opt("status", "authentication.SelfSubjectReviewStatus")},
    "authentication.SelfSubjectReviewStatus": {1: opt("userInfo", "authentication.UserInfo")},
    "authentication.UserInfo": {1: opt("username"), 2: opt("uid"), 3: many("groups"),
                                4: mapping("extra", EXTRA_VALUE)},
    # k8s.io/api/authorization/v1
    "authorization.SelfSubjectAccessReview": {
        1: opt("metadata", META), 2: req("spec", "authorization.SelfSubjectAccessReviewSpec"),
        3: opt("status", "authorization.SubjectAccessReviewStatus"),
    },
    "authorization.SelfSubjectAccessReviewSpec": {
        1: ptr("resourceAttributes", "authorization.ResourceAttributes"),
        2: ptr("nonResourceAttributes", "authorization.NonResourceAttributes"),
    },
    "authorization.ResourceAttributes": {
        1: opt("namespace"), 2: opt("verb"), 3: opt("group"), 4: opt("version"), 5: opt("resource"),
        6: opt("subresource"), 7: opt("name"), 8: ptr("fieldSelector", "authorization.FieldSelectorAttributes"),
        9: ptr("labelSelector", "authorization.LabelSelectorAttributes"),
    },
    "authorization.FieldSelectorAttributes": {1: opt("rawSelector"),
                                              2: many("requirements", "meta.FieldSelectorRequirement")},
    "authorization.LabelSelectorAttributes": {1: opt("rawSelector"),
                                              2: many("requirements", "meta.LabelSelectorRequirement")},
    "authorization.NonResourceAttributes": {1: opt("path"), 2: opt("verb")},
    "authorization.SubjectAccessReviewStatus": {1: req("allowed", BOOL), 4: opt("denied", BOOL), 2: opt("reason"),
                                                3: opt("evaluationError")},
    "authorization.SelfSubjectRulesReview": {
        1: opt("metadata", META), 2: req("spec", "authorization.SelfSubjectRulesReviewSpec"),
        3: opt("status", "authorization.SubjectRulesReviewStatus"),
    },
    "authorization.SelfSubjectRulesReviewSpec": {1: opt("namespace")},
    "authorization.SubjectRulesReviewStatus": {
        1: many("resourceRules", "authorization.ResourceRule", REQ),
        2: many("nonResourceRules", "authorization.NonResourceRule", REQ),
        3: req("incomplete", BOOL), 4: opt("evaluationError"),
    },
    "authorization.ResourceRule": {1: many("verbs", STRING, REQ), 2: many("apiGroups"), 3: many("resources"),
                                   4: many("resourceNames")},
    "authorization.NonResourceRule": {1: many("verbs", STRING, REQ), 2: many("nonResourceURLs")},
    # k8s.io/api/policy/v1
    "policy.Eviction": {1: opt("metadata", META), 2: ptr("deleteOptions", "meta.DeleteOptions")},
    # k8s.io/api/rbac/v1
    "rbac.Role": {1: opt("metadata", META), 2: many("rules", "rbac.PolicyRule", REQ)},
    "rbac.ClusterRole": {1: opt("metadata", META), 2: many("rules", "rbac.PolicyRule", REQ),
                         3: ptr("aggregationRule", "rbac.AggregationRule")},
    "rbac.PolicyRule": {1: many("verbs", STRING, REQ), 2: many("apiGroups"), 3: many("resources"),
                        4: many("resourceNames"), 5: many("nonResourceURLs")},
    "rbac.AggregationRule": {1: many("clusterRoleSelectors", "meta.LabelSelector")},
    "rbac.RoleBinding": {1: opt("metadata", META), 2: many("subjects", "rbac.Subject"),
                         3: req("roleRef", "rbac.RoleRef")},
    "rbac.ClusterRoleBinding": {1: opt("metadata", META), 2: many("subjects", "rbac.Subject"),
                                3: req("roleRef", "rbac.RoleRef")},
    "rbac.Subject": {1: req("kind"), 2: opt("apiGroup"), 3: req("name"), 4: opt("namespace")},
    "rbac.RoleRef": {1: req("apiGroup"), 2: req("kind"), 3: req("name")},
}

# (apiVersion, kind) of a body → its message. DeleteOptions travels in whatever group version the
# client talks to (kubectl sends v1 DeleteOptions to delete a pod), so it is matched by kind alone.
KINDS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "core.Namespace",
    ("v1", "ConfigMap"): "core.ConfigMap",
    ("v1", "Secret"): "core.Secret",
    ("v1", "ServiceAccount"): "core.ServiceAccount",
    ("apps/v1", "Deployment"): "apps.Deployment",
    ("authentication.k8s.io/v1", "TokenRequest"): "authentication.TokenRequest",
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "authentication.SelfSubjectReview",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "authorization.SelfSubjectAccessReview",
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): "authorization.SelfSubjectRulesReview",
    ("policy/v1", "Eviction"): "policy.Eviction",
    ("rbac.authorization.k8s.io/v1", "Role"): "rbac.Role",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "rbac.ClusterRole",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rbac.RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "rbac.ClusterRoleBinding",
}
_ANY_VERSION_KINDS = {"DeleteOptions": "meta.DeleteOptions"}


class Malformed(Exception):
    """The bytes are not a well-formed message of the expected type."""


def decode_object(raw: bytes) -> dict[str, Any]:
    """The JSON object equivalent to a protobuf-encoded request body, or an ApiError."""
    if not raw.startswith(MAGIC):
        raise ApiError.bad_request(f"the body of the request is not {MEDIA_TYPE}: it does not start with "
                                   "the 4-byte prefix 'k8s\\x00'")
    envelope, problem = _envelope(raw[len(MAGIC):])
    try:
        type_meta = _scalars(envelope.get(1, b""), {1: _LENGTH_DELIMITED, 2: _LENGTH_DELIMITED})
    except Malformed as exc:
        raise ApiError.bad_request(f"the {MEDIA_TYPE} envelope of the request body is malformed: {exc}") from None
    api_version, kind = _text(type_meta.get(1, b"")), _text(type_meta.get(2, b""))
    encoding, content_type = _text(envelope.get(3, b"")), _text(envelope.get(4, b""))
    described = f"{kind or '(no kind)'} ({api_version or 'no apiVersion'})"
    if problem:
        raise ApiError.bad_request(f"the {MEDIA_TYPE} body of {described} is malformed: {problem}")
    if encoding or content_type not in ("", MEDIA_TYPE):
        raise ApiError.unsupported_media_type(f"{MEDIA_TYPE} wrapping {described} with content encoding "
                                              f"{encoding!r} and content type {content_type!r}")
    message = KINDS.get((api_version, kind)) or _ANY_VERSION_KINDS.get(kind)
    if message is None:
        raise ApiError.unsupported_media_type(f"{MEDIA_TYPE} for {described}, a kind the sandbox cannot "
                                              "decode from protobuf; send it as application/json")
    try:
        body = _message(bytes(envelope.get(2, b"")), message)
    except Malformed as exc:
        raise ApiError.bad_request(f"the {MEDIA_TYPE} body of {described} is malformed: {exc}") from None
    return {"kind": kind, "apiVersion": api_version, **body}


def _envelope(data: bytes) -> tuple[dict[int, Any], str]:
    """runtime.Unknown's fields, and what is wrong past them: a truncated body still names its kind."""
    fields: dict[int, Any] = {}
    try:
        for number, wire, value in _fields(data):
            if number not in (1, 2, 3, 4) or wire != _LENGTH_DELIMITED:
                return fields, f"unexpected field {number} with wire type {wire} in the envelope"
            fields[number] = value
    except Malformed as exc:
        return fields, str(exc)
    return fields, ""


# The wire format: https://protobuf.dev/programming-guides/encoding/

def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Each field on the wire: (number, wire type, integer value or length-delimited bytes)."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed(f"field number 0 at byte {position}")
        if wire == _VARINT:
            value, position = _varint(data, position)
            yield number, wire, value
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if position + size > len(data):
                raise Malformed(f"field {number} is truncated")
            yield number, wire, int.from_bytes(data[position:position + size], "little")
            position += size
        elif wire == _LENGTH_DELIMITED:
            size, position = _varint(data, position)
            if position + size > len(data):
                raise Malformed(f"field {number} claims {size} bytes, only {len(data) - position} remain")
            yield number, wire, data[position:position + size]
            position += size
        else:
            raise Malformed(f"field {number} has wire type {wire}, which Kubernetes never writes")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(data) and shift < 70:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
    raise Malformed("a varint is truncated or longer than 10 bytes")


def _scalars(data: bytes, wires: dict[int, int]) -> dict[int, Any]:
    """The last value of each expected field of a small fixed message; others are not tolerated."""
    values: dict[int, Any] = {}
    for number, wire, value in _fields(data):
        if wires.get(number) != wire:
            raise Malformed(f"unexpected field {number} with wire type {wire}")
        values[number] = value
    return values


def _text(value: Any) -> str:
    return bytes(value).decode("utf-8", errors="replace")  # as Go's encoding/json renders invalid UTF-8


def _message(data: bytes, name: str) -> dict[str, Any]:
    schema = MESSAGES[name]
    found: dict[int, Any] = {}
    for number, wire, value in _fields(data):
        field = schema.get(number)
        if field is None:
            if value:  # a non-zero value we would otherwise drop without a word
                raise Malformed(f"field {number} of {name} is not understood by the sandbox")
            continue
        if field.map_of is not None:
            key, item = _map_entry(_expect(value, wire, _LENGTH_DELIMITED, name=name, field=field), field.map_of, name,
                                   field=field)
            found.setdefault(number, {})[key] = item
        elif field.repeated and wire == _LENGTH_DELIMITED and field.kind in (INT, BOOL):
            found.setdefault(number, []).extend(_packed(_expect(value, wire, wire, name=name, field=field), field.kind))
        elif field.repeated:
            found.setdefault(number, []).append(_value(value, wire, field.kind, name=name, field=field))
        else:
            found[number] = _value(value, wire, field.kind, name=name, field=field)  # the last one wins, as in Go
    out: dict[str, Any] = {}
    for number, field in schema.items():
        if field.inline:
            out.update(found.get(number, {}))
        elif number in found:
            if not _omitted(field, found[number]):
                out[field.json] = found[number]
        elif field.presence == REQ:
            out[field.json] = _ZEROS.get(field.kind) if not (field.repeated or field.map_of) else None
    return out


_ZEROS: dict[str, Any] = {STRING: "", INT: 0, BOOL: False}


def _omitted(field: Field, value: Any) -> bool:
    """Whether omitempty drops the value: zero scalars and empty lists or maps, never structs."""
    if field.presence != OPT or value:
        return False
    return field.repeated or field.map_of is not None or field.kind in _ZEROS or field.kind == BYTES


def _expect(value: int | bytes, wire: int, expected: int, *, name: str, field: Field) -> Any:
    if wire != expected:
        raise Malformed(f"{name}.{field.json or field.kind} has wire type {wire}, expected {expected}")
    return value


def _value(value: int | bytes, wire: int, kind: str, *, name: str, field: Field) -> Any:
    if kind == INT:
        number = _expect(value, wire, _VARINT, name=name, field=field)
        return number - (1 << 64) if number >= 1 << 63 else number  # int32 and int64 are two's complement
    if kind == BOOL:
        return bool(_expect(value, wire, _VARINT, name=name, field=field))
    data = _expect(value, wire, _LENGTH_DELIMITED, name=name, field=field)
    if kind == STRING:
        return _text(data)
    if kind == BYTES:
        return base64.b64encode(data).decode("ascii")
    special = _SPECIAL.get(kind)
    if special is not None:
        return special(data)
    return _message(data, kind)


def _packed(data: bytes, kind: str) -> list[Any]:
    values: list[Any] = []
    position = 0
    while position < len(data):
        number, position = _varint(data, position)
        values.append(bool(number) if kind == BOOL else number - (1 << 64) if number >= 1 << 63 else number)
    return values


def _map_entry(data: bytes, value_kind: str, name: str, *, field: Field) -> tuple[str, Any]:
    """A map<string, X> entry is a message {1: key, 2: value}; either may be left out when empty."""
    key, item = "", None
    for number, wire, value in _fields(data):
        if number == 1:
            key = _text(_expect(value, wire, _LENGTH_DELIMITED, name=name, field=field))
        elif number == 2:
            item = _value(value, wire, value_kind, name=name, field=field)
        else:
            raise Malformed(f"an entry of {name}.{field.json} has an unexpected field {number}")
    if item is None:
        item = _value(b"", _LENGTH_DELIMITED, value_kind, name=name, field=field)
    return key, item


def _time(data: bytes) -> str | None:
    """metav1.Time: an empty message is the zero time, which JSON renders as null."""
    if not data:
        return None
    values = _scalars(data, {1: _VARINT, 2: _VARINT})
    seconds = values.get(1, 0)
    seconds = seconds - (1 << 64) if seconds >= 1 << 63 else seconds
    try:
        moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=seconds)
    except OverflowError:
        raise Malformed(f"a timestamp of {seconds} seconds is out of range") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")  # JSON drops the nanoseconds too


def _quantity(data: bytes) -> str:
    text = _text(_scalars(data, {1: _LENGTH_DELIMITED}).get(1, b""))
    return text or "0"  # an empty message is the zero quantity


def _int_or_string(data: bytes) -> int | str:
    values = _scalars(data, {1: _VARINT, 2: _VARINT, 3: _LENGTH_DELIMITED})
    if values.get(1, 0) == 1:
        return _text(values.get(3, b""))
    number: int = values.get(2, 0)
    return number - (1 << 64) if number >= 1 << 63 else number


def _fields_v1(data: bytes) -> Any:
    raw = _scalars(data, {1: _LENGTH_DELIMITED}).get(1, b"")
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        raise Malformed("managedFields[].fieldsV1 is not JSON") from None


def _extra_value(data: bytes) -> list[str]:
    """authentication/v1 ExtraValue: a []string wrapped in a message {1: repeated string}."""
    items: list[str] = []
    for number, wire, value in _fields(data):
        if number != 1 or wire != _LENGTH_DELIMITED:
            raise Malformed(f"an ExtraValue has an unexpected field {number}")
        items.append(_text(value))
    return items


_SPECIAL: dict[str, Callable[[bytes], Any]] = {
    TIME: _time, QUANTITY: _quantity, INT_OR_STRING: _int_or_string, FIELDS_V1: _fields_v1,
    EXTRA_VALUE: _extra_value,
}
