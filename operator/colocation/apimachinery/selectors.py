"""Label and field selectors: parsed once per request, immutable, matched against many objects.

Syntax, validation and error wording follow k8s.io/apimachinery (labels.Parse, fields.ParseSelector,
metav1.LabelSelectorAsSelector), so clients that show or parse the messages behave as against a
real API server.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.errors import ApiError

# --------------------------------------------------------------------------------------------
# Label keys and values (apimachinery's util/validation rules and messages).

_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', "
                       "and must start and end with an alphanumeric character")
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character")
_DNS1123_SUBDOMAIN_MSG = ("a DNS-1123 subdomain must consist of lower case alphanumeric characters, "
                          "'-' or '.', and must start and end with an alphanumeric character")


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def label_key_errors(key: str) -> list[str]:
    """Why `key` is not a valid label key ([prefix/]name), or nothing if it is."""
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errors.append("prefix part must be no more than 253 characters")
            if not _DNS1123_SUBDOMAIN_RE.match(prefix):
                errors.append("prefix part " + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT,
                                                            "example.com"))
    else:
        return ["a qualified name " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT,
                                                   "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME_RE.match(name):
        errors.append("name part " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT,
                                                  "MyName", "my.name", "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why `value` is not a valid label value, or nothing if it is."""
    errors: list[str] = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.match(value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, f"({_QUALIFIED_NAME_FMT})?",
                                   "MyValue", "my_value", "12345"))
    return errors


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _invalid(path: str, value: str, details: list[str]) -> str:
    # A field.Invalid error as Go prints it; a nil path prints as "<nil>".
    return f"{path or '<nil>'}: Invalid value: {_go_quote(value)}: {'; '.join(details)}"


# --------------------------------------------------------------------------------------------
# Label selectors.


class Operator(enum.StrEnum):
    """selection.Operator: the values are upstream's, which String() and the errors show."""

    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"
_INT64 = re.compile(r"^[+-]?[0-9]+$")


def _is_int64(text: str) -> bool:
    return bool(_INT64.match(text)) and -(2**63) <= int(text) < 2**63


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector; values are kept sorted and unique."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    @classmethod
    def build(cls, key: str, operator: Operator, values: Sequence[str]) -> Requirement:
        """Validate as labels.NewRequirement does; raises ValueError with upstream's message."""
        errors: list[str] = []
        if key_errors := label_key_errors(key):
            errors.append(_invalid("key", key, key_errors))
        values_json = json.dumps(list(values)) if values else "null"
        if operator in (Operator.IN, Operator.NOT_IN):
            if not values:
                errors.append(f"values: Invalid value: {values_json}: "
                              "for 'in', 'notin' operators, values set can't be empty")
        elif operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS):
            if len(values) != 1:
                errors.append(f"values: Invalid value: {values_json}: "
                              "exact-match compatibility requires one single value")
        elif operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            if values:
                errors.append(f"values: Invalid value: {values_json}: "
                              "values set must be empty for exists and does not exist")
        else:
            if len(values) != 1:
                errors.append(f"values: Invalid value: {values_json}: "
                              "for 'Gt', 'Lt' operators, exactly one value is required")
            not_integer = ["for 'Gt', 'Lt' operators, the value must be an integer"]
            errors.extend(_invalid(f"values[{i}]", v, not_integer)
                          for i, v in enumerate(values) if not _is_int64(v))
        for i, value in enumerate(values):
            if value_errors := label_value_errors(value):
                errors.append(_invalid(f"values[{i}][{key}]", value, value_errors))
        if errors:
            # utilerrors.Aggregate: a single error alone, several in brackets.
            raise ValueError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
        return cls(key, operator, tuple(sorted(set(values))))

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator in (Operator.IN, Operator.EQUALS, Operator.DOUBLE_EQUALS):
            return present and labels[self.key] in self.values
        if self.operator in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return not present or labels[self.key] not in self.values
        if self.operator is Operator.EXISTS:
            return present
        if self.operator is Operator.DOES_NOT_EXIST:
            return not present
        # Gt / Lt compare as integers; a label that is not one never matches.
        if not present or not _is_int64(labels[self.key]) or len(self.values) != 1:
            return False
        actual, bound = int(labels[self.key]), int(self.values[0])
        return actual > bound if self.operator is Operator.GREATER_THAN else actual < bound

    def __str__(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        joined = ",".join(self.values)
        if op in (Operator.IN, Operator.NOT_IN):
            return f"{self.key} {op.value} ({joined})"
        symbol = {Operator.GREATER_THAN: ">", Operator.LESS_THAN: "<"}.get(op, op.value)
        return f"{self.key}{symbol}{joined}"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the default instance selects everything."""

    requirements: tuple[Requirement, ...] = ()
    # metav1's nil selector: matches no object at all (an empty string still means "everything").
    selects_nothing: bool = False

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parse the `labelSelector` query syntax, e.g. "app=web,tier in (a,b),!legacy"."""
        return cls(_sorted(_LabelParser(text).parse()))

    @classmethod
    def nothing(cls) -> LabelSelector:
        return cls((), selects_nothing=True)

    @classmethod
    def from_api(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """Convert a metav1.LabelSelector (matchLabels, matchExpressions) into a selector."""
        if selector is None:
            return cls.nothing()
        if not isinstance(selector, Mapping):
            raise ApiError.bad_request("label selector must be an object")
        match_labels = selector.get("matchLabels") or {}
        match_expressions = selector.get("matchExpressions") or []
        if not isinstance(match_labels, Mapping) or not isinstance(match_expressions, list):
            raise ApiError.bad_request("matchLabels must be an object and matchExpressions a list")
        requirements: list[Requirement] = []
        try:
            for key, value in match_labels.items():
                if not isinstance(value, str):
                    raise ValueError(f"matchLabels[{key}]: value must be a string")
                requirements.append(Requirement.build(key, Operator.EQUALS, [value]))
            for expression in match_expressions:
                requirements.append(_requirement_from_expression(expression))
        except ValueError as exc:
            raise ApiError.bad_request(str(exc)) from None
        return cls(_sorted(requirements))

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything."""
        return not self.requirements and not self.selects_nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.selects_nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


_EXPRESSION_OPERATORS = {"In": Operator.IN, "NotIn": Operator.NOT_IN,
                         "Exists": Operator.EXISTS, "DoesNotExist": Operator.DOES_NOT_EXIST}


def _requirement_from_expression(expression: Any) -> Requirement:
    if not isinstance(expression, Mapping):
        raise ValueError("matchExpressions: each expression must be an object")
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = expression.get("values") or []
    if operator not in _EXPRESSION_OPERATORS:
        raise ValueError(f"{_go_quote(str(operator))} is not a valid label selector operator")
    if (not isinstance(key, str)
            or not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
        raise ValueError("matchExpressions: key must be a string and values a list of strings")
    return Requirement.build(key, _EXPRESSION_OPERATORS[operator], values)


def _sorted(requirements: list[Requirement]) -> tuple[Requirement, ...]:
    # Upstream sorts by key so String() is deterministic; the rest of the tuple breaks ties.
    return tuple(sorted(requirements, key=lambda r: (r.key, r.operator.value, r.values)))


class _Token(enum.Enum):
    END = enum.auto()
    IDENTIFIER = enum.auto()
    OPEN = enum.auto()
    CLOSE = enum.auto()
    COMMA = enum.auto()
    NOT = enum.auto()
    EQUALS = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    NOT_EQUALS = enum.auto()
    GREATER_THAN = enum.auto()
    LESS_THAN = enum.auto()
    IN = enum.auto()
    NOT_IN = enum.auto()


_SYMBOLS = {"(": _Token.OPEN, ")": _Token.CLOSE, ",": _Token.COMMA, "!": _Token.NOT, "=": _Token.EQUALS,
            ">": _Token.GREATER_THAN, "<": _Token.LESS_THAN, "==": _Token.DOUBLE_EQUALS,
            "!=": _Token.NOT_EQUALS}
_KEYWORDS = {"in": _Token.IN, "notin": _Token.NOT_IN}
_WHITESPACE = " \t\r\n"
_VALUE_TOKENS = (_Token.IDENTIFIER, _Token.IN, _Token.NOT_IN)


def _lex(text: str) -> Iterator[tuple[_Token, str]]:
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= len(text):
            yield _Token.END, ""
            return
        if text[pos] in "=!(),<>":
            # Operators are one character, or two when they form "==" / "!=".
            width = 2 if text[pos:pos + 2] in ("==", "!=") else 1
            yield _SYMBOLS[text[pos:pos + width]], text[pos:pos + width]
            pos += width
            continue
        start = pos
        while pos < len(text) and text[pos] not in _WHITESPACE and text[pos] not in "=!(),<>":
            pos += 1
        word = text[start:pos]
        yield _KEYWORDS.get(word, _Token.IDENTIFIER), word


class _LabelParser:
    """Recursive descent over the token list, with upstream's messages for each dead end."""

    def __init__(self, text: str) -> None:
        self._items = list(_lex(text))
        self._pos = 0

    def _peek(self, as_value: bool = True) -> tuple[_Token, str]:
        token, literal = self._items[self._pos]
        # "in" and "notin" are plain words wherever a key or value may stand.
        if as_value and token in (_Token.IN, _Token.NOT_IN):
            token = _Token.IDENTIFIER
        return token, literal

    def _next(self, as_value: bool = True) -> tuple[_Token, str]:
        item = self._peek(as_value)
        self._pos += 1
        return item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self._peek()
            if token is _Token.END:
                return requirements
            if token not in (_Token.IDENTIFIER, _Token.NOT):
                raise ApiError.bad_request(f"found '{literal}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self._requirement())
            except ValueError as exc:
                raise ApiError.bad_request(f"unable to parse requirement: {exc}") from None
            token, literal = self._next()
            if token is _Token.END:
                return requirements
            if token is not _Token.COMMA:
                raise ApiError.bad_request(f"found '{literal}', expected: ',' or 'end of string'")
            token, literal = self._peek()
            if token not in (_Token.IDENTIFIER, _Token.NOT):
                raise ApiError.bad_request(f"found '{literal}', expected: identifier after ','")

    def _requirement(self) -> Requirement:
        token, key = self._next()
        operator: Operator | None = None
        if token is _Token.NOT:
            operator = Operator.DOES_NOT_EXIST
            token, key = self._next()
        if token is not _Token.IDENTIFIER:
            raise ValueError(f"found '{key}', expected: identifier")
        if key_errors := label_key_errors(key):
            raise ValueError(_invalid("", key, key_errors))
        if self._peek()[0] in (_Token.END, _Token.COMMA) and operator is None:
            operator = Operator.EXISTS
        if operator is not None:
            # "!key" takes no operator; whatever follows it is the caller's problem.
            return Requirement.build(key, operator, [])
        operator = self._operator()
        values = self._value_set() if operator in (Operator.IN, Operator.NOT_IN) else self._exact_value()
        return Requirement.build(key, operator, sorted(values))

    def _operator(self) -> Operator:
        token, literal = self._next(as_value=False)
        operators = {_Token.IN: Operator.IN, _Token.NOT_IN: Operator.NOT_IN, _Token.EQUALS: Operator.EQUALS,
                     _Token.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS, _Token.NOT_EQUALS: Operator.NOT_EQUALS,
                     _Token.GREATER_THAN: Operator.GREATER_THAN, _Token.LESS_THAN: Operator.LESS_THAN}
        if token not in operators:
            raise ValueError(f"found '{literal}', expected: {_BINARY_OPERATORS}")
        return operators[token]

    def _exact_value(self) -> set[str]:
        if self._peek()[0] in (_Token.END, _Token.COMMA):
            return {""}
        token, literal = self._next()
        if token is not _Token.IDENTIFIER:
            raise ValueError(f"found '{literal}', expected: identifier")
        return {literal}

    def _value_set(self) -> set[str]:
        token, literal = self._next()
        if token is not _Token.OPEN:
            raise ValueError(f"found '{literal}' expected: '('")
        token, literal = self._peek()
        if token is _Token.CLOSE:  # "()" is the set holding the empty value
            self._next()
            return {""}
        if token not in (_Token.IDENTIFIER, _Token.COMMA):
            raise ValueError(f"found '{literal}', expected: ',', ')' or identifier")
        values = self._identifiers()
        if self._next()[0] is not _Token.CLOSE:
            raise ValueError(f"found '{literal}', expected: ')'")
        return values

    def _identifiers(self) -> set[str]:
        # Empty entries are empty values: "(,a)", "(a,)" and "(a,,b)" all contain "".
        values: set[str] = set()
        while True:
            token, literal = self._next()
            if token is _Token.IDENTIFIER:
                values.add(literal)
                following, following_literal = self._peek()
                if following is _Token.CLOSE:
                    return values
                if following is not _Token.COMMA:
                    raise ValueError(f"found '{following_literal}', expected: ',' or ')'")
            elif token is _Token.COMMA:
                if not values:
                    values.add("")
                following = self._peek()[0]
                if following is _Token.CLOSE:
                    values.add("")
                    return values
                if following is _Token.COMMA:
                    self._next()
                    values.add("")
            else:
                raise ValueError(f"found '{literal}', expected: ',', or identifier")


# --------------------------------------------------------------------------------------------
# Field selectors.

ALWAYS_SELECTABLE = ("metadata.name", "metadata.namespace")

# Selectable fields that are not a plain path into the object, or whose absence means a value.
_FIELD_PATHS = {"source": "source.component"}  # core Event: source is source.component
_ABSENT_AS = {"spec.unschedulable": "false"}  # Node: a bool field, false unless set


@dataclass(frozen=True)
class FieldTerm:
    field: str
    value: str
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.field}{'!=' if self.negated else '='}{escape_field_value(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field = value / field != value terms; the default selects everything."""

    terms: tuple[FieldTerm, ...] = ()

    @classmethod
    def parse(cls, text: str, allowed: Collection[str] = ()) -> FieldSelector:
        """Parse the `fieldSelector` query syntax; fields other than `allowed` are refused."""
        terms: list[FieldTerm] = []
        for part in sorted(_split_terms(text)):
            if not part:
                continue
            split = _split_term(part)
            if split is None:
                raise ApiError.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
            field, operator, raw_value = split
            terms.append(FieldTerm(field, _unescape(raw_value), negated=operator == "!="))
        for term in terms:
            if term.field not in ALWAYS_SELECTABLE and term.field not in allowed:
                raise ApiError.bad_request(f"field label not supported: {term.field}")
        return cls(tuple(terms))

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, t.field) == t.value) != t.negated for t in self.terms)

    def exact(self, field: str) -> str | None:
        """The value every selected object must have in `field`, when the selector pins one."""
        for term in self.terms:
            if term.field == field and not term.negated:
                return term.value
        return None

    def exact_name(self) -> str | None:
        """The name every selected object must have, when the selector pins one."""
        return self.exact("metadata.name")

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)


def field_value(obj: Mapping[str, Any], field: str) -> str:
    """The string a field selector compares: "" when absent, booleans as "true"/"false"."""
    node: Any = obj
    for part in _FIELD_PATHS.get(field, field).split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT_AS.get(field, "")
        node = node[part]
    if node is None:
        return _ABSENT_AS.get(field, "")
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, str):
        return node
    return json.dumps(node, separators=(",", ":")) if isinstance(node, (dict, list)) else str(node)


def escape_field_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_terms(text: str) -> list[str]:
    # Commas separate terms unless escaped; the escape stays for _unescape to check.
    if not text:
        return []
    terms, start, escaped = [], 0, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    # The first operator wins: field names cannot be escaped, values can.
    for i in range(len(term)):
        for operator in ("!=", "==", "="):
            if term.startswith(operator, i):
                return term[:i], operator, term[i + len(operator):]
    return None


def _unescape(value: str) -> str:
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise ApiError.bad_request(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise ApiError.bad_request(f"invalid field selector: unescaped character in value: {char}")
        else:
            out.append(char)
    if escaped:
        raise ApiError.bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)
