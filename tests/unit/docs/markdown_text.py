"""Just enough Markdown for the docs tests: headings, sections, table rows, code spans, links.

No Markdown library: the docs are plain CommonMark-ish text, and what the tests read of them
(code spans, fenced blocks, tables, headings) is regular.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`([^`]+)`")
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")


def doc_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


@dataclass(frozen=True)
class Section:
    """A heading and the lines up to the next heading of the same or a higher level."""

    level: int
    title: str
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def split_text(text: str) -> tuple[str, list[str]]:
    """(prose, code block lines): the text outside fenced code blocks, and the lines inside them."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            prose.append("")
            continue
        if fenced:
            code.append(line)
        prose.append("" if fenced else line)
    return "\n".join(prose), code


def code_spans(prose: str) -> list[str]:
    """Every inline code span, whitespace inside it made single spaces (a span may break a line)."""
    return [" ".join(span.split()) for span in CODE_SPAN.findall(prose)]


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every heading outside code blocks, in order."""
    prose, _ = split_text(text)
    found = []
    for line in prose.splitlines():
        match = HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def sections(text: str) -> Iterator[Section]:
    """Every heading's section, nested ones included in their parents'."""
    lines = text.splitlines()
    marks: list[tuple[int, int, str]] = []  # (line index, level, title)
    fenced = False
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            marks.append((index, len(match.group(1)), match.group(2)))
    for position, (start, level, title) in enumerate(marks):
        end = next((other for other, other_level, _ in marks[position + 1:] if other_level <= level), len(lines))
        yield Section(level, title, tuple(lines[start + 1:end]))


def first_cells(section: Section) -> list[str]:
    """The first cell of every table row of a section, header and separator rows left out."""
    cells = []
    previous_was_row = False
    for line in section.lines:
        is_row = line.lstrip().startswith("|")
        if is_row and previous_was_row and not set(line) <= set("|-: "):
            cells.append(line.strip().strip("|").split("|")[0].strip())
        previous_was_row = is_row
    return cells


def plain_title(title: str) -> str:
    """A heading's text as it reads: code spans and links reduced to their text."""
    return LINK.sub(lambda m: m.group(1), title).replace("`", "")


def github_anchor(title: str) -> str:
    """The anchor GitHub (and, for plain headings, MkDocs) gives a heading."""
    text = plain_title(title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page, with GitHub's -1, -2 suffixes for repeated titles."""
    seen: dict[str, int] = {}
    found = set()
    for _, title in headings(text):
        anchor = github_anchor(title)
        if anchor in seen:
            seen[anchor] += 1
            anchor = f"{anchor}-{seen[anchor]}"
        else:
            seen[anchor] = 0
        found.add(anchor)
    return found
