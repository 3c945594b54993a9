"""The house's counts (issue 39's "Done means"): files and lines per folder, functions over 60 lines, cross-module
``_private`` imports, issue references and measured-figure notes in code, literal data paths into ``../shared`` (outside ``simulator/paths.py``).

    python scripts/house_counts.py [REPO] [-v]

``tests/test_house_rules.py`` holds the rules with the same functions."""

from __future__ import annotations

import ast
import collections
import re
import sys
from pathlib import Path

PACKAGES = ("simulator", "calibrate", "validate", "specsim_cli")
MAX_FUNCTION_LINES = 60
ISSUE_REF = re.compile(r"\b[Ii]ssues? \d+")
SHARED_LITERAL = "../shared"
LAYOUT_MODULE = "simulator/paths.py"  # the one module that knows where the shared data lives


def code_files(root: Path) -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def long_functions(root: Path) -> list[str]:
    out = []
    for p in code_files(root):
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES:
                out.append(f"{p.relative_to(root)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    return out


def private_imports(root: Path) -> list[str]:
    """``from pkg.mod import _name`` across modules of the project (a module's own privates are its business)."""
    out = []
    for p in code_files(root):
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 and n.module.split(".")[0] in PACKAGES:
                out += [f"{p.relative_to(root)}:{n.lineno} {n.module}.{a.name}" for a in n.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def line_matches(root: Path, pattern: re.Pattern) -> list[str]:
    return [f"{p.relative_to(root)}:{i}" for p in code_files(root)
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]


def shared_data_paths(root: Path) -> list[str]:
    """String literals naming a place under ``../shared`` that code would open: a default value, a module-level
    constant, or an argument of a call (``Path(...)``, ``typer.Option(...)``) other than ``help=`` text. Docstrings,
    help texts, examples and messages may name the folder for the reader; data locations come from
    ``simulator.paths``."""
    out = []
    for p in code_files(root):
        if p.relative_to(root).as_posix() == LAYOUT_MODULE:
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        found = []
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += n.args.defaults + [d for d in n.args.kw_defaults if d is not None]
            elif isinstance(n, ast.Call):
                found += n.args + [k.value for k in n.keywords if k.arg not in ("help", "epilog")]
        found += [n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
        for v in found:
            if isinstance(v, ast.Constant) and isinstance(v.value, str) and SHARED_LITERAL in v.value \
                    and not _is_message(tree, v):
                out.append(f"{p.relative_to(root)}:{v.lineno}")
    return sorted(set(out))


def _is_message(tree: ast.AST, node: ast.Constant) -> bool:
    """The literal is (part of) an exception's message: words for the reader, not a place to open."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Raise) and n.exc is not None and any(c is node for c in ast.walk(n.exc)):
            return True
    return False


def module_names(root: Path) -> dict[str, Path]:
    out = {}
    for p in code_files(root):
        parts = list(p.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def import_circles(root: Path) -> list[list[str]]:
    """Groups of the project's modules that import each other, directly or through others (every import counts,
    inside functions too): the strongly connected components with more than one module."""
    mods = module_names(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module, *(f"{n.module}.{a.name}" for a in n.names)] if isinstance(n, ast.ImportFrom) \
                and n.level == 0 and n.module else []
            edges[m] |= {t for t in names if t in mods and t != m}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(mods)))
    for v in mods:
        if v not in index:
            visit(v)
    return sorted(out)


def folder_sizes(root: Path) -> dict[str, tuple[int, int]]:
    files, lines = collections.Counter(), collections.Counter()
    for p in code_files(root):
        rel = p.relative_to(root).parts
        key = "/".join(rel[:2]) if len(rel) > 2 else rel[0]
        files[key] += 1
        lines[key] += p.read_text(encoding="utf-8").count("\n")
    return {k: (files[k], lines[k]) for k in sorted(files)}


def main(argv: list[str]) -> int:
    root = Path(next((a for a in argv if not a.startswith("-")), ".")).resolve()
    sizes = folder_sizes(root)
    print(f"{'folder':28s} {'files':>5s} {'lines':>6s}")
    for k, (f, n) in sizes.items():
        print(f"{k:28s} {f:5d} {n:6d}")
    print(f"{'total':28s} {sum(f for f, _ in sizes.values()):5d} {sum(n for _, n in sizes.values()):6d}")
    checks = {"functions over 60 lines": long_functions(root), "cross-module _private imports": private_imports(root),
              "issue references in code": line_matches(root, ISSUE_REF),
              "literal ../shared data paths in code": shared_data_paths(root),
              "import circles": [" <-> ".join(c) for c in import_circles(root)]}
    for name, found in checks.items():
        print(f"{name}: {len(found)}")
        if "-v" in argv:
            print("".join(f"  {x}\n" for x in found), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
