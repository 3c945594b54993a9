"""Why drafts are rejected: token-level (teacher-forced, from our runs) and step-level
(SpecReason's utility scores, from the shared third-party traces)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.measure.study.token_classes import OPENERS
from simulator.paths import shared

DEFAULT_TRACES = shared("specreason-aime-traces")


def _rate_table(df: pd.DataFrame, by: str, match_col: str) -> pd.DataFrame:
    g = df.groupby(by, observed=True)[match_col]
    out = pd.DataFrame({"tokens": g.size(), "accept_rate": g.mean()})
    out["rejections"] = out.tokens - (out.accept_rate * out.tokens).round().astype(int)
    out["share_of_rejections"] = out.rejections / max(1, out.rejections.sum())
    return out.reset_index()


def token_breakdowns(tokens: pd.DataFrame, draft: str) -> dict[str, pd.DataFrame]:
    """Per-token conditional acceptance (draft argmax == target token, given the correct prefix)
    by token class, position within the reasoning step, context length and target entropy."""
    col = f"match:{draft}"
    d = tokens.copy()
    if f"proposed:{draft}" in d:
        d = d[d[f"proposed:{draft}"]]
    d["step_offset_bin"] = pd.cut(d.step_offset, [-1, 0, 2, 5, 10, 20, 40, 10_000],
                                  labels=["0", "1-2", "3-5", "6-10", "11-20", "21-40", ">40"])
    d["context_bin"] = pd.cut(d.context_tokens, [0, 150, 200, 250, 300, 10_000],
                              labels=["<=150", "151-200", "201-250", "251-300", ">300"])
    d["entropy_bin"] = pd.cut(d.entropy_nats, [-1, 0.1, 0.5, 1.0, 2.0, 100],
                              labels=["<0.1", "0.1-0.5", "0.5-1", "1-2", ">2"])
    return {k: _rate_table(d, by, col) for k, by in
            (("token_class", "token_class"), ("step_offset", "step_offset_bin"), ("context", "context_bin"),
             ("entropy", "entropy_bin"))}


def _first_word(text: str) -> str:
    m = re.match(r"\W*([A-Za-z]+)", text or "")
    w = m.group(1) if m else "(none)"
    return w if w.lower() in OPENERS or w.lower() in {"i", "the", "to", "we", "this", "that", "if", "in"} else "other"


def specreason_step_breakdowns(data: Path = DEFAULT_TRACES, threshold: int = 7) -> dict[str, pd.DataFrame]:
    """Low-score (score < threshold) share of the small model's steps by length, position in the
    chain, starting word, and presence of digits / equations. Traces are read in place."""
    from calibrate.fit.import_specreason import read_records, trace_files

    recs = [r for f in trace_files(data) for r in read_records(f)]
    d = pd.DataFrame({"score": [r["score"] for r in recs], "tokens": [r["num_output_tokens_small"] for r in recs],
                      "step": [r["step_id"] for r in recs], "text": [r["small_model_step"] or "" for r in recs]})
    d["low"] = d.score < threshold
    d["length_bin"] = pd.cut(d.tokens, [0, 20, 50, 100, 200, 100_000], labels=["<=20", "21-50", "51-100", "101-200", ">200"])
    d["chain_bin"] = pd.cut(d.step, [-1, 4, 19, 49, 99, 100_000], labels=["0-4", "5-19", "20-49", "50-99", ">=100"])
    d["start_word"] = d.text.map(_first_word)
    d["has_digits"] = d.text.str.contains(r"\d")
    d["has_equation"] = d.text.str.contains(r"=|\\frac|\\times|\^")
    out = {}
    for name, by in (("length", "length_bin"), ("chain_position", "chain_bin"), ("start_word", "start_word"),
                     ("digits", "has_digits"), ("equation", "has_equation")):
        g = d.groupby(by, observed=True)
        out[name] = pd.DataFrame({"steps": g.size(), "low_score": g.low.sum(), "low_share": g.low.mean(),
                                  "mean_score": g.score.mean()}).reset_index()
    out["_overall"] = pd.DataFrame([{"steps": len(d), "low_score": int(d.low.sum()), "low_share": float(d.low.mean()),
                                     "threshold": threshold}])
    return out
