"""pydantic validation errors as kube-apiserver words them: a 400 for a body that is not an object,
then one `Cause` per invalid field with upstream's field path and message (k8s.io/apimachinery
util/validation/field). Every body our servers validate (NodeMetric reports, custom metric sample
batches) is refused through here, so clients see one style of error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pydantic_core
from pydantic import ValidationError

from colocation.apimachinery.errors import ApiError, Cause

# A location step that follows one of these shapes is a map key, written `field[key]`; `int`
# stands for any list index.
MapShape = tuple[str | type[int], ...]


@dataclass(frozen=True)
class FieldErrorStyle:
    """What differs between the objects: map-valued fields, pattern wording, custom error types."""

    map_fields: tuple[MapShape, ...] = ()
    pattern_messages: Mapping[str, str] = field(default_factory=dict)
    # pydantic error type -> the reason the value is wrong (for PydanticCustomError types).
    custom_problems: Mapping[str, Callable[[object], str | None]] = field(default_factory=dict)

    def path(self, location: Sequence[int | str]) -> str:
        """A pydantic error location as Kubernetes writes field paths: `a.b[3].c[cpu]`."""
        parts: list[str] = []
        for position, step in enumerate(location):
            if step == "[key]":  # the key itself is wrong: the path already ends with it
                continue
            if isinstance(step, int) or self._follows_map(location[:position]):
                parts.append(f"[{step}]")
            else:
                parts.append(f".{step}" if parts else str(step))
        return "".join(parts)

    def _follows_map(self, before: Sequence[int | str]) -> bool:
        for shape in self.map_fields:
            tail = before[-len(shape):]
            if len(tail) == len(shape) and all(isinstance(step, int) if expected is int else step == expected
                                               for step, expected in zip(tail, shape, strict=True)):
                return True
        return False

    def cause(self, error: Mapping[str, Any]) -> Cause:
        kind, value, context = error["type"], error.get("input"), error.get("ctx") or {}
        path = self.path(error["loc"])
        if kind == "missing":
            return Cause(path, "Required value", "FieldValueRequired")
        if kind == "extra_forbidden":
            return Cause(path, "Forbidden: unknown field", "FieldValueForbidden")
        if kind == "duplicate":
            return Cause(f"{path}[{context['index']}]", f"Duplicate value: {go_quote(context['value'])}",
                         "FieldValueDuplicate")
        if kind == "literal_error":
            expected = re.findall(r"'([^']*)'", str(context.get("expected", "")))
            return Cause(path, f"Unsupported value: {show(value)}: supported values: "
                         f"{', '.join(go_quote(v) for v in expected)}", "FieldValueNotSupported")
        if kind == "string_too_long":
            return Cause(path, f"Too long: may not be more than {context.get('max_length')} bytes",
                         "FieldValueTooLong")
        if kind == "too_long":
            count = len(value) if isinstance(value, (list, dict)) else "too many"
            return Cause(path, f"Too many: {count}: must have at most {context.get('max_length')} items",
                         "FieldValueTooMany")
        if kind == "too_short":
            return Cause(path, f"Required value: at least {context.get('min_length')} item", "FieldValueRequired")
        if kind == "string_pattern_mismatch":
            detail = self.pattern_messages.get(str(context.get("pattern")), str(error["msg"]))
            return Cause(path, f"Invalid value: {show(value)}: {detail}")
        if kind in self.custom_problems:
            return Cause(path, f"Invalid value: {show(value)}: {self.custom_problems[kind](value) or error['msg']}")
        detail = str(error["msg"]).removeprefix("Value error, ")
        return Cause(path, f"Invalid value: {show(value)}: {detail[:1].lower() + detail[1:]}")

    def causes(self, exc: ValidationError) -> list[Cause]:
        return [self.cause(error) for error in exc.errors()]


def decoded_object(raw: bytes, kind: str, exc: ValidationError | None = None) -> dict[str, Any]:
    """The JSON object of a body that failed validation (`exc`, when given); a 400 as
    kube-apiserver's decoder gives it when the body is not JSON or not an object."""
    reason = next((str(error["msg"]).removeprefix("Invalid JSON: ") for error in exc.errors()
                   if error["type"] == "json_invalid"), None) if exc is not None else None
    document: object = None
    if reason is None:
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError as decode_error:
            # orjson stops at 64-bit integers; the validator's parser (jiter) took the body, so
            # decode it the same way, for the identity checks and the field errors to follow.
            try:
                document = pydantic_core.from_json(raw, allow_inf_nan=False)
            except ValueError:
                reason = str(decode_error)
    if reason is not None:
        raise ApiError.bad_request(
            f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; "
            f"json parse error: {reason} ({_summary(raw)})")
    if not isinstance(document, dict):
        raise ApiError.bad_request(
            f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; "
            f"json parse error: expected an object ({_summary(raw)})")
    return document


def _summary(raw: bytes) -> str:
    # Upstream's summarizeData: the start of a JSON-looking body, or hex of anything else.
    if not raw:
        return "<empty>"
    if raw[:1] == b"{":
        text = raw[:30].decode("utf-8", "replace")
        return text + " ..." if len(raw) > 30 else text
    return raw[:30].hex() + (" ..." if len(raw) > 30 else "")


def go_quote(value: object) -> str:
    """A value as Go's %q writes a string (other values as they print)."""
    return orjson.dumps(value).decode() if isinstance(value, str) else str(value)


def show(value: object) -> str:
    """A rejected value as a cause shows it: JSON, at most 100 characters."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    try:
        text = orjson.dumps(value, default=str).decode() if value is not None else "null"
    except TypeError:  # orjson's own error too: an integer beyond 64 bits, or nesting too deep
        try:
            text = str(value)
        except ValueError:  # Python refuses str() of an integer over 4,300 digits
            text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= 100 else text[:97] + "..."
