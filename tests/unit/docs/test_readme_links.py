"""README.md's links resolve: every relative link names a file of the repository, and every
anchor a heading of its page (GitHub's anchors). The docs site's own build (`make docs`, strict)
checks the links between pages of docs/; README.md is not part of the site, so it is checked here.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.docs.markdown_text import LINK, README, ROOT, anchors, github_anchor, split_text


def relative_links(path: Path) -> list[str]:
    prose, _ = split_text(path.read_text())
    return [target for _, target in LINK.findall(prose) if "://" not in target and not target.startswith("mailto:")]


def test_github_anchors_are_computed_as_github_does() -> None:
    assert github_anchor("Leader at scale: 1,000, 2,500 nodes (and 1,000 on the real control plane)") == \
        "leader-at-scale-1000-2500-nodes-and-1000-on-the-real-control-plane"
    assert github_anchor("`colocation-config`: batch resources") == "colocation-config-batch-resources"
    assert github_anchor("Agent cost: one `colocation agent`, 110 pods") == "agent-cost-one-colocation-agent-110-pods"


def test_every_relative_link_of_the_readme_resolves() -> None:
    wrong = []
    for target in relative_links(README):
        file, _, anchor = target.partition("#")
        page = (README.parent / file).resolve() if file else README
        if not page.is_relative_to(ROOT) or not page.exists():
            wrong.append(f"{target}: no such file")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page.read_text()):
            wrong.append(f"{target}: {page.name} has no heading with this anchor")
    assert wrong == []


def test_the_readme_links_every_docs_page() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in relative_links(README)}
    pages = {path.resolve() for path in (ROOT / "docs").glob("*.md") if path.name != "index.md"}
    assert sorted(p.name for p in pages - linked) == []
