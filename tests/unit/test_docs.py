"""The documentation holds together: README.md stays a newcomer's page (at most
:data:`README_MAX_LINES` lines) that links every page of docs/, and every relative link of
README.md, ARCHITECTURE.md and docs/*.md points at a file of the repository and, into a
Markdown file, at one of its headings (anchors as GitHub makes them)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from tests.markdown import unfenced

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, ROOT / "ARCHITECTURE.md", *sorted(DOCS.glob("*.md"))]
"""The pages whose links are checked."""

README_MAX_LINES = 400
"""What it is, when to choose it, try it, install, the two commands, links: the rest is in docs/."""

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> list[str]:
    """The lines of Markdown ``text`` outside fenced code blocks, inline code spans removed."""
    return [re.sub(r"`[^`]*`", "", line) for line in unfenced(text)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation and
    symbols dropped (``-`` and ``_`` kept), each space a ``-`` (github-slugger's rule)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of the Markdown file ``path`` (a repeated one as ``x-1``, ``x-2``...)."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(path: Path) -> list[str]:
    """The link targets of ``path`` that are not URLs (no scheme, no ``mailto:``)."""
    targets = [m.group(1) for line in prose(path.read_text(encoding="utf-8")) for m in LINK.finditer(line)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def broken(path: Path, target: str) -> str | None:
    """Why the link ``target`` of the page ``path`` leads nowhere, or None."""
    file_part, _, anchor = target.partition("#")
    dest = (path.parent / file_part).resolve() if file_part else path
    if not dest.is_relative_to(ROOT):
        return "outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading #{anchor} in {dest.relative_to(ROOT)}"
    return None


def test_the_readme_stays_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    links = relative_links(page)
    assert links, f"{page.name} links nothing"
    wrong = {t: why for t in links if (why := broken(page, t)) is not None}
    assert wrong == {}


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in relative_links(README)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert missing == [], f"docs/ pages the README does not link: {missing}"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Try it: `make demo`", "try-it-make-demo"),
        ("Gang scheduling (PodGroups)", "gang-scheduling-podgroups"),
        ("The configuration file (`--config`)", "the-configuration-file---config"),
        ("One pod's walk", "one-pods-walk"),
        ("Large and xlarge presets (1000 nodes)", "large-and-xlarge-presets-1000-nodes"),
        ("The tests of `hack_tools` → here", "the-tests-of-hack_tools--here"),
    ],
    ids=["code", "parentheses", "double-hyphen", "apostrophe", "digits", "underscore-and-arrow"],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("docs/install.md", None),
        ("docs/install.md#upgrading", None),
        ("docs/install.md#no-such-section", "no heading #no-such-section in docs/install.md"),
        ("docs/nothing.md", "no such file"),
        ("../outside.md", "outside the repository"),
        ("#when-to-choose-it", None),
        ("deploy/", None),
    ],
    ids=["file", "anchor", "missing-anchor", "missing-file", "outside", "own-anchor", "folder"],
)
def test_a_broken_link_is_told_apart(target: str, why: str | None) -> None:
    assert broken(README, target) == why
