"""The leader's Lease as agents and replicas read it: the record and the annotations a leader publishes.

Apart from colocation.kube.leaderelection (which elects, through kubernetes-asyncio) so that a
node agent can read where its leader is without importing that client (about 40 MiB resident).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

from colocation.apimachinery.clock import format_micro_time, parse_micro_time

# The annotations a leader publishes on its Lease so agents reach it without kube-apiserver.
LEADER_ENDPOINT_ANNOTATION = "colocation.dev/leader-endpoint"  # https://IP:PORT
LEADER_CA_ANNOTATION = "colocation.dev/leader-ca"  # base64 of the PEM CA bundle of its serving certificate
# The replicas that follow the leader, as JSON {identity: "https://IP:PORT"}: an agent that cannot
# reach the leader asks them, not kube-apiserver, who leads now (a standby's 503 names it).
REPLICAS_ANNOTATION = "colocation.dev/replica-endpoints"
# The header a standby's feed requests carry, "IDENTITY https://IP:PORT": how the leader learns them.
REPLICA_HEADER = "Colocation-Replica"
# The Status cause a standby's 503 carries: reason LEADER_CAUSE, field the identity, message the endpoint.
LEADER_CAUSE = "Leader"
MAX_REPLICAS = 8  # replicas published at most (a Deployment runs 2 or 3)
# Set to REPORTS_TO_ANY_REPLICA when every replica takes agents' NodeMetric reports (--store nats):
# each agent then reports to the replica its node ranks first among REPLICAS_ANNOTATION's.
REPORTS_ANNOTATION = "colocation.dev/reports"
REPORTS_TO_ANY_REPLICA = "any-replica"
# An agent's report carries the digest of the replicas it knows (`replicas_digest`); a replica that
# knows others answers with them (REPLICAS_ANNOTATION's format), so agents follow a rollout without
# reading the Lease again.
REPLICAS_SEEN_HEADER = "Colocation-Replicas-Seen"
REPLICAS_HEADER = "Colocation-Replicas"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LeaderElectionRecord:
    """The Lease's spec in leader-election terms, plus its annotations (what the leader publishes)."""

    holder_identity: str = ""  # "" when released
    lease_duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    leader_transitions: int = 0
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "annotations", MappingProxyType(dict(self.annotations)))

    def same_spec(self, other: LeaderElectionRecord | None) -> bool:
        """Whether `other` says the same about the lease (annotations aside): no sign of life if so."""
        return other is not None and dataclasses.replace(self, annotations={}) == dataclasses.replace(
            other, annotations={})

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaderElectionRecord:
        spec = lease.get("spec") or {}
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=_int(spec.get("leaseDurationSeconds")),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            renew_time=parse_micro_time(spec.get("renewTime")),
            leader_transitions=_int(spec.get("leaseTransitions")),
            annotations={str(k): str(v) for k, v in annotations.items()},
        )

    def to_lease(self, namespace: str, name: str, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A Lease body for PUT (keeping `base`'s resourceVersion and other fields) or POST (no base)."""
        body: dict[str, Any] = copy.deepcopy(dict(base)) if base else {}
        body.update(apiVersion="coordination.k8s.io/v1", kind="Lease")
        metadata = dict(body.get("metadata") or {})
        metadata.pop("managedFields", None)  # omitted means "keep": the server tracks them itself
        metadata.update(name=name, namespace=namespace)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        else:
            metadata.pop("annotations", None)
        spec = dict(body.get("spec") or {})
        spec.update(holderIdentity=self.holder_identity, leaseDurationSeconds=self.lease_duration_seconds,
                    leaseTransitions=self.leader_transitions)
        for key, moment in (("acquireTime", self.acquire_time), ("renewTime", self.renew_time)):
            if moment is None:
                spec.pop(key, None)
            else:
                spec[key] = format_micro_time(moment)
        body.update(metadata=metadata, spec=spec)
        return body


def replicas_annotation(replicas: Mapping[str, str]) -> str:
    """The value of REPLICAS_ANNOTATION: the replicas sorted by identity, at most MAX_REPLICAS."""
    return json.dumps(dict(sorted(replicas.items())[:MAX_REPLICAS]), separators=(",", ":"))


def parse_replicas(text: str) -> dict[str, str]:
    """REPLICAS_ANNOTATION read back: only https endpoints, at most MAX_REPLICAS; {} for anything else."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    replicas = {str(k): v.rstrip("/") for k, v in value.items() if isinstance(v, str) and v.startswith("https://")}
    return dict(list(replicas.items())[:MAX_REPLICAS])


def replicas_digest(replicas: Mapping[str, str]) -> str:
    """A short digest of a replica set, the same for the same set however it is ordered."""
    return hashlib.sha256(replicas_annotation(replicas).encode()).hexdigest()[:16]


class AdvertisedReplicas(NamedTuple):
    """A replica set as a replica answers agents with it: its digest, and REPLICAS_ANNOTATION's text."""

    digest: str
    text: str

    @classmethod
    def of(cls, replicas: Mapping[str, str]) -> AdvertisedReplicas:
        return cls(replicas_digest(replicas), replicas_annotation(replicas))


def parse_replica_header(text: str) -> tuple[str, str] | None:
    """REPLICA_HEADER read back: (identity, endpoint), or None when malformed."""
    identity, _, endpoint = text.strip().partition(" ")
    endpoint = endpoint.strip().rstrip("/")
    if not identity or not endpoint.startswith("https://") or " " in endpoint or len(text) > 512:
        return None
    return identity, endpoint


def _int(value: object) -> int:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    return int(value) if isinstance(value, str) and value.isdigit() else 0
