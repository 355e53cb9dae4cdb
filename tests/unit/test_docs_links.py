"""The repository's docs stand alone: README.md and docs/*.md link only files that exist
in the repository (and headings that exist in them), and mention no document a user of
the repository does not have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.crawling import ROOT

pytestmark = pytest.mark.pure

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").glob("*.md"))]

#: [text](target) and [text]: target
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\[[^\]]+\]:\s*(\S+)", re.M)
#: documents outside the repository (the team's own notes)
OUTSIDE = re.compile(r"DESIGN\.md|ANCHORS\.md|(?<![\w-])shared/", re.I)


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return [a or b for a, b in LINK.findall(text)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"[`*_]{2,}|`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def problems(doc: Path, root: Path = ROOT) -> list[str]:
    out = []
    text = doc.read_text()
    for m in OUTSIDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(f"{doc.name}:{line}: mentions {m.group()!r}, which is not in the repository")
    for target in _links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if root.resolve() not in dest.parents and dest != root.resolve():
            out.append(f"{doc.name}: link {target!r} points outside the repository")
            continue
        if not dest.exists():
            out.append(f"{doc.name}: link {target!r}: no such file in the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{doc.name}: link {target!r}: no heading #{anchor} in {dest.name}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_link_only_what_the_repository_has(doc: Path) -> None:
    assert problems(doc) == []


def test_the_checker_catches_what_it_should(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "README.md").write_text("# Readme\n")
    (repo / "docs" / "frontier.md").write_text((ROOT / "docs" / "frontier.md").read_text())
    probe = repo / "docs" / "probe.md"
    probe.write_text(
        "See `../shared/DESIGN.md`, [the design](../../shared/x.md), [gone](nope.md),\n"
        "[up](../README.md), [anchor](frontier.md#no-such-heading), [ok](frontier.md#settings),\n"
        "[web](https://scrapy.org/)\n"
    )
    found = problems(probe, root=repo)
    assert any("mentions 'shared/'" in p for p in found), found
    assert any("mentions 'DESIGN.md'" in p for p in found), found
    assert any("'../../shared/x.md' points outside the repository" in p for p in found), found
    assert any("'nope.md': no such file" in p for p in found), found
    assert any("no heading #no-such-heading" in p for p in found), found
    assert len(found) == 6, found  # ../README.md, frontier.md#settings and the web link are fine
