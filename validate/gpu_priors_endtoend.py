"""End-to-end checks of the GPU priors, before (datasheet-era catalog) vs after (gpu_priors.yaml).

    .venv/bin/specsim validate priors --out out/gpu-e2e

(a) Decode time per token of the third-party SpecReason traces (QwQ-32B + R1-Distill-Qwen-1.5B, vLLM
    0.8.2, TP=2; the shared data's ``specreason-aime-traces``): measured = slope of a call's wall time vs its
    output tokens (Theil-Sen, scored, and OLS over the per-step calls of problem 60, runs 0-7; the intercept holds
    the HTTP round trips and the prefill), predicted = the cost model's mean decode time per token over
    the same calls' tokens and contexts (prompt 200 tokens + kept tokens before the step), on the stated
    2x RTX A6000 and on 2x A100-80GB. Also per problem (aggregates, 60 and 62-70): base time / base tokens
    (includes each call's fixed part, so an upper bound on the decode time per token).
(b) Time-per-token ratio of the paper's two setups (R1-Distill-Llama-70B TP=4 on 4x A100-80GB vs
    QwQ-32B TP=2 on 2x RTX A6000) and of R1-Distill-Qwen-1.5B on both, decode at a 4096-token context.
    The shared REFERENCE.md states the setups (section 1) and datasheets (section 3) but no measured time
    per token for the A100 setup, so there is no published ratio to score; the measured A6000-side
    figures are the traces' (a).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.stats import theilslopes

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.inputs.loading import write_atomic
from simulator.paths import shared

TRACES = str(shared("specreason-aime-traces"))
PROMPT_TOKENS = 200  # the AIME workload profile's prompt_tokens (a shared prior)
RATIO_CONTEXT = 4096


def _dep(model: str, gpu: str, tp: int, era: str) -> Deployment:
    h = get_hardware(gpu)
    h = h.datasheet_era() if era == "before" else h
    return Deployment(get_model(model), h, tp, prior_profile(h).params(h))


def trace_calls(folder: str) -> dict[str, list[tuple[int, int, float]]]:
    """Per model role: (output tokens, context before the call, wall time s) of every generate call."""
    out: dict[str, list] = {"small": [], "base": []}
    ctx: dict[str, int] = {}
    with open(Path(folder) / "problem60-runs0-7.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            c = ctx.get(r["run"], PROMPT_TOKENS)
            if r.get("num_output_tokens_small") and r.get("small_model_time"):
                out["small"].append((int(r["num_output_tokens_small"]), c, float(r["small_model_time"])))
            if r.get("num_output_tokens_base") and r.get("base_model_time"):
                out["base"].append((int(r["num_output_tokens_base"]), c, float(r["base_model_time"])))
            ctx[r["run"]] = c + int(r.get("final_num_output_tokens") or 0)
    return out


def predicted_per_token(dep: Deployment, calls) -> float:
    tot = sum(float(dep.decode_time(c + np.arange(k)).sum()) for k, c, _ in calls)
    return tot / sum(k for k, _, _ in calls)


def run(folder: str = TRACES) -> dict:
    calls = trace_calls(folder)
    models = {"base": "qwq-32b", "small": "r1-distill-qwen-1.5b"}
    rows_a = []
    for role, cs in calls.items():
        k = np.array([c[0] for c in cs], float)
        t = np.array([c[2] for c in cs], float)
        ols = float(np.polyfit(k, t, 1)[0])
        ts = float(theilslopes(t, k)[0])
        for gpu in ("rtx-a6000", "a100-80gb"):
            r = {"model": models[role], "gpu": f"2x {gpu}", "calls": len(cs), "measured_ols_ms": 1e3 * ols,
                 "measured_theil_sen_ms": 1e3 * ts}
            for era in ("before", "after"):
                p = predicted_per_token(_dep(models[role], gpu, 2, era), cs)
                r[f"{era}_ms"], r[f"{era}_err"] = 1e3 * p, p / ts - 1.0
            rows_a.append(r)
    agg = json.loads((Path(folder) / "per-problem-aggregates.json").read_text(encoding="utf-8"))["per_problem"]
    rows_agg = []
    for pid, v in agg.items():
        a = v["averages"]
        if a.get("base_tokens"):
            rows_agg.append({"problem": pid, "base_ms_per_token_incl_fixed": 1e3 * a["base_model_time_s"] / a["base_tokens"],
                             "small_ms_per_token_incl_fixed": 1e3 * a["small_model_time_s"] / max(
                                 a["small_tokens_accepted"] + a["small_tokens_rejected"], 1)})
    rows_b = []
    for label, (m1, g1, tp1), (m2, g2, tp2) in (
            ("70B TP=4 4xA100 / QwQ-32B TP=2 2xA6000", ("r1-distill-llama-70b", "a100-80gb", 4), ("qwq-32b", "rtx-a6000", 2)),
            ("1.5B TP=4 4xA100 / 1.5B TP=2 2xA6000", ("r1-distill-qwen-1.5b", "a100-80gb", 4), ("r1-distill-qwen-1.5b", "rtx-a6000", 2))):
        r = {"ratio": label}
        for era in ("before", "after"):
            a = float(_dep(m1, g1, tp1, era).decode_time(RATIO_CONTEXT))
            b = float(_dep(m2, g2, tp2, era).decode_time(RATIO_CONTEXT))
            r[f"{era}_num_ms"], r[f"{era}_den_ms"], r[f"{era}_ratio"] = 1e3 * a, 1e3 * b, a / b
        rows_b.append(r)
    return {"a": rows_a, "aggregates": rows_agg, "b": rows_b}


def _md(rows: list[dict], fmt) -> list[str]:
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(fmt(c, r[c]) for c in cols) + " |" for r in rows]
    return out


def _f(col: str, v) -> str:
    if isinstance(v, float):
        return f"{100 * v:+.1f}%" if col.endswith("_err") else f"{v:.3g}" if "ratio" in col else f"{v:.2f}"
    return str(v)


def write_report(traces: str, out: Path, command: str) -> str:
    """Run (a) and (b) on ``traces`` and write ``OUT/report.md``; returns its text."""
    from simulator.errors import InputError

    if not (Path(traces) / "problem60-runs0-7.jsonl").is_file():
        raise InputError(str(traces), None, "problem60-runs0-7.jsonl not found")
    res = run(traces)
    text = ["# GPU priors end to end: before (datasheet-era catalog) vs after (simulator/catalog/gpu_priors.yaml)", "",
            f"Command: `{command}`", "", "## (a) Decode time per token, SpecReason traces (problem 60, runs 0-7), TP=2", "",
            "err = predicted / measured Theil-Sen slope - 1 (robust to runs 6-7, which decode ~2x slower for their first steps; the OLS slope is shown).", ""] + _md(res["a"], _f)
    text += ["", "Per problem (aggregates; time / tokens includes each call's fixed part):", ""] + _md(res["aggregates"], _f)
    text += ["", f"## (b) Time-per-token ratios (decode at {RATIO_CONTEXT} tokens of context)", "",
             "No measured ratio: ../shared/REFERENCE.md sections 1 and 3 give the setups and datasheets, no time per token "
             "for the 4x A100 setup.", ""] + _md(res["b"], _f)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "report.md", "\n".join(text) + "\n")
    return "\n".join(text)
