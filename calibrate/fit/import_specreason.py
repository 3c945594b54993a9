"""Importer for the SpecReason reference code's per-step output (one JSON record per step).

Source format: the per-run pickles of ``spec_reason.py`` (ruipeterpan/specreason, and the
per-step-timing fork RuthvikAtte/specreason) converted to JSONL, one record per reasoning
step, field names kept from the source (see ``specreason-aime-traces/README.md`` in the shared data).

Each line is validated once (required fields, types, ranges); a bad line raises
:class:`~simulator.errors.InputError` naming the file, ``line N`` and the field. Unknown
fields are errors too (never silently dropped), except the two the source itself may add
(``warning``, ``step_str``).

Canonical step table (one row per step, ``STEP_COLUMNS``; units as suffixes):

================== ======================================================================
run_id             source ``run`` (e.g. ``results/60/0``)
problem_id         dataset problem id
repeat_id          repeat (sample) id
step_index         source ``step_id``, 0-based, contiguous per run
small_tokens       tokens the small model proposed (``num_output_tokens_small``)
small_call_s       wall time of the small model's call (HTTP, streaming, incl. model-list)
score              base model's utility score 0..9 (greedy digit; non-digit -> 0 in source)
score_token        raw score token (``justification``)
scoring_call_s     wall time of the scoring call (0 when the source skipped it)
scoring_skipped    the source's context-length guard skipped scoring (score forced to 0)
accepted           score >= threshold (the small step was kept)
base_tokens        tokens of the base model's regeneration (<NA> when accepted)
base_call_s        wall time of the base model's call (NaN when accepted)
kept_tokens        tokens kept for this step (``final_num_output_tokens``)
kept_by            ``small`` or ``base``
step_s             wall time of the whole step (``step_time``)
verify_call_s      step_s - (small + scoring + base): the fork's answer-verification call
context_tokens_before  cumulative kept tokens of the run before this step
has_answer         the kept text contains "boxed" / "Answer:" / "ANSWER:" (the reference
                   code's own finish test)
candidate_answer   boxed answer extracted by the source (or None)
is_correct         source ``is_correct_mathverify`` (True / False / None)
stop_reason        ``finished`` / ``budget`` on a run's last step, else None
================== ======================================================================

Per-request summary (``REQUEST_COLUMNS``): steps, kept_tokens, small_kept_fraction,
total_s (= sum of step_s), stop_reason (recorded), stop_cause (inferred: ``verified`` /
``repeat`` / ``context_guard`` / ``budget``), correct, first_answer_step (steps up to and
including the first ``has_answer`` step; NaN when none) and ``censored`` (no answer step
and not a natural finish: the request's step count under the reference code's finish rule
is only known to exceed ``observed_steps``).

Consistency checks (counted in ``SpecReasonTrace.issues``, never fixed silently): step time
vs the sum of call times, kept tokens vs small/base tokens, acceptance vs threshold, score
parse failures, skipped scoring calls, empty steps.

Tokens are the source's counts (``completion_tokens`` of each call), not re-tokenised text.

Command: ``.venv/bin/specsim import specreason DATA [--summary]``.
"""

from __future__ import annotations

from simulator.paths import shared

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import InputError
from simulator.inputs.loading import unique_json_object

DEFAULT_DATA_DIR = shared("specreason-aime-traces")
ANSWER_MARKERS = ("boxed", "Answer:", "ANSWER:")
STEP_TIME_TOLERANCE_S = 0.005
MAX_COUNT = 2**53  # counts and ids above this lose precision as floats and overflow pandas' int64 sums

STEP_COLUMNS = [
    "run_id", "problem_id", "repeat_id", "step_index", "small_tokens", "small_call_s", "score",
    "score_token", "scoring_call_s", "scoring_skipped", "accepted", "base_tokens", "base_call_s",
    "kept_tokens", "kept_by", "step_s", "verify_call_s", "context_tokens_before", "has_answer",
    "candidate_answer", "is_correct", "stop_reason",
]
REQUEST_COLUMNS = [
    "run_id", "steps", "kept_tokens", "small_kept_fraction", "total_s", "stop_reason", "stop_cause",
    "correct", "first_answer_step", "observed_steps", "censored",
]

# field -> (allowed python types, nullable)
_NUM = (int, float)
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "run": ((str,), False),
    "problem_id": ((int,), False),
    "repeat_id": ((int,), False),
    "step_id": ((int,), False),
    "small_model_step": ((str,), False),
    "num_output_tokens_small": ((int,), False),
    "small_model_time": (_NUM, False),
    "score": (_NUM, False),
    "justification": ((str,), True),
    "eval_time": (_NUM, False),
    "base_model_step": ((str,), True),
    "num_output_tokens_base": ((int,), True),
    "base_model_time": (_NUM, True),
    "final_num_output_tokens": ((int,), False),
    "step_time": (_NUM, False),
    "stop_reason": ((str,), True),
    "candidate_answer": ((str,), True),
    "is_correct_mathverify": ((bool,), True),
}
_OPTIONAL_SOURCE_FIELDS = {"warning", "step_str"}


@dataclass
class SpecReasonTrace:
    """Imported trace: canonical step table, per-request summary, consistency issue counts."""

    steps: pd.DataFrame
    requests: pd.DataFrame
    issues: Counter = field(default_factory=Counter)
    sources: list[Path] = field(default_factory=list)
    threshold: float = 7.0


# ---- reading and validating -------------------------------------------------------------------
def _check_record(rec: object, file: Path, line: int) -> dict:
    where = f"line {line}"
    if not isinstance(rec, dict):
        raise InputError(str(file), where, f"expected a JSON object, got {type(rec).__name__}")
    for name, (types, nullable) in _FIELDS.items():
        if name not in rec:
            raise InputError(str(file), f"{where}: {name}", "required field missing")
        v = rec[name]
        if v is None:
            if not nullable:
                raise InputError(str(file), f"{where}: {name}", "must not be null")
            continue
        if isinstance(v, float) and int in types and float not in types and v.is_integer():
            rec[name] = v = int(v)  # 6.0 from a NaN-padded converter is still a count
        if isinstance(v, bool) and bool not in types or not isinstance(v, types):
            want = "/".join(t.__name__ for t in types)
            raise InputError(str(file), f"{where}: {name}", f"expected {want}, got {type(v).__name__} {v!r}")
        if isinstance(v, float) and not np.isfinite(v):
            raise InputError(str(file), f"{where}: {name}", f"must be a finite number (got {v!r})")
        if isinstance(v, int) and not isinstance(v, bool) and v > MAX_COUNT:
            raise InputError(str(file), f"{where}: {name}", f"implausibly large (got {v!r}; at most {MAX_COUNT})")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise InputError(str(file), f"{where}: {name}", f"must be >= 0 (got {v!r})")
    extra = set(rec) - set(_FIELDS) - _OPTIONAL_SOURCE_FIELDS
    if extra:
        raise InputError(str(file), f"{where}: {sorted(extra)[0]}", "unknown field")
    if not 0 <= rec["score"] <= 9:
        raise InputError(str(file), f"{where}: score", f"must lie in 0..9 (got {rec['score']!r})")
    if rec["stop_reason"] not in (None, "finished", "budget"):
        raise InputError(str(file), f"{where}: stop_reason", f"expected finished/budget/null (got {rec['stop_reason']!r})")
    base = [rec["base_model_step"], rec["num_output_tokens_base"], rec["base_model_time"]]
    if any(b is None for b in base) and not all(b is None for b in base):
        raise InputError(str(file), f"{where}: base_model_step",
                         "base_model_step, num_output_tokens_base and base_model_time must be all null or all set")
    return rec


def read_records(path: Path) -> list[dict]:
    """Validated records of one JSONL file, each tagged with its line number."""
    out = []
    try:
        with path.open("r", encoding="utf-8") as fh:
            for n, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw, object_pairs_hook=unique_json_object)
                except json.JSONDecodeError as e:
                    raise InputError(str(path), f"line {n}", f"malformed JSON ({e.msg})") from None
                except (ValueError, RecursionError) as e:  # a repeated key (unique_json_object), deep nesting
                    raise InputError(str(path), f"line {n}", f"malformed JSON ({e})") from None
                rec = _check_record(rec, path, n)
                rec["_line"] = n
                out.append(rec)
    except UnicodeDecodeError:
        raise InputError(str(path), None, "not a UTF-8 text file") from None
    if not out:
        raise InputError(str(path), None, "no records")
    return out


def trace_files(data: str | Path) -> list[Path]:
    p = Path(data)
    if p.is_dir():
        files = sorted(p.glob("*.jsonl"))
        if not files:
            raise InputError(str(p), None, "no *.jsonl trace files in this directory")
        return files
    if not p.is_file():
        raise InputError(str(p), None, "file not found")
    return [p]


# ---- canonical table ----------------------------------------------------------------------------
def _steps_frame(records: list[dict], threshold: float) -> pd.DataFrame:
    rows = []
    for r in records:
        accepted_src = r["base_model_step"] is None
        kept_text = r["small_model_step"] if accepted_src else r["base_model_step"]
        base_s = r["base_model_time"]
        rows.append({
            "run_id": r["run"], "problem_id": r["problem_id"], "repeat_id": r["repeat_id"],
            "step_index": r["step_id"], "small_tokens": r["num_output_tokens_small"],
            "small_call_s": float(r["small_model_time"]), "score": r["score"],
            "score_token": r["justification"], "scoring_call_s": float(r["eval_time"]),
            "scoring_skipped": r["eval_time"] == 0 and not r["justification"],
            "accepted": r["score"] >= threshold, "_accepted_src": accepted_src,
            "base_tokens": r["num_output_tokens_base"],
            "base_call_s": np.nan if base_s is None else float(base_s),
            "kept_tokens": r["final_num_output_tokens"], "kept_by": "small" if accepted_src else "base",
            "step_s": float(r["step_time"]),
            "verify_call_s": float(r["step_time"]) - float(r["small_model_time"]) - float(r["eval_time"]) - float(base_s or 0.0),
            "has_answer": any(m in kept_text for m in ANSWER_MARKERS),
            "candidate_answer": r["candidate_answer"], "is_correct": r["is_correct_mathverify"],
            "stop_reason": r["stop_reason"], "_kept_text": kept_text, "_line": r["_line"], "_file": r["_file"],
        })
    df = pd.DataFrame(rows)
    df["base_tokens"] = df["base_tokens"].astype("Int64")
    df = df.sort_values(["run_id", "step_index"], kind="stable").reset_index(drop=True)
    df["context_tokens_before"] = df.groupby("run_id")["kept_tokens"].cumsum() - df["kept_tokens"]
    return df


def _check_runs(df: pd.DataFrame) -> None:
    for run, d in df.groupby("run_id", sort=False):
        idx = d["step_index"].to_numpy()
        if not np.array_equal(idx, np.arange(len(d))):
            bad = d.iloc[int(np.argmax(idx != np.arange(len(d))))]
            raise InputError(bad["_file"], f"line {bad['_line']}: step_id",
                             f"run {run}: step ids must be 0..n-1 without gaps or repeats")
        stops = d["stop_reason"].notna().to_numpy()
        if stops[:-1].any():
            bad = d.iloc[int(np.argmax(stops))]
            raise InputError(bad["_file"], f"line {bad['_line']}: stop_reason", f"run {run}: only the last step may carry a stop_reason")


def _issues(df: pd.DataFrame) -> Counter:
    """Consistency checks; every finding is counted, nothing is repaired."""
    c: Counter = Counter()
    expect_kept = np.where(df["_accepted_src"], df["small_tokens"], df["base_tokens"].fillna(-1))
    c["kept_tokens != small/base tokens"] = int((expect_kept != df["kept_tokens"]).sum())
    c["accepted by source but score < threshold, or vice versa"] = int((df["accepted"] != df["_accepted_src"]).sum())
    c["step_s < sum of call times"] = int((df["verify_call_s"] < -STEP_TIME_TOLERANCE_S).sum())
    extra = df["verify_call_s"] > STEP_TIME_TOLERANCE_S
    c["step_s > sum of call times (answer verification call)"] = int((extra & df["candidate_answer"].notna()).sum())
    c["step_s > sum of call times without a candidate answer"] = int((extra & df["candidate_answer"].isna()).sum())
    c["score token not a digit (scored 0)"] = int((~df["score_token"].fillna("").str.isdigit() & ~df["scoring_skipped"]).sum())
    c["scoring skipped by the context-length guard (score forced 0)"] = int(df["scoring_skipped"].sum())
    c["empty small step (0 tokens)"] = int((df["small_tokens"] == 0).sum())
    c["empty base step (0 tokens)"] = int((df["base_tokens"].fillna(1) == 0).sum())
    c["small step at the 512-token cap"] = int((df["small_tokens"] >= 512).sum())
    c["runs without a stop_reason on the last step"] = int((~df.groupby("run_id")["stop_reason"].last().notna()).sum())
    return c


def _stop_cause(d: pd.DataFrame) -> str:
    last = d.iloc[-1]
    if last["stop_reason"] == "budget":
        return "budget"
    if last["kept_tokens"] == 0 and last["scoring_skipped"]:
        return "context_guard"
    if len(d) >= 2 and last["_kept_text"].replace("</think>", "") == d.iloc[-2]["_kept_text"].replace("</think>", ""):
        return "repeat"
    if last["candidate_answer"] is not None:
        return "verified"
    return "other"


def _requests_frame(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for run, d in df.groupby("run_id", sort=False):
        answers = np.flatnonzero(d["has_answer"].to_numpy())
        cause = _stop_cause(d)
        judged = d[~d["scoring_skipped"]]
        correct_vals = d["is_correct"].dropna()
        rows.append({
            "run_id": run, "steps": len(d), "kept_tokens": int(d["kept_tokens"].sum()),
            "small_kept_fraction": float((d["kept_by"] == "small").mean()),
            "total_s": float(d["step_s"].sum()), "stop_reason": d["stop_reason"].iloc[-1], "stop_cause": cause,
            "correct": bool(correct_vals.iloc[-1]) if len(correct_vals) else None,
            "first_answer_step": float(answers[0] + 1) if len(answers) else np.nan,
            # steps observed with a real score: what a censored run is known to exceed
            "observed_steps": int(len(judged)) if len(answers) == 0 else int(answers[0] + 1),
            "censored": len(answers) == 0 and cause in ("context_guard", "budget", "other"),
        })
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)


def import_specreason(data: str | Path = DEFAULT_DATA_DIR, threshold: float = 7.0) -> SpecReasonTrace:
    """Read SpecReason per-step JSONL (a file, or every ``*.jsonl`` in a directory)."""
    files = trace_files(data)
    records = []
    run_file: dict[str, tuple[str, int]] = {}
    for f in files:
        for r in read_records(f):
            r["_file"] = str(f)
            first = run_file.setdefault(str(r["run"]), (str(f), r["_line"]))
            if first[0] != str(f):  # a run's key is its ``run`` id: it must be unique over the inputs
                raise InputError(str(f), f"line {r['_line']}: run", f"run id {r['run']!r} also occurs in {first[0]} "
                                 f"(line {first[1]}); a run's id must be unique")
            records.append(r)
    df = _steps_frame(records, threshold)
    _check_runs(df)
    issues = _issues(df)
    requests = _requests_frame(df)
    steps = df[STEP_COLUMNS].copy()
    return SpecReasonTrace(steps=steps, requests=requests, issues=issues, sources=files, threshold=threshold)


def steps_upto_answer(trace: SpecReasonTrace) -> pd.DataFrame:
    """Steps the reference code would have run: each run up to and including its first answer
    step (``has_answer``); a run without one keeps its steps with a real score (censored)."""
    keep = []
    req = trace.requests.set_index("run_id")
    for run, d in trace.steps.groupby("run_id", sort=False):
        n = int(req.loc[run, "observed_steps"])
        keep.append(d[~d["scoring_skipped"]].head(n) if req.loc[run, "censored"] else d.head(n))
    return pd.concat(keep, ignore_index=True)


# ---- timing ------------------------------------------------------------------------------------
def fit_linear_robust(x, y, f_scale: float = 0.05) -> dict:
    """y ≈ a + b·x by scipy least_squares with a soft-L1 loss (robust to slow outlier calls);
    Theil-Sen slope/intercept alongside as a cross-check."""
    from scipy.optimize import least_squares
    from scipy.stats import theilslopes

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    b0 = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (0.0, float(np.median(y)))
    res = least_squares(lambda p: p[0] + p[1] * x - y, x0=[b0[1], b0[0]], loss="soft_l1", f_scale=f_scale)
    ts = theilslopes(y, x)
    return {"a_s": float(res.x[0]), "b_s_per_token": float(res.x[1]), "theil_sen_a_s": float(ts[1]),
            "theil_sen_b_s_per_token": float(ts[0]), "n": int(len(x))}


def fit_call_times(steps: pd.DataFrame) -> dict[str, dict]:
    """Per-call time models: small and base call s vs output tokens, scoring call s vs context."""
    small = steps[steps["small_tokens"] > 0]
    base = steps[steps["base_tokens"].fillna(0) > 0]
    scored = steps[~steps["scoring_skipped"]]
    return {
        "small_call_s~small_tokens": fit_linear_robust(small["small_tokens"], small["small_call_s"]),
        "base_call_s~base_tokens": fit_linear_robust(base["base_tokens"].astype(float), base["base_call_s"]),
        "scoring_call_s~context_tokens_before": fit_linear_robust(scored["context_tokens_before"], scored["scoring_call_s"]),
    }


def summary_text(trace: SpecReasonTrace) -> str:
    s, r = trace.steps, trace.requests
    lines = [f"sources: {', '.join(str(p) for p in trace.sources)}",
             f"runs {len(r)}, steps {len(s)}, mean steps/run {len(s) / len(r):.1f}, threshold {trace.threshold:g}",
             f"small-kept fraction {(s['kept_by'] == 'small').mean():.4f} ({int((s['kept_by'] == 'small').sum())}/{len(s)})",
             f"mean small step {s['small_tokens'].mean():.2f} tokens, mean base step {s['base_tokens'].dropna().mean():.2f} tokens "
             f"({int(s['base_tokens'].notna().sum())} regenerations)",
             "score histogram: " + " ".join(f"{k}:{v}" for k, v in sorted(Counter(s['score']).items())),
             "", "per request:", r.to_string(index=False), "", "consistency issues:"]
    lines += [f"  {k}: {v}" for k, v in trace.issues.items()]
    scored = s[~s["scoring_skipped"]]
    small = s[s["small_tokens"] > 0]
    base = s[s["base_tokens"].fillna(0) > 0]
    lines += ["", "per-call times:",
              f"  small call s/token (median of ratio) {np.median(small['small_call_s'] / small['small_tokens']):.5f}",
              f"  base call s/token (median of ratio)  {np.median(base['base_call_s'] / base['base_tokens'].astype(float)):.5f}",
              f"  scoring call s: mean {scored['scoring_call_s'].mean():.4f} median {scored['scoring_call_s'].median():.4f} "
              f"p90 {scored['scoring_call_s'].quantile(0.9):.4f}",
              f"  answer-verification call s (fork only): median {s.loc[s['verify_call_s'] > STEP_TIME_TOLERANCE_S, 'verify_call_s'].median():.4f}",
              "", "robust fits y = a + b*x (soft_l1 least squares; Theil-Sen in brackets):"]
    for name, f in fit_call_times(s).items():
        lines.append(f"  {name}: a={f['a_s']:.4f} s, b={f['b_s_per_token'] * 1e3:.4f} ms/token "
                     f"[a={f['theil_sen_a_s']:.4f}, b={f['theil_sen_b_s_per_token'] * 1e3:.4f}] n={f['n']}")
    return "\n".join(lines)

