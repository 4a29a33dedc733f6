"""ClusterColocationProfile: which new pods a profile picks, and what it changes in them (pure).

Every profile whose selectors pick a pod applies, in the order of their names, each changing the
pod in Koordinator's order, its `patch` last (`profile_pod_patch`). Then a picked pod that is
batch or mid asks for the matching extended resources instead of cpu and memory, unless a
profile carries `SKIP_RESOURCES_ANNOTATION`. A part that kube-apiserver would refuse is left out
with a warning: profiles never make a pod's creation fail, except by naming a PriorityClass that
does not exist (`MutationRefused`). `mutate_pod` applies them; `profile_patch` gives the JSON
patch (RFC 6902) against the pod as received. This is Koordinator's pod mutating webhook.

The fields and their order: docs/operator.md#the-pod-webhook-clustercolocationprofile
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.quantity import cpu_millis
from colocation.apimachinery.selectors import LabelSelector
from colocation.koordinator.classes import QOS_CLASSES, QOS_LABEL, priority_of
from colocation.koordinator.profile_pod_patch import PatchInvalid, PodPatch, invalid_changes, parse_pod_patch

KOORDINATOR_PRIORITY_LABEL = "koordinator.sh/priority"
# Koordinator's annotation on a profile that keeps cpu and memory as they are (labels etc. still apply).
SKIP_RESOURCES_ANNOTATION = "config.koordinator.sh/skip-update-resources"
EXTENDED_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "koord-batch": {"cpu": "kubernetes.io/batch-cpu", "memory": "kubernetes.io/batch-memory"},
    "koord-mid": {"cpu": "kubernetes.io/mid-cpu", "memory": "kubernetes.io/mid-memory"},
}
_PERCENT = re.compile(r"^(\d{1,3})%$")
# The pod fields a profile may change, as JSON pointers from the pod's root.
_PATCHED_FIELDS = (("metadata", "labels"), ("metadata", "annotations"), ("spec", "schedulerName"),
                   ("spec", "priorityClassName"), ("spec", "priority"), ("spec", "preemptionPolicy"),
                   ("spec", "nodeSelector"), ("spec", "tolerations"), ("spec", "initContainers"),
                   ("spec", "containers"), ("spec", "overhead"))


class ProfileInvalid(ValueError):
    """A profile this module cannot apply; the message names the profile and the field."""


class MutationRefused(Exception):
    """The pod must not be created as it is (a profile names a PriorityClass that does not exist)."""


@dataclass(frozen=True)
class PriorityClassValue:
    value: int
    preemption_policy: str | None = None


@dataclass(frozen=True, kw_only=True)
class ColocationProfile:
    name: str
    namespace_selector: LabelSelector = field(default_factory=LabelSelector)
    selector: LabelSelector = field(default_factory=LabelSelector)
    probability: int = 100  # percent of the picked pods it applies to
    qos_class: str = ""
    priority_class_name: str = ""
    koordinator_priority: int | None = None
    scheduler_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    label_keys_mapping: Mapping[str, str] = field(default_factory=dict)  # from key -> to key
    annotation_keys_mapping: Mapping[str, str] = field(default_factory=dict)
    label_suffixes: Mapping[str, str] = field(default_factory=dict)
    patch: PodPatch | None = None
    patch_error: str = ""  # why `patch` is left out (the rest of the profile still applies)
    skip_resources: bool = False

    def picks(self, namespace_labels: Mapping[str, str], pod_labels: Mapping[str, str]) -> bool:
        return self.namespace_selector.matches(namespace_labels) and self.selector.matches(pod_labels)


@dataclass(frozen=True)
class Mutation:
    patch: list[dict[str, Any]]  # empty: nothing to change
    applied: tuple[str, ...]  # the profiles applied, in order
    warnings: tuple[str, ...] = ()  # what was left out, and why


def parse_profile(obj: Mapping[str, Any]) -> ColocationProfile:
    """A ClusterColocationProfile object as this module applies it; ProfileInvalid if it cannot be."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    spec = obj.get("spec") or {}

    def fail(path: str, message: str) -> ProfileInvalid:
        return ProfileInvalid(f"ClusterColocationProfile {name!r}: spec.{path}: {message}")

    def selector(key: str) -> LabelSelector:
        value = spec.get(key)
        if value is None:
            return LabelSelector()
        try:
            return LabelSelector.from_api(value)
        except ApiError as error:
            raise fail(key, error.message) from None

    def strings(key: str) -> dict[str, str]:
        value = spec.get(key) or {}
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise fail(key, "must be a map of strings")
        return dict(value)

    qos = spec.get("qosClass") or ""
    if qos and qos not in QOS_CLASSES:
        raise fail("qosClass", f"{qos!r} is none of {', '.join(QOS_CLASSES)}")
    patch, patch_error = None, ""
    if spec.get("patch") is not None:
        try:
            patch = parse_pod_patch(spec["patch"])
        except PatchInvalid as error:
            patch_error = str(error)
    sub_priority = spec.get("koordinatorPriority")
    if sub_priority is not None and (not isinstance(sub_priority, int) or isinstance(sub_priority, bool)):
        raise fail("koordinatorPriority", "must be an integer")
    return ColocationProfile(
        name=name, namespace_selector=selector("namespaceSelector"), selector=selector("selector"),
        probability=_percent(spec.get("probability"), fail), qos_class=qos,
        priority_class_name=str(spec.get("priorityClassName") or ""), koordinator_priority=sub_priority,
        scheduler_name=str(spec.get("schedulerName") or ""), labels=strings("labels"),
        annotations=strings("annotations"), label_keys_mapping=strings("labelKeysMapping"),
        annotation_keys_mapping=strings("annotationKeysMapping"), label_suffixes=strings("labelSuffixes"),
        patch=patch, patch_error=patch_error, skip_resources=SKIP_RESOURCES_ANNOTATION in annotations)


def _percent(value: Any, fail: Callable[[str, str], ProfileInvalid]) -> int:
    """An IntOrString probability: 0-100, or "0%"-"100%"."""
    if value is None:
        return 100
    if isinstance(value, str) and (match := _PERCENT.match(value)):
        value = int(match.group(1))
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
        raise fail("probability", f"{value!r} is not a percentage from 0 to 100 (e.g. 50 or \"50%\")")
    return value


def mutate_pod(profiles: Iterable[ColocationProfile], namespace_labels: Mapping[str, str], pod: Mapping[str, Any],
               *, priority_classes: Mapping[str, PriorityClassValue], roll: Callable[[], int]) -> Mutation:
    """The patch that applies every profile picking `pod` to it. `roll()` draws a number in
    0..99 for each profile with a probability below 100 (the profile applies when it is below)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    picked = sorted((p for p in profiles if p.picks(namespace_labels, labels)), key=lambda p: p.name)
    if not picked:
        return Mutation([], ())
    mutated: dict[str, Any] = copy.deepcopy(dict(pod))
    applied: list[str] = []
    warnings: list[str] = []
    for profile in picked:
        if profile.probability < 100 and not roll() < profile.probability:
            continue
        _apply(profile, mutated, priority_classes)
        if profile.patch_error:
            warnings.append(f"ClusterColocationProfile {profile.name!r}: spec.patch left out: {profile.patch_error}")
        applied.append(profile.name)
    # As Koordinator does: a picked pod that is batch or mid is translated even when no profile
    # applied (its probability skipped it), since the pod may have been batch already.
    if not any(profile.skip_resources for profile in picked):
        _translate_resources(mutated)
    warnings += invalid_changes(pod, mutated)
    return Mutation(profile_patch(pod, mutated), tuple(applied), tuple(warnings))


def _apply(profile: ColocationProfile, pod: dict[str, Any], priority_classes: Mapping[str, PriorityClassValue]) -> None:
    metadata = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})
    labels = {**(metadata.get("labels") or {}), **profile.labels}
    annotations = {**(metadata.get("annotations") or {}), **profile.annotations}
    # Each mapping reads the keys as they were before any mapping wrote (Koordinator's map order is
    # random, so a chain a -> b, b -> c has no one answer there).
    labels.update({to: labels.get(source, "") for source, to in profile.label_keys_mapping.items()})
    annotations.update({to: annotations.get(source, "") for source, to in profile.annotation_keys_mapping.items()})
    for key, suffix in profile.label_suffixes.items():
        if key in labels:
            labels[key] += suffix
    if profile.scheduler_name:
        spec["schedulerName"] = profile.scheduler_name
    if profile.qos_class:
        labels[QOS_LABEL] = profile.qos_class
    if profile.priority_class_name:
        found = priority_classes.get(profile.priority_class_name)
        if found is None:
            raise MutationRefused(f"ClusterColocationProfile {profile.name!r} sets priorityClassName "
                                  f"{profile.priority_class_name!r}, and no PriorityClass of that name exists")
        spec["priorityClassName"] = profile.priority_class_name
        spec["priority"] = found.value
        if found.preemption_policy:
            spec["preemptionPolicy"] = found.preemption_policy
        else:
            spec.pop("preemptionPolicy", None)
    if profile.koordinator_priority is not None:
        labels[KOORDINATOR_PRIORITY_LABEL] = str(profile.koordinator_priority)
    for key, values in (("labels", labels), ("annotations", annotations)):
        if values or key in metadata:
            metadata[key] = values
    if profile.patch is not None:
        profile.patch.apply(pod)


def _translate_resources(pod: dict[str, Any]) -> None:
    names = EXTENDED_RESOURCES.get(priority_of(pod))
    if names is None:
        return
    spec = pod["spec"]
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            resources = container.get("resources")
            if not isinstance(resources, dict):
                continue
            for part in ("requests", "limits"):
                if isinstance(resources.get(part), dict):
                    _replace(resources[part], names)
            limits = resources.get("limits") or {}
            for extended in names.values():
                if extended in limits and extended not in (resources.get("requests") or {}):
                    resources.setdefault("requests", {})[extended] = limits[extended]
    if isinstance(spec.get("overhead"), dict):
        _replace(spec["overhead"], names)


def _replace(amounts: dict[str, Any], names: Mapping[str, str]) -> None:
    for native, extended in names.items():
        if native in amounts:
            quantity = amounts.pop(native)
            # CPU as whole millicores (the unit batch-cpu counts in); memory as the pod gave it.
            amounts[extended] = str(cpu_millis(quantity)) if native == "cpu" else quantity


def profile_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations that turn `before` into `after` on the fields a profile may change.

    Whole fields are written (`add` replaces a member that exists), never list items by index:
    the patch stays right whatever order kube-apiserver's other mutations left the lists in.
    """
    operations: list[dict[str, Any]] = []
    for parent, name in _PATCHED_FIELDS:
        old, new = (before.get(parent) or {}), (after.get(parent) or {})
        if old.get(name) == new.get(name):
            continue
        if name not in new:
            operations.append({"op": "remove", "path": f"/{parent}/{name}"})
        else:
            if parent not in before:
                operations.append({"op": "add", "path": f"/{parent}", "value": {}})
                before = {**before, parent: {}}
            operations.append({"op": "add", "path": f"/{parent}/{name}", "value": new[name]})
    return operations

