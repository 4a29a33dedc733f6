"""A coordination.k8s.io/v1 Lease as kube-apiserver stores it in etcd: Kubernetes protobuf.

kube-apiserver stores built-in kinds as `k8s\\x00` + runtime.Unknown{typeMeta, raw=<message>}
(custom resources stay JSON). Field numbers are those of k8s.io/api/coordination/v1 and
k8s.io/apimachinery/pkg/apis/meta/v1 generated.proto; only what a node Lease carries is encoded.
The stored object has no resourceVersion (etcd's revision is the version) and keeps managedFields.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import orjson

MAGIC = b"k8s\x00"


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values take ten bytes, as in Go
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def varint_field(number: int, value: int) -> bytes:
    return _tag(number, 0) + _varint(value)


def bytes_field(number: int, value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return _tag(number, 2) + _varint(len(raw)) + raw


def _time(text: str | None, micro: bool) -> bytes:
    """metav1.Time / MicroTime: {seconds = 1, nanos = 2}; Time drops the fraction as JSON does."""
    if not text:
        return b""
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    seconds = int(moment.timestamp())
    nanos = moment.microsecond * 1000 if micro else 0
    return varint_field(1, seconds) + (varint_field(2, nanos) if nanos else b"")


def _string_map(number: int, values: Mapping[str, str] | None) -> bytes:
    entries = sorted((values or {}).items())
    return b"".join(bytes_field(number, bytes_field(1, k) + bytes_field(2, v)) for k, v in entries)


def _owner_reference(ref: Mapping[str, Any]) -> bytes:
    out = bytes_field(1, ref.get("kind", "")) + bytes_field(3, ref.get("name", "")) + bytes_field(4, ref.get("uid", ""))
    out += bytes_field(5, ref.get("apiVersion", ""))
    if "controller" in ref:
        out += varint_field(6, int(bool(ref["controller"])))
    if "blockOwnerDeletion" in ref:
        out += varint_field(7, int(bool(ref["blockOwnerDeletion"])))
    return out


def _managed_fields(entry: Mapping[str, Any]) -> bytes:
    out = bytes_field(1, entry.get("manager", "")) + bytes_field(2, entry.get("operation", ""))
    out += bytes_field(3, entry.get("apiVersion", ""))
    if entry.get("time"):
        out += bytes_field(4, _time(entry["time"], micro=False))
    out += bytes_field(6, entry.get("fieldsType", ""))
    if entry.get("fieldsV1") is not None:
        out += bytes_field(7, bytes_field(1, orjson.dumps(entry["fieldsV1"])))  # FieldsV1{raw = 1}
    if entry.get("subresource"):
        out += bytes_field(8, entry["subresource"])
    return out


def object_meta(meta: Mapping[str, Any]) -> bytes:
    out = bytes_field(1, meta.get("name", "")) + bytes_field(2, meta.get("generateName", ""))
    out += bytes_field(3, meta.get("namespace", "")) + bytes_field(4, "") + bytes_field(5, meta.get("uid", ""))
    out += bytes_field(6, "")  # resourceVersion: not stored
    out += varint_field(7, int(meta.get("generation", 0)))
    out += bytes_field(8, _time(meta.get("creationTimestamp"), micro=False))
    out += _string_map(11, meta.get("labels")) + _string_map(12, meta.get("annotations"))
    out += b"".join(bytes_field(13, _owner_reference(ref)) for ref in meta.get("ownerReferences") or ())
    out += b"".join(bytes_field(14, f) for f in meta.get("finalizers") or ())
    out += b"".join(bytes_field(17, _managed_fields(e)) for e in meta.get("managedFields") or ())
    return out


def lease(obj: Mapping[str, Any]) -> bytes:
    """The bytes kube-apiserver would put in etcd for this Lease (as JSON from the API)."""
    spec = obj.get("spec") or {}
    body = bytes_field(1, spec.get("holderIdentity") or "") if spec.get("holderIdentity") is not None else b""
    if spec.get("leaseDurationSeconds") is not None:
        body += varint_field(2, int(spec["leaseDurationSeconds"]))
    for number, name in ((3, "acquireTime"), (4, "renewTime")):
        if spec.get(name):
            body += bytes_field(number, _time(spec[name], micro=True))
    if spec.get("leaseTransitions") is not None:
        body += varint_field(5, int(spec["leaseTransitions"]))
    message = bytes_field(1, object_meta(obj.get("metadata") or {})) + bytes_field(2, body)
    type_meta = bytes_field(1, "coordination.k8s.io/v1") + bytes_field(2, "Lease")
    return MAGIC + bytes_field(1, type_meta) + bytes_field(2, message) + bytes_field(3, "") + bytes_field(4, "")
