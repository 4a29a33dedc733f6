"""A profile's `patch`: the fields it may set, the tolerations kube-apiserver accepts, and the
label / annotation / node selector entries left as sent because kube-apiserver would refuse them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from colocation.koordinator.profile_pod_patch import PatchInvalid, invalid_changes, parse_pod_patch


def patched(patch: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    parse_pod_patch(patch).apply(result)
    return result


def test_maps_merge_key_by_key_and_null_removes_a_key() -> None:
    pod = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {}}
    result = patched({"metadata": {"labels": {"b": None, "c": "3"}, "annotations": {"gone": None}},
                      "spec": {"nodeSelector": {"pool": "batch"}}}, pod)
    assert result == {"metadata": {"labels": {"a": "1", "c": "3"}}, "spec": {"nodeSelector": {"pool": "batch"}}}


def test_an_empty_patch_changes_nothing() -> None:
    pod = {"metadata": {"name": "a"}, "spec": {"schedulerName": "default-scheduler"}}
    assert patched({}, pod) == pod


@pytest.mark.parametrize(("patch", "message"), [
    ("tolerate", "patch: must be an object"),
    ({"status": {}}, "patch.status: not supported; a patch may set only metadata.labels, metadata.annotations, "
                     "spec.nodeSelector, spec.tolerations, spec.schedulerName"),
    ({"metadata": {"name": "other"}}, "patch.metadata.name: not supported"),
    ({"spec": {"containers": []}}, "patch.spec.containers: not supported"),
    ({"metadata": {"labels": {"a": 1}}}, "patch.metadata.labels: must be a map of strings (null removes a key)"),
    ({"spec": {"nodeSelector": ["a"]}}, "patch.spec.nodeSelector: must be a map of strings"),
    ({"spec": {"schedulerName": ""}}, "patch.spec.schedulerName: must be a non-empty string"),
    ({"spec": {"tolerations": {"key": "a"}}}, "patch.spec.tolerations: must be a list"),
])
def test_a_patch_beyond_the_supported_fields_is_refused_naming_the_field(patch: Any, message: str) -> None:
    with pytest.raises(PatchInvalid) as raised:
        parse_pod_patch(patch)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(("toleration", "message"), [
    ({"key": "a", "operator": "Equal", "value": "b", "effect": "NoExecute", "tolerationSeconds": 60}, None),
    ({"operator": "Exists"}, None),  # tolerates every taint
    ({"key": "a", "value": "b"}, None),  # operator "" is Equal
    ({"key": "a", "operator": "Exists", "effect": "NoSchedule"}, None),
    ({"value": "b"}, "[0].operator: must be Exists when key is empty"),
    ({"key": "a", "operator": "Lt", "value": "1"}, "[0].operator: 'Lt' is neither Equal nor Exists"),
    ({"key": "a", "operator": "Exists", "value": "b"}, "[0].value: must be empty when operator is Exists"),
    ({"key": "a", "value": "not valid"}, "[0].value: a valid label must be"),
    ({"key": "a b", "operator": "Exists"}, "[0].key: name part must consist of"),
    ({"key": "a", "operator": "Exists", "effect": "Evict"}, "[0].effect: 'Evict' is none of"),
    ({"key": "a", "operator": "Exists", "tolerationSeconds": 60}, "[0].tolerationSeconds: only with effect NoExecute"),
    ({"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "60"},
     "[0].tolerationSeconds: must be an integer"),
    ({"key": "a", "operator": "Exists", "tolerate": True}, "[0].tolerate: not a toleration field"),
])
def test_tolerations_follow_kube_apiservers_rules(toleration: dict[str, Any], message: str | None) -> None:
    patch = {"spec": {"tolerations": [toleration]}}
    if message is None:
        assert patched(patch, {"spec": {"tolerations": [{"operator": "Exists"}]}})["spec"]["tolerations"] == [
            toleration]
        return
    with pytest.raises(PatchInvalid) as raised:
        parse_pod_patch(patch)
    assert str(raised.value).startswith(f"patch.spec.tolerations{message}")


def test_invalid_entries_are_undone_and_valid_ones_kept() -> None:
    before = {"metadata": {"labels": {"app": "web"}}, "spec": {"nodeSelector": {"disk": "ssd"}}}
    after = {"metadata": {"labels": {"app": "web!", "new": "ok", "bad/key/x": "v"},
                          "annotations": {"example.com/Note": "any text at all", "not valid": "x"}},
             "spec": {"nodeSelector": {"disk": "ssd", "pool": "-bad-"}}}
    warnings = invalid_changes(before, after)
    assert after == {"metadata": {"labels": {"app": "web", "new": "ok"}, "annotations": {"example.com/Note":
                                                                                          "any text at all"}},
                     "spec": {"nodeSelector": {"disk": "ssd"}}}
    assert [warning.split(":")[0] for warning in warnings] == [
        "metadata.labels 'app' left as sent", "metadata.labels 'bad/key/x' left as sent",
        "metadata.annotations 'not valid' left as sent", "spec.nodeSelector 'pool' left as sent"]


@pytest.mark.parametrize("had_annotations", [True, False])
def test_annotations_beyond_kube_apiservers_size_limit_are_left_as_sent(had_annotations: bool) -> None:
    before: dict[str, Any] = {"metadata": {"annotations": {"a": "1"}} if had_annotations else {}}
    after = {"metadata": {"annotations": {"a": "1", "big": "x" * 256 * 1024}}}
    assert invalid_changes(before, after) == [
        "metadata.annotations left as sent: the profiles' would exceed 262144 bytes"]
    assert after["metadata"] == before["metadata"]
