"""Keyword-only records and calls, where positions can be confused (docs/development.md,
"Keyword-only parameters").

In the package and the sandbox:

- a function or method takes at most 3 positional parameters (not counting `self` or `cls`); the
  rest are keyword-only (after `*`);
- a dataclass has at most 3 positional fields; with more it is `@dataclass(kw_only=True)` (or puts
  the rest after `_: KW_ONLY`); a NamedTuple, which cannot be keyword-only, has at most 3 fields;
- instants or clocks (a parameter or field named `now`, `wall`, `at`, `since`, `until`, `deadline`,
  `timestamp`, `clock`, `monotonic`, `started`, `expires`, or ending in `_at`, `_time`,
  `_timestamp`, `_deadline`, `_monotonic`, `_clock`, `_wall`, or starting with `clock_`), when a
  function or record takes two or more, are all keyword-only: a monotonic reading beside a
  wall-clock one is the easiest swap to miss.

Exempt, because their signatures are fixed by the language or a library: dunder methods other than
`__init__`, `__new__` and `__call__` (`__exit__`, `__aexit__`, ...), and Kopf handlers (Kopf calls
them with keywords). Anything else is in `ALLOWED`, with the reason. Ruff's positional-argument rule
(PLR0917) is preview-only, and no linter reads dataclasses' `kw_only`: this walks the AST.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (ROOT / "operator" / "colocation", ROOT / "sandbox" / "colocation_sandbox")

MAX_POSITIONAL = 3
CLOCK = re.compile(r"^(now|wall|at|since|until|deadline|timestamp|clock|monotonic|started|expires)$"
                   r"|_(at|time|timestamp|deadline|monotonic|clock|wall)$|^clock_")
# The language or a protocol fixes the other dunder methods' signatures: these are ours.
CHECKED_DUNDERS = frozenset({"__init__", "__new__", "__call__"})

# "path relative to the repository:qualified name" -> why it keeps its positional parameters.
ALLOWED: dict[str, str] = {
    "operator/colocation/apimachinery/errors.py:ApiError":
        "an exception: BaseException keeps its positional arguments as `args`, which copy and pickle replay",
    "operator/colocation/apiserver/generic_apiserver.py:_StatusRequestHandler.handle_error":
        "overrides aiohttp's RequestHandler.handle_error, whose signature aiohttp fixes",
    "operator/colocation/controllers/kept_pod.py:PodShape":
        "a tuple by design (`cluster._shape_key` zips `_fields` with its values); built by keyword",
}


@dataclass(frozen=True, kw_only=True)
class Violation:
    path: str
    line: int
    name: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}: {self.rule}"


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node)


def _is_dataclass(decorator: ast.expr) -> bool:
    return _dotted(decorator) in ("dataclass", "dataclasses.dataclass")


def _kw_only_decorator(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        keyword.arg == "kw_only" and isinstance(keyword.value, ast.Constant) and keyword.value.value is True
        for keyword in decorator.keywords)


def _field_call_keywords(value: ast.expr | None) -> dict[str, object]:
    """The constant keywords of `field(...)` / `dataclasses.field(...)`, or {} for another default."""
    if isinstance(value, ast.Call) and _dotted(value.func) in ("field", "dataclasses.field"):
        return {keyword.arg: keyword.value.value for keyword in value.keywords
                if keyword.arg is not None and isinstance(keyword.value, ast.Constant)}
    return {}


def _init_fields(node: ast.ClassDef, *, kw_only: bool) -> tuple[list[str], list[str]]:
    """The fields a dataclass's `__init__` takes by position (annotated names before `_: KW_ONLY`,
    not `field(kw_only=True)`), and all it takes (not ClassVars, not `field(init=False)`)."""
    positional: list[str] = []
    every: list[str] = []
    for statement in node.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        annotation = ast.unparse(statement.annotation)
        if "KW_ONLY" in annotation:
            kw_only = True
            continue
        if "ClassVar" in annotation:
            continue
        keywords = _field_call_keywords(statement.value)
        if keywords.get("init") is False:
            continue
        every.append(statement.target.id)
        if keywords.get("kw_only", kw_only) is not True:
            positional.append(statement.target.id)
    return positional, every


def _named_tuple_fields(node: ast.ClassDef) -> list[str]:
    if not any(_dotted(base) in ("NamedTuple", "typing.NamedTuple") for base in node.bases):
        return []
    return [statement.target.id for statement in node.body
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)]


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> tuple[list[str], list[str]]:
    """The parameters a call may pass by position (not `self` or `cls`), and all the named ones."""
    positional = [argument.arg for argument in (*node.args.posonlyargs, *node.args.args)]
    static = any(_dotted(decorator) == "staticmethod" for decorator in node.decorator_list)
    if method and not static and positional:
        positional = positional[1:]
    return positional, [*positional, *(argument.arg for argument in node.args.kwonlyargs)]


def _exempt_function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if node.name.startswith("__") and node.name.endswith("__") and node.name not in CHECKED_DUNDERS:
        return True
    return any(_dotted(decorator).startswith("kopf.") for decorator in node.decorator_list)


def _check_names(positional: list[str], every: list[str], *, what: str) -> Iterator[str]:
    if len(positional) > MAX_POSITIONAL:
        yield (f"{len(positional)} positional {what} (at most {MAX_POSITIONAL}): make the rest keyword-only"
               + (" (@dataclass(kw_only=True))" if what == "fields" else " (after `*`)"))
    clocks = [name for name in every if CLOCK.search(name)]
    if len(clocks) >= 2 and any(name in positional for name in clocks):
        yield f"instants or clocks {', '.join(clocks)} are not all keyword-only: make them keyword-only"


def violations_in(path: Path, source: str) -> Iterator[Violation]:
    relative = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()

    def visit(node: ast.AST, prefix: str, *, in_class: bool) -> Iterator[Violation]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                if not _exempt_function(child):
                    for rule in _check_names(*_parameters(child, method=in_class), what="parameters"):
                        yield Violation(path=relative, line=child.lineno, name=name, rule=rule)
                yield from visit(child, name + ".", in_class=False)
            elif isinstance(child, ast.ClassDef):
                name = prefix + child.name
                dataclass_decorators = [decorator for decorator in child.decorator_list if _is_dataclass(decorator)]
                if dataclass_decorators:
                    fields = _init_fields(child, kw_only=_kw_only_decorator(dataclass_decorators[0]))
                    for rule in _check_names(*fields, what="fields"):
                        yield Violation(path=relative, line=child.lineno, name=name, rule=rule)
                tuple_fields = _named_tuple_fields(child)
                for rule in _check_names(tuple_fields, tuple_fields, what="fields"):
                    yield Violation(path=relative, line=child.lineno, name=name,
                                    rule=rule.replace("(@dataclass(kw_only=True))",
                                                      "(a NamedTuple cannot be: use @dataclass(kw_only=True))"))
                yield from visit(child, name + ".", in_class=True)
            else:
                yield from visit(child, prefix, in_class=in_class)

    yield from visit(ast.parse(source, filename=relative), "", in_class=False)


def all_violations() -> list[Violation]:
    found: list[Violation] = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            found.extend(violations_in(path, path.read_text(encoding="utf-8")))
    return found


def test_records_and_calls_are_keyword_only_where_positions_can_be_confused() -> None:
    found = [violation for violation in all_violations() if f"{violation.path}:{violation.name}" not in ALLOWED]
    if found:
        pytest.fail("keyword-only parameters (docs/development.md#keyword-only-parameters); an exemption goes in "
                    "ALLOWED with its reason:\n" + "\n".join(str(violation) for violation in found), pytrace=False)


def test_every_allowed_entry_is_still_needed() -> None:
    needed = {f"{violation.path}:{violation.name}" for violation in all_violations()}
    assert not set(ALLOWED) - needed, f"stale entries in ALLOWED: {sorted(set(ALLOWED) - needed)}"


def test_the_check_names_each_rule_it_bites_on(tmp_path: Path) -> None:
    source = '''
from dataclasses import dataclass, field, KW_ONLY
from typing import NamedTuple
import kopf

def four(a, b, c, d): ...
def three_then_keywords(a, b, c, *, d, e): ...
def clocks(received_at, now): ...
def clocks_by_keyword(value, *, received_at, now): ...
def one_clock_by_keyword(received_at, *, now): ...
def one_clock(value, now): ...

class Server:
    def method(self, a, b, c, d): ...
    @staticmethod
    def static(a, b, c, d): ...
    def __exit__(self, exc_type, exc, traceback, extra): ...

@kopf.on.create("pods")
def handler(spec, name, namespace, logger, **_): ...

@dataclass(frozen=True)
class Record:
    a: int
    b: int
    c: int
    d: int

@dataclass(frozen=True, kw_only=True)
class KeywordRecord:
    a: int
    b: int
    c: int
    d: int

@dataclass
class SentinelRecord:
    a: int
    _: KW_ONLY
    b: int
    c: int
    d: int

@dataclass
class Stamped:
    created_at: float
    seen_monotonic: float = field(default=0.0)

class Shape(NamedTuple):
    a: int
    b: int
    c: int
    d: int
'''
    path = tmp_path / "module.py"
    found = {(violation.name, violation.rule.split(":")[0]) for violation in violations_in(path, source)}
    assert found == {
        ("four", "4 positional parameters (at most 3)"),
        ("clocks", "instants or clocks received_at, now are not all keyword-only"),
        ("one_clock_by_keyword", "instants or clocks received_at, now are not all keyword-only"),
        ("Server.method", "4 positional parameters (at most 3)"),
        ("Server.static", "4 positional parameters (at most 3)"),
        ("Record", "4 positional fields (at most 3)"),
        ("Stamped", "instants or clocks created_at, seen_monotonic are not all keyword-only"),
        ("Shape", "4 positional fields (at most 3)"),
    }
