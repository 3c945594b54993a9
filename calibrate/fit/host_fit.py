"""Engine host costs by version, fitted on released `vllm bench serve` runs (:mod:`calibrate.fit.gpustack_import`).

Per engine version five fitted terms (:mod:`simulator.catalog.engine_hosts`): t_seq (per sequence per step), t_tp (per
step per tensor-parallel worker beyond the first), the front end's serial part t_fe (the one API-server process's CPU
per request, paid request after request) and its concurrent latency t_lat (hops, ZMQ, first-token streaming: every
request at once; the catalog's t_call = t_lat + t_fe), and the async overlap o (the share of t_step + S t_seq async
scheduling runs beside the GPU: :func:`simulator.cost.roofline.step_time`); and one measured, not fitted: the front
end's first-stage share s (:func:`first_share`, from the version's 4-token bursts; the serving replica's two-stage
front end), held fixed while the five are chosen by robust (soft-L1) least squares on
the log errors of each run's median ITL, mean TTFT and output throughput as the serving simulator predicts them
(:func:`calibrate.fit.released_predict.predict_released`). Each figure pins one mechanism: the median ITL is the step
time at the run's batch (t_seq; mean TPOT is not fitted: it is dominated by stalls -- a decoding request waiting on
the burst's prefill chunks, preemption; requests ending early barely move it, ``burst_probe``'s what-if), the
low-concurrency runs' TTFT is t_lat + t_fe + one prefill, and a burst's TTFT and throughput are its admission through
the serial front end. t_fe is bounded above by the data: a serial front end admits a burst of N requests over
(N - 1) t_fe, so its mean TTFT is at least (N - 1) t_fe / 2 (:func:`serial_bound`). t_step stays the GPU's own
batch-1 figure (docs/gpu-cost-model.md): at large batch t_step and S t_seq cannot be told apart.

Runs whose requests produce fewer than :data:`MIN_FIT_OUTPUT` tokens are predicted but not fitted on: their TPOT is
two or three gaps between scheduling steps, and their throughput is the front end's admission rate.

A version gets terms of its own only from runs of at least :data:`MIN_MODELS` models: host terms fitted on one model's
runs absorb that model's GPU-step error and its front end's particulars (a custom tokenizer mode, a reasoning parser)
and would be handed to every model served by that version and by every newer unfitted one. Such a version's runs are
predicted with the nearest fitted version's terms, a transfer check like the held-out folds.

Held-out checks: :func:`holdout_fold` (by GPU: fit on the other GPUs' runs; by version: on the other versions' runs). A
version with no training runs takes the nearest fitted version's terms."""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.fit.gpustack_import import ReleasedRun
from calibrate.fit.released_predict import measured_figures, predict_released
from simulator.catalog.versions import nearest_version, version_key
from simulator.inputs.loading import write_atomic

# fitted: t_seq, t_tp (per step per tensor-parallel worker beyond the first), t_lat (the concurrent part of t_call),
# t_fe (its serial part), async overlap
FIT_TERMS = ("seq_overhead_s", "tp_step_overhead_s", "call_latency_s", "front_end_serial_s", "async_overlap")
CATALOG_TERMS = ("seq_overhead_s", "tp_step_overhead_s", "call_overhead_s", "front_end_serial_s", "async_overlap")
LOWER = {"seq_overhead_s": 1e-7, "tp_step_overhead_s": 1e-7, "call_latency_s": 1e-4, "front_end_serial_s": 1e-5,
         "async_overlap": 0.0}
UPPER = {"seq_overhead_s": 1e-3, "tp_step_overhead_s": 1e-2, "call_latency_s": 0.2, "front_end_serial_s": 0.05,
         "async_overlap": 0.99}
START = {"seq_overhead_s": 5e-5, "tp_step_overhead_s": 3e-4, "call_latency_s": 1e-2, "front_end_serial_s": None,
         "async_overlap": 0.5}  # t_fe: 0.7 x bound
# terms a version's runs may not measure (no run with async scheduling on, none at TP > 1): fixed at 0 in its fit
# (nothing depends on them there), then transferred from the nearest version that measured them
# (:func:`transfer_unmeasured`)
MEASURED_BY = {"async_overlap": lambda r: r.async_scheduling, "tp_step_overhead_s": lambda r: r.tp > 1}
UNMEASURED = {"async_overlap": "no run of this version had async scheduling on",
              "tp_step_overhead_s": "no run of this version ran at TP > 1"}
MIN_FIT_OUTPUT = 16
FIT_FIGS = ("itl_ms", "ttft_ms", "out_tps")  # fitted on
FIGS = ("tpot_ms", "itl_ms", "ttft_ms", "out_tps")  # reported
MIN_MODELS = 2  # models a version's fitted runs must cover for it to get terms of its own (module docstring)
LOSS_SCALE = 0.3  # soft-L1 scale of the log errors: beyond ~30% a run's pull grows linearly, not quadratically


def in_fit(run: ReleasedRun) -> bool:
    return run.output_tokens >= MIN_FIT_OUTPUT


def nearest(version: str, fitted: dict[str, dict]) -> dict | None:
    """The fitted terms of ``version``, else of the version that stands for it
    (:func:`simulator.catalog.versions.nearest_version`, the catalog's own rule), else None."""
    v = nearest_version(version, fitted)
    return None if v is None else fitted[v]


def serial_bound(runs: list[ReleasedRun]) -> float:
    """The largest serial front-end cost the bursts in ``runs`` allow (fitted or not: a 4-token burst's duration is
    its admission): a serial front end passes a burst's N requests t_fe apart, so the burst lasts at least N t_fe and
    its mean TTFT is at least (N - 1) t_fe / 2; the min over bursts of duration / N and 2 x mean TTFT / (N - 1). The
    catalog's upper bound where ``runs`` has no burst."""
    b = [min(r.measured["duration_s"] / r.requests, 2e-3 * r.measured["mean_ttft_ms"] / (r.requests - 1))
         for r in runs if r.concurrency is None and r.requests > 1]
    return min([UPPER["front_end_serial_s"], *b])


def probe_intake(probe: ReleasedRun) -> tuple[float, float]:
    """(c, s) of a 4-token burst: seconds of run per request and the first-stage share 2 x TTFT / duration - 1 in
    [0, 1] (calibrate.fit.burst_probe's ``two-stage`` table)."""
    dur = probe.measured["duration_s"]
    return dur / probe.requests, float(np.clip(2.0 * probe.measured["mean_ttft_ms"] / 1e3 / dur - 1.0, 0.0, 1.0))


def big_burst(requests: float, concurrency) -> bool:
    """Every request at once (no concurrency cap), >= 900 of them: the released tables' bursts."""
    return (concurrency is None or pd.isna(concurrency)) and requests >= 900


def intake_probe(requests: float, out_per_request: float, concurrency) -> bool:
    """A burst (:func:`big_burst`) with < 10 tokens out each: nearly all intake and prefill."""
    return big_burst(requests, concurrency) and out_per_request < 10


def is_intake_probe(r: ReleasedRun) -> bool:
    return intake_probe(r.requests, r.output_tokens, r.concurrency)


def first_share(runs: list[ReleasedRun]) -> float | None:
    """The front end's first-stage share s of ``runs`` (one engine version): the median over its 4-token bursts of
    :func:`probe_intake`'s s, model-free; None without such a burst."""
    got = [probe_intake(r)[1] for r in runs if is_intake_probe(r)]
    return float(np.median(got)) if got else None


def catalog_terms(f: dict) -> dict:
    """A fit's terms as the engine catalog holds them: t_call = t_lat + t_fe (the whole per-request latency)."""
    out = {t: f[t] for t in ("seq_overhead_s", "tp_step_overhead_s", "front_end_serial_s", "async_overlap",
                             "front_end_first_share") if t in f}
    out["call_overhead_s"] = f["call_latency_s"] + f["front_end_serial_s"]
    return out


def predict_table(runs: list[ReleasedRun], hosts: dict[str, dict] | None = None,
                  sharegpt_sigma: float | None = None) -> pd.DataFrame:
    """One row per run: its description, measured and predicted figures and the signed relative errors
    (``err_<figure>`` = predicted / measured - 1). ``hosts``: {version: host terms} (None: the catalog's);
    ``sharegpt_sigma``: another spread of ShareGPT's lengths (:func:`calibrate.fit.released_predict.run_workload`)."""
    rows = []
    for r in runs:
        h = nearest(r.version, hosts) if hosts else None
        p = predict_released(r, catalog_terms(h) if h else None, sharegpt_sigma=sharegpt_sigma)
        m = measured_figures(r)
        row = {"run": r.key, "version": r.version, "gpu": r.gpu, "model": r.model, "weight_dtype": r.weight_dtype,
               "tp": r.tp, "requests": r.requests, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
               "concurrency": r.concurrency or 0, "dataset": r.dataset, "async_scheduling": r.async_scheduling,
               "in_fit": in_fit(r),
               "batch_mean": p["batch_mean"], "meas_mean_itl_ms": m["mean_itl_ms"], "pred_mean_itl_ms": p["mean_itl_ms"]}
        for f in FIGS:
            row[f"meas_{f}"], row[f"pred_{f}"] = m[f], p[f]
            row[f"err_{f}"] = p[f] / m[f] - 1.0
        rows.append(row)
    return pd.DataFrame(rows)


def _residuals(runs: list[ReleasedRun], host: dict) -> np.ndarray:
    out = []
    for r in runs:
        p, m = predict_released(r, catalog_terms(host)), measured_figures(r)
        out += [np.log(max(p[f], 1e-9) / m[f]) for f in FIT_FIGS if np.isfinite(p[f]) and m[f] > 0]
    return np.asarray(out)


def latency_bound(runs: list[ReleasedRun]) -> float:
    """The largest concurrent latency t_lat the closed-loop runs allow: a request's latency before the engine sees it
    is part of its TTFT, so t_lat < min over closed-loop runs of mean TTFT; the catalog's bound without one."""
    return min([UPPER["call_latency_s"], *[1e-3 * r.measured["mean_ttft_ms"] for r in runs if r.concurrency]])


def fit_version(runs: list[ReleasedRun], fixed: dict | None = None) -> dict:
    """Robust least squares on log errors over ``runs`` (one version): {term: value, ..., "rms_log": , "runs": n,
    "front_end_serial_max_s": the data's bound on t_fe}. The overlap is fitted only where some runs had async
    scheduling on, t_tp only where some ran at TP > 1 (else 0: nothing measured it)."""
    from scipy.optimize import least_squares

    bound, lat_bound, share = serial_bound(runs), latency_bound(runs), first_share(runs)
    runs = [r for r in runs if in_fit(r)]
    fixed = dict(fixed or {})
    if share is not None:  # measured, not fitted: the version's 4-token bursts' TTFT share (two-stage front end)
        fixed.setdefault("front_end_first_share", share)
    for t, measures in MEASURED_BY.items():
        if t not in fixed and not any(measures(r) for r in runs):
            fixed[t] = 0.0
    terms = [t for t in FIT_TERMS if t not in fixed]

    def unpack(x):
        return {**fixed, **{t: (float(np.exp(v)) if t != "async_overlap" else float(v)) for t, v in zip(terms, x)}}

    def enc(t, v):
        return np.log(v) if t != "async_overlap" else v

    upper = {**UPPER, "front_end_serial_s": bound, "call_latency_s": lat_bound}
    start = {**START, "front_end_serial_s": 0.7 * bound, "call_latency_s": min(START["call_latency_s"], 0.5 * lat_bound)}
    x0 = [enc(t, start[t]) for t in terms]
    lo = [enc(t, LOWER[t]) if t != "async_overlap" else LOWER[t] for t in terms]
    hi = [enc(t, upper[t]) for t in terms]
    res = least_squares(lambda x: _residuals(runs, unpack(x)), x0, bounds=(lo, hi), diff_step=0.05, max_nfev=20,
                        loss="soft_l1", f_scale=LOSS_SCALE)
    out = unpack(res.x)
    out["rms_log"] = float(np.sqrt(np.mean(res.fun ** 2)))
    out["runs"] = len(runs)
    out["front_end_serial_max_s"] = upper["front_end_serial_s"]
    # standard errors from the Jacobian (log-space for the overheads, linear for the overlap)
    try:
        cov = np.linalg.pinv(res.jac.T @ res.jac) * (res.fun @ res.fun) / max(len(res.fun) - len(terms), 1)
        for t, s in zip(terms, np.sqrt(np.diag(cov))):
            out[f"{t}_stderr"] = float(s * out[t]) if t != "async_overlap" else float(s)
    except np.linalg.LinAlgError:
        pass
    return out


def fit_hosts(runs: list[ReleasedRun]) -> dict[str, dict]:
    """{version: fitted terms} over every version in ``runs``. The concurrent latency t_lat is measured only by
    closed-loop runs (a burst's TTFT is seconds of queue, where tens of ms of latency are not seen): a version without
    fitted closed-loop runs takes the nearest such version's t_lat (``call_latency_from`` names it). Versions with too
    few models get no terms (:func:`supported_versions`); where no version has enough, one fit over every run, under
    the newest version (``pooled`` lists the versions it pooled)."""
    by = {v: rs for v, rs in supported_versions(runs).items() if rs}
    if not by and runs:
        versions = sorted({r.version for r in runs}, key=version_key)
        by = {versions[-1]: list(runs)}
        pooled = versions
    else:
        pooled = None
    closed = {v for v, rs in by.items() if any(r.concurrency and in_fit(r) for r in rs)}
    out = {v: fit_version(by[v]) for v in sorted(closed)}
    for v in sorted(set(by) - closed):
        near = nearest(v, out)
        lat = near["call_latency_s"] if near else START["call_latency_s"]
        out[v] = fit_version(by[v], {"call_latency_s": lat})
        out[v]["call_latency_from"] = next((k for k, f in out.items() if f is near), "prior") if near else "prior"
    if pooled:
        for f in out.values():
            f["pooled"] = pooled
    return transfer_unmeasured(dict(sorted(out.items(), key=lambda kv: version_key(kv[0]))))


def supported_versions(runs: list[ReleasedRun]) -> dict[str, list[ReleasedRun]]:
    """{version: its runs} for every version in ``runs``; a version whose fitted runs cover fewer than
    :data:`MIN_MODELS` models maps to [] (predicted with the nearest fitted version's terms)."""
    by = {v: [r for r in runs if r.version == v] for v in sorted({r.version for r in runs})}
    return {v: rs if len({r.model for r in rs if in_fit(r)}) >= MIN_MODELS else [] for v, rs in by.items()}


def transfer_unmeasured(fitted: dict[str, dict]) -> dict[str, dict]:
    """A version none of whose runs measured a term of :data:`MEASURED_BY` (no run with async scheduling on: its
    overlap; none at TP > 1: t_tp) held it at 0 in its fit, which changes none of its predictions; the catalog entry
    takes the nearest measuring version's value instead (``<term>_from``), so that the version run with async on or at
    TP > 1 (a newer version resolving to it, whose default is async) is not priced as if async scheduling hid nothing
    or more workers cost nothing."""
    for t in MEASURED_BY:
        measured = {v: f for v, f in fitted.items() if f"{t}_stderr" in f}
        for v, f in fitted.items():
            if v not in measured and measured:
                near = nearest(v, measured)
                f[t] = near[t]
                f[f"{t}_from"] = next(k for k, g in measured.items() if g is near)
    return fitted


def holdout_fold(runs: list[ReleasedRun], by: str | None, value) -> tuple[pd.DataFrame, dict]:
    """One fold of a hold-out (``validate.serving.released.fit_folds`` runs them): fit on the runs whose ``by`` is not
    ``value`` and predict those whose it is (the table with a ``held_out`` column, the fitted terms); ``by`` None: fit
    on every run, predict none."""
    train = [r for r in runs if by is None or getattr(r, by) != value]
    test = [r for r in runs if by is not None and getattr(r, by) == value]
    fitted = fit_hosts(train)
    t = predict_table(test, fitted)
    t["held_out"] = value
    return t, fitted


def holdout_values(runs: list[ReleasedRun], by: str) -> list:
    """The folds of a hold-out ``by`` (``gpu`` | ``version``): its values among ``runs``, sorted."""
    if by not in ("gpu", "version"):
        raise ValueError(f"holdout by gpu or version, not {by!r}")
    return sorted({getattr(r, by) for r in runs})


def joined_folds(parts: list[tuple[pd.DataFrame, dict]], values: list) -> tuple[pd.DataFrame, dict]:
    """A hold-out's (table of held-out predictions with a ``held_out`` column, {held-out value: fitted terms}) from its
    folds' (in the order of ``values``)."""
    return pd.concat([t for t, _ in parts], ignore_index=True), {v: f for v, (_, f) in zip(values, parts)}


def summary(table: pd.DataFrame, group: str) -> pd.DataFrame:
    """Per ``group`` value and overall: rows, and per figure the median and p90 of |error| and the median signed
    error (bias), in %; fitted rows only (``in_fit``)."""
    t = table[table.in_fit]
    out = []
    for g, d in [*t.groupby(group), ("all", t)]:
        row = {group: g, "runs": len(d)}
        for f in FIGS:
            e = (d[f"err_{f}"] * 100).dropna()
            row[f"{f} median |err| %"] = float(e.abs().median())
            row[f"{f} p90 |err| %"] = float(e.abs().quantile(0.9))
            row[f"{f} bias %"] = float(e.median())
        out.append(row)
    return pd.DataFrame(out)


def write_catalog(fitted: dict[str, dict], path, source: str, date: str, drop: tuple[str, ...] = ()) -> None:
    """Replace the fitted versions of vLLM in the engine catalog at ``path`` (other versions and engines kept), each
    term with its kind, source and standard error; the file's provenance names the data, the command and the date.
    ``drop``: versions the data hold but the fit gave no terms (too few models): their old entries are removed."""
    from simulator.inputs.loading import read_yaml

    previous = {e["version"]: e for e in read_yaml(path)["engines"].get("vllm", [])}
    new = []
    for v, f in sorted(fitted.items()):
        src = f"fitted on {f['runs']} released vLLM {v} runs ({source}); rms log error {f['rms_log']:.3f}"
        ent = {"version": v}
        c = catalog_terms(f)
        for t in CATALOG_TERMS:
            se = f.get(f"{t}_stderr") if t != "call_overhead_s" else f.get("call_latency_s_stderr")
            fitted = t not in MEASURED_BY or f"{t}_stderr" in f
            kind = "calibrated" if fitted else "transferred" if f"{t}_from" in f else "prior"
            ent[t] = {"value": float(f"{c[t]:.4g}"), "kind": kind,
                      "source": (src + (f"; t_lat {f['call_latency_s']:.4g} s" + (
                          f" (from vLLM {f['call_latency_from']}: no closed-loop run of {v})" if "call_latency_from" in f
                          else "") + " + t_fe" if t == "call_overhead_s" else "")
                                 + (f"; bounded above by the bursts (duration / N, 2 x mean TTFT / (N - 1)) at "
                                    f"{f['front_end_serial_max_s']:.3g} s"
                                    if t == "front_end_serial_s" else "")) if fitted
                      else UNMEASURED[t] + (f"; transferred from vLLM {f[t + '_from']}" if f"{t}_from" in f else "")}
            if se is not None:
                ent[t]["stderr"] = float(f"{se:.3g}")
        ent["call_overhead_s"] = kept_call(previous.get(v), f) or ent["call_overhead_s"]
        if "front_end_first_share" in f:
            ent["front_end_first_share"] = {
                "value": float(f"{f['front_end_first_share']:.3g}"), "kind": "calibrated",
                "source": f"median over released vLLM {v} 4-token bursts ({source}) of 2 x mean TTFT / duration - 1 "
                          "(calibrate.fit.host_fit.first_share, model-free), fixed in the fit"}
        new.append(ent)
    put_versions(path, new, drop=drop, provenance={"kind": "fitted", "source": source, "date": date,
                             "method": "calibrate.fit.host_fit.fit_hosts (robust least squares on log errors of median "
                                       "ITL, mean TTFT, output throughput)"})


KEPT_NOTE = "kept from the catalog's previous entry: the fit does not identify t_lat"


def kept_call(old: dict | None, f: dict) -> dict | None:
    """The catalog's current t_call (``old``: the version's entry as the catalog has it, None: new to it) where the fit
    ``f`` does not identify the concurrent latency t_lat (its standard error at least its value: the released runs'
    few closed loops pull it both ways), else None (the fitted t_lat + t_fe is written)."""
    se = f.get("call_latency_s_stderr")
    if se is None or se < f["call_latency_s"]:
        return None
    if old is None or "call_overhead_s" not in old:
        return None
    keep = dict(old["call_overhead_s"])
    base = keep["source"].split("); ", 1)[1] if keep["source"].startswith(KEPT_NOTE) else keep["source"]
    keep["source"] = f"{KEPT_NOTE} ({f['call_latency_s']:.3g} +- {se:.3g} s in the latest refit); {base}"
    return keep


def put_versions(path, entries: list[dict], provenance: dict | None = None, drop: tuple[str, ...] = ()) -> None:
    """Write ``entries`` (catalog entries of vLLM versions) into the engine catalog at ``path``, replacing those
    versions and keeping the others but ``drop`` (and the file's leading comments); ``provenance``: the file's new
    provenance."""
    import yaml

    from simulator.inputs.loading import read_yaml

    raw = read_yaml(path)
    names = {e["version"] for e in entries} | set(drop)
    keep = [e for e in raw["engines"].get("vllm", []) if e["version"] not in names]
    raw["engines"]["vllm"] = sorted(keep + entries, key=lambda e: version_key(e["version"]))
    if provenance is not None:
        raw["provenance"] = provenance
    head = "".join(line for line in open(path) if line.startswith("#"))
    write_atomic(path, head + yaml.safe_dump(raw, sort_keys=False, width=120))
