"""The docs name every flag and ConfigMap key the code has, and only those.

Where the truth comes from: the flags of the `colocation` command are its click parsers
(`colocation.cli.main`, each subcommand's options: every spelling, `--no-…` and former names
included); the benchmarks' flags are `benchmarks.run.parser()`. The ConfigMap's keys are
`colocation.controllers.config.CONFIG_KEY_MODELS`, and their fields the pydantic models
walked by alias.

The rules, over README.md and every page of docs/:

1. docs/configuration.md documents every flag of every subcommand, in the first column of the
   tables under the heading "`colocation SUBCOMMAND`" (or under "Flags of every subcommand" for
   the ones all subcommands share), and names no flag there that the subcommand lacks.
2. A command line — a code span, or a line of a code block, that starts with
   `colocation SUBCOMMAND` — names only that subcommand's flags (inside `--operator-arg=` and
   `--agent-arg=`, only the operator's and the agent's); one that starts with
   `python -m benchmarks.run`, only the benchmarks'. Command lines of other programs (kubectl,
   helm, make, pytest, pip, kube-apiserver, ...) are not checked.
3. A code span that is a bare flag (it starts with `--`) is a flag of `colocation` or of
   `python -m benchmarks.run`, unless OTHER_PROGRAMS_FLAGS below lists it with its program.
4. docs/configuration.md documents every field of every ConfigMap key, in the first column of
   the tables of the section whose heading starts with the key in a code span; a field of a
   nested object is written `parent.child`; a list of objects is named in the section, and its
   entries' fields by their own names (the table describes one entry). Those tables name no
   field the model lacks.
5. A code span that reads like a ConfigMap key (`…-config`) names one the operator reads,
   unless OTHER_CONFIG_NAMES lists it.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any, get_args, get_origin

import click
import pytest
from pydantic import BaseModel

from colocation import cli
from colocation.controllers.config import CONFIG_KEY_MODELS
from tests.unit.docs.markdown_text import DOCS, Section, code_spans, doc_files, first_cells, sections, split_text

CONFIGURATION = DOCS / "configuration.md"
SHARED_FLAGS_HEADING = "Flags of every subcommand"
# Flags the docs name that belong to other programs, each with its program.
OTHER_PROGRAMS_FLAGS = {
    "--api-audiences": "kube-apiserver",
    "--config": "kube-scheduler",
    "--service-account-issuer": "kube-apiserver",
    "--requestheader-*": "kube-apiserver",
    "--proxy-client-*": "kube-apiserver",
    "--etcd-compaction-interval": "kube-apiserver",
    "--enable-aggregator-routing": "kube-apiserver",
    "--require-hashes": "pip",
    "--only-binary": "pip",
    "--no-index": "pip",
    "--no-deps": "pip",
    "--upgrade": "pip-compile",
    "--set": "helm",
    "--set-json": "helm",
    # Not another program's: the strategy development.md adds as its worked example, not the agent's.
    "--be-cpu-idle-interval": "the worked example in development.md, \"Add an agent strategy\"",
}
OTHER_CONFIG_NAMES = {"slo-controller-config": "Koordinator's ConfigMap"}
FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9*-]*")
NESTED_ARG = re.compile(r"--(operator|agent)-arg[= ](--[a-z0-9][a-z0-9-]*)")
CONFIG_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*-config$")
HELP = {"--help"}


# --------------------------------------------------------------------------------------------
# The code's flags and keys.


@cache
def subcommands() -> dict[str, click.Command]:
    context = click.Context(cli.main)
    found = {}
    for name in cli.main.list_commands(context):
        command = cli.main.get_command(context, name)
        assert command is not None
        found[name] = command
    return found


def missing_subcommands() -> set[str]:
    """Optional subcommands whose distribution is not installed: cli's stand-in has no options."""
    return {name for name, command in subcommands().items()
            if name in cli.OPTIONAL_COMMANDS and not any(isinstance(p, click.Option) for p in command.params)}


def skip_if_missing(name: str) -> None:
    if name in missing_subcommands():
        pytest.skip(f"colocation {name} is not installed here ({cli.OPTIONAL_COMMANDS[name]}): its flags are unknown")


@cache
def parser_flags(name: str) -> frozenset[str]:
    """Every spelling of every option of `colocation NAME`."""
    flags: set[str] = set()
    for param in subcommands()[name].params:
        if isinstance(param, click.Option):
            flags.update(opt for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--"))
    return frozenset(flags)


@cache
def shared_flags() -> frozenset[str]:
    installed = [name for name in subcommands() if name not in missing_subcommands()]
    return frozenset.intersection(*(parser_flags(name) for name in installed))


@cache
def benchmark_flags() -> frozenset[str]:
    from benchmarks.run import parser

    return frozenset(opt for action in parser()._actions for opt in action.option_strings if opt.startswith("--"))


@cache
def colocation_flags() -> frozenset[str]:
    return frozenset().union(*(parser_flags(name) for name in subcommands())) | HELP


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The pydantic model an annotation holds, and whether as a list's entries."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (list, tuple, set, frozenset) and args:
        model, _ = _model_in(args[0])
        return model, model is not None
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in args:
            model, in_list = _model_in(arg)
            if model is not None:
                return model, in_list
    return None, False


def model_fields(model: type[BaseModel], prefix: str = "") -> tuple[set[str], set[str]]:
    """(documented names, list names): the fields to document, as rule 4 writes them."""
    names: set[str] = set()
    lists: set[str] = set()
    for name, field in model.model_fields.items():
        alias = field.alias or name
        nested, in_list = _model_in(field.annotation)
        if nested is None:
            names.add(prefix + alias)
        elif in_list:
            lists.add(prefix + alias)
            inner_names, inner_lists = model_fields(nested, "")
            names |= inner_names
            lists |= inner_lists
        else:
            inner_names, inner_lists = model_fields(nested, f"{prefix}{alias}.")
            names |= inner_names
            lists |= inner_lists
    return names, lists


# --------------------------------------------------------------------------------------------
# What the docs say.


def configuration_sections() -> list[Section]:
    return list(sections(CONFIGURATION.read_text()))


def documented_flags(title: str) -> set[str]:
    """The flags in the first column of the tables under the heading titled so."""
    found: set[str] = set()
    matched = [s for s in configuration_sections() if s.title.replace("`", "") == title]
    assert matched, f"docs/configuration.md has no heading {title!r}"
    for section in matched:
        for cell in first_cells(section):
            for span in code_spans(cell):
                if span.startswith("--"):
                    found.update(FLAG.findall(span))
    return found


def key_section(key: str) -> Section:
    matched = [s for s in configuration_sections() if s.title.startswith(f"`{key}`")]
    assert len(matched) == 1, f"docs/configuration.md needs one heading that starts with `{key}`"
    return matched[0]


def documented_fields(key: str) -> set[str]:
    return {span for cell in first_cells(key_section(key)) for span in code_spans(cell)}


def command_lines() -> Iterator[tuple[str, str]]:
    """(file, command) of every code span and code block line that is a command."""
    for path in doc_files():
        prose, code = split_text(path.read_text())
        for text in (*code_spans(prose), *(line.strip().removeprefix("$ ") for line in code)):
            yield path.relative_to(DOCS.parent).as_posix(), text


def bare_flag_spans() -> Iterator[tuple[str, str]]:
    for path in doc_files():
        prose, _ = split_text(path.read_text())
        for span in code_spans(prose):
            if span.startswith("--"):
                yield path.relative_to(DOCS.parent).as_posix(), span


def unknown_flags(text: str, known: frozenset[str] | set[str]) -> list[str]:
    """The flags of a command line that are not known, nested operator and agent arguments checked
    against the operator's and the agent's flags."""
    wrong = []
    for which, flag in NESTED_ARG.findall(text):
        if flag not in parser_flags(which):
            wrong.append(flag)
    text = NESTED_ARG.sub(lambda m: f"--{m.group(1)}-arg", text)
    return wrong + [flag for flag in FLAG.findall(text) if flag not in known]


# --------------------------------------------------------------------------------------------
# Rule 1.


@pytest.mark.parametrize("name", ["agent", "cleanup", "operator", "sandbox"])
def test_configuration_documents_exactly_each_subcommands_flags(name: str) -> None:
    assert name in subcommands(), f"colocation {name} no longer exists: drop its section of docs/configuration.md"
    skip_if_missing(name)
    documented = documented_flags(f"colocation {name}") | documented_flags(SHARED_FLAGS_HEADING)
    assert sorted(parser_flags(name) - documented) == [], f"flags of colocation {name} missing in configuration.md"
    assert sorted(documented - parser_flags(name)) == [], f"configuration.md names flags colocation {name} lacks"


def test_every_subcommand_has_its_section() -> None:
    titles = {section.title.replace("`", "") for section in configuration_sections()}
    assert sorted(f"colocation {name}" for name in subcommands() if f"colocation {name}" not in titles) == []


def test_the_shared_table_holds_only_flags_every_subcommand_has() -> None:
    assert sorted(documented_flags(SHARED_FLAGS_HEADING) - shared_flags()) == []


# --------------------------------------------------------------------------------------------
# Rules 2 and 3.


def test_command_lines_name_only_flags_of_their_command() -> None:
    wrong = []
    for where, text in command_lines():
        words = text.split()
        if words[:1] == ["colocation"] and len(words) > 1 and words[1] in subcommands():
            if words[1] in missing_subcommands():
                continue  # rule 1's test for it says why it is skipped
            known = parser_flags(words[1]) | HELP
        elif words[:3] == ["python", "-m", "benchmarks.run"]:
            known = benchmark_flags() | HELP
        else:
            continue
        wrong += [f"{where}: {flag} in `{text}`" for flag in unknown_flags(text, known)]
    assert wrong == []


def test_bare_flags_are_flags_of_colocation_or_a_named_program() -> None:
    if missing_subcommands():
        pytest.skip(f"not installed here: {sorted(missing_subcommands())}; their flags are unknown")
    known = colocation_flags() | benchmark_flags() | set(OTHER_PROGRAMS_FLAGS)
    wrong = [f"{where}: {flag} in `{span}`" for where, span in bare_flag_spans()
             for flag in unknown_flags(span, known)]
    assert wrong == []


def test_the_other_programs_flags_are_still_named_somewhere() -> None:
    """An entry no page names any more is removed, so the list stays the docs' own."""
    named = {flag for _, span in bare_flag_spans() for flag in FLAG.findall(span)}
    named |= {flag for path in doc_files() for flag in FLAG.findall(path.read_text())}
    assert sorted(set(OTHER_PROGRAMS_FLAGS) - named) == []


# --------------------------------------------------------------------------------------------
# Rules 4 and 5.


@pytest.mark.parametrize("key", sorted(CONFIG_KEY_MODELS))
def test_configuration_documents_exactly_each_keys_fields(key: str) -> None:
    names, lists = model_fields(CONFIG_KEY_MODELS[key])
    documented = documented_fields(key)
    assert sorted(names - documented) == [], f"fields of {key} missing in its table of configuration.md"
    assert sorted(documented - names) == [], f"configuration.md's table of {key} names fields the model lacks"
    section_spans = set(code_spans(split_text(key_section(key).text)[0]))
    assert sorted(lists - section_spans) == [], f"the section of {key} does not name its lists"


def test_config_names_in_the_docs_are_keys_the_operator_reads() -> None:
    wrong = []
    for path in doc_files():
        for span in code_spans(split_text(path.read_text())[0]):
            if CONFIG_NAME.match(span) and span not in CONFIG_KEY_MODELS and span not in OTHER_CONFIG_NAMES:
                wrong.append(f"{path.name}: {span}")
    assert wrong == []
