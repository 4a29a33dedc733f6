"""The options of a write (CreateOptions, UpdateOptions, PatchOptions, DeleteOptions), checked as
apimachinery's validation does before anything else: 422 Invalid on the options kind. ListOptions
are read and checked by `colocation.apimachinery.watch_params`, for every server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from colocation.apimachinery.errors import ApiError, Cause

META_GROUP = "meta.k8s.io"
FIELD_MANAGER_MAX_LENGTH = 128
_FIELD_VALIDATIONS = ("", "Ignore", "Strict", "Warn")
_PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")
_APPLY_PATCH_TYPES = ("application/apply-patch+yaml", "application/apply-patch+cbor")


def check_write_options(kind: str, query: Any, *, patch_type: str = "") -> None:
    """Raise 422 Invalid on `kind` (CreateOptions, UpdateOptions, PatchOptions) for bad query options."""
    causes: list[Cause] = []
    manager = query.get("fieldManager", "")
    if kind == "PatchOptions":
        if patch_type in _APPLY_PATCH_TYPES:
            if not manager:
                causes.append(Cause("fieldManager", "Required value: is required for apply patch",
                                    "FieldValueRequired"))
        elif "force" in query:
            causes.append(_forbidden("force", "may not be specified for non-apply patch"))
    causes += _field_manager_causes(manager)
    causes += _dry_run_causes(query.getall("dryRun", []))
    validation = query.get("fieldValidation", "")
    if validation not in _FIELD_VALIDATIONS:
        causes.append(_not_supported("fieldValidation", _quote(validation), _FIELD_VALIDATIONS))
    if causes:
        raise ApiError.invalid(META_GROUP, kind, "", causes=causes)


def check_delete_options(options: Mapping[str, Any], dry_run: list[str]) -> None:
    """Raise 422 Invalid on DeleteOptions (the body's, with the query's propagationPolicy and dryRun)."""
    causes: list[Cause] = []
    policy = options.get("propagationPolicy")
    if options.get("orphanDependents") is not None and policy is not None:
        causes.append(Cause("propagationPolicy", f"Invalid value: {_quote(policy)}: orphanDependents and "
                            "deletionPropagation cannot be both set"))
    if policy is not None and policy not in _PROPAGATION_POLICIES:
        causes.append(_not_supported("propagationPolicy", _quote(policy), (*_PROPAGATION_POLICIES, "nil")))
    causes += _dry_run_causes(dry_run)
    if causes:
        raise ApiError.invalid(META_GROUP, "DeleteOptions", "", causes=causes)


def _field_manager_causes(manager: str) -> list[Cause]:
    causes: list[Cause] = []
    if len(manager.encode()) > FIELD_MANAGER_MAX_LENGTH:
        causes.append(Cause("fieldManager", f"Too long: may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes",
                            "FieldValueTooLong"))
    position = 0
    for char in manager:  # Go ranges over a string by byte offset
        if not char.isprintable():
            causes.append(Cause("fieldManager", f"Invalid value: {_quote(manager)}: invalid character "
                                f"U+{ord(char):04X} (at position {position})"))
        position += len(char.encode())
    return causes


def _dry_run_causes(values: list[str]) -> list[Cause]:
    if all(value == "All" for value in values):
        return []
    shown = "[" + ",".join(_quote(value) for value in values) + "]"
    return [_not_supported("dryRun", shown, ("All",))]


def _not_supported(field: str, shown: str, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(_quote(value) for value in supported)
    return Cause(field, f"Unsupported value: {shown}: supported values: {listed}", "FieldValueNotSupported")


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _forbidden(field: str, detail: str) -> Cause:
    return Cause(field, f"Forbidden: {detail}", "FieldValueForbidden")
