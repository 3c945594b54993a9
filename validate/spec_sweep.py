"""Speculation under load on a GPU no fit saw: the B200 closed-loop sweep predicted per arm and concurrency, against
what it measured (the data, the assumptions and the predictions: ``calibrate.gpu_priors.spec_sweep``).

Three predictions: ``heldout`` (host terms of the released-table fit, the sweep held out), ``catalog`` (every parameter
from the catalog) and ``mtp_fitted`` (the baseline arm's per-sequence slope, then the B200's eta_comp fitted on the MTP
arm; DSpark held out). Compared: ITL per concurrency, its growth from 1 to GROWTH_AT streams and the speedups over no
speculation at SPEEDUP_AT.

    specsim validate spec-sweep --out reports/b200-speculation
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calibrate.gpu_priors.spec_sweep import (ARMS, HELD_OUT_ENGINE, REF_VERSION, arm_capacity, deployments,
                                             fit_eta_comp, load, predict, sweep_host_terms)
from simulator.catalog import get_hardware
from simulator.catalog.engine_hosts import ServingEngine
from simulator.cost.cost_profile import prior_profile

QUEUE_JUMP = 5.0  # a row queued: its median TTFT this many times the next lower concurrency's (streams waited)
GROWTH_AT = 64
SPEEDUP_AT = (1, 16, 64, 128)


def queued(d: pd.DataFrame) -> set:
    """(arm, concurrency) rows that queued: the engine ran fewer sequences than streams, the TTFT jumps (QUEUE_JUMP)."""
    out = set()
    for arm, g in d.sort_values("concurrency").groupby("arm"):
        t = g["ttft_ms"].to_numpy()
        out |= {(arm, int(c)) for c, a, b in zip(g["concurrency"].iloc[1:], t[:-1], t[1:]) if b > QUEUE_JUMP * a}
    return out


def capacity_table(d: pd.DataFrame) -> pd.DataFrame:
    """Per arm at its largest concurrency: the sequences the B200's memory plan holds (mean lengths of that row) and
    whether the streams queue, predicted (fewer held than streams) and measured (:func:`queued`)."""
    q, rows, deps = queued(d), [], deployments()
    for arm, g in d.groupby("arm"):
        r = g.loc[g["concurrency"].idxmax()]
        held = arm_capacity(arm, r["prompt"], r["output"], deps)
        rows.append({"arm": arm, "drafts verified": ARMS[arm].k, "states per sequence": 1 + ARMS[arm].k,
                     "streams": int(r["concurrency"]), "sequences held": held,
                     "queues (predicted)": held < r["concurrency"],
                     "queued (measured)": (arm, int(r["concurrency"])) in q})
    return pd.DataFrame(rows)


def shape_table(d: pd.DataFrame, col: str) -> pd.DataFrame:
    """Per arm: ITL growth from 1 to GROWTH_AT streams; per speculative arm: speedup over the baseline at SPEEDUP_AT
    (not where the streams queued: the speedup of a full engine is not the one asked)."""
    rows, q = [], queued(d)
    base = d[d["arm"] == "baseline"].set_index("concurrency")
    for arm, g in d.groupby("arm"):
        g = g.set_index("concurrency")
        rows.append({"arm": arm, "what": f"ITL({GROWTH_AT}) / ITL(1)", "measured": g.at[GROWTH_AT, "itl_ms"] / g.at[1, "itl_ms"],
                     "predicted": g.at[GROWTH_AT, col] / g.at[1, col]})
        if arm == "baseline":
            continue
        for c in SPEEDUP_AT:
            if (arm, c) in q or c not in g.index:
                continue
            rows.append({"arm": arm, "what": f"speedup at {c}", "measured": base.at[c, "itl_ms"] / g.at[c, "itl_ms"],
                         "predicted": base.at[c, col] / g.at[c, col]})
    t = pd.DataFrame(rows)
    t["error"] = t["predicted"] / t["measured"] - 1
    return t


def run(report: Path | None = None) -> dict:
    from simulator.catalog.engine_hosts import engine_version

    d = load()
    d["catalog_ms"] = predict(d)
    d["heldout_ms"] = predict(d, engine=HELD_OUT_ENGINE)  # the GPUStack (vLLM 0.11) terms, async on
    mtp = d[d["arm"] == "mtp"]
    # the fitted variant: the per-sequence slope from the baseline arm (sweep_host_terms), then eta_comp on the MTP
    # arm; DSpark held out
    slope = sweep_host_terms(d)
    host = {"seq_overhead_s": slope["slope_seq_overhead_s"],
            "async_overlap": engine_version(ServingEngine(version=REF_VERSION)).async_overlap.value}
    eta, se = fit_eta_comp(mtp, host)
    d["mtp_fitted_ms"] = predict(d, eta, host=host)
    out = {"data": d, "eta_comp_mtp": (eta, se), "slope": slope, "capacity": capacity_table(d),
           "heldout": shape_table(d, "heldout_ms"),
           "catalog": shape_table(d, "catalog_ms"), "mtp_fitted": shape_table(d, "mtp_fitted_ms")}
    if report is not None:
        write_report(Path(report), out)
    return out


def write_report(folder: Path, out: dict) -> None:
    from simulator.inputs.loading import write_atomic

    folder.mkdir(parents=True, exist_ok=True)
    d = out["data"]
    write_atomic(folder / "itl.csv", d.to_csv(index=False, float_format="%.5g"))
    eta, se = out["eta_comp_mtp"]
    hw = get_hardware("b200")
    L = ["# Speculation under load on a B200 (vLLM 0.30 closed loop): predicted vs measured", "",
         "Command: `specsim validate spec-sweep --out reports/b200-speculation` "
         "(module docstring: assumptions). Each arm's own measured acceptance length per concurrency is the input.", "",
         "Arms: " + "; ".join(f"{k}: {a.note}" for k, a in ARMS.items()) + ". Target: the catalog's qwen3.8-27b "
         "(48 Gated DeltaNet layers, an fp32 state per sequence; 16 full-attention layers). A row whose median TTFT "
         f"jumps {QUEUE_JUMP:g}x over the next lower concurrency queued; it is predicted at the sequences the memory "
         "plan holds and left out of the speedups.", "",
         "## Sequences the B200 holds per arm (vLLM's memory plan; each speculating sequence keeps 1 + k states)", "",
         out["capacity"].to_markdown(index=False), "",
         f"B200 eta_comp: catalog {prior_profile(hw).params(hw).compute_efficiency:.3f} "
         f"({prior_profile(hw).compute_efficiency.source}); fitted on the MTP arm (with the baseline arm's slope): "
         f"{eta:.3f} ± {se:.3f}.", "",
         f"ITL growth beyond the GPU model on the baseline arm, as a per-sequence cost under async scheduling: "
         f"{out['slope']['slope_effective_s'] * 1e6:.0f} us (t_seq {out['slope']['slope_seq_overhead_s'] * 1e6:.0f} us x "
         f"(1 - o of vLLM {REF_VERSION}): the share exposed while the GPU paces the step); the catalog's vLLM 0.30 entry does not adopt it (docs/serving-model.md).", ""]
    for key, title in (("heldout", f"Host terms of the released-table fit (vLLM {REF_VERSION}, async on): the sweep held "
                                   "out"),
                       ("catalog", "Every parameter from the catalog (no B200 GPU fit; host terms: the catalog's vLLM "
                                   "0.30 entry, fitted on the baseline arm where written)"),
                       ("mtp_fitted", "The baseline arm's per-sequence slope, then the B200's eta_comp fitted on the MTP "
                                      "arm (DSpark held out)")):
        t = out[key]
        L += [f"## {title}", "", "| arm | what | measured | predicted | error |", "|---|---|---|---|---|"]
        for r in t.itertuples():
            L.append(f"| {r.arm} | {r.what} | {r.measured:.2f} | {r.predicted:.2f} | {r.error:+.1%} |")
        a = t["error"].abs()
        L += ["", f"Within 15%: {int((a <= 0.15).sum())} of {len(t)}; median |error| {a.median():.1%}.", ""]
    L += ["## ITL per concurrency: median |error|", "", "| arm | 0.11 held out | catalog | MTP-fitted |", "|---|---|---|---|"]
    for arm, g in [*d.groupby("arm"), ("all", d)]:
        L.append(f"| {arm} | " + " | ".join(f"{(g[c] / g['itl_ms'] - 1).abs().median():.1%}"
                                            for c in ("heldout_ms", "catalog_ms", "mtp_fitted_ms")) + " |")
    L += ["", "## ITL per concurrency (ms)", "", "| arm | streams | AL | measured | 0.11 held out | catalog | MTP-fitted |",
          "|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        L.append(f"| {r.arm} | {r.concurrency} | {r.al:.2f} | {r.itl_ms:.2f} | {r.heldout_ms:.2f} | {r.catalog_ms:.2f} "
                 f"| {r.mtp_fitted_ms:.2f} |")
    write_atomic(folder / "report.md", "\n".join(L) + "\n")

