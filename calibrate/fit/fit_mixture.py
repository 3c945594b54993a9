"""A workload as a mixture over problems, fitted from per-step runs *and* per-problem aggregates.

Inputs (the shared data's ``specreason-aime-traces/``, :data:`DATA_DIR`): the per-step runs of one problem (AIME #60,
runs 0-7) and the per-problem aggregates of ten problems (60, 62-70: means over each problem's
runs of steps, kept / rejected steps, tokens by producer, times by call kind; no per-step
records). The form is a shared shape with per-problem parameters:

=============================  ===========================================  ==================================
what                           shape (shared, from the per-step runs)       level (per problem, from aggregates)
=============================  ===========================================  ==================================
step tokens, small proposals   empirical lengths of problem 60's proposals  scaled to the problem's mean tokens
                                                                           per proposal ((acc.+rej.) / steps)
step tokens, base regenerated  empirical lengths of problem 60's            scaled to base tokens / rejected
                               regenerations                                steps (shared scale if none)
score pmf (0-9)                problem 60's pmf, exponentially tilted       tilt s.t. P(score >= 7) = the
                               p_k(θ) ∝ p_k e^{θk}                          problem's kept share
steps to the answer N          lognormal, σ from problem 60's runs          median s.t. the chain's expected
                               (censored MLE)                               steps at t=7 = the mean steps
=============================  ===========================================  ==================================

Shared across problems by assumption (not identifiable from means): the prompt and judge lengths
(problem 60's estimate), the token acceptance a_i and verbosity (priors), the budget. Times are
*not* part of the workload: the aggregates' times per token say how fast the machine was (see
:func:`machine_speed`), not what the request is.

Commands::

    specsim import aggregates SHARED_DATA/specreason-aime-traces/per-problem-aggregates.json
    specsim fit mixture --out simulator/profiles/workload_aime_qwq32b_r1-1.5b.yaml
    specsim validate mixture --out out/mixture-validation     # leave one problem out
"""

from __future__ import annotations

from simulator.paths import shared

import datetime as _dt
import json
import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from scipy import optimize, stats

from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.inputs.workload import WorkloadProfile

DATA_DIR = shared("specreason-aime-traces")
AGGREGATES = DATA_DIR / "per-problem-aggregates.json"
MIXTURE_PROFILE = "simulator/profiles/workload_aime_qwq32b_r1-1.5b.yaml"
REGENERATE = f".venv/bin/specsim fit mixture --out {MIXTURE_PROFILE}"
THRESHOLD = 7  # the recorded runs' threshold (aggregates' config.score_threshold)
N_MAX_STEPS = 3000
UPSTREAM = "RuthvikAtte/specreason, results/experiment_summary.json (per-problem means) and results/60 runs 0-7 (per step)"


# ---- the aggregates format -----------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Averages(_Strict):
    total_steps: float = Field(gt=0)
    accepted_steps: float = Field(ge=0)
    rejected_steps: float = Field(ge=0)
    acceptance_rate: float = Field(ge=0, le=1)
    small_tokens_accepted: float = Field(ge=0)
    small_tokens_rejected: float = Field(ge=0)
    base_tokens: float = Field(ge=0)
    total_tokens: float = Field(gt=0)
    small_model_time_s: float = Field(ge=0)
    base_model_time_s: float = Field(ge=0)
    eval_time_s: float = Field(ge=0)
    total_time_s: float = Field(gt=0)
    forced_base_steps: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _consistent(self):
        if abs(self.accepted_steps + self.rejected_steps + self.forced_base_steps - self.total_steps) > 0.01 * self.total_steps + 0.5:
            raise ValueError("accepted_steps + rejected_steps must equal total_steps")
        kept = self.base_tokens + self.small_tokens_accepted
        if abs(kept - self.total_tokens) > 0.01 * self.total_tokens + 1:
            raise ValueError(f"total_tokens {self.total_tokens:g} must equal base_tokens + small_tokens_accepted "
                             f"({kept:g}): the tokens the runs kept")
        for tokens, time, name in ((self.base_tokens, self.base_model_time_s, "base"),
                                   (self.small_tokens_accepted + self.small_tokens_rejected, self.small_model_time_s,
                                    "small")):
            if tokens > 0 and time <= 0:
                raise ValueError(f"{name}_model_time_s must be > 0 when the {name} model wrote {tokens:g} tokens")
        parts = self.base_model_time_s + self.small_model_time_s + self.eval_time_s
        if parts > self.total_time_s * 1.01 + 0.01:
            raise ValueError(f"total_time_s {self.total_time_s:g} is shorter than its parts (base + small + eval "
                             f"{parts:g} s)")
        return self


class ProblemAggregate(_Strict):
    completed_runs: int = Field(ge=1)
    accuracy: float | None = Field(default=None, ge=0, le=1)
    correct_count: int | None = Field(default=None, ge=0)
    averages: Averages

    @model_validator(mode="after")
    def _counts(self):
        if self.correct_count is not None and self.correct_count > self.completed_runs:
            raise ValueError(f"correct_count {self.correct_count} exceeds completed_runs {self.completed_runs}")
        return self


def load_aggregates(path: str | Path = AGGREGATES) -> dict[str, ProblemAggregate]:
    """Per-problem aggregates, validated: a bad field is one ``InputError`` naming file and field."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(path), None, "not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(str(path), None, f"not valid JSON ({e})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("per_problem"), dict) or not raw["per_problem"]:
        raise InputError(str(path), "per_problem", "expected a non-empty mapping of problem id -> aggregates")
    out = {}
    for pid, rec in raw["per_problem"].items():
        try:
            out[str(pid)] = ProblemAggregate.model_validate(rec)
        except ValidationError as e:
            err = pydantic_error_to_input_error(str(path), e)
            raise InputError(str(path), f"per_problem.{pid}.{err.field}" if err.field else f"per_problem.{pid}",
                             err.message) from None
    thr = (raw.get("config") or {}).get("score_threshold", THRESHOLD)
    if float(thr) != THRESHOLD:
        raise InputError(str(path), "config.score_threshold", f"the fit assumes threshold {THRESHOLD}, got {thr}")
    return out


def machine_speed(aggs: dict[str, ProblemAggregate]) -> list[dict]:
    """What the aggregates' times say about the machine: seconds per generated token by model and
    seconds per scoring call, per problem (workload-free quantities)."""
    rows = []
    for pid, a in aggs.items():
        v = a.averages
        small_tok = v.small_tokens_accepted + v.small_tokens_rejected
        rows.append({"problem": pid, "base_s_per_token": v.base_model_time_s / v.base_tokens if v.base_tokens else math.nan,
                     "small_s_per_token": v.small_model_time_s / small_tok if small_tok else math.nan,
                     "scoring_s_per_call": v.eval_time_s / v.total_steps})
    return rows


# ---- the fit ---------------------------------------------------------------------------------------
def tilt(p: np.ndarray, theta: float) -> np.ndarray:
    w = np.asarray(p, float) * np.exp(theta * (np.arange(10) - 4.5))
    return w / w.sum()


def tilt_for_acceptance(p: np.ndarray, target: float, threshold: int = THRESHOLD) -> float:
    """θ with P_θ(score >= threshold) = target (monotone in θ); clipped to [-12, 12]."""
    f = lambda th: tilt(p, th)[threshold:].sum() - target  # noqa: E731
    if f(-12) >= 0:
        return -12.0
    if f(12) <= 0:
        return 12.0
    return float(optimize.brentq(f, -12, 12, xtol=1e-10))


def scaled_lengths(values, weights, mean: float, max_tokens: int) -> dict:
    """The empirical shape scaled so its mean (after rounding and clipping to [1, max]) is ``mean``."""
    v, w = np.asarray(values, float), np.asarray(weights, float)
    w = w / w.sum()
    scale = mean / float(np.dot(v, w))
    for _ in range(20):
        s = np.clip(np.rint(v * scale), 1, max_tokens)
        got = float(np.dot(s, w))
        if abs(got - mean) < 1e-3 * mean:
            break
        scale *= mean / got
    s = np.clip(np.rint(v * scale), 1, max_tokens).astype(int)
    uniq, inv = np.unique(s, return_inverse=True)
    agg = np.bincount(inv, weights=w)
    return {"kind": "empirical", "values": uniq.tolist(), "weights": [float(f"{x:.8g}") for x in agg]}


def lognormal_sigma_from_runs(observed, event) -> float:
    """Censored lognormal MLE of σ for the steps to the answer (problem 60's runs)."""
    t, e = np.asarray(observed, float), np.asarray(event, bool)

    def nll(x):
        mu, sig = x[0], math.exp(x[1])
        ll = stats.norm.logpdf(np.log(t[e]), mu, sig).sum() - np.log(t[e]).sum()
        ll += stats.norm.logsf(np.log(t[~e]), mu, sig).sum()
        return -ll

    res = optimize.minimize(nll, [math.log(np.median(t)), math.log(0.5)], method="Nelder-Mead")
    return float(math.exp(res.x[1]))


def _steps_dist(median: float, sigma: float) -> dict:
    return {"kind": "lognormal", "median": float(f"{median:.6g}"), "sigma": float(f"{sigma:.6g}"), "min": 1, "max": N_MAX_STEPS}


def expected_steps(w: WorkloadProfile, threshold: int = THRESHOLD) -> float:
    from simulator.engines.chain import run_chain

    return run_chain(w, w.acceptance_probability(threshold), 0).steps


def fit_problem(shared: WorkloadProfile, sigma: float, name: str, agg: ProblemAggregate) -> dict:
    """One problem's fields (see the module docstring)."""
    v = agg.averages
    K = shared.max_step_tokens
    ps, pb = shared.step_tokens.small.compile(), shared.step_tokens.base.compile()
    small_mean = (v.small_tokens_accepted + v.small_tokens_rejected) / v.total_steps
    fields = {"small": scaled_lengths(ps.support, ps.probs, small_mean, K)}
    if v.rejected_steps >= 0.5:
        fields["base"] = scaled_lengths(pb.support, pb.probs, v.base_tokens / v.rejected_steps, K)
        base_how = "scaled to base tokens / rejected steps"
    else:
        fields["base"] = scaled_lengths(pb.support, pb.probs, small_mean * pb.mean / ps.mean, K)
        base_how = "scaled like the small steps (no rejected steps)"
    theta = tilt_for_acceptance(np.asarray(shared.scores), v.acceptance_rate)
    scores = [float(f"{x:.10g}") for x in tilt(np.asarray(shared.scores), theta)]
    scores[-1] = 1.0 - sum(scores[:-1])
    prob = {"name": name, "weight": 1.0, "step_tokens": fields, "scores": scores}

    def steps_at(log_median: float) -> float:
        d = dict(prob, steps_per_request={"base": _steps_dist(math.exp(log_median), sigma)})
        w = WorkloadProfile.model_validate({**shared.model_dump(exclude={"problems"}),
                                           **{k: d[k] for k in ("step_tokens", "scores", "steps_per_request")}})
        return expected_steps(w) - v.total_steps

    lo, hi = math.log(2.0), math.log(N_MAX_STEPS / 2)
    f_lo, f_hi = steps_at(lo), steps_at(hi)
    if f_lo >= 0:
        lm, how_n = lo, "at its lower bound (the data's mean is below the chain's minimum)"
    elif f_hi <= 0:
        lm, how_n = hi, "at its upper bound: the token budget caps the chain below the data's mean steps"
    else:
        lm, how_n = optimize.brentq(steps_at, lo, hi, xtol=1e-4), "solved so the chain's expected steps at t=7 match"
    prob["steps_per_request"] = {"base": _steps_dist(math.exp(lm), sigma)}
    prob["source"] = (f"aggregates of problem {name} ({agg.completed_runs} runs): step_tokens.small {ps.mean:.1f} -> "
                      f"{small_mean:.1f} tokens/proposal; step_tokens.base {base_how}; scores tilted θ={theta:+.3f} "
                      f"to P(score>=7)={v.acceptance_rate:.3f}; steps_per_request lognormal median {math.exp(lm):.1f} "
                      f"{how_n} ({v.total_steps:.1f})")
    return prob


def shared_profile(data_dir: str | Path = DATA_DIR) -> tuple[WorkloadProfile, float, str]:
    """Problem 60's per-step fit (shapes, priors) and the lognormal σ of its steps to the answer."""
    from calibrate.fit.fit_workload import fit_workload_from_trace
    from calibrate.fit.import_specreason import import_specreason

    trace = import_specreason(data_dir)
    w60 = fit_workload_from_trace(trace)
    req = trace.requests
    sigma = lognormal_sigma_from_runs(req["observed_steps"], ~req["censored"].astype(bool))
    return w60, sigma, w60.provenance.method


def fit_mixture(aggregates: dict[str, ProblemAggregate], shared: WorkloadProfile, sigma: float,
                problems: list[str] | None = None, date: str | None = None, source: str = "") -> WorkloadProfile:
    """The mixture over ``problems`` (default: all), each with weight 1 (a random problem of the set)."""
    from calibrate.fit.fit_workload import repo_relative

    names = problems or list(aggregates)
    if not names:
        raise InputError(None, "problems", "no problem to fit")
    for n in names:
        if n not in aggregates:
            raise InputError(None, "problems", f"unknown problem {n!r} (known: {', '.join(aggregates)})")
    probs = [fit_problem(shared, sigma, n, aggregates[n]) for n in names]
    shared_method = shared.provenance.method
    method = (
        f"mixture over {len(names)} problems ({', '.join(names)}), weight 1 each. SHARED SHAPES from problem 60's per-step "
        f"runs: step-length shapes, score pmf shape (tilted per problem), steps-to-answer lognormal sigma {sigma:.3f} "
        f"(censored MLE over its runs). PER PROBLEM from the aggregates: step-length scales, score tilt (P(score>=7) = "
        f"kept share), lognormal median (expected chain steps at t=7 = mean steps). SHARED PRIORS: prompt and judge "
        f"lengths, verbosity, token_acceptance (as in the single-problem fit: {shared_method.split('PRIORS', 1)[-1].strip()})"
    )
    data = shared.model_dump(mode="json", exclude={"problems"})
    data.update({
        "name": "aime_qwq32b_r1-1.5b",
        "dataset": f"AIME 2024 problems {', '.join(names)} (a random problem of the set)",
        "steps_per_request": {"base": _steps_dist(float(np.median([p['steps_per_request']['base']['median'] for p in probs])), sigma)},
        "problems": probs,
    })
    data["provenance"] = {**data["provenance"], "kind": "fitted", "method": method,
                          "source": source or f"{repo_relative(DATA_DIR)} ({UPSTREAM})",
                          "date": date or _dt.date.today().isoformat()}
    return WorkloadProfile.model_validate(data)


def mixture_to_yaml(profile: WorkloadProfile, command: str = REGENERATE) -> str:
    from calibrate.fit.fit_workload import profile_to_yaml

    return profile_to_yaml(profile, command, about=(
        "# Workload mixture over AIME 2024 problems (QwQ-32B + R1-Distill-Qwen-1.5B, threshold-7 SpecReason runs):\n"
        "# shapes from problem 60's per-step runs, per-problem levels from the per-problem aggregates;\n"
        "# what is shared / fitted / prior: provenance.method and each problem's source; docs/workload-fit.md.\n"))
