"""JSONPath, the subset CRD printer columns use, evaluated with client-go's semantics.

Also how client-go's JSONPath prints one result: scalars as Go's `%v` writes them, the rest as Go's
encoding/json does, which is what a string printer column shows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Step:
    kind: str  # "field" | "index" | "all" | "filter"
    name: str = ""
    index: int = 0
    filter_path: tuple[Step, ...] = ()
    operator: str = ""
    operand: Any = None


_TERMINATORS = set(" \t\r\n.,[]$@{}")
_FILTER = re.compile(r"^\?\((@(?:\.[^=!<>]+)?)\s*(==|!=)\s*(.+?)\)$")


def parse_jsonpath(text: str) -> list[Step]:
    """Parse `.a.b[0]['c'].d\\.e[?(@.type=="Ready")]`; ValueError on what printer columns cannot use.

    Like client-go, a key in `['...']` is parsed again as a dotted path, so a dot in it must be
    escaped (`['app\\.kubernetes\\.io/name']`), and `\\` escapes a dot in a plain field name.
    """
    steps: list[Step] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in "$@ ":
            i += 1
        elif char == "." and text.startswith("..", i):
            raise ValueError("recursive descent is not supported")
        elif char == ".":
            i += 1
            start = i
            while i < len(text) and text[i] not in _TERMINATORS:
                i += 2 if text[i] == "\\" else 1
            name = text[start:i].replace("\\", "")
            if name == "*":
                raise ValueError("wildcards are not supported")
            if name:
                steps.append(Step(kind="field", name=name))
        elif char == "[":
            end = text.find("]", i) if not text.startswith("[?(", i) else text.find(")]", i) + 1
            if end <= i:
                raise ValueError(f"unterminated array in {text!r}")
            steps.extend(_parse_bracket(text[i + 1:end]))
            i = end + 1
        else:
            raise ValueError(f"unrecognized character in {text!r}: {char!r}")
    return steps


def _parse_bracket(inner: str) -> list[Step]:
    if inner.startswith("'") and inner.endswith("'") and len(inner) >= 2:
        return parse_jsonpath("." + inner[1:-1])
    if inner in ("*", ":"):
        return [Step(kind="all")]
    if re.fullmatch(r"-?\d+", inner):
        return [Step(kind="index", index=int(inner))]
    match = _FILTER.match(inner)
    if match:
        path, operator, literal = match.groups()
        return [Step(kind="filter", filter_path=tuple(parse_jsonpath(path)), operator=operator,
                      operand=_literal(literal.strip()))]
    raise ValueError(f"invalid array index {inner}")


def _literal(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError as exc:
            raise ValueError(f"unsupported filter operand {text}") from exc


def evaluate_jsonpath(steps: Iterable[Step], data: Any) -> list[Any]:
    """All results, in order; missing keys yield none, a bad index raises LookupError (as upstream)."""
    current = [data]
    for step in steps:
        following: list[Any] = []
        for value in current:
            if value is None:
                continue  # upstream skips nil intermediates
            if step.kind == "field":
                if isinstance(value, dict) and step.name in value:
                    following.append(value[step.name])
            elif not isinstance(value, list):
                raise LookupError(f"{type(value).__name__} is not array or slice")
            elif step.kind == "index":
                index = step.index + len(value) if step.index < 0 else step.index
                if not 0 <= index < len(value):
                    raise LookupError(f"array index out of bounds: index {step.index}, length {len(value)}")
                following.append(value[index])
            elif step.kind == "all":
                following.extend(value)
            else:
                for item in value:
                    found = evaluate_jsonpath(step.filter_path, item) if step.filter_path else [item]
                    if found and (found[0] == step.operand) == (step.operator == "=="):
                        following.append(item)
        current = following
    return current


# --- Printing a result as client-go does -----------------------------------------------------------

def go_text(value: Any) -> str:
    """How client-go's JSONPath prints one result: scalars as Go prints them, the rest as JSON."""
    if isinstance(value, dict | list):
        return go_json(value)
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


def go_float(value: float) -> str:
    """A float64 as Go's %v (and encoding/json) writes it: 7.0 is "7", 1e21 is "1e+21"."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}e{exponent[0]}{exponent[1:].zfill(2)}" if e and exponent[0] in "+-" else text


def go_json(value: Any) -> str:
    """Compact JSON as Go's encoding/json writes it: sorted keys, HTML-escaped, Go floats."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{go_json(str(k))}:{go_json(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, float):
        return go_float(value)
    text = json.dumps(value, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text
