"""The few PromQL forms the monitoring component uses, parsed and evaluated over recorded samples.

There is no Prometheus here: `benchmarks.dashboard_pngs` records /metrics scrapes of a sandbox and
evaluates each dashboard panel's query with this module, and tests/unit/manifests/test_monitoring.py
parses every alert and panel expression with it (an unknown function or an unbalanced bracket is an
error). What it supports: selectors with `= != =~ !~` matchers and a `[range]`; `rate`, `increase`,
`histogram_quantile`, `vector`; the aggregations `sum max min avg count quantile` with `by (...)`;
`+ - * /`, comparisons (filters) and `or`. Differences from Prometheus, on purpose: `increase` is
the increase between the first and last sample in the range and `rate` that divided by the time
between them (Prometheus extrapolates both a little towards the range's edges, so its values are
slightly higher); an instant selector looks back 5 minutes at most, as Prometheus's default does.
Pure: no I/O.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs; "__name__" included for raw series
Vector = dict[Labels, float]
Matrix = dict[Labels, list[tuple[float, float]]]

FUNCTIONS = frozenset({"rate", "increase", "histogram_quantile", "vector"})
AGGREGATIONS = frozenset({"sum", "max", "min", "avg", "count", "quantile"})
LOOKBACK = 300.0  # seconds an instant selector reaches back for a series' latest sample
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_TOKEN = re.compile(r"""\s*(?:
    (?P<duration>\d+(?:ms|[smhdwy])(?![A-Za-z_]))
  | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/<>=(){}\[\],])
)""", re.VERBOSE)


class PromQLError(ValueError):
    """An expression outside the supported subset, or not PromQL at all."""


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value)
    range: float | None = None  # seconds, for a range selector

    def matches(self, labels: Mapping[str, str]) -> bool:
        if labels.get("__name__") != self.name:
            return False
        for label, op, value in self.matchers:
            actual = labels.get(label, "")
            if op in ("=~", "!~"):
                if (re.fullmatch(value, actual) is not None) != (op == "=~"):
                    return False
            elif (actual == value) != (op == "="):
                return False
        return True


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Aggregate:
    op: str
    by: tuple[str, ...]
    expr: Expr
    param: Expr | None = None


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: Expr
    rhs: Expr


Expr = Number | Selector | Call | Aggregate | Binary


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while text[position:].strip():
        match = _TOKEN.match(text, position)
        if match is None or match.lastgroup is None:
            raise PromQLError(f"unexpected character {text[position:].lstrip()[:1]!r} at {position}")
        tokens.append((match.lastgroup, match.group(match.lastgroup)))
        position = match.end()
    return tokens


def parse(text: str) -> Expr:
    """The expression's tree; PromQLError names what is wrong."""
    parser = _Parser(tokenize(text))
    expr = parser.expression()
    if parser.position != len(parser.tokens):
        raise PromQLError(f"unexpected {parser.peek()[1]!r} after a complete expression")
    return expr


def metric_names(expr: Expr) -> set[str]:
    """Every metric name the expression selects."""
    match expr:
        case Selector():
            return {expr.name}
        case Call():
            return set().union(*(metric_names(arg) for arg in expr.args))
        case Aggregate():
            return metric_names(expr.expr) | (metric_names(expr.param) if expr.param else set())
        case Binary():
            return metric_names(expr.lhs) | metric_names(expr.rhs)
    return set()


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.position = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.position] if self.position < len(self.tokens) else ("end", "end of expression")

    def take(self, expected: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token[0] == "end" or (expected is not None and token[1] != expected):
            raise PromQLError(f"expected {expected or 'more'}, found {token[1]!r}")
        self.position += 1
        return token

    def expression(self) -> Expr:
        expr = self.comparison()
        while self.peek() == ("ident", "or"):
            self.take()
            expr = Binary("or", expr, self.comparison())
        return expr

    def comparison(self) -> Expr:
        expr = self.additive()
        if self.peek()[1] in _COMPARISONS:
            expr = Binary(self.take()[1], expr, self.additive())
        return expr

    def additive(self) -> Expr:
        expr = self.multiplicative()
        while self.peek()[1] in ("+", "-"):
            expr = Binary(self.take()[1], expr, self.multiplicative())
        return expr

    def multiplicative(self) -> Expr:
        expr = self.primary()
        while self.peek()[1] in ("*", "/"):
            expr = Binary(self.take()[1], expr, self.primary())
        return expr

    def primary(self) -> Expr:
        kind, text = self.take()
        if kind == "number":
            return Number(float(text))
        if text == "(":
            expr = self.expression()
            self.take(")")
            return expr
        if kind != "ident":
            raise PromQLError(f"unexpected {text!r}")
        if text in AGGREGATIONS:
            return self.aggregate(text)
        if self.peek()[1] == "(":
            if text not in FUNCTIONS:
                raise PromQLError(f"unknown function {text!r} (supported: {', '.join(sorted(FUNCTIONS))})")
            return Call(text, tuple(self.listed(self.expression)))
        return self.selector(text)

    def aggregate(self, op: str) -> Aggregate:
        by = self.grouping() if self.peek() == ("ident", "by") else ()
        self.take("(")
        param = None
        if op == "quantile":
            param = self.expression()
            self.take(",")
        expr = self.expression()
        self.take(")")
        if not by and self.peek() == ("ident", "by"):
            by = self.grouping()
        return Aggregate(op, by, expr, param)

    def grouping(self) -> tuple[str, ...]:
        self.take("by")
        return tuple(self.listed(lambda: self.take()[1]))

    def listed(self, item: Callable[[], T]) -> list[T]:
        """`( item, item, ... )`"""
        self.take("(")
        items = [item()]
        while self.peek()[1] == ",":
            self.take()
            items.append(item())
        self.take(")")
        return items

    def selector(self, name: str) -> Selector:
        matchers = []
        if self.peek()[1] == "{":
            self.take()
            while self.peek()[1] != "}":
                label = self.take()[1]
                op = self.take()[1]
                kind, value = self.take()
                if op not in ("=", "!=", "=~", "!~") or kind != "string":
                    raise PromQLError(f"bad label matcher {label}{op}{value}")
                matchers.append((label, op, _unquote(value)))
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
        seconds = None
        if self.peek()[1] == "[":
            self.take()
            kind, text = self.take()
            if kind != "duration":
                raise PromQLError(f"expected a duration such as 5m, found {text!r}")
            unit = text.lstrip("0123456789")
            seconds = int(text[: len(text) - len(unit)]) * _DURATION_UNITS[unit]
            self.take("]")
        return Selector(name, tuple(matchers), seconds)


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


class Series:
    """Recorded samples by series: what an instant query at time t reads.

    A NaN sample is a staleness marker, as Prometheus writes when a target's scrape fails: the
    series is absent from then until its next sample.
    """

    def __init__(self, samples: Iterable[tuple[float, Mapping[str, str], float]]) -> None:
        by_labels: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
        for t, labels, value in samples:
            by_labels[tuple(sorted(labels.items()))].append((t, value))
        self.points = {labels: sorted(points) for labels, points in by_labels.items()}

    def select(self, selector: Selector, t: float, window: float) -> Matrix:
        """Each matching series' points in (t - window, t]."""
        found: Matrix = {}
        for labels, points in self.points.items():
            if selector.matches(dict(labels)):
                inside = [p for p in points if t - window < p[0] <= t]
                if inside and not math.isnan(inside[-1][1]):
                    found[labels] = [p for p in inside if not math.isnan(p[1])]
        return found


def evaluate(expr: Expr, series: Series, t: float) -> Vector | float:
    """The instant query's value at time t: a vector, or a scalar for a number."""
    match expr:
        case Number():
            return expr.value
        case Selector():
            if expr.range is not None:
                raise PromQLError(f"a range selector ({expr.name}[...]) needs rate() or increase()")
            return {labels: points[-1][1] for labels, points in series.select(expr, t, LOOKBACK).items()}
        case Call():
            return _call(expr, series, t)
        case Aggregate():
            return _aggregate(expr, series, t)
        case Binary():
            return _binary(expr.op, evaluate(expr.lhs, series, t), evaluate(expr.rhs, series, t))


def query(expr: Expr, series: Series, t: float) -> Vector:
    """An instant query whose answer must be a vector (a dashboard panel's, an alert's)."""
    return _vector(evaluate(expr, series, t))


def _call(call: Call, series: Series, t: float) -> Vector:
    if call.function == "vector":
        (scalar,) = call.args
        return {(): _scalar(evaluate(scalar, series, t))}
    if call.function in ("rate", "increase"):
        (selector,) = call.args
        if not isinstance(selector, Selector) or selector.range is None:
            raise PromQLError(f"{call.function}() takes a range selector")
        found: Vector = {}
        for labels, points in series.select(selector, t, selector.range).items():
            increase = counter_increase(points)
            if increase is not None:
                found[_without_name(labels)] = (increase if call.function == "increase"
                                                else increase / (points[-1][0] - points[0][0]))
        return found
    quantile, buckets = call.args
    return histogram_quantile(_scalar(evaluate(quantile, series, t)), _vector(evaluate(buckets, series, t)))


def counter_increase(points: Sequence[tuple[float, float]]) -> float | None:
    """Increase from the first to the last point; a drop is a counter reset (a restart, from zero)."""
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return math.fsum(after - before if after >= before else after
                     for (_, before), (_, after) in itertools.pairwise(points))


def histogram_quantile(q: float, buckets: Vector) -> Vector:
    """Prometheus's estimate: linear within the bucket holding the q-th rank, per label set without `le`."""
    groups: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for labels, count in buckets.items():
        le = dict(labels).get("le")
        if le is not None:
            groups[tuple(item for item in labels if item[0] != "le")].append((float(le), count))
    result: Vector = {}
    for labels, bounds in groups.items():
        bounds.sort()
        total = bounds[-1][1]
        if not bounds or bounds[-1][0] != math.inf or total <= 0:
            result[labels] = math.nan
            continue
        rank = q * total
        lower, below = 0.0, 0.0
        for upper, count in bounds:
            if count >= rank:
                if upper == math.inf:
                    result[labels] = lower
                elif count == below:
                    result[labels] = upper
                else:
                    result[labels] = lower + (upper - lower) * (rank - below) / (count - below)
                break
            lower, below = upper, count
    return result


def quantile(q: float, values: Sequence[float]) -> float:
    """Prometheus's quantile(): linear between the two nearest ranks."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


_FOLDS: dict[str, Callable[[list[float]], float]] = {
    "sum": math.fsum, "max": max, "min": min, "count": lambda v: float(len(v)),
    "avg": lambda v: math.fsum(v) / len(v),
}


def _aggregate(aggregate: Aggregate, series: Series, t: float) -> Vector:
    groups: dict[Labels, list[float]] = defaultdict(list)
    for labels, value in _vector(evaluate(aggregate.expr, series, t)).items():
        groups[tuple(item for item in labels if item[0] in aggregate.by)].append(value)
    if aggregate.op == "quantile":
        assert aggregate.param is not None
        q = _scalar(evaluate(aggregate.param, series, t))
        return {labels: quantile(q, values) for labels, values in groups.items()}
    return {labels: _FOLDS[aggregate.op](values) for labels, values in groups.items()}


_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
    "==": lambda a, b: float(a == b), "!=": lambda a, b: float(a != b), ">": lambda a, b: float(a > b),
    "<": lambda a, b: float(a < b), ">=": lambda a, b: float(a >= b), "<=": lambda a, b: float(a <= b),
}


def _binary(op: str, lhs: Vector | float, rhs: Vector | float) -> Vector | float:
    if op == "or":
        left, right = _vector(lhs), _vector(rhs)
        return {**left, **{labels: value for labels, value in right.items() if labels not in left}}
    apply = _ARITHMETIC[op]
    if isinstance(lhs, float) and isinstance(rhs, float):
        return apply(lhs, rhs)
    pairs: dict[Labels, tuple[float, float]]
    if isinstance(rhs, float):
        pairs = {labels: (value, rhs) for labels, value in _vector(lhs).items()}
    elif isinstance(lhs, float):
        pairs = {labels: (lhs, value) for labels, value in rhs.items()}
    else:
        right = {_without_name(labels): value for labels, value in rhs.items()}
        pairs = {_without_name(labels): (value, right[_without_name(labels)]) for labels, value in lhs.items()
                 if _without_name(labels) in right}
    if op in _COMPARISONS:  # a filter: keeps the left-hand value where the comparison holds
        return {labels: a for labels, (a, b) in pairs.items() if apply(a, b)}
    return {_without_name(labels): apply(a, b) for labels, (a, b) in pairs.items()}


def _vector(value: Vector | float) -> Vector:
    if isinstance(value, float):
        raise PromQLError("expected an instant vector, found a scalar")
    return value


def _scalar(value: Vector | float) -> float:
    if not isinstance(value, float):
        raise PromQLError("expected a number, found a vector")
    return value


def _without_name(labels: Labels) -> Labels:
    return tuple(item for item in labels if item[0] != "__name__")

