"""Between-batch spread: intervals for a run of a *new batch* (another machine, load or day), not only another run.

The replay interval (``validate.replay``) draws a new run's log offset per call kind from the Student-t predictive of
the fit runs' offsets. The fit runs come from one batch, so that spread is the *within-batch* run-to-run noise: a
held-out batch that runs 20-30% slower than every fit run falls outside it. Random-effects model, per call kind o:

    log(measured / predicted) of a run r in batch b = mu_o + beta_{b,o} + rho_{r,o} (+ call noise)

rho the run effect (the fit runs' offsets estimate it, as before), beta the batch effect, beta_{.,o} ~ N(0, sigma_o^2).
The fitted profile is anchored on the fit batch (its offsets' mean holds beta_fit), so a new batch differs from it by
beta_new - beta_fit, variance 2 sigma_o^2. The interval model adds one more term to every call kind's run offset,

    u_o = (old run-level draw) + b_o,   b_o ~ sqrt(2) * s_o * t_{K-1}

s_o the sd (ddof 1) over K batches of their log speed factors, the kinds drawn jointly (multivariate t with the
batches' correlation, as the run offsets). With s_o = 0 (or no batches given) the interval is the old one, draw for
draw (the batch term uses its own random stream).

Where s_o comes from (``from_aggregates``): batches whose speed we can see. The SpecReason repository's per-problem
aggregates are ten batches of the same setup (each problem's 16 runs, run together); ``validate.drift.
aggregate_speed_factors`` turns each into a speed factor per call kind against the fold's profile (the mean run's
calls rebuilt at its token counts and predicted, so the problem's workload -- step lengths, context -- is divided
out and what is left is the batch's speed: per-token decode time of a memory-bound model hardly depends on the
problem). The end-to-end kind ``e2e`` is the batches' log(total time / the three call kinds' time), the time outside
the modelled calls. Kinds the batches do not show (spec_generate, ...) get the pooled spread of the others (noted).
The aggregate method's own error (``validate.drift.method_check``) and the batch means' within-batch noise inflate s_o:
conservative.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from simulator.errors import InputError
from validate.replay import OffsetPredictive, offset_correlation

AGG_KINDS = ("small_generate", "score", "base_generate")


@dataclass
class BatchSpread:
    """Per call kind, the log speed factor of each batch (``{kind: {batch: log factor}}``) and where they came from."""

    factors: dict[str, dict[str, float]]
    source: str = ""

    @classmethod
    def constant(cls, sd: float, kinds=(*AGG_KINDS, "e2e"), batches: int = 10) -> "BatchSpread":
        """A spread of ``sd`` (log) in every kind, from ``batches`` synthetic batches (tests, what-if)."""
        z = np.linspace(-1.0, 1.0, batches)
        z = z / z.std(ddof=1) if batches > 1 and sd > 0 else np.zeros(batches)
        return cls({k: {str(i): float(sd * v) for i, v in enumerate(z)} for k in kinds}, f"constant sd {sd:g}")

    def predictives(self, ops) -> tuple[dict[str, OffsetPredictive], list[str]]:
        """Per kind in ``ops``: the predictive of a new batch's log factor relative to the fit batch (loc 0, scale
        sqrt(2)·s, K-1 dof); kinds the batches do not show get the spread pooled over the others."""
        own = {o: np.asarray(list(v.values()), dtype=float) for o, v in self.factors.items() if len(v) >= 2}
        pool = [v for o, v in own.items() if o != "e2e"]  # call kinds only: the end-to-end ratio is not a call's speed
        dof = sum(len(v) - 1 for v in pool)
        pooled = np.sqrt(sum((len(v) - 1) * v.var(ddof=1) for v in pool if np.ptp(v) > 0) / dof) if dof else 0.0
        out, notes = {}, []
        for op in ops:
            if op in own:
                v = own[op]
                sd = float(v.std(ddof=1)) if np.ptp(v) > 0 else 0.0  # equal factors: exactly no spread
                out[op] = OffsetPredictive(len(v), 0.0, float(np.sqrt(2.0) * sd), float(len(v) - 1), v,
                                           f"between-batch t, {len(v) - 1} dof")
            elif dof:
                out[op] = OffsetPredictive(0, 0.0, float(np.sqrt(2.0) * pooled), float(dof), np.zeros(1),
                                           f"between-batch t, pooled over kinds ({dof} dof)")
                notes.append(f"{op}: no batch shows this kind: between-batch spread pooled over "
                             f"{', '.join(sorted(set(own) - {'e2e'}))} ({dof} dof)")
        return out, notes

    def draws(self, ops, shape, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """{kind: draws of shape ``shape``} of a new batch's log factor relative to the fit batch; kinds with zero
        spread are left out (their term is 0), so a zero spread changes nothing."""
        preds, _ = self.predictives(ops)
        preds = {o: p for o, p in preds.items() if p.scale > 0}
        if not preds:
            return {}
        per = {o: self.factors[o] for o in preds if o in self.factors}
        corr = offset_correlation(per, {o: preds[o] for o in per}) if len(per) == len(preds) else None
        if corr is not None:
            kinds, chol, dof = corr
            z = rng.standard_normal((*shape, len(kinds))) @ chol.T
            w = np.sqrt(rng.chisquare(dof, shape) / dof)
            return {o: preds[o].scale * z[..., i] / w for i, o in enumerate(kinds)}
        return {o: p.draw(rng, shape) for o, p in preds.items()}

    def table(self) -> pd.DataFrame:
        """Per kind: batches, sd of the log factor, and the new-batch 90% factor range relative to the fit batch."""
        rows = []
        preds, _ = self.predictives(sorted(self.factors))
        for op, p in preds.items():
            h = p.scale * stats.t.ppf(0.95, p.dof)
            rows.append({"kind": op, "batches": p.n, "sd_log": p.scale / np.sqrt(2.0),
                         "new_batch_90_low": float(np.exp(-h)), "new_batch_90_high": float(np.exp(h))})
        return pd.DataFrame(rows)


def aggregate_log_factors(aggregates: str | Path | dict, profile, setup, exclude=(),
                          source: str | None = None) -> dict[str, dict[str, float]]:
    """{kind: {problem: log speed factor}} of the per-problem aggregates against ``profile`` (module docstring), the
    problems in ``exclude`` left out; plus ``e2e``: log(total / modelled kinds' time) per problem."""
    from validate.drift import aggregate_speed_factors

    data = aggregates if isinstance(aggregates, dict) else read_aggregates(aggregates)
    try:
        keep = {k: v for k, v in data["per_problem"].items() if str(k) not in set(map(str, exclude))}
        f = aggregate_speed_factors({"per_problem": keep}, profile, setup)
        out: dict[str, dict[str, float]] = {}
        for r in f.itertuples():
            if r.factor > 0 and np.isfinite(r.factor):
                out.setdefault(str(r.op), {})[str(r.problem)] = float(np.log(r.factor))
        for pid, p in keep.items():
            a = p["averages"]
            calls = sum(float(a[k]) for k in ("small_model_time_s", "eval_time_s", "base_model_time_s"))
            tot = float(a.get("total_time_s") or 0.0)
            if calls > 0 and tot >= calls:
                out.setdefault("e2e", {})[str(pid)] = float(np.log(tot / calls))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(source or (str(aggregates) if not isinstance(aggregates, dict) else None), "per_problem",
                         f"per-problem aggregates (SpecReason experiment_summary layout: per_problem -> averages "
                         f"with steps, tokens and times) ({type(e).__name__}: {e})") from None
    return out


def read_aggregates(path) -> dict:
    """The per-problem aggregates JSON at ``path`` (InputError naming the file when it is not one)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(str(path), None, f"not a readable JSON file ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("per_problem"), dict) or len(data["per_problem"]) < 2:
        raise InputError(str(path), "per_problem", "an object of at least 2 problems (batches), each with averages")
    return data


def from_aggregates(aggregates: str | Path | dict, profile, setup, exclude=(),
                    source: str | None = None) -> BatchSpread:
    """The between-batch spread of the per-problem aggregates' batches (a path, or its ``read_aggregates`` content
    with ``source`` its path) against ``profile``."""
    source = source or str(aggregates)
    f = aggregate_log_factors(aggregates, profile, setup, exclude, source)
    n = max((len(v) for v in f.values()), default=0)
    if n < 2:
        raise InputError(source, "per_problem", "at least 2 batches with times are needed for a spread")
    return BatchSpread(f, f"{source}: {n} batches (problems)")


# ---- leave-one-batch-out on the aggregates ------------------------------------------------------------------
def lobo_aggregates(factors: dict[str, dict[str, float]], run_scale: dict[str, OffsetPredictive],
                    level: float = 0.90) -> pd.DataFrame:
    """Leave one batch out over the aggregates' batches: for every held-out batch q and every other batch p as the
    fit batch, is q's log factor inside p's +- the interval half-width, old (run-level predictive alone, ``run_scale``
    per kind) and new (run-level and between-batch, the spread estimated without q)? One row per kind: pairs,
    coverage and median half-width (as a factor) of both."""
    rows = []
    a = 1.0 - (1.0 - level) / 2.0
    for op, v in factors.items():
        if op not in run_scale or len(v) < 4:
            continue
        rp = run_scale[op]
        t_old = rp.scale * stats.t.ppf(a, rp.dof) if rp.dof else 0.0
        inside_old, inside_new, widths = [], [], []
        for q in v:
            rest = {k: x for k, x in v.items() if k != q}
            b = BatchSpread({op: rest}).predictives([op])[0][op]
            # the sum of two t's has no closed form: the half-width of the draws of run + batch terms
            rng = np.random.default_rng(0)
            d = rp.draw(rng, 20000) - rp.loc + b.draw(rng, 20000)
            h = float(np.quantile(np.abs(d), level))
            for p in rest:
                diff = v[q] - v[p]
                inside_old.append(abs(diff) <= t_old)
                inside_new.append(abs(diff) <= h)
            widths.append(h)
        rows.append({"kind": op, "batches": len(v), "pairs": len(inside_old),
                     "coverage_old": float(np.mean(inside_old)), "coverage_new": float(np.mean(inside_new)),
                     "half_width_old": float(np.exp(t_old) - 1),
                     "half_width_new": float(np.exp(np.median(widths)) - 1)})
    return pd.DataFrame(rows)


def lobo_report(aggregates: str, profile_path: str, level: float = 0.90) -> str:
    """What ``specsim validate drift --lobo`` adds: the between-batch spread per kind and the leave-one-batch-out
    coverage over the aggregates' problems, old interval (run-to-run only) against new (with the between-batch term)."""
    from simulator.cost.cost_profile import load_profile
    from validate.replay import noise_model, setup_from_profile

    profile = load_profile(profile_path)
    setup = setup_from_profile(profile)
    f = aggregate_log_factors(aggregates, profile, setup)
    noise, _ = noise_model(profile)
    t = lobo_aggregates({k: v for k, v in f.items() if k in noise}, {k: noise[k].offset for k in noise}, level)
    fmt = {"float_format": lambda v: f"{v:.3f}", "index": False}
    return "\n".join([f"between-batch spread ({len(next(iter(f.values())))} batches: the problems of {aggregates}; "
                      "log factor sd per kind, and a new batch's 90% factor range relative to the fit batch):",
                      BatchSpread(f).table().to_string(**fmt), "",
                      f"leave one batch out (each problem held out, every other as the fit batch; {100 * level:g}% "
                      "interval of the held-out batch's factor; half-width as a factor - 1):",
                      t.to_string(**fmt)])


# ---- a batch we hold only as aggregates: the runs of a problem that the per-step traces do not hold --------------
AVG_KEYS = ("total_steps", "rejected_steps", "small_tokens_accepted", "small_tokens_rejected", "base_tokens",
            "total_tokens", "small_model_time_s", "eval_time_s", "base_model_time_s", "total_time_s")


def unseen_runs(aggregates: dict, trace) -> tuple[str, dict, dict, int] | None:
    """(problem, the mean of the per-step runs, the mean of that problem's *other* runs, how many) where the traces'
    runs are some of one aggregates problem's completed runs:
    others = (n · the n-run mean − the traces' sum) / (n − m).
    None when the traces span several problems, the problem is not in the aggregates, it had failed runs, or the
    traces hold all its runs. A negative derived value (the source counts differently) is an InputError."""
    from validate.drift import trace_aggregates

    pids = set(map(str, trace.steps["problem_id"].unique()))
    if len(pids) != 1:
        return None
    pid = pids.pop()
    entry = aggregates.get("per_problem", {}).get(pid)
    if not entry or entry.get("error_runs") or not entry.get("completed_runs"):
        return None
    n, runs = int(entry["completed_runs"]), trace_aggregates(trace)["per_problem"]
    total = dict(zip(trace.requests["run_id"].astype(str), trace.requests["total_s"].astype(float)))
    m = len(runs)
    if m >= n:
        return None
    known = {k: float(np.mean([r["averages"][k] if k != "total_time_s" else total[r["run"]] for r in runs.values()]))
             for k in AVG_KEYS}
    other = {k: (n * float(entry["averages"][k]) - m * known[k]) / (n - m) for k in AVG_KEYS}
    bad = [k for k, v in other.items() if not v >= 0]
    if bad:
        raise InputError(None, "per_problem", f"problem {pid}: the runs the traces do not hold come out negative in "
                                              f"{', '.join(bad)}: the aggregates count differently from the traces")
    return pid, known, other, n - m


def unseen_batch_check(aggregates: str, traces: str, profile_path: str, level: float = 0.90, n_boot: int = 4000) -> str:
    """The problem's other runs (``unseen_runs``) as a held-out batch, the traces' runs as the fit batch: per call kind
    the held-out mean run's speed factor relative to the fit runs' mean, and its end-to-end time against the interval
    of one run of a new batch around the held-out workload at the fit batch's speed (old: run-to-run spread of the
    profile's fit runs, centred; new: plus the between-batch spread of the aggregates' *other* problems). A batch
    mean inside a run's interval is the weakest check: a run of that batch strays further."""
    import dataclasses

    from simulator.cost.cost_profile import load_profile
    from calibrate.fit.import_specreason import import_specreason
    from validate.drift import aggregate_speed_factors, trace_aggregates
    from validate.replay import CallNoise, noise_model, request_totals, setup_from_profile, t_predictive

    data, trace = read_aggregates(aggregates), import_specreason(traces)
    got = unseen_runs(data, trace)
    if got is None:
        return "no held-out batch: the traces are not some of the completed runs of one problem of the aggregates"
    pid, known, other, n_other = got
    profile = load_profile(profile_path)
    setup = setup_from_profile(profile)
    fit, out = (aggregate_speed_factors({"per_problem": {pid: {"averages": a}}}, profile, setup).set_index("op")
                for a in (known, other))
    calls = ("small_model_time_s", "eval_time_s", "base_model_time_s")
    e2e_fit = known["total_time_s"] / sum(known[k] for k in calls)
    ops, secs = [], []
    for op, r in out.iterrows():  # the held-out mean run's calls at the fit batch's speed
        n = max(1, int(round(r["calls"])))
        ops += [op] * n
        secs += [float(r["predicted_s"] * fit.loc[op, "factor"]) / n] * n
    ops, secs = np.array(ops), np.array(secs)
    point = float(secs.sum() * e2e_fit)
    noise = {op: CallNoise(dataclasses.replace(nm.offset, loc=0.0), nm.within_quantiles)
             for op, nm in noise_model(profile)[0].items()}
    per_run = {r["run"]: r["averages"] for r in trace_aggregates(trace)["per_problem"].values()}
    tot_s = dict(zip(trace.requests["run_id"].astype(str), trace.requests["total_s"].astype(float)))
    e2e_run = t_predictive([np.log(tot_s[k] / sum(v[c] for c in calls)) for k, v in per_run.items()])
    batch = from_aggregates(data, profile, setup, exclude=[pid], source=aggregates)
    a, rows = (1 - level) / 2, []
    for label, b in (("old", None), ("new", batch)):
        bd = b.draws(sorted(set(ops)) + ["e2e"], (1, n_boot), np.random.default_rng(2)) if b is not None else {}
        rng = np.random.default_rng(1)
        tot = request_totals(secs, np.zeros(len(secs), dtype=int), ops, 1, noise, n_boot, rng, bd)[0]
        tot = tot * e2e_fit * np.exp(e2e_run.draw(rng, n_boot) - e2e_run.loc + (bd["e2e"][0] if "e2e" in bd else 0.0))
        lo, hi = np.quantile(tot, [a, 1 - a])
        rows.append({"interval": label, "low_s": lo, "high_s": hi, "width": (hi - lo) / point,
                     "measured_s": other["total_time_s"], "inside": bool(lo <= other["total_time_s"] <= hi)})
    rel = out["factor"] / fit["factor"]
    fmt = {"float_format": lambda v: f"{v:.3f}", "index": False}
    m = len(trace.requests)
    return "\n".join([
        f"held-out batch: the {n_other} runs of problem {pid} the traces do not hold, as their mean run "
        f"(({n_other + m} x "
        f"the aggregates' mean - the traces' {m} runs) / {n_other}); fit batch: the traces' {m} runs",
        "speed factor of the held-out mean run relative to the fit runs' mean, per kind: "
        + ", ".join(f"{op} {v:.3f}" for op, v in rel.items()),
        f"end-to-end of the held-out mean run: {other['total_time_s']:.1f} s measured, {point:.1f} s for its "
        "workload at "
        f"the fit batch's speed; {100 * level:g}% interval of one run of a new batch:",
        pd.DataFrame(rows).to_string(**fmt)])
