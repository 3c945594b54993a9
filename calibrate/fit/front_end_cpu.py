"""The `vllm serve` API server's CPU per engine step, per streamed token and per request, from serve-bench levels
(``specsim fit front-end-cpu``; docs/serve-bench.md).

`vllm serve` runs one API-server process (one asyncio loop) beside its engine core: it parses and tokenises each
request, and for every engine step it receives the step's outputs, detokenises each sequence's new token and writes it
to its client. Each level folder of ``specsim measure serve-bench`` records that process's CPU seconds over the level
apart from the engine's (``run.json`` ``options.server_cpu_s``), the level's wall time, and the server's /metrics
before and after it, whose counters give the level's engine steps (``vllm:iteration_tokens_total_count``), generated
tokens (``vllm:generation_tokens_total``) and finished requests (``vllm:request_success_total``). Model::

    front-end CPU = c_step steps + c_tok tokens + c_req requests + c_idle wall          (each c >= 0)

fitted by non-negative least squares; c_idle is the loop's own upkeep while the server waits (health checks, periodic
stats). The check is held out: each level predicted from the others' fit. The figures are this host's: a front end on
another CPU runs the same code at that CPU's speed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from simulator.errors import InputError

COUNTERS = {"steps": "vllm:iteration_tokens_total_count", "tokens": "vllm:generation_tokens_total",
            "requests": "vllm:request_success_total"}
TERMS = ("steps", "tokens", "requests", "wall_s")  # the regressors, in the order of the fitted costs
COSTS = ("c_step_s", "c_tok_s", "c_req_s", "c_idle")
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def counter_totals(path: Path, names) -> dict[str, float]:
    """{name: the sum over label sets of its samples} of each counter of ``names`` in a Prometheus text file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(str(path), None, f"cannot read vLLM /metrics text ({e.__class__.__name__})") from None
    totals: dict[str, float] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        m = _SAMPLE.match(line)
        if m is None or m.group("name") not in names:
            continue
        try:
            totals[m.group("name")] = totals.get(m.group("name"), 0.0) + float(m.group("value"))
        except ValueError:
            raise InputError(f"{path}:{no}", m.group("name"), f"expected a number (got {m.group('value')!r})") from None
    for name in names:
        if name not in totals:
            raise InputError(str(path), name, "no such counter: a vLLM /metrics scrape of a running server was expected")
    return totals


def read_level(folder: str | Path) -> dict:
    """One serve-bench level: its front-end and engine CPU seconds, wall time, and the counters' increases."""
    d = Path(folder)
    run = d / "run.json"
    try:
        opts = json.loads(run.read_text(encoding="utf-8"))["options"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(str(run), None, f"expected a serve-bench level's run.json ({e.__class__.__name__})") from None
    cpu = opts.get("server_cpu_s") or {}
    if not {"front_end", "engine"} <= set(cpu) or "wall_s" not in opts:
        raise InputError(str(run), "options.server_cpu_s", "expected the server's CPU seconds (front_end, engine) and "
                         "wall_s: a level measured by specsim measure serve-bench since it records them")
    out = {"level": d.name, "front_end_cpu_s": float(cpu["front_end"]), "engine_cpu_s": float(cpu["engine"]),
           "wall_s": float(opts["wall_s"])}
    after, before = (counter_totals(d / f, COUNTERS.values()) for f in ("metrics_after.txt", "metrics_before.txt"))
    out.update({key: after[name] - before[name] for key, name in COUNTERS.items()})
    return out


def fit(levels: list[dict]) -> dict[str, float]:
    """Non-negative least squares of the front end's CPU on :data:`TERMS`: {cost name: seconds per unit}."""
    from scipy.optimize import nnls

    a = np.array([[lv[t] for t in TERMS] for lv in levels], dtype=float)
    b = np.array([lv["front_end_cpu_s"] for lv in levels], dtype=float)
    scale = np.maximum(a.max(axis=0), 1e-12)  # columns of comparable size for the solver
    x, _ = nnls(a / scale, b)
    return {c: float(v) for c, v in zip(COSTS, x / scale)}


def predict(costs: dict[str, float], level: dict) -> float:
    return float(sum(costs[c] * level[t] for c, t in zip(COSTS, TERMS)))


def held_out(levels: list[dict]) -> list[dict]:
    """Each level's front-end CPU predicted by the fit on the other levels (needs >= len(TERMS) + 1 levels)."""
    if len(levels) <= len(TERMS):
        raise InputError(None, "levels", f"a held-out check needs at least {len(TERMS) + 1} levels (got {len(levels)})")
    rows = []
    for i, lv in enumerate(levels):
        p = predict(fit(levels[:i] + levels[i + 1:]), lv)
        rows.append({"level": lv["level"], "measured_s": lv["front_end_cpu_s"], "predicted_s": p,
                     "error": p / lv["front_end_cpu_s"] - 1.0 if lv["front_end_cpu_s"] > 0 else float("nan")})
    return rows


def report(folders: list[str | Path]) -> tuple[dict, str]:
    """(the fit, held-out errors and levels as a document; its markdown)."""
    levels = [dict(read_level(f), folder=str(f)) for f in folders]
    costs, rows = fit(levels), held_out(levels)
    err = np.abs([r["error"] for r in rows])
    doc = {"costs": costs, "held_out": rows, "median_abs_error": float(np.median(err)), "levels": levels}
    lines = ["| level | steps | tokens | requests | wall s | front-end CPU s (measured / held out) | engine CPU s |",
             "|---|---|---|---|---|---|---|"]
    for lv, r in zip(levels, rows):
        lines.append(f"| {lv['folder']} | {lv['steps']:.0f} | {lv['tokens']:.0f} | {lv['requests']:.0f} | "
                     f"{lv['wall_s']:.1f} | {lv['front_end_cpu_s']:.2f} / {r['predicted_s']:.2f} "
                     f"({100 * r['error']:+.0f}%) | {lv['engine_cpu_s']:.1f} |")
    lines += ["", f"Fit on every level: {costs['c_step_s'] * 1e3:.3f} ms per engine step, {costs['c_tok_s'] * 1e6:.1f} us "
              f"per streamed token, {costs['c_req_s'] * 1e3:.2f} ms per request, {costs['c_idle'] * 1e3:.2f} ms per "
              f"second of wall time; held out (each level from the others' fit): median |error| "
              f"{100 * doc['median_abs_error']:.1f}%."]
    return doc, "\n".join(lines) + "\n"
