"""ClusterColocationProfile as test vectors: which profiles pick a pod, in what order, and what a
pod becomes (labels, key mappings and suffixes, scheduler, priority, the profile's patch, batch
resources), read back through the JSON patch."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from colocation.koordinator.colocation_profile import (
    ColocationProfile,
    MutationRefused,
    PriorityClassValue,
    ProfileInvalid,
    mutate_pod,
    parse_profile,
    profile_patch,
)
from colocation_sandbox.server.patches import json_patch as apply_json_patch

CLASSES = {"koord-batch": PriorityClassValue(5500, "Never"), "koord-prod": PriorityClassValue(9500),
           "koord-mid": PriorityClassValue(7500)}


def profile(name: str, **spec: Any) -> ColocationProfile:
    annotations = spec.pop("annotations_of_profile", {})
    return parse_profile({"metadata": {"name": name, "annotations": annotations}, "spec": spec})


def pod(labels: Mapping[str, str] | None = None, containers: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": "web-", "namespace": "team-a"}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": containers or [{"name": "main", "image": "app"}], "schedulerName":
                     "default-scheduler", "priority": 0, **spec}}


def container(requests: Mapping[str, str] | None = None, limits: Mapping[str, str] | None = None,
              name: str = "main") -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = dict(requests)
    if limits is not None:
        resources["limits"] = dict(limits)
    return {"name": name, "image": "app", "resources": resources}


def never() -> int:
    raise AssertionError("no profile here has a probability below 100")


def applied(profiles: list[ColocationProfile], the_pod: dict[str, Any],
            namespace_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The pod as kube-apiserver stores it after applying the webhook's patch."""
    mutation = mutate_pod(profiles, namespace_labels or {}, the_pod, priority_classes=CLASSES, roll=never)
    result: dict[str, Any] = apply_json_patch(copy.deepcopy(the_pod), mutation.patch)
    return result


BATCH = {"qosClass": "BE", "priorityClassName": "koord-batch", "schedulerName": "koord-scheduler"}


# ---- which profiles pick a pod ------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "namespace_labels", "pod_labels", "picked"), [
    ({}, {}, {}, True),  # no selectors: every pod in every namespace
    ({"namespaceSelector": {"matchLabels": {"colocation": "on"}}}, {"colocation": "on"}, {}, True),
    ({"namespaceSelector": {"matchLabels": {"colocation": "on"}}}, {}, {}, False),
    ({"namespaceSelector": {}}, {}, {}, True),  # empty: everything, as Kubernetes reads it
    ({"selector": {"matchLabels": {"tier": "batch"}}}, {}, {"tier": "batch"}, True),
    ({"selector": {"matchLabels": {"tier": "batch"}}}, {}, {"tier": "web"}, False),
    ({"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["batch", "etl"]}]}},
     {}, {"tier": "etl"}, True),
    ({"namespaceSelector": {"matchLabels": {"colocation": "on"}}, "selector": {"matchLabels": {"tier": "batch"}}},
     {"colocation": "on"}, {"tier": "web"}, False),  # both must match
])
def test_a_profile_picks_pods_by_namespace_labels_and_pod_labels(
        spec: dict[str, Any], namespace_labels: dict[str, str], pod_labels: dict[str, str], picked: bool) -> None:
    mutation = mutate_pod([profile("p", **spec, labels={"picked": "yes"})], namespace_labels, pod(pod_labels),
                          priority_classes=CLASSES, roll=never)
    assert (mutation.applied == ("p",)) is picked
    assert bool(mutation.patch) is picked


def test_a_pod_no_profile_picks_is_left_untouched() -> None:
    mutation = mutate_pod([profile("p", selector={"matchLabels": {"tier": "batch"}}, **BATCH)], {},
                          pod({"tier": "web"}, [container({"cpu": "1"})]), priority_classes=CLASSES, roll=never)
    assert (mutation.patch, mutation.applied) == ([], ())


def test_every_picking_profile_applies_in_name_order_so_the_last_name_wins() -> None:
    profiles = [profile("b-second", schedulerName="second", labels={"shared": "b", "only-b": "1"}),
                profile("a-first", schedulerName="first", labels={"shared": "a", "only-a": "1"})]
    mutation = mutate_pod(profiles, {}, pod({}), priority_classes=CLASSES, roll=never)
    assert mutation.applied == ("a-first", "b-second")
    result = applied(profiles, pod({}))
    assert result["spec"]["schedulerName"] == "second"
    assert result["metadata"]["labels"] == {"shared": "b", "only-a": "1", "only-b": "1"}


@pytest.mark.parametrize(("probability", "draw", "applies"), [
    (50, 49, True), (50, 50, False), ("30%", 29, True), ("30%", 30, False), (0, 0, False), ("100%", 99, True)])
def test_a_probability_applies_a_profile_to_that_share_of_pods(probability: int | str, draw: int,
                                                                applies: bool) -> None:
    mutation = mutate_pod([profile("p", probability=probability, labels={"x": "y"})], {}, pod({}),
                          priority_classes=CLASSES, roll=lambda: draw)
    assert (mutation.applied == ("p",)) is applies


# ---- what it sets ----------------------------------------------------------------------------

def test_a_batch_profile_sets_qos_priority_scheduler_labels_and_annotations() -> None:
    the_profile = profile("batch", **BATCH, koordinatorPriority=1111, labels={"team": "etl"},
                          annotations={"note": "colocated"})
    result = applied([the_profile], pod({"app": "etl", "team": "mine"}))
    assert result["metadata"]["labels"] == {"app": "etl", "team": "etl", "koordinator.sh/qosClass": "BE",
                                            "koordinator.sh/priority": "1111"}
    assert result["metadata"]["annotations"] == {"note": "colocated"}
    spec = result["spec"]
    assert (spec["schedulerName"], spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "koord-scheduler", "koord-batch", 5500, "Never")


def test_a_priority_class_without_a_preemption_policy_clears_the_pods() -> None:
    result = applied([profile("prod", priorityClassName="koord-prod")], pod({}, preemptionPolicy="Never"))
    assert result["spec"]["priority"] == 9500
    assert "preemptionPolicy" not in result["spec"]


def test_a_missing_priority_class_refuses_the_pod_and_names_it() -> None:
    with pytest.raises(MutationRefused, match=r"'absent'.*no PriorityClass"):
        mutate_pod([profile("p", priorityClassName="absent")], {}, pod({}), priority_classes=CLASSES, roll=never)


# ---- key mappings, suffixes, the patch (Koordinator's order: labels, mappings, suffixes, ..., patch) ----

def test_koordinators_labels_and_suffixes_case() -> None:
    """Koordinator's own vector: mappings copy values (a missing source gives ""), suffixes then
    append to labels the pod has (a mapped one included), the patch adds its labels last."""
    the_profile = profile(
        "p", **BATCH, koordinatorPriority=1111, labels={"testLabelA": "valueA"},
        labelKeysMapping={"label-key-to-load": "label-key-to-store",
                          "label-key-to-load-not-exist": "label-key-to-store-not-exist"},
        labelSuffixes={"label-key-1": "suffix", "label-key-to-store": "suffix-0", "suffix-label-key-1": "suffix-1"},
        patch={"metadata": {"labels": {"test-patch-label": "patch-a"},
                            "annotations": {"test-patch-annotation": "patch-b"}}})
    result = applied([the_profile], pod({"label-key-to-load": "test-label-value", "label-key-1": "label-value-1"}))
    assert result["metadata"]["labels"] == {
        "label-key-1": "label-value-1suffix", "testLabelA": "valueA", "test-patch-label": "patch-a",
        "label-key-to-load": "test-label-value", "label-key-to-store": "test-label-valuesuffix-0",
        "label-key-to-store-not-exist": "", "koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "1111"}
    assert result["metadata"]["annotations"] == {"test-patch-annotation": "patch-b"}


def test_annotation_keys_mapping_copies_an_annotation_under_another_key() -> None:
    the_pod = pod({})
    the_pod["metadata"]["annotations"] = {"team.example.com/owner": "data"}
    result = applied([profile("p", annotationKeysMapping={"team.example.com/owner": "koord.example.com/owner"})],
                     the_pod)
    assert result["metadata"]["annotations"] == {"team.example.com/owner": "data", "koord.example.com/owner": "data"}


def test_mappings_read_the_keys_as_they_were_before_any_mapping_wrote() -> None:
    result = applied([profile("p", labelKeysMapping={"a": "b", "b": "c"})], pod({"a": "1", "b": "2"}))
    assert result["metadata"]["labels"] == {"a": "1", "b": "1", "c": "2"}


def test_a_mapping_reads_the_profiles_own_labels_but_not_the_qos_label_it_sets_later() -> None:
    result = applied([profile("p", qosClass="BE", labels={"tier": "batch"},
                              labelKeysMapping={"tier": "copied-tier", "koordinator.sh/qosClass": "copied-qos"})],
                     pod({}))
    assert result["metadata"]["labels"] == {"tier": "batch", "copied-tier": "batch", "copied-qos": "",
                                            "koordinator.sh/qosClass": "BE"}


def test_the_patch_applies_last_merging_maps_replacing_tolerations_and_the_scheduler() -> None:
    tolerations = [{"key": "colocation", "operator": "Exists", "effect": "NoSchedule"}]
    the_profile = profile("p", schedulerName="koord-scheduler", labels={"team": "a"}, patch={
        "metadata": {"labels": {"team": "b", "drop-me": None}},
        "spec": {"nodeSelector": {"pool": "batch", "zone": None}, "tolerations": tolerations,
                 "schedulerName": "patched-scheduler"}})
    the_pod = pod({"drop-me": "x", "keep": "y"}, nodeSelector={"zone": "a", "disk": "ssd"},
                  tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": 300}])
    result = applied([the_profile], the_pod)
    assert result["metadata"]["labels"] == {"team": "b", "keep": "y"}
    assert result["spec"]["nodeSelector"] == {"pool": "batch", "disk": "ssd"}
    assert result["spec"]["tolerations"] == tolerations
    assert result["spec"]["schedulerName"] == "patched-scheduler"


def test_a_patch_that_cannot_apply_is_left_out_with_a_warning_and_the_rest_applies() -> None:
    the_profile = profile("p", **BATCH, patch={"spec": {"containers": [{"name": "main", "image": "other"}]}})
    mutation = mutate_pod([the_profile], {}, pod({}, [container({"cpu": "1"})]), priority_classes=CLASSES, roll=never)
    assert mutation.applied == ("p",)
    assert mutation.warnings == ("ClusterColocationProfile 'p': spec.patch left out: patch.spec.containers: not "
                                 "supported; a patch may set only metadata.labels, metadata.annotations, "
                                 "spec.nodeSelector, spec.tolerations, spec.schedulerName",)
    result = apply_json_patch(copy.deepcopy(pod({}, [container({"cpu": "1"})])), mutation.patch)
    assert result["spec"]["containers"][0] == {"name": "main", "image": "app",
                                               "resources": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}


@pytest.mark.parametrize(("spec", "pod_labels", "warning", "labels"), [
    ({"labelSuffixes": {"app": "-" + "x" * 60}}, {"app": "web"},
     "metadata.labels 'app' left as sent: value 'web-xxx", {"app": "web"}),
    ({"labelKeysMapping": {"app": "not a key"}}, {"app": "web"},
     "metadata.labels 'not a key' left as sent: key 'not a key'", {"app": "web"}),
    ({"labelSuffixes": {"app": "-"}}, {"app": "web"}, "metadata.labels 'app' left as sent: value 'web-'",
     {"app": "web"}),
])
def test_a_label_kube_apiserver_would_refuse_is_left_as_sent_with_a_warning(
        spec: dict[str, Any], pod_labels: dict[str, str], warning: str, labels: dict[str, str]) -> None:
    mutation = mutate_pod([profile("p", **spec)], {}, pod(pod_labels), priority_classes=CLASSES, roll=never)
    assert len(mutation.warnings) == 1 and mutation.warnings[0].startswith(warning)
    assert apply_json_patch(copy.deepcopy(pod(pod_labels)), mutation.patch)["metadata"]["labels"] == labels


# ---- batch and mid resources -----------------------------------------------------------------

@pytest.mark.parametrize(("requests", "limits", "want_requests", "want_limits"), [
    ({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"},
     {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
     {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"}),
    # CPU in whole millicores, rounded up as Quantity.MilliValue() does.
    ({"cpu": "0.0005"}, None, {"kubernetes.io/batch-cpu": "1"}, None),
    # A limit without a request: the request is the limit, as Kubernetes defaults it for native resources.
    (None, {"cpu": "2", "memory": "512Mi"}, {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "512Mi"},
     {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "512Mi"}),
    # Other resources stay.
    ({"cpu": "1", "ephemeral-storage": "1Gi"}, None,
     {"kubernetes.io/batch-cpu": "1000", "ephemeral-storage": "1Gi"}, None),
])
def test_a_batch_pod_asks_for_batch_resources_instead_of_cpu_and_memory(
        requests: dict[str, str] | None, limits: dict[str, str] | None, want_requests: dict[str, str],
        want_limits: dict[str, str] | None) -> None:
    result = applied([profile("batch", **BATCH)], pod({}, [container(requests, limits)]))
    resources = result["spec"]["containers"][0]["resources"]
    assert resources.get("requests") == want_requests
    assert resources.get("limits") == want_limits


def test_init_containers_and_overhead_are_translated_too() -> None:
    the_pod = pod({}, [container({"cpu": "1"})], initContainers=[container({"memory": "64Mi"}, name="init")],
                  overhead={"cpu": "100m", "memory": "10Mi"})
    spec = applied([profile("batch", **BATCH)], the_pod)["spec"]
    assert spec["initContainers"][0]["resources"]["requests"] == {"kubernetes.io/batch-memory": "64Mi"}
    assert spec["overhead"] == {"kubernetes.io/batch-cpu": "100", "kubernetes.io/batch-memory": "10Mi"}


def test_a_mid_priority_pod_asks_for_mid_resources() -> None:
    result = applied([profile("mid", priorityClassName="koord-mid")], pod({}, [container({"cpu": "1"})]))
    assert result["spec"]["containers"][0]["resources"]["requests"] == {"kubernetes.io/mid-cpu": "1000"}


@pytest.mark.parametrize("spec", [{"priorityClassName": "koord-prod"}, {"labels": {"a": "b"}}])
def test_prod_pods_and_pods_without_a_low_class_keep_cpu_and_memory(spec: dict[str, Any]) -> None:
    result = applied([profile("p", **spec)], pod({}, [container({"cpu": "1", "memory": "1Gi"})]))
    assert result["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}


def test_a_pod_made_best_effort_by_its_qos_label_alone_is_batch() -> None:
    result = applied([profile("be", qosClass="BE")], pod({}, [container({"cpu": "1"})]))
    assert result["spec"]["containers"][0]["resources"]["requests"] == {"kubernetes.io/batch-cpu": "1000"}


def test_a_picked_pod_that_is_batch_already_is_translated_even_when_no_profile_applied() -> None:
    the_pod = pod({}, [container({"cpu": "1"})], priority=5500)
    mutation = mutate_pod([profile("p", probability=0, labels={"x": "y"})], {}, the_pod, priority_classes=CLASSES,
                          roll=lambda: 0)
    assert mutation.applied == ()
    result = apply_json_patch(copy.deepcopy(the_pod), mutation.patch)
    assert result["spec"]["containers"][0]["resources"]["requests"] == {"kubernetes.io/batch-cpu": "1000"}
    assert result["metadata"]["labels"] == {}  # the profile itself did not apply


def test_the_skip_annotation_on_any_picked_profile_keeps_resources_but_applies_the_rest() -> None:
    profiles = [profile("a", **BATCH),
                profile("b", labels={"x": "y"},
                        annotations_of_profile={"config.koordinator.sh/skip-update-resources": ""})]
    result = applied(profiles, pod({}, [container({"cpu": "1"})]))
    assert result["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    assert result["spec"]["priorityClassName"] == "koord-batch"


# ---- bad profiles, the patch -----------------------------------------------------------------

@pytest.mark.parametrize(("spec", "message"), [
    ({"qosClass": "GOLD"}, r"spec.qosClass: 'GOLD' is none of LSE, LSR, LS, BE, SYSTEM"),
    ({"probability": 150}, r"spec.probability: 150 is not a percentage"),
    ({"probability": "half"}, r"spec.probability: 'half' is not a percentage"),
    ({"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}, r"spec.selector: .*Near"),
    ({"labels": {"a": 1}}, r"spec.labels: must be a map of strings"),
    ({"koordinatorPriority": "high"}, r"spec.koordinatorPriority: must be an integer"),
    ({"labelKeysMapping": {"a": None}}, r"spec.labelKeysMapping: must be a map of strings"),
    ({"labelSuffixes": ["a"]}, r"spec.labelSuffixes: must be a map of strings"),
])
def test_a_profile_that_cannot_apply_says_which_field_is_wrong(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileInvalid, match=rf"ClusterColocationProfile 'bad': {message}"):
        profile("bad", **spec)


def _pods_without_labels() -> Iterator[dict[str, Any]]:
    yield {"metadata": {"name": "a"}, "spec": {"containers": []}}
    yield {"spec": {"containers": []}}


@pytest.mark.parametrize("the_pod", list(_pods_without_labels()))
def test_the_patch_creates_missing_parents_and_maps(the_pod: dict[str, Any]) -> None:
    result = applied([profile("p", labels={"a": "b"})], the_pod)
    assert result["metadata"]["labels"] == {"a": "b"}


def test_the_patch_writes_whole_fields_and_removes_what_went() -> None:
    before = {"metadata": {"labels": {"a": "1"}}, "spec": {"preemptionPolicy": "Never", "priority": 0}}
    after = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"priority": 5500}}
    assert profile_patch(before, after) == [
        {"op": "add", "path": "/metadata/labels", "value": {"a": "1", "b": "2"}},
        {"op": "add", "path": "/spec/priority", "value": 5500},
        {"op": "remove", "path": "/spec/preemptionPolicy"},
    ]
