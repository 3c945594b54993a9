"""Fit a :class:`~simulator.inputs.workload.WorkloadProfile` from imported SpecReason step traces.

What is fitted from the data and what is a prior (details and figures: docs/workload-fit.md):

- ``step_tokens.small``: empirical distribution of every small-model proposal's length;
  ``step_tokens.base``: empirical distribution of the base model's regenerations. Both are the
  source's token counts clipped to [1, 512] (a 0-token step still costs a call).
- ``scores``: empirical pmf of the 0..9 scores plus a pseudo-count of ``SCORE_PSEUDO_COUNT``
  (0.5, Jeffreys) per score, so no threshold gets probability exactly 0 or 1 from a finite
  sample; the shift of any P(score >= tau) is at most 10·0.5/(n+5).
  Steps whose scoring call the source skipped (context guard, score forced to 0) are left out.
- ``steps_per_request.base``: the number of steps up to and including the first step whose
  kept text contains the reference code's answer markers (``boxed`` / ``Answer:``). Runs that
  never produced one (budget or context limit first) are right-censored. Estimator:
  Kaplan-Meier atoms at the observed answer steps; the mass KM leaves after the last event
  (held by runs censored beyond it) is spread as a geometric tail after each such run's
  censoring point, with the censored-geometric MLE hazard p = events / (sum of observed
  steps of all runs). The tail is truncated where 99.9 % of its mass is covered.
  ``verbosity`` 1.0 and no ``small`` entry: the data has only mixed SpecReason chains, no
  vanilla runs, so small-vs-base verbosity is a prior, and N describes the mixed chain.
- ``token_acceptance``: not observable here (no speculative decoding in the runs): a prior.
- ``prompt_tokens`` / ``judge_template_tokens``: not recorded by the source; estimated from
  the prompt texts with tokens ≈ chars/4 plus chat-template special tokens.
- ``answer_tokens`` 0: the answer (``\\boxed{}``) is written inside the thinking chain and the
  request ends at that step; no separate answer phase runs.

Command: :data:`REGENERATE` (the traces: the shared data's ``specreason-aime-traces``).
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import yaml

from calibrate.fit.import_specreason import DEFAULT_DATA_DIR, SpecReasonTrace, steps_upto_answer
from simulator.errors import InputError
from simulator.inputs.loading import write_atomic
from simulator.inputs.workload import WorkloadProfile
from simulator.paths import REPO

SCORE_PSEUDO_COUNT = 0.5
MAX_STEP_TOKENS = 512
TAIL_COVERAGE = 0.999
UPSTREAM_REPO = "RuthvikAtte/specreason (fork of ruipeterpan/specreason), results/60 runs 0-7"
_TRACES = Path(os.path.relpath(DEFAULT_DATA_DIR, REPO)).as_posix()  # as seen from the repository root
REGENERATE = f".venv/bin/specsim fit workload-traces {_TRACES} --out simulator/profiles/workload_aime60_qwq32b_r1-1.5b.yaml"

# Prior for a_i = P(first i drafted tokens accepted), R1-Distill-Qwen-1.5B drafting for QwQ-32B.
# No published figure for this pair was found. Conditional per-position rate starts at 0.70
# (same-tokenizer Qwen2.5 small->32B pairs are commonly quoted at 0.65-0.80; the R1 distill
# and QwQ were post-trained apart, so the low side) and falls by 0.02 per position.
ACCEPTANCE_PRIOR_FIRST = 0.70
ACCEPTANCE_PRIOR_DECAY = 0.02
ACCEPTANCE_PRIOR_POSITIONS = 8

# Prompt of the reference code (spec_reason.py, get_first_user_msg) and AIME 2024 problem 60
# (HuggingFaceH4/aime_2024 row 0), used only to estimate the prompt's token count.
_USER_TEMPLATE = (
    "\n        Solve the following math problem efficiently and clearly. Please reason step by step, \n"
    "        separate logical reasoning steps with two newline characters (\\n\\n), and put your final answer within \\boxed{}.\n"
    "        Problem: {problem}\n        "
)
_AIME_PROBLEM_60 = (
    "Every morning Aya goes for a $9$-kilometer-long walk and stops at a coffee shop afterwards. "
    "When she walks at a constant speed of $s$ kilometers per hour, the walk takes her 4 hours, including "
    "$t$ minutes spent in the coffee shop. When she walks $s+2$ kilometers per hour, the walk takes her 2 hours "
    "and 24 minutes, including $t$ minutes spent in the coffee shop. Suppose Aya walks at $s+\\frac{1}{2}$ "
    "kilometers per hour. Find the number of minutes the walk takes her, including the $t$ minutes spent in the coffee shop."
)
_JUDGE_TEXT = (
    "Evaluate the last reasoning step solely based on factual correctness and logical validity. Ignore style, "
    "phrasing, or overall usefulness—only judge whether the step is objectively correct and logically follows "
    "from prior steps. Assign a score from 0 to 9." + "<think>I think the quality score is: "
)
CHARS_PER_TOKEN = 4.0
# <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n<think>\n : ~10 tokens around a turn pair
CHAT_TEMPLATE_TOKENS = 10


def estimate_tokens(text: str) -> int:
    """tokens ≈ chars / 4 (a rule of thumb for English BPE; LaTeX runs higher, ±25 %)."""
    return int(round(len(text) / CHARS_PER_TOKEN))


# ---- pieces ------------------------------------------------------------------------------------
def _empirical(lengths) -> dict:
    v = np.clip(np.asarray(lengths, dtype=np.int64), 1, MAX_STEP_TOKENS)
    uniq, counts = np.unique(v, return_counts=True)
    return {"kind": "empirical", "values": uniq.tolist(), "weights": counts.astype(float).tolist()}


def score_pmf(scores, pseudo_count: float = SCORE_PSEUDO_COUNT) -> list[float]:
    """p_k = (n_k + c) / (n + 10c), k = 0..9, a score s counted in bin floor(s).

    Floor, not rounding: a step is kept when s >= threshold, so for an integer threshold τ the
    acceptance P(s >= τ) is exactly P(floor(s) >= τ) = sum_{k>=τ} p_k also for the logprob-weighted
    (real-valued) score; greedy digit scores are integers either way."""
    s = np.clip(np.floor(np.asarray(scores, dtype=float) + 1e-9), 0, 9).astype(int)
    counts = np.bincount(s, minlength=10)[:10].astype(float) + pseudo_count
    p = counts / counts.sum()
    return [round(float(x), 10) for x in p]


def acceptance_prior(n: int = ACCEPTANCE_PRIOR_POSITIONS) -> list[float]:
    """a_i = prod_{j<=i} c_j with c_j = first - decay·(j-1)."""
    cond = ACCEPTANCE_PRIOR_FIRST - ACCEPTANCE_PRIOR_DECAY * np.arange(n)
    return [round(float(x), 6) for x in np.cumprod(cond)]


def steps_km_with_geometric_tail(observed, event, coverage: float = TAIL_COVERAGE) -> tuple[dict, dict]:
    """Kaplan-Meier on step counts with right censoring, geometric tail for the leftover mass.

    KM: S(t) = prod_{t_i <= t} (1 - d_i / r_i). Atoms: S(t_i-) - S(t_i) at event times.
    Leftover S(t_last) is shared equally by the runs censored at or after t_last (Efron's
    redistribute-to-the-right leaves it with them); each spreads its share geometrically
    from c+1 on, hazard p = (events) / (sum of all observed step counts) -- the censored
    geometric MLE (log L = d log p + (sum n_i - d) log(1-p)).
    """
    t = np.asarray(observed, dtype=np.int64)
    e = np.asarray(event, dtype=bool)
    if not e.any():
        raise InputError(None, "steps_per_request", "every run is censored: no step count to fit")
    values, weights = [], []
    surv = 1.0
    for time in np.unique(t[e]):
        at_risk = int((t >= time).sum())
        d = int(((t == time) & e).sum())
        mass = surv * d / at_risk
        values.append(int(time))
        weights.append(mass)
        surv -= mass
    p = e.sum() / t.sum()
    last_event = int(t[e].max())
    tail_owners = t[(~e) & (t >= last_event)]
    if surv > 1e-12 and len(tail_owners):
        k_max = int(np.ceil(np.log(1 - coverage) / np.log(1 - p)))
        k = np.arange(k_max)
        shape = p * (1 - p) ** k
        shape /= shape.sum()
        for c in tail_owners:
            values.extend((int(c) + 1 + k).tolist())
            weights.extend((surv / len(tail_owners) * shape).tolist())
    pmf = pd.Series(weights).groupby(values).sum()
    pmf = pmf / pmf.sum()
    dist = {"kind": "empirical", "values": [int(v) for v in pmf.index],
            "weights": [float(f"{w:.10g}") for w in pmf.to_numpy()]}
    info = {"events": int(e.sum()), "censored": int((~e).sum()), "geometric_mle_mean_steps": float(1 / p),
            "km_leftover_mass": float(max(surv, 0.0)), "mean_steps": float(np.dot(pmf.index, pmf.to_numpy()))}
    return dist, info


# ---- fit ---------------------------------------------------------------------------------------
def _method_text(n_runs: int, n_steps: int, n_base: int, n_scored: int, finish_rule: str, steps_info: dict) -> str:
    """``provenance.method``: what was fitted from how much data, and which fields are priors."""
    return (
        f"fitted from {n_runs} runs / {n_steps} steps (finish rule {finish_rule}): step_tokens = empirical "
        f"source token counts clipped to [1, {MAX_STEP_TOKENS}] ({n_steps} small proposals, {n_base} base "
        f"regenerations); scores = empirical pmf of {n_scored} greedy scores + {SCORE_PSEUDO_COUNT} pseudo-count per "
        f"score; steps_per_request = Kaplan-Meier ({steps_info['events']} answered, {steps_info['censored']} censored) "
        f"with a geometric tail (censored MLE mean {steps_info['geometric_mle_mean_steps']:.1f} steps) for the "
        f"leftover mass {steps_info['km_leftover_mass']:.3f}. PRIORS (not in the data): verbosity 1.0 (no vanilla "
        f"runs); token_acceptance a_i = prod(c_j), c_j = {ACCEPTANCE_PRIOR_FIRST} - {ACCEPTANCE_PRIOR_DECAY}(j-1) "
        f"(no speculative decoding in the runs, no published figure for this pair found); prompt_tokens and "
        f"judge_template_tokens estimated as chars/{CHARS_PER_TOKEN:g} + {CHAT_TEMPLATE_TOKENS} template tokens "
        f"(not recorded); answer_tokens 0 (answer written inside the thinking chain)."
    )


def fit_workload_from_steps(
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    *,
    source: str,
    finish_rule: Literal["first_answer", "recorded"] = "first_answer",
    token_budget: int = 8192,
    date: str | None = None,
) -> WorkloadProfile:
    """Fit the profile from the importer's canonical step table and per-request summary.

    ``finish_rule="first_answer"``: ``steps`` should already be cut at each run's first answer
    step (see ``steps_upto_answer``) and N is ``requests.observed_steps`` with ``censored``;
    ``"recorded"``: N is each run's recorded step count, censored when it stopped on budget.
    """
    if finish_rule == "first_answer":
        observed, event = requests["observed_steps"], ~requests["censored"].astype(bool)
    else:
        observed, event = requests["steps"], requests["stop_reason"] != "budget"
    steps_dist, steps_info = steps_km_with_geometric_tail(observed, event)
    scored = steps[~steps["scoring_skipped"]]
    base_tokens = steps["base_tokens"].dropna()
    method = _method_text(len(requests), len(steps), len(base_tokens), len(scored), finish_rule, steps_info)
    prompt = _USER_TEMPLATE.replace("{problem}", _AIME_PROBLEM_60)
    name, dataset = _what_was_fitted(steps, requests)
    data = {
        "name": name,
        "dataset": dataset,
        "base_model": "Qwen/QwQ-32B",
        "small_model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "provenance": {
            "kind": "fitted",
            "source": f"{source} ({UPSTREAM_REPO})",
            "method": method,
            "date": date or _dt.date.today().isoformat(),
            "hardware": "not stated in the results; the upstream recipe is 2x RTX A6000-48GB TP=2, but the "
                        "measured per-token times are below that roofline (docs/workload-fit.md)",
            "engine": "vLLM 0.8.2",
            "models": ["Qwen/QwQ-32B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"],
        },
        "prompt_tokens": estimate_tokens(prompt) + CHAT_TEMPLATE_TOKENS,
        "answer_tokens": 0,
        "judge_template_tokens": estimate_tokens(_JUDGE_TEXT) + CHAT_TEMPLATE_TOKENS,
        "token_budget": token_budget,
        "max_step_tokens": MAX_STEP_TOKENS,
        "steps_per_request": {"base": steps_dist},
        "verbosity": 1.0,
        "step_tokens": {"small": _empirical(steps["small_tokens"]), "base": _empirical(base_tokens)},
        "scores": score_pmf(scored["score"]),
        "token_acceptance": acceptance_prior(),
    }
    return WorkloadProfile.model_validate(data)


def _what_was_fitted(steps: pd.DataFrame, requests: pd.DataFrame) -> tuple[str, str]:
    """(name, dataset) of a profile fitted on these runs: the AIME problems their steps name and how many runs."""
    ids = sorted({int(x) for x in steps["problem_id"].dropna()}) if "problem_id" in steps else []
    which = ", ".join(map(str, ids)) or "unknown"
    name = f"aime{'-'.join(map(str, ids)) or 'x'}_qwq32b_r1-1.5b"
    runs = f"{len(requests)} SpecReason run{'s' if len(requests) != 1 else ''}"
    if ids == [60]:
        return name, f"AIME 2024 problem 60 (HuggingFaceH4/aime_2024 row 0), {runs}"
    return name, (f"AIME 2024 problem{'s' if len(ids) > 1 else ''} {which}, {runs} (prompt_tokens estimated from "
                  "problem 60's text, the one known here)")


def fit_workload_from_trace(trace: SpecReasonTrace, finish_rule: Literal["first_answer", "recorded"] = "first_answer",
                            date: str | None = None) -> WorkloadProfile:
    steps = steps_upto_answer(trace) if finish_rule == "first_answer" else trace.steps
    source = ", ".join(repo_relative(p) for p in trace.sources)
    return fit_workload_from_steps(steps, trace.requests, source=source, finish_rule=finish_rule, date=date)


def repo_relative(path: Path) -> str:
    """Data paths as seen from the repository root, so the profile does not depend on the caller's cwd
    (symlinks are not resolved: a linked data folder keeps the path it is reached by)."""
    return Path(os.path.relpath(os.path.abspath(path), REPO)).as_posix()


def profile_to_yaml(profile: WorkloadProfile, command: str = REGENERATE, about: str | None = None) -> str:
    """YAML text with a header comment (``about``: what it is; how to regenerate; where the figures are)."""
    about = about or ("# Workload profile fitted from real SpecReason per-step traces (QwQ-32B + R1-Distill-Qwen-1.5B,\n"
                      f"# {profile.dataset}, threshold 7). Priors are named in provenance.method; see docs/workload-fit.md.\n")
    header = about + f"# Regenerate (do not edit by hand):\n#   {command}\n"
    body = yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False,
                          default_flow_style=None, width=120, allow_unicode=True)
    return header + body


def write_workload_yaml(profile: WorkloadProfile, out: str | Path, command: str = REGENERATE) -> Path:
    out = Path(out)
    return write_atomic(out, profile_to_yaml(profile, command))

