"""docs/README.md indexes every document in docs/ (a new doc must be listed)."""

from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_doc_is_in_the_index():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and f"]({p.name})" not in index]
    assert not missing, f"docs/README.md does not list {missing}"
