"""The markdown of ``specsim report`` (:func:`simulator.report.capacity_report.build_report`): the answer first, the
method, the capacity table, the excluded configurations, accuracy, load curves, assumptions, provenance and the
command that reproduces it, one section per function."""

from __future__ import annotations

import datetime as _dt
import shlex
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.paths import code_version
from simulator.studies.capacity.table import EXACT_TRAFFIC, parallelism


def device_word(hardware_names) -> str:
    """What a replica of these hardware names is made of, as the report names it: "CPU host" or "GPU"."""
    return "CPU host" if all(str(h) == "cpu" for h in hardware_names) else "GPU"


ASSUMPTIONS = [
    "One replica = the scenario's devices (GPUs, or CPU hosts) at the given TP; the small and base engines are "
    "colocated on them and "
    "take turns (their iterations never overlap): one iteration of each engine with work per round.",
    "Continuous batching, vLLM V1-like: every iteration serves the whole running batch; prefills are chunked into "
    "the token budget left after the decoding sequences' tokens (execution.max_num_batched_tokens); at most "
    "execution.max_num_seqs sequences per engine. Unset, both are what `vllm serve` picks on each GPU "
    "(simulator.catalog.engine_hosts.batch_defaults); the values used are under Provenance.",
    "Iteration time = the cost model's pass time for the batch's aggregates (Deployment.batch_forward_time); "
    "a speculative iteration = gamma draft passes + one verification pass over gamma+1 tokens per sequence.",
    "Each engine call pays the per-call overhead t_call off the GPU (host side) before queueing. Host costs per "
    "step, sequence and call are the serving engine's version's (Provenance); async scheduling overlaps them as "
    "that version defaults it, off for an engine speculating with a separate draft model or prompt lookup unless "
    "the scenario sets serving_engine.async_scheduling.",
    "KV cache: vLLM's start-up plan per engine (gpu_memory_utilization x driver-reported memory - weights/TP - "
    "profile-pass activations - non-torch - CUDA graphs, in whole blocks; a lone engine gets the whole utilization, "
    "specreason's colocated engines split it; the draft's KV counted in the base engine). Running sequences hold "
    "whole blocks (on average half a block beyond their tokens; vLLM's null block aside) and, when speculating, "
    "the slots of their drafts (2 gamma; gamma with prompt lookup). Prefixes stay cached between a request's calls "
    "and are evicted LRU when room is needed; decoding growth that does not fit preempts the youngest sequence "
    "(recompute). Checked against vLLM 0.32's scheduler in engine steps (specsim validate kv-waves).",
    "Requests follow the single-request engines' step semantics (simulator/engines/des.py), sampled at arrival: the same "
    "seed gives the same requests at every load (common random numbers).",
    "Latency statistics skip the first 10% of arrivals (warm-up from an empty system). A rate is sustained when "
    "the SLO holds and the run is stationary: the latency of the steady requests (10 batch means by arrival) does "
    "not rise by more than 20% of its mean over the run with a significant slope (one-sided t > 1.86), and the last "
    "quarter of arrivals' mean latency is <= 1.25x the second quarter's; each run spans at least 4 single-request "
    "latencies of arrivals.",
    "Capacity is per replica; replicas are independent (no router model). Costs assume the replica's devices are "
    "billed whether busy or not.",
]


@dataclass(frozen=True)
class ReportContent:
    """What the report says: the resolved scenario ``rs``, SLO, load and interval settings, the capacity table
    ``cap`` with the recommendation ``rec``, the load ``curves``, the accuracy model and floor, the configurations
    not searched (``skipped``), the headline ``line`` and the command-line settings it reproduces."""

    rs: object
    slo: object
    load: object
    cap: pd.DataFrame
    curves: pd.DataFrame
    gpu_hour_cost: float | None
    target_qps: float | None
    scenario_arg: str
    rec: dict
    floor: object
    acc_model: object
    spec: object
    skipped: tuple = ()
    line: str = ""
    serving_note: str | None = None
    bench_serve: str | None = None
    currency: str = "USD"

    @property
    def exact(self) -> bool:
        """The requests are a serving benchmark's (a serving workload): every configuration decodes them exactly."""
        return self.serving_note is not None

    @property
    def dev(self) -> str:
        """What a replica is made of: CPU hosts or GPUs."""
        return device_word(self.rs.hardware_names)


def capacity_markdown(c: ReportContent) -> str:
    """The whole report.md."""
    sc = c.rs.scenario
    L = [f"# Capacity plan: {sc.name}", "", f"**{c.line}**", ""]
    if c.serving_note or c.rs.workload_note():
        L += [f"> Note: {c.serving_note or c.rs.workload_note()}", ""]
    L += [
         f"_{sc.description}_  ", f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} by `specsim simulate report`.", "",
         "## Answer", "", (f"Accuracy: {EXACT_TRAFFIC}." if c.exact else f"Accuracy floor: {c.floor.describe()}."), ""]
    L += _answer(c) + model_error_section(c) + _method(c) + _capacity_table(c) + _excluded(c) + _accuracy(c) + _load_curves(c)
    L += ["", "## SLO frontier", "", "![SLO frontier](slo_frontier.png)", "",
          "## Assumptions", ""] + [f"- {a}" for a in ASSUMPTIONS]
    L += _provenance(c)
    return "\n".join(L)


def _answer(c: ReportContent) -> list[str]:
    """The Answer's bullets: the recommendation with its interval, ties, cost and replicas, or why there is none."""
    from simulator.inputs.accuracy import accuracy_text
    from simulator.studies.capacity import EQUIVALENCE

    b, dev, spec, slo, currency = c.rec["best"], c.dev, c.spec, c.slo, c.currency
    L = []
    if b is not None:
        L.append(f"- **Recommended: {b.label}** on {b.hardware} ({parallelism(b)}): one replica sustains "
                 f"**{b.max_qps:.3g} requests/s** ({_ci(b)} 95% interval, {int(b.replications)} replications) under "
                 f"`{slo.text}` ({b.qps_per_gpu:.3g} requests/s per {dev})"
                 + ("." if c.exact else f"; accuracy {_acc(b)} ({b.accuracy_why})." if np.isfinite(b.accuracy)
                    else f"; {accuracy_text(b.accuracy, b.accuracy_why)}."))
        if c.rec["ties"]:
            L.append(f"- **Within the interval of the best** (tied: the paired 95% interval of the per-{dev} capacity "
                     f"difference over common seeds does not exceed {EQUIVALENCE:.0%}): {', '.join(c.rec['ties'])}.")
        if c.gpu_hour_cost:
            L.append(f"- Cost at capacity: **{b.cost_per_1000_requests:.3g} {currency} per 1000 requests** at {c.gpu_hour_cost:g} "
                     f"{currency} per {dev}-hour.")
        if c.target_qps:
            L.append(f"- For {c.target_qps:g} requests/s: **{int(b.replicas)} replica(s) = {int(b.gpus)} {dev}(s)**"
                     + _at_lower_bound(b, dev) + ".")
        if not b.converged:
            L.append(f"- The interval did not reach ±{spec.target:.0%} of the rate within {spec.max_reps} replications "
                     f"(half-width {b.half_width_rel:.0%}); raise `--requests` for a final plan.")
    else:
        L.append("- **No configuration can be recommended**: none is shown to meet the accuracy floor with a capacity "
                 f"above 0 under `{slo.text}`. See the excluded configurations below.")
    if len(c.skipped):
        L.append(f"- {len(c.skipped)} configuration(s) were not searched: they fail the accuracy floor, are inconclusive "
                 "against it or have no accuracy data of their own, so they cannot be recommended (listed below with the reason; `--accuracy-floor "
                 "none` searches them too).")
    return L


def model_error_section(c: ReportContent) -> list[str]:
    """The model's own held-out error on the scenario's GPUs, beside the interval (the simulation's noise only)."""
    from simulator.catalog.serving_accuracy import HEADING, scenario_error_lines

    lines = scenario_error_lines(c.rs)
    if not lines:
        return []
    return ["", "## How far to trust these figures", "",
            "The 95% intervals are the simulation's own noise (replications over common seeds), not the model's "
            f"error. {HEADING}: released `vllm bench serve` runs, each predicted with host terms fitted without its "
            "GPU's runs; median |predicted / measured - 1| per figure, in brackets the median signed error (negative: "
            "predicted low, e.g. a TPOT predicted low means the SLO is met more easily here than on the GPU):", ""]\
        + [f"- {line}" for line in lines]\
        + ["", "Not in those runs: speculative decoding or SpecReason under load, Poisson arrivals (bursts of 1000 "
           "requests and closed loops of 4 users), vLLM versions after 0.13. Per regime and version: "
           "docs/results.md (serving under load on released GPU tables), reports/serving-released/regimes.md."]


def _method(c: ReportContent) -> list[str]:
    """How a rate is judged and how capacities are searched, ranked and compared."""
    from simulator.engines.serving.metrics import DRIFT_LIMIT
    from simulator.studies.capacity import EQUIVALENCE

    slo, load, spec, dev = c.slo, c.load, c.spec, c.dev
    more = (f"then the run length is doubled up to {spec.max_request_doublings}x" if spec.max_request_doublings else
            "one run length for every configuration; a row that does not get there says converged False")
    return ["", f"SLO: `{slo.text}` (a rate meets it when the requests after the warm-up do and the run is stationary: "
          f"no significant latency growth, no drift: the last quarter of arrivals' mean latency <= {DRIFT_LIMIT:g}x the "
          f"second quarter's). Load: Poisson arrivals; seed {load.seed}.", "",
          f"Capacity intervals: configurations that meet the accuracy floor get replications with common random numbers "
          f"(replication k = the same requests and arrival gaps in every configuration), at least {spec.min_reps}, until the "
          f"95% t-interval's half-width is <= {spec.target:.0%} of the rate (at most {spec.max_reps}; {more}), "
          f"{load.requests} requests per simulation: the search of `specsim capacity` (same seeds, same run length, "
          f"same figures). A configuration already significantly below the best (the paired test below) gets no more "
          f"replications: its rank cannot become 1 (converged: no: stopped, below the best); nor does one that cannot "
          f"be recommended (converged: no: stopped, cannot be recommended). "
          f"Configurations that fail the accuracy floor, are inconclusive against it or have no accuracy data of "
          f"their own are not searched; "
          f"one with measured accuracy whose floor cannot be judged (the reference's accuracy unknown) is searched "
          f"but never recommended. "
          f"Rank = 1 + the number of configurations whose per-{dev} capacity is higher with a paired 95% interval "
          f"of the difference above {EQUIVALENCE:.0%} of the lower one. Standing: among the configurations that meet the "
          f"accuracy floor, re-ranked alone, those of rank 1 beside the best are within the interval of the best (a "
          f"tie; the Answer's list). A configuration that sustains no load is not ranked. Replicas for the target: at "
          f"the max rate, and in brackets at the 95% interval's lower bound where that needs more. The SLO's figures "
          f"\"at max\" are one replication's, the one whose max rate is nearest the mean, at its own max rate (the "
          f"rate the SLO was judged at; the mean's own run does not exist).", ""]


def _capacity_table(c: ReportContent) -> list[str]:
    """One row per configuration: rank, capacity and interval, accuracy, cost, replicas."""
    cap, dev, currency = c.cap, c.dev, c.currency
    terms = [t.name for t in c.slo.terms]  # the SLO's own statistics (p90_latency_s ...), not a fixed p99
    shown = " / ".join(t.replace("_", " ").removesuffix(" s") for t in terms)
    L = ["## Capacity, accuracy and cost per configuration", "",
          "| rank | configuration | hardware | TP | max req/s | 95% interval | converged | reps | standing | req/s per " + dev
          + f" | accuracy [95%] | floor | {shown} at max (s) | cost / 1000 req ({currency}) | replicas | " + dev + "s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in cap.itertuples():
        L.append(f"| {'—' if pd.isna(r.rank) else r.rank} | {r.label} | {r.hardware} | {r.tp} | {_fmt(r.max_qps)} | {_ci(r)} | "
                 f"{'yes' if r.converged else (f'no: stopped, {r.stopped}' if getattr(r, 'stopped', '') else '**no**')}"
                 f" | {int(r.replications)} | {r.standing} | "
                 f"{_fmt(r.qps_per_gpu)} | {_acc(r)} | {r.accuracy_floor} | {' / '.join(_fmt(getattr(r, t, np.nan)) for t in terms)} | "
                 f"{_fmt(getattr(r, 'cost_per_1000_requests', np.nan))} | {_replicas(r, 'replicas')} | {_replicas(r, 'gpus')} |")
    return L


def _excluded(c: ReportContent) -> list[str]:
    """The configurations not searched or not recommended, and why."""
    from simulator.inputs.accuracy import excluded_text

    cap, acc_model, skipped, floor, slo = c.cap, c.acc_model, c.skipped, c.floor, c.slo
    L = ["", "## Excluded configurations and why", ""]
    L += [f"- {t}." for t in excluded_text(acc_model, skipped, floor)] or ["- none: every configuration was searched."]
    kept = cap[(cap.accuracy_floor != "meets") & (cap.max_qps > 0)]
    if len(kept):
        L.append(f"- {', '.join(kept.label)}: searched (accuracy measured) but not recommended: the accuracy floor "
                 f"is not shown to be met ({'; '.join(dict.fromkeys(kept.accuracy_why))}).")
    zero = cap[cap.max_qps <= 0]
    if len(zero):
        L.append(f"- {', '.join(zero.label)}: no rate meets `{slo.text}` (sustain no load); not ranked.")
    return L


def _accuracy(c: ReportContent) -> list[str]:
    """The Pareto plot and where the accuracy data come from (benchmark traffic: no accuracy to compare)."""
    if c.exact:
        return ["", "## Accuracy", "", f"Not compared: {EXACT_TRAFFIC}. The scenario's reasoning accuracy data "
                "(its `workload`) describe its reasoning requests, not this traffic."]
    acc_model = c.acc_model
    L = ["", "## Latency, accuracy and capacity", "", "![Pareto frontier](pareto.png)", "",
          f"Pareto frontier (dashed): configurations with known accuracy that no other beats on capacity per {c.dev}, accuracy "
          "and single-request latency at once. Crosses at the bottom: accuracy unknown (no graded answers; never guessed)."]
    if acc_model.profile is not None:
        pr = acc_model.profile
        L += ["", f"Accuracy data: `{pr.name}` ({pr.provenance.kind}: {pr.provenance.source}). Speculative decoding is exact: "
              "specdecode has vanilla-base's accuracy and specreason-decode specreason's, at every gamma."]
        for claim in pr.published:
            L.append(f"- Published (qualitative, not used as a number): {claim.text} Source: {claim.source}.")
    else:
        L += ["", f"Accuracy data: none ({acc_model.unknown_reason})."]
    return L


def _load_curves(c: ReportContent) -> list[str]:
    """Latency vs load of each system's best configuration, and the best one's engine load at capacity."""
    curves, b = c.curves, c.rec["best"]
    L = ["", "Single-request latency (analytic engine) of each configuration is in `capacity.csv` "
          "(`single_request_latency_s`), with every metric at the capacity point.", "",
          "## Latency vs load", "", "![latency vs load](latency_vs_load.png)", "",
          "Each system's best configuration on one grid of offered loads (log scale). Speculation's benefit shrinks "
          f"under load: its extra passes (drafts, scoring, regenerations) compete for the same {c.dev}s as the batch grows.", "",
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
    return L


def _provenance(c: ReportContent) -> list[str]:
    """Where the workload and cost profiles come from, and the command that reproduces the report."""
    rs, w, slo, load, currency = c.rs, c.rs.workload, c.slo, c.load, c.currency
    gpu_hour_cost, target_qps, bench_serve, scenario_arg = c.gpu_hour_cost, c.target_qps, c.bench_serve, c.scenario_arg
    L = ["", "## Provenance", "", f"- Code: {code_version()}",
          f"- Workload `{w.name}` ({w.dataset}; base {w.base_model}, small {w.small_model}): "
          f"{w.provenance.kind} — {w.provenance.source}" + (f"; {w.provenance.method}" if getattr(w.provenance, 'method', None) else "")]
    for h in rs.hardware_names:
        p = rs.cost_profile(h)
        L.append(f"- Cost profile for {h}: `{p.name}`, {p.provenance.kind} — {p.provenance.source}")
    if any(h not in rs.cost_profiles and h != "cpu" for h in rs.hardware_names):  # GPU priors: the engine's terms
        L.append(f"- {engine_line(rs)}")
    L.append(f"- {rs.limits_line()}")
    L += ["", "## Reproduce", "", "```", f"specsim simulate report {scenario_arg} --out <DIR> --slo '{slo.text}' --requests {load.requests} "
          f"--seed {load.seed}" + (f" --gpu-hour-cost {gpu_hour_cost:g} --currency {shlex.quote(currency)}" if gpu_hour_cost else "")
          + (f" --target-qps {target_qps:g}" if target_qps else "")
          + (" --bench-serve " + shlex.quote(bench_serve) if bench_serve is not None else ""), "```", "",
          "Files: `capacity.csv`, `latency_vs_load.csv`, `resolved.json` (the resolved scenario and run settings).", ""]
    return L


def engine_line(rs) -> str:
    """The serving engine the GPU priors' host terms come from, and its async scheduling (a cost profile loaded from
    a file keeps its own host terms)."""
    from simulator.catalog.engine_hosts import async_on, engine_version

    se = rs.scenario.serving_engine
    ev = engine_version(se)
    on = async_on(se, ev.version)
    how = ("stated" if se.async_scheduling is not None else "the version's default") + (
        "; off for an engine speculating with a separate draft model or prompt lookup, as vLLM defaults it"
        if on and se.async_scheduling is None else "")
    return (f"Serving engine (GPU priors' host terms): {se.name} {se.version or ev.version} (catalog entry {ev.version}, "
            f"simulator/catalog/engine_hosts.yaml); async scheduling {'on' if on else 'off'} ({how})")


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
