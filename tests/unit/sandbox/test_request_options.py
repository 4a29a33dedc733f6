"""Write options (Create/Update/Patch/DeleteOptions) refused as apimachinery's meta/v1 validation does."""

from __future__ import annotations

import pytest
from multidict import MultiDict

from colocation.apimachinery.errors import ApiError
from colocation_sandbox.server.request_options import check_delete_options, check_write_options


def _refusal(kind: str, query: dict[str, str] | list[tuple[str, str]], patch_type: str = "") -> ApiError:
    with pytest.raises(ApiError) as caught:
        check_write_options(kind, MultiDict(query), patch_type=patch_type)
    return caught.value


def test_apply_needs_a_field_manager() -> None:
    error = _refusal("PatchOptions", {}, "application/apply-patch+yaml")
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required ' \
                            "for apply patch"
    assert error.details == {"kind": "PatchOptions", "group": "meta.k8s.io", "causes": [
        {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
         "field": "fieldManager"}]}


def test_several_problems_are_listed_in_brackets_in_upstream_order() -> None:
    error = _refusal("PatchOptions", [("fieldValidation", "Loose"), ("dryRun", "All"), ("dryRun", "x")],
                     "application/apply-patch+yaml")
    assert error.message == (
        'PatchOptions.meta.k8s.io "" is invalid: [fieldManager: Required value: is required for apply patch, '
        'dryRun: Unsupported value: ["All","x"]: supported values: "All", '
        'fieldValidation: Unsupported value: "Loose": supported values: "", "Ignore", "Strict", "Warn"]')


def test_force_is_for_apply_only_and_field_managers_are_short_and_printable() -> None:
    error = _refusal("PatchOptions", {"force": "false"}, "application/merge-patch+json")
    assert [c["field"] for c in error.details["causes"]] == ["force"]
    error = _refusal("CreateOptions", {"fieldManager": "é" * 65})  # 130 bytes
    assert error.details["causes"][0]["message"] == "Too long: may not be more than 128 bytes"
    error = _refusal("UpdateOptions", {"fieldManager": "é\tx"})
    assert error.details["causes"][0]["message"] == 'Invalid value: "é\\tx": invalid character U+0009 (at position 2)'
    check_write_options("PatchOptions", MultiDict({"fieldManager": "me", "force": "true"}),
                        patch_type="application/apply-patch+yaml")


def test_delete_options() -> None:
    check_delete_options({"propagationPolicy": "Orphan"}, ["All"])
    with pytest.raises(ApiError) as caught:
        check_delete_options({"orphanDependents": True, "propagationPolicy": "Orphan"}, [])
    assert caught.value.details["causes"][0]["message"] == (
        'Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set')
    with pytest.raises(ApiError) as caught:
        check_delete_options({"propagationPolicy": "Later"}, [])
    assert caught.value.details["causes"][0]["message"] == (
        'Unsupported value: "Later": supported values: "Foreground", "Background", "Orphan", "nil"')
