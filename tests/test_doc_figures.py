"""Figures the docs quote from a command are what that command prints today.

Each quote below names a doc, the `specsim` command its text gives (run here with ``--format json``), the figure it
picks from the output, and the doc's words around it. A model change that moves a quoted figure fails here, naming
the doc, the command and the fresh figure, until the doc is updated (the committed reports have their own check,
``tests/validate/test_committed_reports.py``). Figures are written as the CLI's headline writes them: three
significant digits for rates, one decimal for seconds, two for speedups. Three capacity searches the docs quote (TP 8
against DeepSeek's DP 8, TP 4 x PP 2 against TP 8, Qwen3.5-27B's MTP grid: ~2 min of searching on 2 cores) are dated
snapshots there, not checked here, to keep the suite inside CI's time. One engine step's quotes (`simulate pass-time`)
are checked the same way."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from typing import Callable

import pytest
import yaml

from simulator.paths import REPO
from specsim_cli.main import main


def sig3(x: float) -> str:
    return f"{x:.3g}"


def one(x: float) -> str:
    return f"{x:.1f}"


def two(x: float) -> str:
    return f"{x:.2f}"


def interval(r: dict) -> str:
    """A capacity row's max rate with its 95% interval, as the docs write it: ``5.91 [5.45, 6.61]``."""
    return f"{sig3(r['max_qps'])} [{sig3(r['max_qps_lo'])}, {sig3(r['max_qps_hi'])}]"


def row(**want) -> Callable[[dict], dict]:
    """The one result row whose fields equal ``want``."""
    def pick(out: dict) -> dict:
        rows = [r for r in out["results"] if all(r.get(k) == v for k, v in want.items())]
        assert len(rows) == 1, f"{len(rows)} result rows match {want}"
        return rows[0]
    return pick


def best_of(system: str) -> Callable[[dict], dict]:
    """The row of ``system`` with the highest capacity (its best gamma)."""
    return lambda out: max((r for r in out["results"] if r["system"] == system), key=lambda r: r["max_qps"])


@dataclass(frozen=True)
class Quote:
    docs: tuple[str, ...]  # the docs quoting it, relative to the repository
    args: tuple[str, ...]  # after `specsim`; the first scenario argument may be edited (``base``)
    text: str  # the doc's words with {} where the figure stands
    pick: Callable[[dict], dict]  # the result row
    column: str  # "": the whole row goes to ``fmt``
    fmt: Callable
    base: dict | None = field(default=None)  # the scenario's ``base:`` replaced (a variant the doc names)


WHATIF_235B = ("simulate", "whatif", "h100x8-qwen3-235b-plain")
PLAIN_235B = ("simulate", "capacity", "h100x8-qwen3-235b-plain", "--slo", "p99_ttft<=2s", "--requests", "100")
DP8 = ("simulate", "capacity", "h200x8-deepseek-r1-dp8-plain", "--slo", "p99_ttft<=2s", "--requests", "100")
H200X2 = ("simulate", "capacity", "h200x2-qwen3-32b-serving", "--slo", "p99_latency<=600s", "--requests", "200")
EAGLE3 = ("simulate", "whatif", "eagle3-qwen3-32b-h200")
QWEN35 = ("simulate", "whatif", "qwen3.5-27b-mtp-h200")
R1_MTP = ("simulate", "whatif", "moe-deepseek-r1-h200x8-mtp")
REFERENCE = ("simulate", "whatif", "reference-a6000-qwq32b")
CPU_T5 = ("simulate", "capacity", "cpu-smollm2", "--system", "specreason", "--threshold", "5", "--target-qps", "2")
QWEN32_DRAFT = ("simulate", "pass-time", "--model", "qwen3-32b", "--hardware", "h200", "--dtype", "fp8", "--draft",
                "head", "--gamma", "4", "--batch", "1", "--context", "4096")
QWEN35_MTP = ("simulate", "pass-time", "--model", "qwen3.5-27b", "--hardware", "h200", "--batch", "1,64", "--context",
              "2000", "--draft", "mtp", "--gamma", "3")
R1_STEP = ("simulate", "pass-time", "--model", "deepseek-r1", "--hardware", "h200", "--dtype", "fp8", "--batch", "64",
           "--context", "8704")
BOTH = ("docs/whatif.md", "docs/drafters.md")
QUOTES = (
    Quote(("docs/drafters.md",), QWEN32_DRAFT, "verification {} ms. At the same", row(batch=1), "verify_ms", two),
    Quote(("docs/drafters.md",), QWEN35_MTP, "verification {} ms at batch 1", row(batch=1), "verify_ms", one),
    Quote(("docs/drafters.md",), QWEN35_MTP, "ms at batch 1, {} ms at 64", row(batch=64), "verify_ms", one),
    Quote(("docs/drafters.md",), QWEN35_MTP, "at 64 against a {} ms decode step", row(batch=64), "pass_ms", one),
    Quote(("docs/moe.md",), (*R1_STEP, "--tp", "8"), "{} ms at TP 8 (ep 1)", row(batch=64), "pass_ms", one),
    Quote(("docs/moe.md",), (*R1_STEP, "--tp", "1", "--dp", "8", "--ep", "8"), "against {} ms with DP 8", row(batch=64),
          "pass_ms", one),
    Quote(("docs/whatif.md",), REFERENCE, "Best: specdecode g=4: {} s per request", row(system="specdecode", gamma=4),
          "latency_s", sig3),
    Quote(("docs/whatif.md",), REFERENCE, "vanilla-small {} s (unknown", row(system="vanilla-small"), "latency_s", sig3),
    Quote(("docs/whatif.md",), REFERENCE, "specreason-decode g=4 t=3 {} s (unknown",
          row(system="specreason-decode", gamma=4, threshold=3), "latency_s", sig3),
    Quote(("docs/capacity.md",), CPU_T5, "SLO p99 ≤ 40 s: {} req/s, 9 hosts", row(system="specreason"), "", interval),
    Quote(("docs/whatif.md",), WHATIF_235B, "`specsim simulate whatif h100x8-qwen3-235b-plain`: {} s per AIME request",
          row(system="vanilla-base"), "latency_s", one),
    Quote(("docs/whatif.md",), PLAIN_235B, "--requests 100`: {} req/s per replica; the same", best_of("vanilla-base"),
          "max_qps", sig3),
    Quote(("docs/whatif.md",), WHATIF_235B, "`base: {{tp: 4, pp: 2}}`: {} s and", row(system="vanilla-base"),
          "latency_s", one, base={"model": "qwen3-235b-a22b", "tp": 4, "pp": 2}),
    Quote(("docs/whatif.md",), PLAIN_235B, "s and {} req/s (2026-12-02", best_of("vanilla-base"), "max_qps", sig3,
          base={"model": "qwen3-235b-a22b", "tp": 4, "pp": 2}),
    Quote(("docs/whatif.md",), DP8, "--requests 100`: {} req/s per replica, against", best_of("vanilla-base"),
          "max_qps", sig3),
    Quote(("docs/whatif.md",), DP8, "against {} with `tp: 8` (2026-12-02)", best_of("vanilla-base"), "max_qps", sig3,
          base={"model": "deepseek-r1", "tp": 8, "weight_dtype": "fp8"}),
    Quote(("docs/whatif.md",), H200X2, "--requests 200`: {} req/s per replica", best_of("vanilla-base"), "max_qps",
          sig3),
    Quote(("docs/capacity.md",), H200X2, "The H200 case gives {} req/s per replica", best_of("vanilla-base"), "",
          interval),
    Quote(("docs/drafters.md",), EAGLE3, "(23.7 s vs {} s)", row(system="vanilla-base", tp=1), "latency_s", one),
    Quote(BOTH, EAGLE3, "SpecDecode {}x at γ = 6 on TP 1", row(system="specdecode", gamma=6, tp=1), "speedup", two),
    Quote(("docs/whatif.md",), QWEN35, "vanilla {} s per AIME request", row(system="vanilla-base"), "latency_s", one),
    Quote(("docs/whatif.md",), QWEN35, "SpecDecode {}x at γ = 1", row(system="specdecode", gamma=1), "speedup", two),
    Quote(("docs/whatif.md",), QWEN35, "to {}x at γ = 4", row(system="specdecode", gamma=4), "speedup", two),
    Quote(BOTH, R1_MTP, "best SpecDecode {} s,", row(system="specdecode", gamma=3), "latency_s", one),
    Quote(BOTH, R1_MTP, "s, {}x at k = 3", row(system="specdecode", gamma=3), "speedup", two),
)


def _scenario(name: str, base: dict | None, tmp_path) -> str:
    if base is None:
        return name
    spec = yaml.safe_load((REPO / "scenarios" / f"{name}.yaml").read_text())
    spec["base"] = base
    path = tmp_path / f"{name}-variant.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _run(args: tuple[str, ...], base: dict | None, tmp_path) -> dict:
    argv = list(args)
    argv[2] = _scenario(argv[2], base, tmp_path)
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(argv + ["--format", "json"])
    assert code == 0, f"specsim {' '.join(argv)} exited {code}"
    return json.loads(buf.getvalue())


def _groups() -> dict[str, list[Quote]]:
    """The quotes by the command they come from (each command runs once)."""
    out: dict[str, list[Quote]] = {}
    for q in QUOTES:
        key = "specsim " + " ".join(q.args) + (f" (base: {json.dumps(q.base, sort_keys=True)})" if q.base else "")
        out.setdefault(key, []).append(q)
    return out


@pytest.mark.parametrize("command", list(_groups()))
def test_quoted_figures_are_what_the_command_prints(command: str, tmp_path):
    quotes = _groups()[command]
    out = _run(quotes[0].args, quotes[0].base, tmp_path)
    stale = []
    for q in quotes:
        picked = q.pick(out)
        fresh = q.fmt(picked[q.column] if q.column else picked)
        for name in q.docs:
            if q.text.format(fresh) not in re.sub(r"\s+", " ", (REPO / name).read_text()):
                stale.append(f"{name} should quote {q.text.format(fresh)!r} (the command now gives {fresh})")
    assert not stale, f"`{command}`: update the docs: " + "; ".join(stale)


def test_the_check_sees_a_moved_figure():
    """A doc quoting another figure than the command's fails: the template is matched with the fresh figure in it."""
    q = Quote(("docs/whatif.md",), ("simulate", "whatif", "x"), "vanilla {} s per AIME request", row(system="a"),
              "latency_s", one)
    assert q.text.format(one(72.25)) == "vanilla 72.2 s per AIME request"
    assert q.text.format(one(99.0)) not in re.sub(r"\s+", " ", (REPO / q.docs[0]).read_text())
