"""The house's rules for code (docs/extending.md): short functions, public names across modules, no lab notes in
code, data locations from one module. The counts come from ``scripts/house_counts.py`` (run it for the per-folder
table); each test names every offender."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def counts():
    spec = importlib.util.spec_from_file_location("house_counts", ROOT / "scripts" / "house_counts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_function_is_over_sixty_lines(counts):
    assert counts.long_functions(ROOT) == []


def test_no_module_imports_another_modules_private_names(counts):
    assert counts.private_imports(ROOT) == []


def test_no_issue_numbers_in_code(counts):
    assert counts.line_matches(ROOT, counts.ISSUE_REF) == []


def test_data_locations_come_from_simulator_paths(counts):
    assert counts.shared_data_paths(ROOT) == []


def test_no_import_circles(counts):
    assert counts.import_circles(ROOT) == []


def test_the_checks_see_what_they_look_for(tmp_path, counts):
    pkg = tmp_path / "simulator"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (pkg / "a.py").write_text(
        "from simulator.b import _hidden\n"
        'DATA = "../shared/data/x"\n'
        "# see issue 12\n"
        f"def long():\n{body}\n"
        'def f(p="../shared/data/y"):\n    """Example: ../shared/data/z (a docstring may name it)."""\n'
        '    raise ValueError("no table in ../shared/data")\n')
    assert [x.split(" ")[1] for x in counts.long_functions(tmp_path)] == ["long"]
    assert counts.private_imports(tmp_path) == ["simulator/a.py:1 simulator.b._hidden"]
    assert counts.line_matches(tmp_path, counts.ISSUE_REF) == ["simulator/a.py:3"]
    assert counts.shared_data_paths(tmp_path) == ["simulator/a.py:2", "simulator/a.py:65"]
    (pkg / "b.py").write_text("def g():\n    from simulator.a import long\n")
    assert counts.import_circles(tmp_path) == [["simulator.a", "simulator.b"]]
