"""The suite's hypothesis profiles (tests/conftest.py): "ci", the default, keeps every property and each test's own
example count with no per-example deadline; "thorough" (``pytest --hypothesis-profile thorough``) draws ten times the
examples, of every test, which holds only if every test sets its count through ``examples(n)``."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings

from tests.conftest import examples

TESTS = Path(__file__).resolve().parent


def test_ci_profile_has_no_deadline_and_keeps_counts():
    ci = settings.get_profile("ci")
    assert ci.deadline is None
    assert examples(40) == 40 if settings.default.max_examples == ci.max_examples else examples(40) == 400


def test_thorough_profile_scales_every_count_tenfold():
    assert settings.get_profile("thorough").max_examples == 10 * settings.get_profile("ci").max_examples
    assert settings.get_profile("thorough").deadline is None


def test_every_explicit_example_count_goes_through_examples():
    bare = [f"{p.relative_to(TESTS)}:{i}" for p in TESTS.rglob("*.py") if p.name != "conftest.py"
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"max_examples\s*=\s*\d", line)]
    assert not bare, f"write max_examples=examples(N) so --hypothesis-profile thorough scales it: {bare}"
