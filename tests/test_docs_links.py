"""Every relative link in docs/ (and the README) resolves: the file or folder exists, and a `#anchor` names a heading
of the page it points to (GitHub's heading slugs, or an explicit `<a id="...">`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("**/*.md")) + [ROOT / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        anchors.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
        match = re.match(r"#{1,6}\s+(.*)", line)
        if not match:
            continue
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(page: Path) -> list[str]:
    return [m.group(1) for line in _prose_lines(page.read_text(encoding="utf-8"))
            for m in LINK.finditer(CODE_SPAN.sub("", line))]


def _broken(page: Path) -> list[str]:
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor})")
    return broken


def test_relative_links_in_docs_resolve():
    broken = {str(p.relative_to(ROOT)): b for p in PAGES if (b := _broken(p))}
    assert not broken, f"broken links: {broken}"


def test_slug_follows_github():
    assert _slug("Capacity search and costs (`simulator/studies/capacity/`)") == \
        "capacity-search-and-costs-simulatorstudiescapacity"
    assert _slug("Best γ vs concurrency") == "best-γ-vs-concurrency"
