"""A ClusterColocationProfile's `patch`, and the check of what profiles did to a pod (pure).

`parse_pod_patch` accepts the fields a webhook can set on a new pod without undoing
kube-apiserver's own admission: labels, annotations and node selector (merged key by key; null
removes), tolerations (replaced) and the scheduler's name. Any other field, or a toleration
kube-apiserver would refuse, is a `PatchInvalid`. `invalid_changes` undoes any label, annotation
or node selector change kube-apiserver would refuse, so profiles never make a pod's creation fail.

The fields, and why only these: docs/operator.md#the-pod-webhook-clustercolocationprofile
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from colocation.apimachinery.selectors import label_key_errors, label_value_errors

SUPPORTED_FIELDS = ("metadata.labels", "metadata.annotations", "spec.nodeSelector", "spec.tolerations",
                    "spec.schedulerName")
_TOLERATION_OPERATORS = ("", "Equal", "Exists")
_TAINT_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_ANNOTATIONS_MAX_BYTES = 256 * 1024  # kube-apiserver's limit on a pod's annotations, keys and values


class PatchInvalid(ValueError):
    """A patch this module cannot apply safely; the message names the field from `patch`."""


@dataclass(frozen=True, kw_only=True)
class PodPatch:
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    node_selector: Mapping[str, str | None] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] | None = None
    scheduler_name: str | None = None

    def apply(self, pod: dict[str, Any]) -> None:
        """Apply to `pod` (a pod object, changed in place)."""
        metadata, spec = pod.setdefault("metadata", {}), pod.setdefault("spec", {})
        _merge(metadata, "labels", self.labels)
        _merge(metadata, "annotations", self.annotations)
        _merge(spec, "nodeSelector", self.node_selector)
        if self.tolerations is not None:
            spec["tolerations"] = [dict(toleration) for toleration in self.tolerations]
        if self.scheduler_name is not None:
            spec["schedulerName"] = self.scheduler_name


def _merge(parent: dict[str, Any], key: str, changes: Mapping[str, str | None]) -> None:
    if not changes:
        return
    merged = dict(parent.get(key) or {})
    for name, value in changes.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    if merged or key in parent:
        parent[key] = merged


def parse_pod_patch(value: Any) -> PodPatch:
    """A profile's `spec.patch` as this module applies it; PatchInvalid if it cannot be."""
    parts = _object(value, "patch", ("metadata", "spec"))
    metadata = _object(parts.get("metadata") or {}, "patch.metadata", ("labels", "annotations"))
    spec = _object(parts.get("spec") or {}, "patch.spec", ("nodeSelector", "tolerations", "schedulerName"))
    scheduler = spec.get("schedulerName")
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler):
        raise PatchInvalid("patch.spec.schedulerName: must be a non-empty string")
    tolerations = spec.get("tolerations")
    if tolerations is not None:
        if not isinstance(tolerations, list):
            raise PatchInvalid("patch.spec.tolerations: must be a list")
        tolerations = tuple(_toleration(item, f"patch.spec.tolerations[{index}]")
                            for index, item in enumerate(tolerations))
    return PodPatch(labels=_changes(metadata, "labels", "patch.metadata"),
                    annotations=_changes(metadata, "annotations", "patch.metadata"),
                    node_selector=_changes(spec, "nodeSelector", "patch.spec"),
                    tolerations=tolerations, scheduler_name=scheduler)


def _object(value: Any, path: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PatchInvalid(f"{path}: must be an object")
    for key in value:
        if key not in allowed:
            raise PatchInvalid(f"{path}.{key}: not supported; a patch may set only {', '.join(SUPPORTED_FIELDS)}")
    return value


def _changes(parent: Mapping[str, Any], key: str, path: str) -> dict[str, str | None]:
    value = parent.get(key) or {}
    if not isinstance(value, Mapping) or not all(v is None or isinstance(v, str) for v in value.values()):
        raise PatchInvalid(f"{path}.{key}: must be a map of strings (null removes a key)")
    return dict(value)


def _toleration(item: Any, path: str) -> Mapping[str, Any]:
    """A toleration kube-apiserver accepts in a pod (its ValidateTolerations rules)."""
    if not isinstance(item, Mapping):
        raise PatchInvalid(f"{path}: must be an object")
    for key in item:
        if key not in _TOLERATION_FIELDS:
            raise PatchInvalid(f"{path}.{key}: not a toleration field ({', '.join(_TOLERATION_FIELDS)})")
    key, operator, value = item.get("key") or "", item.get("operator") or "", item.get("value") or ""
    effect, seconds = item.get("effect") or "", item.get("tolerationSeconds")
    if not all(isinstance(text, str) for text in (key, operator, value, effect)):
        raise PatchInvalid(f"{path}: key, operator, value and effect must be strings")
    problem = ""
    if key and (errors := label_key_errors(key)):
        problem = f"key: {'; '.join(errors)}"
    elif not key and operator != "Exists":
        problem = "operator: must be Exists when key is empty"
    elif operator not in _TOLERATION_OPERATORS:
        problem = f"operator: {operator!r} is neither Equal nor Exists"
    elif operator == "Exists" and value:
        problem = "value: must be empty when operator is Exists"
    elif operator != "Exists" and (errors := label_value_errors(value)):
        problem = f"value: {'; '.join(errors)}"
    elif effect not in _TAINT_EFFECTS:
        problem = f"effect: {effect!r} is none of NoSchedule, PreferNoSchedule, NoExecute"
    elif seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
        problem = "tolerationSeconds: must be an integer"
    elif seconds is not None and effect != "NoExecute":
        problem = "tolerationSeconds: only with effect NoExecute"
    if problem:
        raise PatchInvalid(f"{path}.{problem}")
    return dict(item)


def invalid_changes(before: Mapping[str, Any], after: dict[str, Any]) -> list[str]:
    """Undo in `after` each label, annotation and node selector entry that profiles set and
    kube-apiserver would refuse (back to its value in `before`, or removed); one warning each."""
    warnings: list[str] = []
    for parent, name, check_value in (("metadata", "labels", True), ("metadata", "annotations", False),
                                      ("spec", "nodeSelector", True)):
        old = dict((before.get(parent) or {}).get(name) or {})
        new = (after.get(parent) or {}).get(name)
        if not isinstance(new, dict):
            continue
        for key, value in list(new.items()):
            if key in old and old[key] == value:
                continue
            # Annotation keys are checked lower-cased, as kube-apiserver checks them.
            errors = label_key_errors(key if check_value else key.lower())
            errors = [f"key {key!r}: {error}" for error in errors]
            if check_value and isinstance(value, str):
                errors += [f"value {value!r}: {error}" for error in label_value_errors(value)]
            if errors:
                warnings.append(f"{parent}.{name} {key!r} left as sent: {'; '.join(errors)}")
                if key in old:
                    new[key] = old[key]
                else:
                    del new[key]
        if name == "annotations" and _size(new) > _ANNOTATIONS_MAX_BYTES >= _size(old):
            if "annotations" in (before.get("metadata") or {}):
                after["metadata"]["annotations"] = old
            else:
                del after["metadata"]["annotations"]
            warnings.append(f"metadata.annotations left as sent: the profiles' would exceed "
                            f"{_ANNOTATIONS_MAX_BYTES} bytes")
    return warnings


def _size(annotations: Mapping[str, Any]) -> int:
    return sum(len(key.encode()) + len(str(value).encode()) for key, value in annotations.items())
