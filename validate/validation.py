"""One validation: measured inputs + a cost profile + a hold-out rule -> predictions and figures.

Phases: load the measured set; build the folds (``validate.holdout``); per fold, replay the
test runs' calls (``validate.replay``) and, when a workload profile for the fold exists,
predict them from distributions (``validate.distribution``); then summarise
(``validate.metrics``). Plotting and files are ``validate.report``'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.cost.cost_profile import load_profile
from simulator.cost.setup import Setup
from calibrate.fit.measured import MeasuredSet, load_measured, run_key
from simulator.errors import InputError
from validate.distribution import predict_config, predict_distribution
from validate.holdout import Fold, check_out_of_sample, fold_test_set, make_folds
from validate.metrics import summarize_frame
from validate.replay import PRIOR_PROFILES, interval_notes, prior_for_runs, replay, setup_for_runs


@dataclass
class ValidationResult:
    inputs: list[str]
    profile_path: str
    rule: str
    setup: Setup
    folds: list[Fold]
    replay: pd.DataFrame                 # per test request
    calls: pd.DataFrame                  # per test call (replay)
    distribution: pd.DataFrame | None    # per test request (distribution mode)
    figures: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    workload_source: str = ""
    drift_kinds: pd.DataFrame | None = None   # per held-out run and call kind: speed factor, fit range, outside
    drift_runs: pd.DataFrame | None = None    # per held-out run: flagged, scope, hardware that would explain it
    drift_policy: str = "flag"
    drift_excluded: list[str] = field(default_factory=list)
    interval_statement: str = ""

    @property
    def flagged_runs(self) -> list[str]:
        d = self.drift_runs
        return [] if d is None or d.empty else list(d.loc[d["drift_flag"].astype(bool), "run_key"])


def _fold_workload(ms: MeasuredSet, fold: Fold, workload_path: str | None):
    """The fold's workload profile: ``--workload`` as given, else refitted on the fold's fit runs."""
    from simulator.inputs.workload import load_workload

    if workload_path:
        return load_workload(workload_path), f"--workload {workload_path} (as given; the user vouches it is out of sample)"
    train = [k for k in fold.fit_runs if k in set(ms.run_keys)]
    if not train:
        return None, f"fit runs of fold {fold.name} are not among the inputs: cannot refit the workload out of sample"
    leak = sorted(set(train) & set(fold.test_runs)) if fold.unit == "runs" else []
    if leak:  # never refit on held-out runs (check_out_of_sample refuses this first; belt and braces)
        raise InputError(None, "--holdout", f"fold {fold.name}: held-out run(s) {', '.join(leak)} would be used to "
                                            "refit the workload; in-sample error is not validation")
    if ms.kind == "run_dir":
        from calibrate.fit.fit_workload_runs import fit_workload_from_runs

        src = ms.requests.drop_duplicates("run_key").set_index("run_key")["source"]
        flt = None
        if fold.unit == "requests":  # only the fold's fit requests: {run dir: runner request ids}
            flt = {}
            for run, req in fold.fit_requests or []:  # request ids are "<run dir name>/<runner request_id>"
                flt.setdefault(src[run], set()).add(str(req).rsplit("/", 1)[-1])
        w = fit_workload_from_runs([src[k] for k in train], date=(fold.profile.fit or {}).get("date"),
                                   requests=flt).profile
        return w, ("workload refitted per fold on its fit requests (calibrate.fit.fit_workload_runs, empirical, "
                   "request filter)" if flt is not None else
                   "workload refitted per fold on its fit runs (calibrate.fit.fit_workload_runs, empirical)")
    if ms.trace is None:
        return None, ("the SpecReason trace files ran different thresholds: one workload cannot be refitted over "
                      "them; give --workload (a workload profile fitted on other runs) or validate each threshold apart")
    from calibrate.fit.fit_workload import fit_workload_from_steps

    # SpecReason traces: one request per run, so a fold's fit requests are exactly its fit runs
    req = ms.trace.requests[ms.trace.requests["run_id"].map(run_key).isin(train)]
    steps = ms.steps[ms.steps["run_id"].map(run_key).isin(train)]
    w = fit_workload_from_steps(steps, req, source=", ".join(ms.inputs), date=(fold.profile.fit or {}).get("date"))
    return w, "workload refitted per fold on its fit runs (calibrate.fit.fit_workload, finish rule first_answer)"


def _attach_vanilla(d: pd.DataFrame, ms: MeasuredSet, w, profile, setup, des_requests: int, seed: int) -> None:
    """Speedup over vanilla: the measured vanilla-base mean (any input run of the same problems, fit
    or test: it is the measured denominator) and the model's vanilla-base prediction from the fold's
    profiles (the predicted denominator, never a measurement)."""
    van = ms.requests[(ms.requests["system"] == "vanilla-base") & ~ms.requests["to_answer_censored"].astype(bool)]
    if van.empty:
        d["measured_vanilla_s"], d["pred_vanilla_s"] = np.nan, np.nan
        return
    from simulator.inputs.systems import SystemConfig

    from validate.distribution import execution_of

    d["measured_vanilla_s"] = float(van["to_answer_s"].mean())
    d["pred_vanilla_s"] = predict_config(SystemConfig(system="vanilla-base"), w, profile, setup, des_requests,
                                         seed, execution=execution_of(ms, van.iloc[0]))["predicted_s"]


def _fold_drift(fold: Fold, calls: pd.DataFrame, setup: Setup) -> tuple[pd.DataFrame, pd.DataFrame]:
    from validate.drift import fit_ranges, flag_runs, speed_factors, summarize_runs

    kinds = flag_runs(speed_factors(calls), fit_ranges(fold.profile))
    kinds["fold"] = fold.name
    runs = summarize_runs(kinds, setup, fold.profile)
    runs["fold"] = fold.name
    if fold.unit == "requests":
        # requests held out of runs that are themselves fit runs: same machine, period and load by construction,
        # so no between-batch drift to detect (their speed factors stay in the table, unflagged)
        same = runs["run_key"].astype(str).isin([str(r) for r in fold.fit_runs])
        runs.loc[same, "drift_flag"] = False
        runs.loc[same, "drift_scope"] = "none (request hold-out within a fit run)"
    return kinds, runs


def _fold_e2e(ms: MeasuredSet, fold: Fold):
    """The predictive of a new run's end-to-end / modelled-calls ratio from the fold's fit requests among the inputs
    (``replay.e2e_predictive``); (predictive or None, note)."""
    from validate.replay import e2e_predictive

    if fold.fit_requests:
        keys = set(map(tuple, fold.fit_requests))
        r = ms.requests[[(str(a), str(b)) in keys for a, b in zip(ms.requests["run_key"], ms.requests["request_id"])]]
    else:
        r = ms.requests.iloc[0:0]
    p = e2e_predictive(r) if len(r) else None
    if p is None:
        return None, (f"end-to-end, fold {fold.name}: the fit runs are not among the inputs, so the time outside the "
                      "modelled calls cannot be estimated: end-to-end predicted as the calls alone (biased low)")
    return p, (f"end-to-end, fold {fold.name}: calls x {np.exp(p.loc):.3f} (time outside the modelled calls, "
               f"{p.n} fit run(s), {p.method})")


def _fit_batches(ms: MeasuredSet, folds: list[Fold]) -> set[str]:
    from validate.drift import batch_of

    known = set(ms.run_keys)
    out: set[str] = set()
    for fold in folds:
        for k in fold.fit_runs:
            out.add(batch_of(ms, k) if k in known else
                    " + ".join(map(str, (fold.profile.fit or {}).get("inputs", []))) or "the profile's fit inputs")
    return out


def _fold_batch(between: tuple[str, dict] | None, fold: Fold, setup: Setup, notes: list[str]):
    """The between-batch spread of the aggregates ``between`` ((path, content)) against the fold's profile (None
    without); its figures go to ``notes``."""
    if not between:
        return None
    from validate.batch import from_aggregates

    b = from_aggregates(between[1], fold.profile, setup, source=between[0])
    t = b.table()
    notes.append(f"intervals, fold {fold.name}: for a run of a new batch: between-batch spread from {b.source}, "
                 "log sd per kind " + ", ".join(f"{r.kind} {r.sd_log:.3f}" for r in t.itertuples())
                 + " (validate.batch)")
    kinds = sorted(set((fold.profile.fit or {}).get("per_op", {})) - {"all"})
    notes.extend(f"intervals, fold {fold.name}: {n}" for n in b.predictives(kinds)[1])
    return b


def _drop_runs(df: pd.DataFrame | None, runs: list[str], col: str) -> pd.DataFrame | None:
    if df is None:
        return None
    return df[~df[col].astype(str).isin(runs)].reset_index(drop=True)


class NothingToValidate(Exception):
    """No held-out request with a measured time: a failure (exit 1), never a pass with n = 0 and NaN figures."""


def _drop_unusable(rep_df: pd.DataFrame, dist_df: pd.DataFrame | None, call_df: pd.DataFrame):
    """Held-out requests without a timed call or a positive recorded time cannot be judged: left out of every
    figure and named; none left -> :class:`NothingToValidate`."""
    ok = (rep_df["measured_s"].astype(float) > 0) & (rep_df["measured_e2e_s"].astype(float) > 0)
    bad = rep_df.loc[~ok, "request_id"].astype(str).tolist()
    if not bad:
        return rep_df, dist_df, []
    if not ok.any():
        runs = ", ".join(dict.fromkeys(rep_df["run_key"].astype(str)))
        raise NothingToValidate(f"nothing to validate: none of the {len(rep_df)} held-out request(s) has a measured "
                                f"time (zero or missing call timings in run(s) {runs or 'none'})")
    keep = set(rep_df.loc[ok, "request_id"].astype(str))
    dist_df = None if dist_df is None else dist_df[dist_df["request_id"].astype(str).isin(keep)].reset_index(drop=True)
    note = (f"{len(bad)} held-out request(s) without a measured time left out of every figure: "
            + ", ".join(bad[:8]) + (" ..." if len(bad) > 8 else ""))
    return rep_df[ok].reset_index(drop=True), dist_df, [note]


def check_plausible(profile, where: str | None, field_prefix: str, allow: bool) -> list[str]:
    """A profile with a parameter outside its physical range (``simulator.cost.cost_profile.implausible``: an efficiency
    above 1, or ``kind: rejected``) is refused (InputError, exit 2) unless ``allow``; then its notes."""
    from simulator.cost.cost_profile import implausible

    bad = implausible(profile)
    if not bad:
        return []
    if not allow:
        n, why = next(iter(bad.items()))
        more = f" (and {', '.join(list(bad)[1:])})" if len(bad) > 1 else ""
        raise InputError(where, f"{field_prefix}{n}", f"a value within its physical range (got {why}){more}: the "
                                                      "profile is not a calibration of this hardware; "
                                                      "--allow-implausible validates it anyway")
    return [f"physically implausible parameter(s) used because of --allow-implausible ({field_prefix or 'profile'}): "
            + "; ".join(f"{n} {w}" for n, w in bad.items())]


def _profile_and_setup(profile_path: str, ms: MeasuredSet, allow_implausible: bool):
    """The profile the folds start from (a catalog prior named, or a profile file checked for plausibility), the
    setup of the runs, and the notes so far."""
    if profile_path in PRIOR_PROFILES:
        return prior_for_runs(profile_path, ms.hint)
    profile = load_profile(profile_path)
    setup, notes = setup_for_runs(profile, ms.hint)
    notes += check_plausible(profile, str(profile_path), "", allow_implausible)
    return profile, setup, notes


def _refit_warnings(folds: list[Fold], profile) -> list[str]:
    """Folds refitted here (loro, requests:...): never silent, but not refused (no user's profile)."""
    from simulator.cost.cost_profile import implausible

    out = []
    for fold in folds:
        if fold.profile is not profile:
            bad = implausible(fold.profile)
            if bad:
                out.append(f"WARNING: fold {fold.name}: the refitted profile has parameter(s) outside their physical "
                           "range, kind rejected: " + "; ".join(f"{n} {w}" for n, w in bad.items())
                           + " (its predictions are reported as they are)")
    return out


@dataclass(frozen=True)
class _Options:
    """How each fold is predicted (``run_validation``'s arguments of the same names)."""
    distribution: bool
    workload_path: str | None
    des_requests: int
    n_boot: int
    seed: int
    level: float


def _predict_fold(ms: MeasuredSet, fold: Fold, setup: Setup, between, o: _Options, notes: list[str]):
    """One fold's held-out requests replayed (and, with ``o.distribution``, predicted from the workload): (replay
    rows, call rows, drift kinds, drift runs, distribution rows or None, the workload's source or None when not
    run); notes go to ``notes``."""
    check_out_of_sample(fold)  # never report in-sample error as validation
    test = fold_test_set(ms, fold)
    e2e, e2e_note = _fold_e2e(ms, fold)
    notes.append(e2e_note)
    batch = _fold_batch(between, fold, setup, notes)
    r, c = replay(test, fold.profile, setup, n_boot=o.n_boot, seed=o.seed, level=o.level, e2e=e2e, batch=batch)
    r["fold"], c["fold"] = fold.name, fold.name
    kinds, runs = _fold_drift(fold, c, setup)
    notes += [f"intervals, fold {fold.name}: {n}" for n in interval_notes(fold.profile, c["op"].unique())]
    if not o.distribution:
        return r, c, kinds, runs, None, None
    w, wsrc = _fold_workload(ms, fold, o.workload_path)
    if w is None:
        notes.append(f"distribution mode skipped: {wsrc}")
        return r, c, kinds, runs, None, wsrc
    d = predict_distribution(test, w, fold.profile, setup, n_requests=o.des_requests, seed=o.seed, level=o.level,
                             batch=batch)
    d["fold"] = fold.name
    unmod = sorted({x for v in d["unmodelled_ops"].astype(str) for x in v.split(",") if x})
    if unmod:
        notes.append(f"distribution intervals, fold {fold.name}: no cost-model residuals for "
                     f"{', '.join(unmod)}: those simulated calls keep their DES times")
    _attach_vanilla(d, ms, w, fold.profile, setup, o.des_requests, o.seed)
    return r, c, kinds, runs, d, wsrc


def _apply_drift(rep_df, dist_df, call_df, flagged: list[str], drift: str):
    """Marks the flagged runs' rows; with ``drift == "exclude"`` leaves them out: (replay, distribution, calls,
    excluded runs)."""
    for df in (rep_df, dist_df):
        if df is not None:
            df["drift_flag"] = df["run_key"].astype(str).isin(flagged)
    excluded: list[str] = []
    if drift == "exclude" and flagged:
        excluded = flagged
        rep_df, dist_df = _drop_runs(rep_df, excluded, "run_key"), _drop_runs(dist_df, excluded, "run_key")
        call_df = _drop_runs(call_df, excluded, "run_id")
        if rep_df.empty:
            raise InputError(None, "--drift", f"exclude: every held-out run ({', '.join(excluded)}) is outside the fit "
                                              "runs' speed range; nothing left to judge")
    return rep_df, dist_df, call_df, excluded


def run_validation(inputs: list[str], profile_path: str, rule: str | None = None, workload_path: str | None = None,
                   distribution: bool = True, des_requests: int = 1000, n_boot: int = 1000, seed: int = 0,
                   drift: str = "flag", allow_implausible: bool = False, level: float = 0.90,
                   between_batch: str | None = None) -> ValidationResult:
    """``drift``: ``flag`` keeps runs outside the fit runs' speed range in the figures (marked);
    ``exclude`` leaves them out of every figure (listed in the report); see ``validate.drift``.
    ``between_batch``: per-problem aggregates whose problems are batches of the same setup: the intervals are for a
    run of a new batch (``validate.batch``); None: for a run of the fit runs' batch."""
    from validate.drift import POLICIES, interval_statement

    if drift not in POLICIES:
        raise InputError(None, "--drift", f"expected {' or '.join(POLICIES)} (got {drift!r})")
    ms = load_measured(inputs)
    if between_batch:  # a bad file fails before any refit
        from validate.batch import read_aggregates

        between = (between_batch, read_aggregates(between_batch))
    else:
        between = None
    profile, setup, notes = _profile_and_setup(profile_path, ms, allow_implausible)
    folds = make_folds(ms, profile, setup, rule)
    notes += _refit_warnings(folds, profile)
    o = _Options(distribution, workload_path, des_requests, n_boot, seed, level)
    reps, calls, dists, wsrc, dk, dr = [], [], [], "", [], []
    for fold in folds:
        r, c, kinds, runs, d, src = _predict_fold(ms, fold, setup, between, o, notes)
        dk.append(kinds)
        dr.append(runs)
        reps.append(r)
        calls.append(c)
        wsrc = wsrc if src is None else src
        if d is not None:
            dists.append(d)
    drift_runs = pd.concat(dr, ignore_index=True)
    flagged = list(drift_runs.loc[drift_runs["drift_flag"].astype(bool), "run_key"])
    rep_df, call_df = pd.concat(reps, ignore_index=True), pd.concat(calls, ignore_index=True)
    dist_df = pd.concat(dists, ignore_index=True) if dists else None
    rep_df, dist_df, call_df, excluded = _apply_drift(rep_df, dist_df, call_df, flagged, drift)
    rep_df, dist_df, unusable = _drop_unusable(rep_df, dist_df, call_df)
    notes += unusable
    if distribution and dist_df is not None:
        _check_judgeable(dist_df)
        cens = dist_df.loc[dist_df["to_answer_censored"].astype(bool), "request_id"].astype(str).tolist()
        if cens:  # named wherever they are left out
            notes.append(f"distribution mode: {len(cens)} censored held-out request(s) left out of its figures (no "
                         f"answer inside the recording: token budget or context limit): {', '.join(cens)}")
    res = ValidationResult(inputs=ms.inputs, profile_path=str(profile_path), rule=rule or "profile", setup=setup,
                           folds=folds, replay=rep_df, calls=call_df, distribution=dist_df, notes=sorted(set(notes)),
                           workload_source=wsrc, drift_kinds=pd.concat(dk, ignore_index=True), drift_runs=drift_runs,
                           drift_policy=drift, drift_excluded=excluded,
                           interval_statement=interval_statement(_fit_batches(ms, folds), between_batch))
    res.figures = figures(res)
    return res


def _check_judgeable(d: pd.DataFrame) -> None:
    """Distribution mode compares time to the first answer; a held-out set where every request is
    censored (no answer inside the recording: the token budget or the context guard ended it) has
    nothing to compare -- an InputError (exit 2), not a crash and not a pass."""
    cens = d["to_answer_censored"].astype(bool)
    if cens.all():
        runs = ", ".join(dict.fromkeys(d["run_key"].astype(str)))
        raise InputError(None, "--holdout", f"distribution mode: no uncensored held-out run to judge (held-out "
                                            f"run(s) {runs} never reached an answer inside the recording: token "
                                            "budget or context limit); hold out other runs or give --no-distribution")


def figures(res: ValidationResult) -> dict[str, pd.DataFrame]:
    """Every table the report prints (and the bar checks)."""
    out: dict[str, pd.DataFrame] = {}
    r = res.replay
    by = ["config"] if r["config"].nunique() > 1 else None
    out["replay_calls"] = summarize_frame(r, "predicted_s", "measured_s", "pi_low_s", "pi_high_s", by=by)
    out["replay_e2e"] = summarize_frame(r, "predicted_e2e_s", "measured_e2e_s", "pi_e2e_low_s", "pi_e2e_high_s", by=by)
    out["replay_per_op"] = summarize_frame(res.calls, "predicted_s", "wall_s", by=["op"])
    out["replay_per_run"] = summarize_frame(r, "predicted_e2e_s", "measured_e2e_s", "pi_e2e_low_s", "pi_e2e_high_s",
                                            by=["run_key"])
    if "drift_flag" in r.columns:  # coverage for runs like the fit runs and for flagged (other-batch) runs, apart
        out["replay_by_drift"] = summarize_frame(r, "predicted_e2e_s", "measured_e2e_s", "pi_e2e_low_s", "pi_e2e_high_s",
                                                 by=["drift_flag"])
    d = res.distribution
    if d is not None:
        ok = d[~d["to_answer_censored"].astype(bool)]
        out["distribution"] = summarize_frame(ok, "predicted_s", "to_answer_s", "pi_low_s", "pi_high_s", by=by)
        if "drift_flag" in ok.columns:
            out["distribution_by_drift"] = summarize_frame(ok, "predicted_s", "to_answer_s", "pi_low_s", "pi_high_s",
                                                           by=["drift_flag"])
        means = ok.groupby("config").agg(measured_mean_s=("to_answer_s", "mean"), predicted_s=("predicted_s", "mean"),
                                         des_mean_s=("des_mean_s", "mean"), n=("to_answer_s", "size"),
                                         measured_small_frac=("small_step_fraction", "mean"),
                                         predicted_small_frac=("pred_small_step_fraction", "mean"),
                                         measured_acc_len=("acceptance_length", "mean"),
                                         predicted_acc_len=("pred_acceptance_length", "first"),
                                         measured_vanilla_s=("measured_vanilla_s", "first"),
                                         pred_vanilla_s=("pred_vanilla_s", "first")).reset_index()
        means["measured_speedup"] = means.pop("measured_vanilla_s") / means["measured_mean_s"]
        means["predicted_speedup"] = means.pop("pred_vanilla_s") / means["predicted_s"]
        out["distribution_means"] = means
    out["coverage_levels"] = coverage_levels(res)
    out["configs"] = _config_table(res)
    return out


def coverage_levels(res: ValidationResult) -> pd.DataFrame:
    """Nominal vs measured coverage of the central 50/80/90/95% intervals (``replay.COVERAGE_LEVELS``): per scope
    (replay end-to-end, replay calls, distribution mode), the share of held-out requests inside, and n."""
    from validate.metrics import coverage
    from validate.replay import COVERAGE_LEVELS, level_columns

    scopes = [("replay e2e", res.replay, "measured_e2e_s", "e2e_"), ("replay calls", res.replay, "measured_s", "")]
    if "drift_flag" in res.replay.columns and res.replay["drift_flag"].astype(bool).any():
        like = res.replay[~res.replay["drift_flag"].astype(bool)]  # runs like the fit runs: the intervals' claim
        scopes += [("replay e2e, unflagged", like, "measured_e2e_s", "e2e_"),
                   ("replay calls, unflagged", like, "measured_s", "")]
    if res.distribution is not None:
        scopes.append(("distribution", res.distribution[~res.distribution["to_answer_censored"].astype(bool)],
                       "to_answer_s", ""))
    rows = []
    for name, d, meas, pre in scopes:
        for lv in COVERAGE_LEVELS:
            lo, hi = level_columns(lv, pre)
            if lo not in d.columns:
                continue
            ok = d[lo].notna() & d[hi].notna() & (d[meas].astype(float) > 0)
            rows.append({"scope": name, "nominal": lv, "coverage": coverage(d.loc[ok, meas], d.loc[ok, lo], d.loc[ok, hi]),
                         "n": int(ok.sum()), "inside": int(((d.loc[ok, meas] >= d.loc[ok, lo])
                                                            & (d.loc[ok, meas] <= d.loc[ok, hi])).sum())})
    return pd.DataFrame(rows, columns=["scope", "nominal", "coverage", "n", "inside"])


def _config_table(res: ValidationResult) -> pd.DataFrame:
    """Per configuration: mean measured vs replayed latency, and speedup over vanilla-base when it was run."""
    r = res.replay
    g = r.groupby("config").agg(system=("system", "first"), threshold=("threshold", "first"), gamma=("gamma", "first"),
                                requests=("request_id", "size"), measured_s=("measured_e2e_s", "mean"),
                                predicted_s=("predicted_e2e_s", "mean"), pi_low_s=("pi_e2e_low_s", "mean"),
                                pi_high_s=("pi_e2e_high_s", "mean"),
                                measured_small_frac=("small_step_fraction", "mean")).reset_index()
    van = g[g["system"] == "vanilla-base"]
    if len(van):
        g["measured_speedup"] = float(van["measured_s"].iloc[0]) / g["measured_s"]
        g["predicted_speedup"] = float(van["predicted_s"].iloc[0]) / g["predicted_s"]
    else:
        g["measured_speedup"] = np.nan
        g["predicted_speedup"] = np.nan
    return g


def headline(res: ValidationResult, target: str) -> float:
    """The median APE the bar is checked against: replay end-to-end (``e2e``), replay of the
    modelled calls (``calls``) or distribution mode (``distribution``)."""
    key = {"e2e": "replay_e2e", "calls": "replay_calls", "distribution": "distribution"}[target]
    if key not in res.figures:
        raise InputError(None, "--bar-target", f"no {target} figures (distribution mode did not run)")
    return float(res.figures[key].iloc[0]["median_ape"])


def load_inputs_exist(paths: list[Path]) -> None:
    for p in paths:
        if not Path(p).exists():
            raise InputError(str(p), None, "not found")
