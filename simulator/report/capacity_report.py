"""``specsim report``: a capacity-planning report (markdown + PNGs) for a team lead.

Contents: the answer first (best configuration, its capacity and cost), the capacity and
cost table of every configuration, latency-vs-load curves of each system's best
configuration, the SLO frontier (capacity of every configuration), the assumptions, and the
provenance of the workload and cost profiles. Plots are drawn through ``simulator.report.plots.pyplot()``; every file
is written to a temporary name in the output folder and renamed into place, so a reader never
sees a half-written file.
"""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.studies.capacity import (DEFAULT_REQUESTS, IntervalSpec, LoadSpec, Workers, capacity_points, config_key,
                                default_slo, headline, requests_for, run_points, search_table, serving_setup)
from simulator.studies.capacity.table import parallelism
from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.slo import parse_slo
from simulator.report.plots import pyplot

CURVE_POINTS = 12
ASSUMPTIONS = [
    "One replica = the scenario's GPUs at the given TP; the small and base engines are colocated on them and "
    "take turns (their iterations never overlap): one iteration of each engine with work per round.",
    "Continuous batching, vLLM-like: every iteration serves the whole running batch; a prefill is processed whole "
    "in one iteration (no chunked prefill); at most 256 sequences per engine.",
    "Iteration time = the cost model's pass time for the batch's aggregates (Deployment.batch_forward_time); "
    "a speculative iteration = gamma draft passes + one verification pass over gamma+1 tokens per sequence.",
    "Each engine call pays the per-call overhead t_call off the GPU (host side) before queueing.",
    "KV cache: vLLM's start-up plan per engine (gpu_memory_utilization x driver-reported memory - weights/TP - "
    "profile-pass activations - non-torch - CUDA graphs, in whole blocks; a lone engine gets the whole utilization, "
    "specreason's colocated engines split it; the draft's KV counted in the base engine). Prefixes stay cached between a request's calls "
    "and are evicted LRU when room is needed; decoding growth that does not fit preempts the youngest sequence "
    "(recompute).",
    "Requests follow the single-request engines' step semantics (simulator/engines/des.py), sampled at arrival: the same "
    "seed gives the same requests at every load (common random numbers).",
    "Latency statistics skip the first 10% of arrivals (warm-up from an empty system). A rate is sustained when "
    "the SLO holds and the run is stationary: the latency of the steady requests (10 batch means by arrival) does "
    "not rise by more than 20% of its mean over the run with a significant slope (one-sided t > 1.86), and the last "
    "quarter of arrivals' mean latency is <= 1.25x the second quarter's; each run spans at least 4 single-request "
    "latencies of arrivals.",
    "Capacity is per replica; replicas are independent (no router model). Costs assume the replica's GPUs are "
    "billed whether busy or not.",
]


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
    slo = parse_slo(slo_text or default_slo(rs, serving), "--slo")
    floor = parse_floor(accuracy_floor, accuracy_margin)
    acc_model = scenario_accuracy(rs)
    load = LoadSpec(requests=requests or DEFAULT_REQUESTS, seed=rs.scenario.seed if seed is None else seed)
    spec = interval or IntervalSpec()
    configs = rs.system_configs(systems, gammas, thresholds)  # never trimmed: only the eligible ones are searched
    if serving is not None:
        from simulator.studies.capacity.bench import check_systems

        configs = check_systems(configs, bool(systems))
    if not configs:
        raise InputError(None, "--system", "no configuration left to search")
    # the points by the key of the rows they become (capacity.table.config_key), built and checked before the search
    by_key = {}
    for p in capacity_points(rs, slo, load, configs, serving):
        if config_key(p) in by_key:
            raise InputError(None, "--system", f"two configurations are both named {config_key(p)}")
        by_key[config_key(p)] = p
    with Workers(workers, ray_address) as pool:  # one set of worker processes for both stages (their caches stay)
        # the same search as `specsim capacity` (simulator.studies.capacity.search_table): configurations failing the
        # accuracy floor, or without accuracy data of their own, are not searched and get no capacity figure
        cap, rec, skipped = search_table(rs, slo, load, configs, spec, acc_model, floor, gpu_hour_cost, target_qps,
                                         currency=currency, only_eligible=True, pool=pool, progress=progress and (
                                             lambda d, t, r: progress(d, t, r, "search replications (at most)")),
                                         serving=serving)
        cap["interval"] = ["converged" if c else "not converged" for c in cap.converged]
        # latency vs load: each system's best configuration on one log-spaced grid of rates spanning every
        # system's knee (from 10% of the lowest capacity to 130% of the highest); a system stops at 140% of its own
        best = cap[cap.max_qps > 0].drop_duplicates("system")
        pts = []
        if len(best):
            rates = np.geomspace(0.1 * best.max_qps.min(), 1.3 * best.max_qps.max(), CURVE_POINTS)
            pts = [replace(by_key[config_key(r)], rate=float(q),
                           single_latency_s=float(r.single_request_latency_s))
                   for r in best.itertuples() for q in rates if q <= 1.4 * r.max_qps]
        curves = pd.DataFrame(run_points(pts, pool=pool, progress=progress and (
            lambda d, t, r: progress(d, t, r, "latency-vs-load points")))) if pts else pd.DataFrame(
            columns=["label", "rate_qps", "latency_p50_s", "latency_p99_s", "goodput_qps"])

    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "capacity.csv", lambda p: cap.to_csv(p, index=False))
    _atomic_write(out / "latency_vs_load.csv", lambda p: curves.to_csv(p, index=False))
    _atomic_write(out / "latency_vs_load.png", lambda p: _plot_curves(curves, slo, p))
    _atomic_write(out / "slo_frontier.png", lambda p: _plot_frontier(cap, slo, p))
    _atomic_write(out / "pareto.png", lambda p: _plot_pareto(cap, p))
    b = rec["best"] if rec["best"] is not None else (cap.iloc[0] if len(cap) else None)
    if b is not None and b.max_qps > 0:  # engine load over time for the best configuration at its capacity
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
                                 (mf.small, mf.base), plans=plans, execution=rs.scenario.execution)
        _atomic_write(out / "engine_load.png", lambda p: _plot_engine_load(trace, f"{b.label} at {b.max_qps:.3g} req/s", p))
    meta = {"scenario": str(rs.path), "slo": slo.text, "requests_per_point": load.requests, "seed": load.seed,
            "gpu_hour_cost": gpu_hour_cost, "currency": currency, "target_qps": target_qps, "accuracy_floor": floor.describe(),
            "recommended": None if rec["best"] is None else rec["best"].label, "recommended_ties": rec["ties"],
            "resolved_scenario": rs.to_dict(), "serving_workload": serving and json.loads(serving)}
    _atomic_write(out / "resolved.json", lambda p: Path(p).write_text(json.dumps(meta, indent=1, default=str)))
    line = headline(cap, rec, slo.text, gpu_hour_cost, currency, target_qps)
    meta["headline"] = line
    md = _markdown(rs, slo, load, cap, curves, gpu_hour_cost, target_qps, scenario, rec, floor, acc_model, spec,
                   skipped, line, serving_note, bench_serve, currency)
    _atomic_write(out / "report.md", lambda p: Path(p).write_text(md))
    return out / "report.md", line, excluded_text(acc_model, skipped, floor)


def _at_lower_bound(b, dev: str) -> str:
    """The Answer's replicas at the interval's lower bound, where they differ from those at the max rate."""
    lo = b.get("replicas_lo", b.replicas)
    if not np.isfinite(lo):
        return "; no count is shown to suffice at the interval's lower bound (0 requests/s)"
    return (f"; {int(lo)} = {int(b.gpus_lo)} {dev}(s) if the capacity is at its interval's lower bound "
            f"({b.max_qps_lo:.3g} requests/s)" if lo != b.replicas else "")


def _replicas(r, col: str) -> str:
    """Replicas (or GPUs) for the target at the max rate, with the count at the interval's lower bound where it is
    higher: ``3 (4)``."""
    at, lo = getattr(r, col, np.nan), getattr(r, f"{col}_lo", np.nan)
    return _fmt(at) + (f" ({_fmt(lo)})" if np.isfinite(at) and np.isfinite(lo) and lo != at else "")


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


def _plot_pareto(cap: pd.DataFrame, path: str) -> None:
    plt = pyplot()
    systems = list(dict.fromkeys(cap.system))
    colors = {s: plt.cm.tab10(i) for i, s in enumerate(systems)}
    front = pareto_front(cap)
    fig, ax = plt.subplots(figsize=(8.5, 5))
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
    ax.text(ax.get_xlim()[0], -0.075, " accuracy unknown", fontsize=7, va="center")
    ax.set(xscale="log", xlabel="max requests/s per GPU under the SLO (bars: 95% interval)",
           ylabel="accuracy (bars: 95% interval)", ylim=(-0.12, 1.02),
           title="Latency-accuracy-capacity: marker size = single-request latency")
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _fmt(v, nd=3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)) or v is pd.NA:
        return "—"
    return f"{v:.{nd}g}" if isinstance(v, (float, np.floating)) else str(v)


def _ci(r) -> str:
    lo, hi = getattr(r, "max_qps_lo", np.nan), getattr(r, "max_qps_hi", np.nan)
    if not np.isfinite(hi):
        return "—"
    return f"[{lo:.3g}, {hi:.3g}]"


def _acc(r) -> str:
    return "unknown" if not np.isfinite(r.accuracy) else f"{r.accuracy:.3f} [{r.accuracy_lo:.3f}, {r.accuracy_hi:.3f}]"


def _markdown(rs, slo, load, cap, curves, gpu_hour_cost, target_qps, scenario_arg, rec, floor, acc_model, spec,
              skipped=(), line: str = "", serving_note: str | None = None, bench_serve: str | None = None,
              currency: str = "USD") -> str:
    from simulator.studies.capacity import EQUIVALENCE

    sc, w = rs.scenario, rs.workload
    b = rec["best"]
    dev = "CPU host" if all(str(h) == "cpu" for h in rs.hardware_names) else "GPU"  # what a replica is made of
    L = [f"# Capacity plan: {sc.name}", "", f"**{line}**", ""]
    if serving_note or rs.workload_note():
        L += [f"> Note: {serving_note or rs.workload_note()}", ""]
    L += [
         f"_{sc.description}_  ", f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} by `specsim report`.", "",
         "## Answer", "", f"Accuracy floor: {floor.describe()}.", ""]
    if b is not None:
        L.append(f"- **Recommended: {b.label}** on {b.hardware} ({parallelism(b)}): one replica sustains "
                 f"**{b.max_qps:.3g} requests/s** ({_ci(b)} 95% interval, {int(b.replications)} replications) under "
                 f"`{slo.text}` ({b.qps_per_gpu:.3g} requests/s per {dev}); accuracy {_acc(b)} ({b.accuracy_why}).")
        if rec["ties"]:
            L.append(f"- **Within the interval of the best** (tied: the paired 95% interval of the per-{dev} capacity "
                     f"difference over common seeds does not exceed {EQUIVALENCE:.0%}): {', '.join(rec['ties'])}.")
        if gpu_hour_cost:
            L.append(f"- Cost at capacity: **{b.cost_per_1000_requests:.3g} {currency} per 1000 requests** at {gpu_hour_cost:g} "
                     f"{currency} per {dev}-hour.")
        if target_qps:
            L.append(f"- For {target_qps:g} requests/s: **{int(b.replicas)} replica(s) = {int(b.gpus)} {dev}(s)**"
                     + _at_lower_bound(b, dev) + ".")
        if not b.converged:
            L.append(f"- The interval did not reach ±{spec.target:.0%} of the rate within {spec.max_reps} replications "
                     f"(half-width {b.half_width_rel:.0%}); raise `--requests` for a final plan.")
    else:
        L.append("- **No configuration can be recommended**: none is shown to meet the accuracy floor with a capacity "
                 f"above 0 under `{slo.text}`. See the excluded configurations below.")
    if len(skipped):
        L.append(f"- {len(skipped)} configuration(s) were not searched: they fail the accuracy floor, are inconclusive "
                 "against it or have no accuracy data of their own, so they cannot be recommended (listed below with the reason; `--accuracy-floor "
                 "none` searches them too).")
    from simulator.engines.serving.metrics import DRIFT_LIMIT

    more = (f"then the run length is doubled up to {spec.max_request_doublings}x" if spec.max_request_doublings else
            "one run length for every configuration; a row that does not get there says converged False")
    L += ["", f"SLO: `{slo.text}` (a rate meets it when the requests after the warm-up do and the run is stationary: "
          f"no significant latency growth, no drift: the last quarter of arrivals' mean latency <= {DRIFT_LIMIT:g}x the "
          f"second quarter's). Load: Poisson arrivals; seed {load.seed}.", "",
          f"Capacity intervals: configurations that meet the accuracy floor get replications with common random numbers "
          f"(replication k = the same requests and arrival gaps in every configuration), at least {spec.min_reps}, until the "
          f"95% t-interval's half-width is <= {spec.target:.0%} of the rate (at most {spec.max_reps}; {more}), "
          f"{load.requests} requests per simulation: the search of `specsim capacity` (same seeds, same run length, "
          f"same figures). A configuration already significantly below the best (the paired test below) gets no more "
          f"replications: its rank cannot become 1 (converged: no: stopped). "
          f"Configurations that fail the accuracy floor, are inconclusive against it or have no accuracy data of "
          f"their own are not searched; "
          f"one with measured accuracy whose floor cannot be judged (the reference's accuracy unknown) is searched "
          f"but never recommended. "
          f"Rank = 1 + the number of configurations whose per-{dev} capacity is higher with a paired 95% interval "
          f"of the difference above {EQUIVALENCE:.0%} of the lower one. Standing: among the configurations that meet the "
          f"accuracy floor, re-ranked alone, those of rank 1 beside the best are within the interval of the best (a "
          f"tie; the Answer's list). A configuration that sustains no load is not ranked. Replicas for the target: at "
          f"the max rate, and in brackets at the 95% interval's lower bound where that needs more.", "",
          "## Capacity, accuracy and cost per configuration", "",
          "| rank | configuration | hardware | TP | max req/s | 95% interval | converged | reps | standing | req/s per " + dev
          + f" | accuracy [95%] | floor | p99 latency at max (s) | cost / 1000 req ({currency}) | replicas | " + dev + "s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in cap.itertuples():
        L.append(f"| {'—' if pd.isna(r.rank) else r.rank} | {r.label} | {r.hardware} | {r.tp} | {_fmt(r.max_qps)} | {_ci(r)} | "
                 f"{'yes' if r.converged else ('no: stopped, below the best' if getattr(r, 'stopped_below_best', False) else '**no**')}"
                 f" | {int(r.replications)} | {r.standing} | "
                 f"{_fmt(r.qps_per_gpu)} | {_acc(r)} | {r.accuracy_floor} | {_fmt(r.latency_p99_s)} | "
                 f"{_fmt(getattr(r, 'cost_per_1000_requests', np.nan))} | {_replicas(r, 'replicas')} | {_replicas(r, 'gpus')} |")
    from simulator.inputs.accuracy import excluded_text

    L += ["", "## Excluded configurations and why", ""]
    L += [f"- {t}." for t in excluded_text(acc_model, skipped, floor)] or ["- none: every configuration was searched."]
    kept = cap[(cap.accuracy_floor != "meets") & (cap.max_qps > 0)]
    if len(kept):
        L.append(f"- {', '.join(kept.label)}: searched (accuracy measured) but not recommended: the accuracy floor "
                 f"is not shown to be met ({'; '.join(dict.fromkeys(kept.accuracy_why))}).")
    zero = cap[cap.max_qps <= 0]
    if len(zero):
        L.append(f"- {', '.join(zero.label)}: no rate meets `{slo.text}` (sustain no load); not ranked.")
    L += ["", "## Latency, accuracy and capacity", "", "![Pareto frontier](pareto.png)", "",
          "Pareto frontier (dashed): configurations with known accuracy that no other beats on capacity per GPU, accuracy "
          "and single-request latency at once. Crosses at the bottom: accuracy unknown (no graded answers; never guessed)."]
    if acc_model.profile is not None:
        pr = acc_model.profile
        L += ["", f"Accuracy data: `{pr.name}` ({pr.provenance.kind}: {pr.provenance.source}). Speculative decoding is exact: "
              "specdecode has vanilla-base's accuracy and specreason-decode specreason's, at every gamma."]
        for c in pr.published:
            L.append(f"- Published (qualitative, not used as a number): {c.text} Source: {c.source}.")
    else:
        L += ["", f"Accuracy data: none ({acc_model.unknown_reason})."]
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
    if b is not None and b.max_qps > 0:
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
          f"--seed {load.seed}" + (f" --gpu-hour-cost {gpu_hour_cost:g} --currency {shlex.quote(currency)}" if gpu_hour_cost else "")
          + (f" --target-qps {target_qps:g}" if target_qps else "")
          + (" --bench-serve " + shlex.quote(bench_serve) if bench_serve else ""), "```", "",
          "Files: `capacity.csv`, `latency_vs_load.csv`, `resolved.json` (the resolved scenario and run settings).", ""]
    return "\n".join(L)
