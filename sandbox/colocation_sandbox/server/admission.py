"""What happens to an object between the request and the store: defaults, pruning, validation."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

from colocation.apimachinery.errors import ApiError, Cause
from colocation.apimachinery.objects import Obj
from colocation.apimachinery.quantity import parse_quantity
from colocation.apimachinery.selectors import label_key_errors, label_value_errors
from colocation_sandbox.server import crd_schema
from colocation_sandbox.server.resource_types import ResourceType
from colocation_sandbox.server.structural_schema import check_structural


def unknown_fields(obj: Any, pruned: Any, path: str = "") -> list[str]:
    """Paths present in `obj` that pruning removed (for fieldValidation=Strict and Warn)."""
    if isinstance(obj, dict) and isinstance(pruned, dict):
        found: list[str] = []
        for key, value in obj.items():
            child = f"{path}.{key}" if path else key
            if key not in pruned:
                found.append(child)
            else:
                found.extend(unknown_fields(value, pruned[key], child))
        return found
    if isinstance(obj, list) and isinstance(pruned, list):
        return [f for i, (a, b) in enumerate(zip(obj, pruned, strict=False))
                for f in unknown_fields(a, b, f"{path}[{i}]")]
    return []


def admit(rt: ResourceType, obj: Obj, field_validation: str, *, status_write: bool = False,
          creating: bool = False, old: Obj | None = None) -> tuple[Obj, list[str]]:
    """Prepare an object for writing. Returns the object and warnings for the client.

    A write through the status subresource (`status_write`) of a custom resource is validated as
    apiextensions' ValidateStatusUpdate does: the status against its own schema, then the scale
    subresource's status replicas; any other write against the whole schema and both replicas.
    An update (`old`, the stored object) ratchets: what it leaves unchanged is not held against it.
    """
    _check_type_meta(rt, obj)
    warnings: list[str] = []
    if rt.schema is not None:
        pruned = crd_schema.prune(obj, rt.schema)
        dropped = unknown_fields(obj, pruned)
        if dropped and field_validation == "Strict":
            listed = ", ".join(f'unknown field "{f}"' for f in dropped)
            raise ApiError.bad_request(f"strict decoding error: {listed}")
        if dropped and field_validation == "Warn":
            warnings.extend(f'unknown field "{f}"' for f in dropped)
        obj = crd_schema.apply_defaults(pruned, rt.schema)
        causes = custom_resource_causes(rt, obj, status_write, old=old)
        if causes:
            raise ApiError.invalid(rt.group, rt.kind, (obj.get("metadata") or {}).get("name", ""), causes=causes)
    else:
        obj = _builtin_defaults(rt, obj, creating)
        if rt.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            causes = crd_causes(obj)
            if causes:
                raise ApiError.invalid(rt.group, rt.kind, (obj.get("metadata") or {}).get("name", ""), causes=causes)
    return obj, warnings


def custom_resource_causes(rt: ResourceType, obj: Obj, status_write: bool, *, old: Obj | None = None) -> list[Cause]:
    assert rt.schema is not None
    causes: list[Cause] = []
    if status_write:
        status_schema = (rt.schema.get("properties") or {}).get("status")
        if "status" in obj and status_schema is not None:
            causes += crd_schema.validation_causes(obj["status"], status_schema, under="status")
    else:
        causes += crd_schema.validation_causes(obj, rt.schema)
    if old is not None:
        causes = crd_schema.ratchet(causes, obj, old)
    if not status_write and (spec_path := rt.scale_paths.get("specReplicasPath")):
        causes += crd_schema.scale_replicas_causes(obj, spec_path)
    if status_path := rt.scale_paths.get("statusReplicasPath"):
        causes += crd_schema.scale_replicas_causes(obj, status_path)
    return causes


def crd_causes(crd: Obj) -> list[Cause]:
    """What apiextensions-apiserver would reject in a CustomResourceDefinition."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes: list[Cause] = []
    for field in ("plural", "kind"):
        if not names.get(field):
            causes.append(Cause(f"spec.names.{field}", "Required value", "FieldValueRequired"))
    if not spec.get("group"):
        causes.append(Cause("spec.group", "Required value", "FieldValueRequired"))
    expected = f'{names.get("plural")}.{spec.get("group")}'
    if (crd.get("metadata") or {}).get("name") != expected:
        causes.append(Cause("metadata.name", f'Invalid value: "{(crd.get("metadata") or {}).get("name")}": '
                            f"must be spec.names.plural+\".\"+spec.group"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(Cause("spec.scope", f'Unsupported value: "{spec.get("scope")}": supported values: '
                            '"Cluster", "Namespaced"', "FieldValueNotSupported"))
    versions = spec.get("versions") or []
    if sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(Cause("spec.versions", "Invalid value: must have exactly one version marked as storage "
                            "version"))
    for index, version in enumerate(versions):
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        path = f"spec.versions[{index}].schema.openAPIV3Schema"
        if schema is None:
            causes.append(Cause(path, "Required value: schemas are required", "FieldValueRequired"))
            continue
        for problem in check_structural(schema, path):
            field, _, message = problem.partition(": ")
            causes.append(Cause(field, message, "FieldValueForbidden" if message.startswith("Forbidden")
                                else "FieldValueInvalid"))
    return causes


def _check_type_meta(rt: ResourceType, obj: Obj) -> None:
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind and kind != rt.kind:
        raise ApiError.bad_request(f"the kind of the object ({kind}) does not match the resource "
                                   f"({rt.resource}, kind {rt.kind})")
    if api_version and api_version.rpartition("/")[0] != rt.group:
        raise ApiError.bad_request(f"the API version of the object ({api_version}) does not match the "
                                   f"request ({rt.api_version})")
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise ApiError.bad_request("metadata must be an object")
    for field in ("labels", "annotations"):
        values = (metadata or {}).get(field)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise ApiError.invalid(rt.group, rt.kind, (metadata or {}).get("name", ""), causes=[
                Cause(f"metadata.{field}", "Invalid value: values must be strings", "FieldValueTypeInvalid")])
    causes = [Cause("metadata.labels", f'Invalid value: "{text}": {error}')
              for key, value in ((metadata or {}).get("labels") or {}).items()
              for text, errors in ((key, label_key_errors(key)), (value, label_value_errors(value)))
              for error in errors]
    if causes:
        raise ApiError.invalid(rt.group, rt.kind, (metadata or {}).get("name", ""), causes=causes)


def new_namespace(name: str) -> Obj:
    """A Namespace as an API create leaves it, for the namespaces the sandbox makes itself."""
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def _builtin_defaults(rt: ResourceType, obj: Obj, creating: bool) -> Obj:
    """The few defaults of built-in types that clients in this project read back."""
    if (rt.group, rt.resource) == ("", "namespaces"):
        # Every write labels a namespace with its name (SetDefaults_Namespace); a new one is Active
        # and carries the kubernetes finalizer, whatever it asked for (PrepareForCreate).
        meta = obj.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta.get("name", "")}
        obj = {**obj, "metadata": {**meta, "labels": labels}}
        if not creating:
            return obj
        finalizers = list((obj.get("spec") or {}).get("finalizers") or ())
        if "kubernetes" not in finalizers:
            finalizers.append("kubernetes")
        return {**obj, "spec": {**(obj.get("spec") or {}), "finalizers": finalizers}, "status": {"phase": "Active"}}
    if (rt.group, rt.resource) == ("", "pods"):
        status = dict(obj.get("status") or {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos_class(obj.get("spec") or {}))
        conditions = list(status.get("conditions") or [])
        # As kube-apiserver does for a gated pod, so kubectl shows it as SchedulingGated.
        if (obj.get("spec") or {}).get("schedulingGates") and not any(
                c.get("type") == "PodScheduled" for c in conditions):
            status["conditions"] = [*conditions, {
                "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates"}]
        return {**obj, "status": status}
    if (rt.group, rt.resource) == ("", "secrets"):
        return {**obj, "type": obj.get("type") or "Opaque"}
    if (rt.group, rt.resource) == ("", "services"):
        return {**obj, "spec": _service_spec(obj)}
    if (rt.group, rt.resource) == ("apps", "deployments"):
        spec = dict(obj.get("spec") or {})
        spec.setdefault("replicas", 1)
        return {**obj, "spec": spec}
    return obj


def _service_spec(obj: Obj) -> dict[str, Any]:
    spec = dict(obj.get("spec") or {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec["ports"] = [{"protocol": "TCP", **p, "targetPort": p.get("targetPort", p.get("port"))}
                     for p in spec.get("ports") or ()]
    if not spec.get("clusterIP"):
        # No IP allocator in the sandbox: a stable address derived from the name is unique enough.
        meta = obj.get("metadata") or {}
        digest = hashlib.sha256(f'{meta.get("namespace")}/{meta.get("name")}'.encode()).digest()
        spec["clusterIP"] = f"10.96.{digest[0]}.{max(digest[1], 1)}"
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    return spec


_QOS_RESOURCES = ("cpu", "memory")


def _qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort, as the kubelet computes it: from the cpu and memory
    requests and limits of every container (init containers too) that are above zero, summed;
    extended resources (e.g. kubernetes.io/batch-cpu) do not count."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container in list(spec.get("containers") or ()) + list(spec.get("initContainers") or ()):
        resources = container.get("resources") or {}
        container_limits = resources.get("limits") or {}
        # A request left out is the limit (kube-apiserver defaults it so before the kubelet looks).
        container_requests = {**container_limits, **(resources.get("requests") or {})}
        for given, totals in ((container_requests, requests), (container_limits, limits)):
            for name in _QOS_RESOURCES:
                amount = _positive(given.get(name))
                if amount is not None:
                    totals[name] = totals.get(name, Decimal(0)) + amount
        if not all(_positive(container_limits.get(name)) is not None for name in _QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(name) == amount for name, amount in requests.items()) \
            and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


def _positive(value: object) -> Decimal | None:
    """A quantity above zero, or None (absent, zero or unparsable: none of them counts)."""
    if not isinstance(value, str | int | float):
        return None
    try:
        amount = parse_quantity(value)
    except ValueError:
        return None
    return amount if amount > 0 else None
