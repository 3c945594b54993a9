"""``specsim report``: a capacity-planning report (markdown + PNGs) for a team lead.

Contents: the answer first (best configuration, its capacity and cost), the capacity and
cost table of every configuration, latency-vs-load curves of each system's best
configuration, the SLO frontier (capacity of every configuration), the assumptions, and the
provenance of the workload and cost profiles. Plots use matplotlib's Agg backend; every file
is written to a temporary name in the output folder and renamed into place, so a reader never
sees a half-written file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.capacity import (DEFAULT_REQUESTS, LoadSpec, capacity_points, capacity_table, default_slo,
                                requests_for, run_points)
from simulator.scenario import load_scenario
from simulator.serving.slo import parse_slo

CURVE_POINTS = 12
ASSUMPTIONS = [
    "One replica = the scenario's GPUs at the given TP; the small and base engines are colocated on them and "
    "take turns (their iterations never overlap): one iteration of each engine with work per round.",
    "Continuous batching, vLLM-like: every iteration serves the whole running batch; a prefill is processed whole "
    "in one iteration (no chunked prefill); at most 256 sequences per engine.",
    "Iteration time = the cost model's pass time for the batch's aggregates (Deployment.batch_forward_time); "
    "a speculative iteration = gamma draft passes + one verification pass over gamma+1 tokens per sequence.",
    "Each engine call pays the per-call overhead t_call off the GPU (host side) before queueing.",
    "KV cache: static memory split (memory_fraction); capacity = (fraction x memory - weights/TP) / KV bytes per "
    "token per GPU (the draft's KV counted in the base engine). Prefixes stay cached between a request's calls "
    "and are evicted LRU when room is needed; decoding growth that does not fit preempts the youngest sequence "
    "(recompute).",
    "Requests follow the single-request engines' step semantics (simulator/des.py), sampled at arrival: the same "
    "seed gives the same requests at every load (common random numbers).",
    "Latency statistics skip the first 10% of arrivals (warm-up from an empty system). A rate is sustained when "
    "the SLO holds and the latency does not drift upward over the run (last quarter of arrivals <= 1.5x the "
    "second quarter); each run spans at least 4 single-request latencies of arrivals.",
    "Capacity is per replica; replicas are independent (no router model). Costs assume the replica's GPUs are "
    "billed whether busy or not.",
]


def _atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def build_report(scenario: str, out: Path, slo_text: str | None = None, requests: int | None = None,
                 seed: int | None = None, gpu_hour_cost: float | None = None, target_qps: float | None = None,
                 workers: int | None = None, ray_address: str | None = None) -> Path:
    """Run the capacity search and the load curves; write report.md, PNGs, CSVs. Returns report.md."""
    rs = load_scenario(scenario)
    slo = parse_slo(slo_text or default_slo(rs), "--slo")
    load = LoadSpec(requests=requests or DEFAULT_REQUESTS, seed=rs.scenario.seed if seed is None else seed)
    cap = capacity_table(run_points(capacity_points(rs, slo, load), workers, ray_address), gpu_hour_cost, target_qps)
    # latency vs load: each system's best configuration on one log-spaced grid of rates spanning every
    # system's knee (from 10% of the lowest capacity to 130% of the highest); a system stops at 140% of its own
    best = cap[cap.max_qps > 0].drop_duplicates("system")
    by_label = {p.cfg.label + f"|{p.hardware}|{p.tp}": p for p in capacity_points(rs, slo, load)}
    pts = []
    if len(best):
        rates = np.geomspace(0.1 * best.max_qps.min(), 1.3 * best.max_qps.max(), CURVE_POINTS)
        pts = [replace(by_label[f"{r.label}|{r.hardware}|{r.tp}"], rate=float(q))
               for r in best.itertuples() for q in rates if q <= 1.4 * r.max_qps]
    curves = pd.DataFrame(run_points(pts, workers, ray_address)) if pts else pd.DataFrame(
        columns=["label", "rate_qps", "latency_p50_s", "latency_p99_s", "goodput_qps"])

    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "capacity.csv", lambda p: cap.to_csv(p, index=False))
    _atomic_write(out / "latency_vs_load.csv", lambda p: curves.to_csv(p, index=False))
    _atomic_write(out / "latency_vs_load.png", lambda p: _plot_curves(curves, slo, p))
    _atomic_write(out / "slo_frontier.png", lambda p: _plot_frontier(cap, slo, p))
    b = cap.iloc[0]
    if b.max_qps > 0:  # engine load over time for the best configuration at its capacity
        from simulator.serving.replica import simulate_serving

        bp = by_label[f"{b.label}|{b.hardware}|{b.tp}"]
        mf = rs.scenario.memory_fraction
        n, _ = requests_for(bp, float(b.max_qps))
        trace = simulate_serving(bp.cfg, rs.deployments(bp.hardware, bp.tp), rs.workload, load.arrivals(float(b.max_qps)),
                                 n, bp.seed, (mf.small, mf.base), load.max_batch,
                                 execution=rs.scenario.execution)
        _atomic_write(out / "engine_load.png", lambda p: _plot_engine_load(trace, f"{b.label} at {b.max_qps:.3g} req/s", p))
    meta = {"scenario": str(rs.path), "slo": slo.text, "requests_per_point": load.requests, "seed": load.seed,
            "gpu_hour_cost": gpu_hour_cost, "target_qps": target_qps,
            "resolved_scenario": rs.to_dict()}
    _atomic_write(out / "resolved.json", lambda p: Path(p).write_text(json.dumps(meta, indent=1, default=str)))
    md = _markdown(rs, slo, load, cap, curves, gpu_hour_cost, target_qps, scenario)
    _atomic_write(out / "report.md", lambda p: Path(p).write_text(md))
    return out / "report.md"


def _plot_curves(curves: pd.DataFrame, slo, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, g in curves.groupby("label", sort=False):
        g = g.sort_values("rate_qps")
        line, = axes[0].plot(g.rate_qps, g.latency_p99_s, marker="o", label=f"{label} p99")
        axes[0].plot(g.rate_qps, g.latency_p50_s, ls="--", color=line.get_color(), alpha=0.7)
        axes[1].plot(g.rate_qps, g.goodput_qps, marker="o", color=line.get_color(), label=label)
    for t in slo.terms:
        if t.metric == "latency_s":
            axes[0].axhline(t.limit_s, color="k", lw=1, ls=":", label=f"SLO {t.name} <= {t.limit_s:g}s")
    axes[0].set(xlabel="offered load (requests/s)", ylabel="latency (s): p99 solid, p50 dashed", yscale="log", xscale="log",
                title="Latency vs load (best configuration per system)")
    if len(curves):
        lim = [curves.rate_qps.min(), curves.rate_qps.max()]
        axes[1].plot(lim, lim, color="0.7", lw=1, ls=":")
    axes[1].set(xlabel="offered load (requests/s)", ylabel="goodput (requests/s within SLO)", title="Goodput",
                xscale="log", yscale="log")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _plot_engine_load(trace, title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, e in trace.timeline.groupby("engine", sort=False):
        if not len(e):
            continue
        axes[0].step(e["at"], e["batch"], where="post", label=name, lw=0.8)
        cap = trace.info["kv_capacity_tokens"][name]
        if cap:
            axes[1].step(e["at"], e["kv_used_tokens"] / cap, where="post", label=name, lw=0.8)
    axes[0].set(xlabel="time (s)", ylabel="running sequences", title=f"Batch size: {title}")
    axes[1].set(xlabel="time (s)", ylabel="KV cache occupancy", ylim=(0, 1.05), title="KV cache occupancy")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _plot_frontier(cap: pd.DataFrame, slo, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = cap.sort_values("max_qps")
    labels = [f"{r.label} [{r.hardware} tp={r.tp}]" for r in c.itertuples()]
    systems = list(dict.fromkeys(cap.system))
    colors = {s: plt.cm.tab10(i) for i, s in enumerate(systems)}
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(c) + 1.5))
    ax.barh(labels, c.max_qps, color=[colors[s] for s in c.system])
    ax.set(xlabel="max requests/s per replica under the SLO", title=f"SLO frontier: {slo.text}")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _fmt(v, nd=3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)) or v is pd.NA:
        return "—"
    return f"{v:.{nd}g}" if isinstance(v, (float, np.floating)) else str(v)


def _markdown(rs, slo, load, cap, curves, gpu_hour_cost, target_qps, scenario_arg) -> str:
    sc, w = rs.scenario, rs.workload
    b = cap.iloc[0]
    L = [f"# Capacity plan: {sc.name}", "",
         f"_{sc.description}_  ", f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} by `specsim report`.", "",
         "## Answer", ""]
    if b.max_qps > 0:
        L.append(f"- **Best configuration: {b.label}** on {b.hardware} (TP={b.tp}): one replica sustains "
                 f"**{b.max_qps:.3g} requests/s** under `{slo.text}` ({b.qps_per_gpu:.3g} requests/s per GPU).")
        if gpu_hour_cost:
            L.append(f"- Cost at capacity: **{b.cost_per_1000_requests:.3g} per 1000 requests** at {gpu_hour_cost:g} per GPU-hour.")
        if target_qps:
            L.append(f"- For {target_qps:g} requests/s: **{int(b.replicas)} replica(s) = {int(b.gpus)} GPU(s)**.")
        van = cap[cap.system == "vanilla-base"]
        if len(van) and van.max_qps.iloc[0] > 0 and b.system != "vanilla-base":
            L.append(f"- That is {b.max_qps / van.max_qps.iloc[0]:.2f}x the capacity of vanilla-base.")
    else:
        L.append(f"- **No configuration meets `{slo.text}` even at 5% of its single-request throughput.** Relax the SLO.")
    L += ["", f"SLO: `{slo.text}` (a rate meets it when the requests after the warm-up do). Load: Poisson arrivals; "
          f"{load.requests} requests per simulated point, seed {load.seed}.", "",
          "## Capacity and cost per configuration", "",
          "| configuration | hardware | TP | max req/s | req/s per GPU | p99 latency at max (s) | mean TTFT at max (s) | "
          "base batch | small batch | cost / 1000 req | replicas | GPUs |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in cap.itertuples():
        L.append(f"| {r.label} | {r.hardware} | {r.tp} | {_fmt(r.max_qps)} | {_fmt(r.qps_per_gpu)} | {_fmt(r.latency_p99_s)} | "
                 f"{_fmt(r.ttft_mean_s)} | {_fmt(r.base_batch_mean, 2)} | {_fmt(r.small_batch_mean, 2)} | "
                 f"{_fmt(getattr(r, 'cost_per_1000_requests', np.nan))} | {_fmt(getattr(r, 'replicas', np.nan))} | "
                 f"{_fmt(getattr(r, 'gpus', np.nan))} |")
    L += ["", "Single-request latency (analytic engine) of each configuration is in `capacity.csv` "
          "(`single_request_latency_s`), with every metric at the capacity point.", "",
          "## Latency vs load", "", "![latency vs load](latency_vs_load.png)", "",
          "Each system's best configuration on one grid of offered loads (log scale). Speculation's benefit shrinks "
          "under load: its extra passes (drafts, scoring, regenerations) compete for the same GPUs as the batch grows.", "",
          "p99 latency (s) by offered load (requests/s); blank: beyond 140% of that configuration's capacity.", "",
          "| configuration | " + " | ".join(f"{q:.3g}/s" for q in sorted(curves.rate_qps.unique())) + " |",
          "|---|" + "---|" * curves.rate_qps.nunique()]
    grid = sorted(curves.rate_qps.unique())
    for label, g in curves.groupby("label", sort=False):
        at = dict(zip(g.rate_qps, g.latency_p99_s))
        L.append(f"| {label} | " + " | ".join(_fmt(at[q]) if q in at else "" for q in grid) + " |")
    if b.max_qps > 0:
        L += ["", "## Engine load at capacity", "", "![engine load](engine_load.png)", "",
              f"Batch size and KV-cache occupancy of each engine over one simulated run of {b.label} at its capacity "
              "(arrivals stop after the run's requests, hence the final drain)."]
    L += ["", "## SLO frontier", "", "![SLO frontier](slo_frontier.png)", "",
          "## Assumptions", ""] + [f"- {a}" for a in ASSUMPTIONS]
    L += ["", "## Provenance", "",
          f"- Workload `{w.name}` ({w.dataset}; base {w.base_model}, small {w.small_model}): "
          f"{w.provenance.kind} — {w.provenance.source}" + (f"; {w.provenance.method}" if getattr(w.provenance, 'method', None) else "")]
    for h in rs.hardware_names:
        p = rs.cost_profile(h)
        L.append(f"- Cost profile for {h}: `{p.name}`, {p.provenance.kind} — {p.provenance.source}")
    L += ["", "## Reproduce", "", "```", f"specsim report {scenario_arg} --out <DIR> --slo '{slo.text}' --requests {load.requests} "
          f"--seed {load.seed}" + (f" --gpu-hour-cost {gpu_hour_cost:g}" if gpu_hour_cost else "")
          + (f" --target-qps {target_qps:g}" if target_qps else ""), "```", "",
          "Files: `capacity.csv`, `latency_vs_load.csv`, `resolved.json` (the resolved scenario and run settings).", ""]
    return "\n".join(L)
