"""``specsim report``: a capacity-planning report (markdown + PNGs) for a team lead.

Contents: the answer first (best configuration, its capacity and cost), the capacity and
cost table of every configuration, latency-vs-load curves of each system's best
configuration, the SLO frontier (capacity of every configuration), the assumptions, and the
provenance of the workload and cost profiles. Plots are drawn through ``simulator.report.plots.pyplot()``; every file
is written to a temporary name in the output folder and renamed into place, so a reader never
sees a half-written file.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.studies.capacity import (DEFAULT_REQUESTS, IntervalSpec, LoadSpec, Workers, capacity_points, config_key,
                                default_slo, headline, requests_for, run_points, search_table, serving_setup)
from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.slo import parse_slo
from simulator.report.capacity_markdown import ReportContent, capacity_markdown, device_word
from simulator.report.plots import pyplot

CURVE_POINTS = 12


def _atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename over ``path`` (simulator.inputs.loading)."""
    from simulator.inputs.loading import replace_atomic

    replace_atomic(path, write)


def build_report(scenario: str, out: Path, slo_text: str | None = None, requests: int | None = None,
                 seed: int | None = None, gpu_hour_cost: float | None = None, target_qps: float | None = None,
                 workers: int | None = None, ray_address: str | None = None, accuracy_floor: str | None = None,
                 accuracy_margin: float | None = None, interval: IntervalSpec | None = None,
                 systems: list[str] | None = None, gammas: list[int] | None = None, thresholds: list[int] | None = None,
                 progress=None, bench_serve: str | None = None, currency: str = "USD",
                 grid_overrides: dict | None = None) -> tuple[Path, str, list[str]]:
    """Accuracy first, then capacity: configurations that meet the accuracy floor, or whose own accuracy is
    measured while the floor's reference has none (``accuracy.searched``), get the replicated capacity search of ``specsim capacity`` (the same
    function, seeds and run length: the same figures); only those meeting the floor can be recommended. The
    others (fail, inconclusive, or no accuracy data) are listed with the reason and get no capacity figure
    (``--accuracy-floor none`` searches every configuration). Then the load curves; write report.md, PNGs,
    CSVs. Returns (report.md, the headline: best configuration and why, one line per reason configurations
    were not searched). ``bench_serve`` (or the
    scenario's ``serving_workload``): that serving workload's requests everywhere, searches and curves alike
    (``simulator.studies.capacity.bench``). ``grid_overrides``: --hardware / --tp. The grid is never trimmed
    (``capacity.search_grid``): the report searches only the configurations whose accuracy allows it."""
    from simulator.inputs.accuracy import excluded_text, parse_floor, scenario_accuracy

    rs = load_scenario(scenario, grid_overrides)
    serving, serving_note = serving_setup(rs, bench_serve)
    slo = parse_slo(default_slo(rs, serving) if slo_text is None else slo_text, "--slo")
    floor = parse_floor(accuracy_floor, accuracy_margin)
    acc_model = scenario_accuracy(rs)
    load = LoadSpec(requests=requests or DEFAULT_REQUESTS, seed=rs.scenario.seed if seed is None else seed)
    spec = interval or IntervalSpec()
    configs = _configs(rs, systems, gammas, thresholds, serving)
    by_key = _points_by_key(rs, slo, load, configs, serving)
    with Workers(workers, ray_address) as pool:  # one set of worker processes for both stages (their caches stay)
        # the same search as `specsim capacity` (simulator.studies.capacity.search_table): configurations failing the
        # accuracy floor, or without accuracy data of their own, are not searched and get no capacity figure
        cap, rec, skipped = search_table(rs, slo, load, configs, spec, acc_model, floor, gpu_hour_cost, target_qps,
                                         currency=currency, only_eligible=True, pool=pool, progress=progress and (
                                             lambda d, t, r: progress(d, t, r, "search replications (at most)")),
                                         serving=serving)
        cap["interval"] = ["converged" if c else "not converged" for c in cap.converged]
        curves = _load_curves(cap, by_key, pool, progress)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "capacity.csv", lambda p: cap.to_csv(p, index=False))
    _atomic_write(out / "latency_vs_load.csv", lambda p: curves.to_csv(p, index=False))
    _atomic_write(out / "latency_vs_load.png", lambda p: _plot_curves(curves, slo, p))
    _atomic_write(out / "slo_frontier.png", lambda p: _plot_frontier(cap, slo, p))
    _atomic_write(out / "pareto.png", lambda p: _plot_pareto(cap, p, device_word(rs.hardware_names)))
    _engine_load_at_capacity(out, rs, cap, rec, by_key, load, serving)
    meta = {"scenario": str(rs.path), "slo": slo.text, "requests_per_point": load.requests, "seed": load.seed,
            "gpu_hour_cost": gpu_hour_cost, "currency": currency, "target_qps": target_qps, "accuracy_floor": floor.describe(),
            "recommended": None if rec["best"] is None else rec["best"].label, "recommended_ties": rec["ties"],
            "resolved_scenario": rs.to_dict(), "serving_workload": serving and json.loads(serving)}
    _atomic_write(out / "resolved.json", lambda p: Path(p).write_text(json.dumps(meta, indent=1, default=str)))
    line = headline(cap, rec, slo.text, gpu_hour_cost, currency, target_qps, exact=serving is not None)
    md = capacity_markdown(ReportContent(rs, slo, load, cap, curves, gpu_hour_cost, target_qps, scenario, rec, floor,
                                         acc_model, spec, skipped, line, serving_note, bench_serve, currency))
    _atomic_write(out / "report.md", lambda p: Path(p).write_text(md))
    return out / "report.md", line, excluded_text(acc_model, skipped, floor)


def _configs(rs, systems, gammas, thresholds, serving) -> list:
    """The configurations to search (never trimmed: only the eligible ones are searched)."""
    configs = rs.system_configs(systems, gammas, thresholds)
    if serving is not None:
        from simulator.studies.capacity.bench import check_systems

        configs = check_systems(configs, bool(systems))
    if not configs:
        raise InputError(None, "--system", "no configuration left to search")
    return configs


def _points_by_key(rs, slo, load, configs, serving) -> dict:
    """The points by the key of the rows they become (capacity.table.config_key), built and checked before the
    search."""
    by_key = {}
    for p in capacity_points(rs, slo, load, configs, serving):
        if config_key(p) in by_key:
            raise InputError(None, "--system", f"two configurations are both named {config_key(p)}")
        by_key[config_key(p)] = p
    return by_key


def _load_curves(cap: pd.DataFrame, by_key: dict, pool, progress) -> pd.DataFrame:
    """Latency vs load: each system's best configuration on one log-spaced grid of rates spanning every system's
    knee (from 10% of the lowest capacity to 130% of the highest); a system stops at 140% of its own."""
    best = cap[cap.max_qps > 0].drop_duplicates("system")
    pts = []
    if len(best):
        rates = np.geomspace(0.1 * best.max_qps.min(), 1.3 * best.max_qps.max(), CURVE_POINTS)
        pts = [replace(by_key[config_key(r)], rate=float(q),
                       single_latency_s=float(r.single_request_latency_s))
               for r in best.itertuples() for q in rates if q <= 1.4 * r.max_qps]
    return pd.DataFrame(run_points(pts, pool=pool, progress=progress and (
        lambda d, t, r: progress(d, t, r, "latency-vs-load points")))) if pts else pd.DataFrame(
        columns=["label", "rate_qps", "latency_p50_s", "latency_p99_s", "goodput_qps"])


def _engine_load_at_capacity(out: Path, rs, cap: pd.DataFrame, rec: dict, by_key: dict, load, serving) -> None:
    """Engine load over time (engine_load.png) of the best configuration at its capacity, when it sustains any."""
    b = rec["best"] if rec["best"] is not None else (cap.iloc[0] if len(cap) else None)
    if b is None or not b.max_qps > 0:
        return
    from simulator.studies.capacity.search import point_plans
    from simulator.engines.serving.replica import simulate_serving

    bp = by_key[config_key(b)]
    mf = rs.scenario.memory_fraction
    n, _ = requests_for(bp, float(b.max_qps))
    if serving is not None:
        from simulator.studies.capacity.bench import arrivals as serving_arrivals

        arr, plans = serving_arrivals(serving, float(b.max_qps)), point_plans(bp, n)
    else:
        arr, plans = load.arrivals(float(b.max_qps)), None
    trace = simulate_serving(bp.cfg, rs.deployments(bp.hardware, bp.tp), rs.workload, arr, n, bp.seed,
                             (mf.small, mf.base), plans=plans, execution=rs.execution_for(bp.hardware, bp.tp),
                             engine=rs.scenario.serving_engine)
    _atomic_write(out / "engine_load.png", lambda p: _plot_engine_load(trace, f"{b.label} at {b.max_qps:.3g} req/s", p))


def _plot_curves(curves: pd.DataFrame, slo, path: str) -> None:
    plt = pyplot()
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
    plt = pyplot()
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
    plt = pyplot()
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


def pareto_front(cap: pd.DataFrame) -> pd.Series:
    """Configurations with known accuracy that no other known one dominates in (capacity per GPU up,
    accuracy up, single-request latency down), one at least strictly better."""
    k = cap[cap.accuracy.notna()]
    front = pd.Series(False, index=cap.index)
    for i, r in k.iterrows():
        dom = ((k.qps_per_gpu >= r.qps_per_gpu) & (k.accuracy >= r.accuracy) & (k.single_request_latency_s <= r.single_request_latency_s)
               & ((k.qps_per_gpu > r.qps_per_gpu) | (k.accuracy > r.accuracy) | (k.single_request_latency_s < r.single_request_latency_s)))
        front[i] = not dom.any()
    return front


def _plot_pareto(cap: pd.DataFrame, path: str, dev: str = "GPU") -> None:
    plt = pyplot()
    systems = list(dict.fromkeys(cap.system))
    colors = {s: plt.cm.tab10(i) for i, s in enumerate(systems)}
    front = pareto_front(cap)
    fig, ax = plt.subplots(figsize=(8.5, 5))
    ax.set_xscale("log")  # first: the labels below are placed on the log axis
    none = cap[~(cap.qps_per_gpu > 0)]  # sustained no load: no place on a log axis; named under the plot
    cap = cap[cap.qps_per_gpu > 0]
    known = cap[cap.accuracy.notna()]
    unknown = cap[cap.accuracy.isna()]
    lat = cap.single_request_latency_s
    size = 20 + 200 * (lat - lat.min()) / (lat.max() - lat.min() + 1e-12)
    for s in systems:
        k = known[known.system == s]
        if len(k):
            ax.errorbar(k.qps_per_gpu, k.accuracy, yerr=[(k.accuracy - k.accuracy_lo).clip(lower=0), (k.accuracy_hi - k.accuracy).clip(lower=0)],
                        xerr=[((k.max_qps - k.max_qps_lo.fillna(k.max_qps)) / k.gpus_per_replica).clip(lower=0),
                              ((k.max_qps_hi.fillna(k.max_qps) - k.max_qps) / k.gpus_per_replica).clip(lower=0)],
                        fmt="none", ecolor=colors[s], alpha=0.4, lw=0.8)
            ax.scatter(k.qps_per_gpu, k.accuracy, s=size[k.index], color=colors[s], label=s, alpha=0.8)
        u = unknown[unknown.system == s]
        if len(u):
            ax.scatter(u.qps_per_gpu, [-0.08] * len(u), s=size[u.index], color=colors[s], marker="x",
                       label=f"{s} (accuracy unknown)" if not len(k) else None)
    f = known[front[known.index]].sort_values("qps_per_gpu")
    if len(f):
        ax.plot(f.qps_per_gpu, f.accuracy, color="k", lw=1, ls="--", label="Pareto frontier")
        for r in f.itertuples():
            ax.annotate(r.label, (r.qps_per_gpu, r.accuracy), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.axhline(-0.04, color="0.7", lw=0.5)
    ax.text(ax.get_xlim()[0], -0.075, " below the line: accuracy unknown", fontsize=7, va="center")
    xlabel = f"max requests/s per {dev} under the SLO (bars: 95% interval)"
    if len(none):
        xlabel += "\nnot shown, no load sustained: " + ", ".join(none.label.astype(str))
    ax.set(xlabel=xlabel, ylabel="accuracy (bars: 95% interval)", ylim=(-0.12, 1.02),
           title="Latency-accuracy-capacity: marker size = single-request latency")
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
