"""What the server knows about a resource type: names, scope, subresources, columns, schema."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, kw_only=True)
class PrinterColumn:
    """A column of `kubectl get`, as in a CRD's additionalPrinterColumns."""

    name: str
    type: str  # integer | number | string | boolean | date
    json_path: str  # e.g. ".status.phase"
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True, kw_only=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    resource: str  # plural, lower case: "pods"
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()  # "status", "scale", "eviction", "token", ...
    verbs: tuple[str, ...] = ALL_VERBS
    printer_columns: tuple[PrinterColumn, ...] = ()
    # Custom resources: the structural schema (openAPIV3Schema) of this version, or None.
    schema: dict[str, Any] | None = None
    # Custom resources only: where the scale subresource reads and writes.
    scale_paths: dict[str, str] = field(default_factory=dict)
    # Built-in types accept strategic merge patches; custom resources do not.
    strategic: bool = True
    # Whether metadata.generation is maintained (types with a spec that controllers observe).
    tracks_generation: bool = False
    # Create-only "virtual" resources (TokenReview, SubjectAccessReview, ...) are never stored.
    virtual: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage_key(self) -> tuple[str, str]:
        """Objects are stored once per group and resource, whatever version they are read in."""
        return (self.group, self.resource)


def _rt(group: str, version: str, resource: str, *, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    singular = kw.pop("singular", kind.lower())
    return ResourceType(group=group, version=version, resource=resource, kind=kind, namespaced=namespaced,
                        singular=singular, **kw)


_STATUS = frozenset({"status"})
_CREATE_ONLY = ("create",)

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _rt("", "v1", "namespaces", kind="Namespace", namespaced=False, short_names=("ns",),
        subresources=_STATUS | {"finalize"},
        verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    _rt("", "v1", "nodes", kind="Node", namespaced=False, short_names=("no",), subresources=_STATUS),
    _rt("", "v1", "pods", kind="Pod", namespaced=True, short_names=("po",), categories=("all",),
        subresources=_STATUS | {"eviction", "binding"}, tracks_generation=True),
    _rt("", "v1", "configmaps", kind="ConfigMap", namespaced=True, short_names=("cm",)),
    _rt("", "v1", "secrets", kind="Secret", namespaced=True),
    _rt("", "v1", "services", kind="Service", namespaced=True, short_names=("svc",), categories=("all",),
        subresources=_STATUS),
    _rt("", "v1", "endpoints", kind="Endpoints", namespaced=True, short_names=("ep",), singular="endpoints"),
    _rt("", "v1", "serviceaccounts", kind="ServiceAccount", namespaced=True, short_names=("sa",),
        subresources=frozenset({"token"})),
    _rt("", "v1", "events", kind="Event", namespaced=True, short_names=("ev",)),
    _rt("", "v1", "resourcequotas", kind="ResourceQuota", namespaced=True, short_names=("quota",),
        subresources=_STATUS),
    _rt("", "v1", "limitranges", kind="LimitRange", namespaced=True, short_names=("limits",)),
    _rt("scheduling.k8s.io", "v1", "priorityclasses", kind="PriorityClass", namespaced=False, short_names=("pc",)),
    _rt("apps", "v1", "replicasets", kind="ReplicaSet", namespaced=True, short_names=("rs",), categories=("all",),
        subresources=_STATUS | {"scale"}, tracks_generation=True),
    _rt("apps", "v1", "statefulsets", kind="StatefulSet", namespaced=True, short_names=("sts",), categories=("all",),
        subresources=_STATUS | {"scale"}, tracks_generation=True),
    _rt("discovery.k8s.io", "v1", "endpointslices", kind="EndpointSlice", namespaced=True),
    _rt("events.k8s.io", "v1", "events", kind="Event", namespaced=True, short_names=("ev",)),
    _rt("coordination.k8s.io", "v1", "leases", kind="Lease", namespaced=True),
    _rt("apps", "v1", "deployments", kind="Deployment", namespaced=True, short_names=("deploy",), categories=("all",),
        subresources=_STATUS | {"scale"}, tracks_generation=True),
    _rt("apps", "v1", "daemonsets", kind="DaemonSet", namespaced=True, short_names=("ds",), categories=("all",),
        subresources=_STATUS, tracks_generation=True),
    _rt("policy", "v1", "poddisruptionbudgets", kind="PodDisruptionBudget", namespaced=True, short_names=("pdb",),
        subresources=_STATUS, tracks_generation=True),
    _rt("apiregistration.k8s.io", "v1", "apiservices", kind="APIService", namespaced=False,
        categories=("api-extensions",),
        subresources=_STATUS),
    _rt("apiextensions.k8s.io", "v1", "customresourcedefinitions", kind="CustomResourceDefinition", namespaced=False,
        short_names=("crd", "crds"), categories=("api-extensions",), subresources=_STATUS, tracks_generation=True),
    # Stored and served, not evaluated: the sandbox runs no CEL (docs/install.md says which
    # policies the install has and that only a real kube-apiserver enforces them).
    _rt("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", kind="ValidatingAdmissionPolicy",
        namespaced=False,
        categories=("api-extensions",), subresources=_STATUS, tracks_generation=True),
    _rt("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
        kind="ValidatingAdmissionPolicyBinding", namespaced=False, categories=("api-extensions",),
        tracks_generation=True),
    # Stored and served, never called: the sandbox runs no admission webhooks (manifests/webhook.yaml).
    _rt("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", kind="MutatingWebhookConfiguration",
        namespaced=False, categories=("api-extensions",), tracks_generation=True),
    # Stored and served, not used: the sandbox has no priority and fairness (manifests/flowcontrol.yaml).
    _rt("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", kind="FlowSchema", namespaced=False, subresources=_STATUS),
    _rt("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", kind="PriorityLevelConfiguration",
        namespaced=False,
        subresources=_STATUS),
    _rt("rbac.authorization.k8s.io", "v1", "roles", kind="Role", namespaced=True),
    _rt("rbac.authorization.k8s.io", "v1", "rolebindings", kind="RoleBinding", namespaced=True),
    _rt("rbac.authorization.k8s.io", "v1", "clusterroles", kind="ClusterRole", namespaced=False),
    _rt("rbac.authorization.k8s.io", "v1", "clusterrolebindings", kind="ClusterRoleBinding", namespaced=False),
    _rt("authentication.k8s.io", "v1", "tokenreviews", kind="TokenReview", namespaced=False, verbs=_CREATE_ONLY,
        virtual=True),
    _rt("authentication.k8s.io", "v1", "selfsubjectreviews", kind="SelfSubjectReview", namespaced=False,
        verbs=_CREATE_ONLY,
        virtual=True),
    _rt("authorization.k8s.io", "v1", "subjectaccessreviews", kind="SubjectAccessReview", namespaced=False,
        verbs=_CREATE_ONLY,
        virtual=True),
    _rt("authorization.k8s.io", "v1", "selfsubjectaccessreviews", kind="SelfSubjectAccessReview", namespaced=False,
        verbs=_CREATE_ONLY, virtual=True),
    _rt("authorization.k8s.io", "v1", "localsubjectaccessreviews", kind="LocalSubjectAccessReview", namespaced=True,
        verbs=_CREATE_ONLY, virtual=True),
    _rt("authorization.k8s.io", "v1", "selfsubjectrulesreviews", kind="SelfSubjectRulesReview", namespaced=False,
        verbs=_CREATE_ONLY, virtual=True),
)

# Fields a field selector may name, per resource, beyond metadata.name and metadata.namespace.
EXTRA_SELECTABLE_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("spec.nodeName", "status.phase", "spec.schedulerName", "spec.serviceAccountName",
                   "status.podIP", "spec.restartPolicy"),
    ("", "events"): ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                     "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                     "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"),
    ("events.k8s.io", "events"): ("regarding.kind", "regarding.namespace", "regarding.name",
                                  "regarding.uid", "reason", "type", "reportingController"),
    ("", "secrets"): ("type",),
    ("", "namespaces"): ("status.phase",),
    ("", "nodes"): ("spec.unschedulable",),
}


class Registry:
    """Resource types by group/version/resource, changing as CRDs come and go."""

    def __init__(self, types: tuple[ResourceType, ...] = BUILTIN_TYPES) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.resource)] = rt

    def remove(self, group: str, resource: str) -> None:
        for key in [k for k in self._types if k[0] == group and k[2] == resource]:
            del self._types[key]

    def get(self, group: str, version: str, resource: str) -> ResourceType | None:
        return self._types.get((group, version, resource))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    def groups(self) -> dict[str, list[str]]:
        """Group name -> its versions, core group excluded, in registration order."""
        result: dict[str, list[str]] = {}
        for group, version, _ in self._types:
            if group and version not in result.setdefault(group, []):
                result[group].append(version)
        return result

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _), rt in self._types.items() if g == group and v == version]
