"""Every Kubernetes API call the operator and the agent make, declared as data.

This module is the single source of truth for the RBAC in `manifests/`:
`tests/unit/manifests/test_manifests.py` fails if the Roles and bindings allow less than the
calls declared here, for the right ServiceAccount, or anything more. The clients look their
calls up with `declared()` at import time, so a new call fails loudly until it is declared here,
and then the manifest test fails until the RBAC grants it. Namespaces are the ones the manifests
install into; installing elsewhere means changing both together.

The permissions, and why each: docs/install.md#permissions
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

OPERATOR_NAMESPACE = "colocation-system"
NODE_LEASE_NAMESPACE = "colocation-node-lease"
# Holds the two bootstrap objects an aggregated API server reads (front-proxy CA, header names).
AUTHENTICATION_CONFIG_NAMESPACE = "kube-system"
AUTHENTICATION_CONFIG_MAP = "extension-apiserver-authentication"

OPERATOR_SERVICE_ACCOUNT = "colocation-operator"
AGENT_SERVICE_ACCOUNT = "colocation-agent"
LEADER_LEASE_NAME = "colocation-operator"
# With --evaluation-shards N, a Lease per shard says which replica evaluates its nodes
# (controllers.evaluation_shards); RBAC names each one, so their number is bounded.
MAX_EVALUATION_SHARDS = 16
SHARD_LEASE_NAMES = tuple(f"{LEADER_LEASE_NAME}-shard-{shard}" for shard in range(MAX_EVALUATION_SHARDS))
CONFIG_MAP_NAME = "colocation-config"

# The serving CA every replica signs its serving certificate with (manager.serving_ca), and the
# APIServices of the install whose caBundle the operator keeps current (each only while it names
# the operator's Service: one left to metrics-server stays untouched).
CA_SECRET_NAME = "colocation-operator-ca"
OPERATOR_APISERVICES = ("v1alpha1.metrics.colocation.dev", "v1beta1.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io",
                        "v1beta1.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io")

# The pod webhook of ClusterColocationProfiles (apiserver.pod_mutation_webhook): its configuration's
# caBundle is kept current like the APIServices'.
POD_WEBHOOK_CONFIGURATION = "colocation-pod-profiles"

SLO_GROUP = "slo.colocation.dev"
METRICS_GROUP = "metrics.colocation.dev"


@dataclass(frozen=True, kw_only=True)
class ApiCall:
    """One kind of request, in the terms RBAC authorizes it.

    `namespace` is None for cluster-scoped resources and for calls across all namespaces
    (both need a ClusterRoleBinding); `name` is "" when the call is not limited to one object.
    """

    group: str  # "" for the core group
    resource: str  # plural, lower case
    verb: str  # get, list, watch, create, update, patch, delete
    namespace: str | None
    subresource: str = ""
    name: str = ""

    def __str__(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f"in namespace {self.namespace}" if self.namespace is not None else "cluster-wide"
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {resource}.{self.group or 'core'}{named} {where}"


@dataclass(frozen=True)
class NonResourceCall:
    """A request to a path that is no resource (RBAC's nonResourceURLs), cluster-wide by nature."""

    path: str
    verb: str = "get"

    def __str__(self) -> str:
        return f"{self.verb} {self.path}"


def _calls(
    group: str,
    resource: str,
    verbs: Iterable[str],
    *,
    namespace: str | None,
    subresource: str = "",
    name: str = "",
) -> tuple[ApiCall, ...]:
    return tuple(ApiCall(group=group, resource=resource, verb=verb, namespace=namespace, subresource=subresource,
                         name=name) for verb in verbs)


_READ = ("get", "list", "watch")
_WRITE_STATUS = ("patch", "update")
_OWN = ("get", "list", "watch", "create", "update", "patch", "delete")

OPERATOR_API_CALLS: tuple[ApiCall, ...] = (
    # Leader election on Lease colocation-operator (create has no name in RBAC terms).
    *_calls("coordination.k8s.io", "leases", ("create",), namespace=OPERATOR_NAMESPACE),
    *_calls("coordination.k8s.io", "leases", ("get", "update"), namespace=OPERATOR_NAMESPACE, name=LEADER_LEASE_NAME),
    *(call for name in SHARD_LEASE_NAMES
      for call in _calls("coordination.k8s.io", "leases", ("get", "update"), namespace=OPERATOR_NAMESPACE, name=name)),
    # Node heartbeats written by the agents.
    *_calls("coordination.k8s.io", "leases", _READ, namespace=NODE_LEASE_NAMESPACE),
    # Batch resources live in node.status.capacity/allocatable.
    *_calls("", "nodes", _READ, namespace=None),
    *_calls("", "nodes", _WRITE_STATUS, namespace=None, subresource="status"),
    # Priority classification of pods, and the exit process.
    *_calls("", "pods", _READ, namespace=None),
    *_calls("", "pods", ("create",), namespace=None, subresource="eviction"),
    *_calls("policy", "poddisruptionbudgets", _READ, namespace=None),
    # The cluster configuration.
    *_calls("", "configmaps", _READ, namespace=OPERATOR_NAMESPACE),
    # The agents' ServiceAccounts: a token is accepted without TokenReview only while its account exists.
    *_calls("", "serviceaccounts", ("list", "watch"), namespace=OPERATOR_NAMESPACE),
    # Events about nodes (namespace default), pods (theirs) and the ConfigMap: any namespace.
    *_calls("", "events", ("create", "patch"), namespace=None),
    *_calls("events.k8s.io", "events", ("create", "patch"), namespace=None),
    *_calls(SLO_GROUP, "nodeslos", _OWN, namespace=None),
    *_calls(SLO_GROUP, "nodeslos", _WRITE_STATUS, namespace=None, subresource="status"),
    *_calls(SLO_GROUP, "noderesources", _OWN, namespace=None),
    *_calls(SLO_GROUP, "noderesources", _WRITE_STATUS, namespace=None, subresource="status"),
    # A standby follows the leader's NodeMetric watch (warm standby); the leader authorizes it
    # by SubjectAccessReview like any other reader.
    *_calls(METRICS_GROUP, "nodemetrics", _READ, namespace=None),
    # ...and, with custom metrics, the leader's feed of the samples it accepted (a resource of the
    # operator's own API, never stored: custommetrics.sample_feed).
    ApiCall(group=METRICS_GROUP, resource="samplebatches", verb="watch", namespace=None),
    # Kopf scans CRDs to resolve resources, and lists namespaces when given namespace patterns.
    *_calls("apiextensions.k8s.io", "customresourcedefinitions", _READ, namespace=None),
    *_calls("", "namespaces", ("list", "watch"), namespace=None),
    # The pod webhook, on every replica: the profiles, namespaces' labels (above) and the values of
    # PriorityClasses it sets, followed by informers; its configuration's caBundle patched by name.
    *_calls(SLO_GROUP, "clustercolocationprofiles", ("list", "watch"), namespace=None),
    *_calls("scheduling.k8s.io", "priorityclasses", ("list", "watch"), namespace=None),
    *_calls("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ("get", "patch"), namespace=None,
            name=POD_WEBHOOK_CONFIGURATION),
    # The serving CA: created by the first replica (a create cannot be limited to one name),
    # then read and rotated by name; the APIServices' caBundle patched by name.
    *_calls("", "secrets", ("create",), namespace=OPERATOR_NAMESPACE),
    *_calls("", "secrets", ("get", "update"), namespace=OPERATOR_NAMESPACE, name=CA_SECRET_NAME),
    *(call for name in OPERATOR_APISERVICES
      for call in _calls("apiregistration.k8s.io", "apiservices", ("get", "patch"), namespace=None, name=name)),
    # Delegated authentication and authorization of the aggregated API server: granted by
    # binding the bootstrap roles system:auth-delegator and extension-apiserver-authentication-reader.
    *_calls("authentication.k8s.io", "tokenreviews", ("create",), namespace=None),
    *_calls("authorization.k8s.io", "subjectaccessreviews", ("create",), namespace=None),
    *_calls("", "configmaps", _READ, namespace=AUTHENTICATION_CONFIG_NAMESPACE, name=AUTHENTICATION_CONFIG_MAP),
)

# The issuer and keys of ServiceAccount tokens, to authenticate agents' bound tokens without a
# TokenReview (apiserver.local_token_authentication). Kubernetes' own binding
# system:service-account-issuer-discovery grants them to every ServiceAccount already; the manifests
# grant them again so that they do not depend on it.
OPERATOR_NON_RESOURCE_CALLS: tuple[NonResourceCall, ...] = (
    NonResourceCall("/.well-known/openid-configuration"),
    NonResourceCall("/openid/v1/jwks"),
)

AGENT_API_CALLS: tuple[ApiCall, ...] = (
    # Heartbeat: Lease <node> (its name is the node's, unknown before the pod is scheduled).
    *_calls("coordination.k8s.io", "leases", ("get", "create", "update"), namespace=NODE_LEASE_NAMESPACE),
    # The leader's report endpoint and CA bundle are annotations on its Lease.
    *_calls("coordination.k8s.io", "leases", ("get",), namespace=OPERATOR_NAMESPACE, name=LEADER_LEASE_NAME),
    # Its Node (uid for the Lease's ownerReference, labels) and its pods (fieldSelector
    # spec.nodeName, which RBAC cannot narrow).
    *_calls("", "nodes", _READ, namespace=None),
    *_calls("", "pods", _READ, namespace=None),
    # Its collection policy.
    *_calls(SLO_GROUP, "nodeslos", _READ, namespace=None),
    # Reports: PUT .../nodemetrics/{node}/status; RBAC calls every PUT "update", even one that
    # creates. The leader accepts a report only from a token bound to a pod on that node.
    ApiCall(group=METRICS_GROUP, resource="nodemetrics", verb="update", namespace=None, subresource="status"),
    # Custom metric samples scraped from annotated pods: PUT .../nodemetrics/{node}/samples, the
    # same node rule as reports.
    ApiCall(group=METRICS_GROUP, resource="nodemetrics", verb="update", namespace=None, subresource="samples"),
    # Memory eviction: PUT .../nodemetrics/{node}/evictions asks the leader to evict best-effort
    # pods of that node (the same node rule); the agent itself may evict nothing.
    ApiCall(group=METRICS_GROUP, resource="nodemetrics", verb="update", namespace=None, subresource="evictions"),
    # Events on its Node when an enforcement strategy starts or stops (node events live in default).
    ApiCall(group="", resource="events", verb="create", namespace="default"),
)

# `colocation cleanup` (manager.cleanup), run by a person or the chart's post-delete hook Job after
# the operator stopped: strip batch and mid resources from every Node (the same status patch the
# leader sends) and delete our Leases. The hook binds these cluster-wide: it runs while helm deletes
# the chart's namespaces, where no Role can be created any more (docs/install.md, "Uninstall").
CLEANUP_SERVICE_ACCOUNT = "colocation-cleanup"
CLEANUP_API_CALLS: tuple[ApiCall, ...] = (
    ApiCall(group="", resource="nodes", verb="list", namespace=None),
    ApiCall(group="", resource="nodes", verb="patch", namespace=None, subresource="status"),
    *_calls("coordination.k8s.io", "leases", ("list", "delete"), namespace=NODE_LEASE_NAMESPACE),
    *_calls("coordination.k8s.io", "leases", ("get", "delete"), namespace=OPERATOR_NAMESPACE, name=LEADER_LEASE_NAME),
    *(ApiCall(group="coordination.k8s.io", resource="leases", verb="delete", namespace=OPERATOR_NAMESPACE, name=name)
      for name in SHARD_LEASE_NAMES),
)
# ...and with --delete-custom-resources, every NodeSLO and NodeResource (their CRDs outlive a release).
CLEANUP_CUSTOM_RESOURCE_CALLS: tuple[ApiCall, ...] = (
    *_calls(SLO_GROUP, "nodeslos", ("list", "delete"), namespace=None),
    *_calls(SLO_GROUP, "noderesources", ("list", "delete"), namespace=None),
)

# The roles the operator is bound to that Kubernetes itself defines; they grant more than the
# operator uses, which is why the least-privilege check leaves them out.
DELEGATION_CLUSTER_ROLE = "system:auth-delegator"
DELEGATION_ROLE = "extension-apiserver-authentication-reader"


Call = TypeVar("Call", ApiCall, NonResourceCall)


def declared(calls: Iterable[Call], call: Call) -> Call:
    """Return `call` if it is declared in `calls`, else raise: for clients, at import time."""
    if call not in tuple(calls):
        raise LookupError(f"undeclared Kubernetes API call: {call}; add it to colocation.kube.permissions")
    return call
